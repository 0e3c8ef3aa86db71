"""A process that has imported TensorFlow and forks a fresh process per measuring run, kept for the next runs.

Importing TensorFlow takes seconds (4-5 CPU-seconds on the 2-core CI machine), and a plan's runs come in up
to three sets: its small batches, then a run at 256 (:data:`snippets.lib.model_plan.WIDE_BATCH`), then
any run again alone (``measure_many``, in the module that serves). One child serves them all, and the
planner's command starts it while it reads the model's weights (:func:`prestart`). Each run is still a
process forked from one whose TensorFlow runtime never started, so each figure comes from an allocator
nothing else has used (:mod:`snippets.lib.model_step`'s docstring says why that matters).

The child is ``python -m <module> --serve``, a module whose ``--serve`` calls :func:`serve` (the measuring
one: it gives its own name, so this module imports none): it reads one JSON line per set of runs on its
standard input and answers with :data:`PROGRESS` lines as runs end, then one :data:`RESULTS` line.
A child started under another working directory, or other TF_, KERAS_, XLA_, JAX_, CUDA_ or PYTHON*
variables, is not reused (a test may change them); other variables a builder reads, and edits to this
project's own modules, reach the runs only through a new child: :func:`close`. When a plan's runs are done the
planner lets it go (:func:`release`): it ends after :data:`IDLE` seconds with no run, so a notebook does not keep
its ~700 MiB for as long as its kernel lives, and a script or a test that plans again sooner reuses it.

A test run starts many processes that plan (workers, kernels, the commands they run), each of which would import
TensorFlow for its child: there one shared server (:func:`start_shared`, conftest.py) forks each of them its child.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from snippets.lib import units

ROOT = Path(__file__).resolve().parents[2]

#: Seconds without a run ending after which the child says which runs still go (a progress line).
HEARTBEAT = 60

#: How the child marks a progress line, and the line with a set's results, on its standard output.
PROGRESS = "progress: "
RESULTS = "results: "


#: Prefixes of the environment variables a measuring run reads (TensorFlow's, Keras's, XLA's, CUDA's, the
#: interpreter's): a child started under others is not reused. Not the rest, which TensorFlow's own import
#: sets in the parent (TF2_BEHAVIOR, TPU_*), nor TF_CPP_MIN_LOG_LEVEL, logging only, which the child sets.
READ = ("TF_", "KERAS_", "XLA_", "JAX_", "CUDA_", "PYTHON")


def child_env(**changes: str) -> dict[str, str]:
    """This process's environment with ``changes``, for a child ``python -m snippets...``: the project's root and
    the working directory lead ``PYTHONPATH`` (the project's modules, and a reader's module run from where they are)."""
    env = {**os.environ, **changes}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.getcwd(), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


#: The variable naming a shared server's socket (:func:`start_shared`): a process that would start its own child asks it
#: for one, a fork of a process that imported TensorFlow once (milliseconds, not the import's 4-5 CPU-seconds). One run
#: of the test suite on 2 cores started 14 children (in its workers, kernels and the commands they run), 51 of its 680
#: CPU-seconds; with one shared, 6 (28 CPU-seconds), under another working directory or environment. A reader's command
#: starts one child, and sets none.
SHARED = "SNIPPETS_SHARED_FORK_SERVER"


def _share_key() -> str:
    """What a shared server and a process that asks it for a child must agree on: the working directory and the
    variables a run reads (:data:`READ`) as a child started here would have them (:func:`child_env`; ``PYTHONPATH``'s
    repeats left out, which a kernel's environment adds; the defaults :mod:`snippets.lib.devices` sets on import), the
    interpreter, and ``HOME`` (Keras reads ``~/.keras/keras.json``)."""
    from snippets.lib.devices import ENVIRONMENT

    env = {**ENVIRONMENT, **child_env()}
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(env["PYTHONPATH"].split(os.pathsep)))
    return json.dumps([os.getcwd(), sys.executable, env.get("HOME"), _reads(env)])


def _reads(env: dict[str, str]) -> list[tuple[str, str]]:
    """The variables of ``env`` a run reads (:data:`READ`), sorted: not TF_CPP_MIN_LOG_LEVEL, which the child sets."""
    return sorted((name, value) for name, value in env.items()
                  if name.startswith(READ) and name != "TF_CPP_MIN_LOG_LEVEL")


def _key() -> tuple:
    return os.getcwd(), tuple(_reads(os.environ))


class Server:
    """One ``--serve`` child (module docstring); :meth:`run` one set of runs through it."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.killed, self.lock, self.claims = False, threading.Lock(), 0
        env = child_env(TF_CPP_MIN_LOG_LEVEL="3")
        # Its stderr goes to a file, so that reading stdout line by line cannot stall on a full stderr pipe; a
        # session of its own, so that a timeout ends its forked runs with it.
        self.errors = tempfile.TemporaryFile("w+")
        shared = os.environ.get(SHARED)
        self.child = (shared and _attach(shared, module, self.errors)) or subprocess.Popen(
            [sys.executable, "-m", module, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.errors, text=True, env=env, start_new_session=True)
        # After asking: _share_key imports snippets.lib.devices, which sets a variable the key reads (an audit: the
        # next call saw another environment and started another child).
        self.key = _key()

    def alive(self) -> bool:
        """Whether the child still runs, under this process's working directory and environment."""
        return self.child.poll() is None and self.key == _key()

    def kill(self) -> None:
        self.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.child.pid, signal.SIGKILL)

    def close(self) -> None:
        """End the child and any run it forked (nothing in them needs a clean exit)."""
        self.kill()
        with contextlib.suppress(OSError):
            self.child.stdin.close()
        self.child.wait()
        self.errors.close()

    def run(self, payload: list, parallel: int, timeout: float, progress: Callable[[str], None]) -> list[dict]:
        """The results of ``payload`` (``[step fields, cap, threads, steps]`` each), ``parallel`` runs at once.

        Raises:
            RuntimeError: no results within ``timeout`` seconds (the child and its runs are killed), or
                the child ended without them (its last line on stderr).
        """
        with self.lock:  # one set at a time: the child answers in order on one stdout
            return self._run(payload, parallel, timeout, progress)

    def _run(self, payload: list, parallel: int, timeout: float, progress: Callable[[str], None]) -> list[dict]:
        timer = threading.Timer(timeout, self.kill)
        timer.start()
        self.errors.seek(0, os.SEEK_END)
        since = self.errors.tell()  # this set's errors only
        try:
            self.child.stdin.write(json.dumps([payload, parallel]) + "\n")
            self.child.stdin.flush()
            for line in self.child.stdout:
                if line.startswith(PROGRESS):
                    progress(line[len(PROGRESS):].rstrip())
                elif line.startswith(RESULTS):
                    return json.loads(line[len(RESULTS):])
        except OSError:  # the child ended while being written to: said below
            pass
        except BaseException:
            # Left mid-set (an interrupt, a failing progress callback): the child would hand this set's
            # results to the next call (an audit), so it goes.
            self.kill()
            self.child.wait()
            raise
        finally:
            timer.cancel()
        self.child.wait()
        if self.killed:
            raise RuntimeError(f"no result in {timeout:.0f} s: the runs were stopped (a step this slow on this host's CPU)")
        self.errors.seek(since)
        code = "" if self.child.returncode is None else f" (return code {self.child.returncode})"
        raise RuntimeError((self.errors.read().strip().splitlines() or [f"the measuring process ended{code}"])[-1])


class Forked:
    """A child a shared server forked (:func:`start_shared`), read and ended as the :class:`subprocess.Popen` of one.

    Not this process's child: its return code is not known here (:attr:`returncode` stays None), and its end is seen
    through a pidfd, opened before it can end (it waits for its input, which this process holds open)."""

    def __init__(self, pid: int, stdin: int, stdout: int) -> None:
        """``stdin``, ``stdout``: this process's ends of the child's pipes, descriptors (files once it is open).

        Raises:
            ProcessLookupError: the child has ended already.
        """
        self._ended: int | None = os.pidfd_open(pid)
        self.pid, self.stdin, self.stdout, self.returncode = pid, os.fdopen(stdin, "w"), os.fdopen(stdout), None

    def poll(self, timeout: float | None = 0) -> int | None:
        """0 once the child has ended (not its return code), else None; ``timeout`` seconds at most (None: no limit)."""
        if self._ended is not None:
            waiting = select.poll()  # not select: it stops at descriptor 1024
            waiting.register(self._ended, select.POLLIN)
            if waiting.poll(None if timeout is None else timeout * 1000):
                os.close(self._ended)
                self._ended = None
        return None if self._ended is not None else 0

    def wait(self) -> int:
        """0 once the child has ended."""
        return self.poll(timeout=None)


def _attach(path: str, module: str, errors) -> Forked | None:
    """A child of ``module`` forked by the shared server listening at ``path``, its standard error to ``errors``;
    None if there is none, it serves another module or its environment is not this process's (:func:`_share_key`)."""
    to_child, from_child = os.pipe(), os.pipe()
    try:
        with socket.socket(socket.AF_UNIX) as ask:
            ask.settimeout(120)  # it accepts once its own TensorFlow import is done, on a loaded host too
            ask.connect(path)
            asking = json.dumps([module, _share_key()]).encode()
            socket.send_fds(ask, [asking], [to_child[0], from_child[1], errors.fileno()])
            reply = ask.makefile().readline()
    except OSError:  # not listening (any more), or no answer in time
        reply = ""
    finally:
        os.close(to_child[0])
        os.close(from_child[1])
    if reply.strip().isdigit():
        with contextlib.suppress(ProcessLookupError):  # it ended already
            return Forked(int(reply), to_child[1], from_child[0])
    os.close(to_child[1])
    os.close(from_child[0])
    return None


def start_shared(module: str) -> subprocess.Popen | None:
    """Start a shared server of ``module`` for this process and every process it starts from now on: this process's
    environment gets :data:`SHARED`. Each asks it for its child (:class:`Server`) while its environment is the one
    this process has now; otherwise it starts its own. End it with :func:`stop_shared`; it ends by itself when this
    process does (its standard input, from here, closes). None, and no server, where the socket cannot be made (its
    path is limited to about 108 bytes, under ``TMPDIR``): each process starts its own child, as without one."""
    folder = tempfile.mkdtemp(prefix="fork-server-")
    path = os.path.join(folder, "socket")
    # Bound here: one who asks before the server is up waits for it. Its own output (TensorFlow's start-up lines) to a
    # file beside it: a child it forks writes to its asker's.
    try:
        with socket.socket(socket.AF_UNIX) as listening, open(os.path.join(folder, "output"), "w") as output:
            listening.bind(path)
            listening.listen(64)
            shared = subprocess.Popen([sys.executable, "-m", module, "--serve", str(listening.fileno())],
                                      stdin=subprocess.PIPE, stdout=output, stderr=output,
                                      env=child_env(TF_CPP_MIN_LOG_LEVEL="3"), pass_fds=[listening.fileno()],
                                      start_new_session=True)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return None
    shared.folder = folder
    os.environ[SHARED] = path
    return shared


def stop_shared(shared: subprocess.Popen | None) -> None:
    """End a shared server of :func:`start_shared` (each child it forked ends with its asker: :func:`close`)."""
    if shared is None:
        return
    if os.environ.get(SHARED, "").startswith(shared.folder):
        del os.environ[SHARED]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(shared.pid, signal.SIGKILL)
    shared.stdin.close()
    shared.wait()
    shutil.rmtree(shared.folder, ignore_errors=True)


_warm: Server | None = None
_starting = threading.Lock()


def server(module: str) -> Server:
    """The child of ``module`` (module docstring) to run a set through: the one started before if it still
    serves, else a new one."""
    global _warm
    with _starting:  # two threads would each start one, and the first would be left running
        if _warm is None or _warm.module != module or not _warm.alive():
            close()
            _warm = Server(module)
        _warm.claims += 1  # under the lock release()'s timer takes: a child handed out is not ended under its caller
        return _warm


def prestart(module: str) -> None:
    """Start ``module``'s child now, so that its TensorFlow import overlaps what the caller does before measuring."""
    server(module)


#: Seconds an unused child waits for more runs after :func:`release` before it ends. Another plan in that time
#: (a notebook's next cell, a script's next configuration) skips a TensorFlow import, 4-5 CPU-seconds each.
IDLE = 60.0


def release(after: float = IDLE) -> None:
    """End the child (if any) ``after`` seconds from now, unless :func:`server` hands it out again before then.

    Called when a plan's runs are done; the wait runs on a daemon thread, so a command's exit does not wait for it
    (:func:`close` ends the child at exit).
    """
    old = _warm
    if old is None:
        return
    claims = old.claims

    def end_if_unused() -> None:
        global _warm
        with _starting:
            if _warm is old and old.claims == claims and not old.lock.locked():
                _warm = None
                old.close()

    timer = threading.Timer(after, end_if_unused)
    timer.daemon = True
    timer.start()


@atexit.register
def close() -> None:
    """End the child, if any (at exit too)."""
    global _warm
    if _warm is not None:
        _warm, old = None, _warm
        old.close()


def serve(run_job: Callable[[dict, str, int | None, int], dict],
          describe: Callable[[dict, int | None], tuple[str, str]], listening: int | None = None) -> None:
    """The child's loop: import TensorFlow once, then for each line on stdin fork its runs and print the results.

    ``run_job(fields, cap, threads, steps)`` measures one run in a forked process; ``describe(fields, threads)``
    gives its label and how its progress line names it (``"32 per device, 1 inter-op thread"``). ``listening``: the
    descriptor of a shared server's socket (:func:`start_shared`); the loop runs in each child it forks.
    """
    from snippets.lib import devices  # noqa: F401 (first: it sets the environment TensorFlow reads on import)

    import tensorflow  # noqa: F401  (imported once, before the forks)

    if listening is not None:
        _fork_children(listening)
    for line in sys.stdin:
        payload, parallel = json.loads(line)
        print(RESULTS + json.dumps(fork_jobs(payload, parallel, run_job, describe)), flush=True)


def _fork_children(listening: int) -> None:
    """A shared server's loop (:func:`start_shared`): to each process that asks for a child of this module under the
    same environment (:func:`_attach`), fork one, its standard input, output and error the asker's, which answers its
    own pid (else "no"). Returns in each child. The server ends when killed (:func:`stop_shared`) or when its standard
    input closes, whose other end only :func:`start_shared`'s process holds: with that process, however it ends (an
    audit found one left for good by a killed pytest)."""
    key = json.dumps([sys.modules["__main__"].__spec__.name, _share_key()])
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # its children are reaped as they end
    waiting = select.poll()
    waiting.register(listening, select.POLLIN)
    waiting.register(0, select.POLLIN)
    with socket.socket(fileno=listening) as server:
        while True:
            if any(fd == 0 for fd, _ in waiting.poll()):  # end of its input: whoever started it has ended
                shutil.rmtree(os.path.dirname(server.getsockname()), ignore_errors=True)
                os._exit(0)
            asker, _ = server.accept()
            with asker:
                fds: list[int] = []
                try:
                    message, fds, _, _ = socket.recv_fds(asker, 1 << 16, 3)
                    pid = os.fork() if message == key.encode() and len(fds) == 3 else -1
                except OSError:  # the asker left, or no fork (memory): it starts its own child
                    pid = -1
                if pid == 0:
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # fork_jobs waits for its runs
                    os.setsid()  # its asker ends it and its runs as one group (Server.kill): so before the answer
                    for target, fd in enumerate(fds):
                        os.dup2(fd, target)
                        os.close(fd)
                    with contextlib.suppress(OSError):
                        asker.sendall(f"{os.getpid()}\n".encode())
                    return
                for fd in fds:
                    os.close(fd)
                if pid < 0:
                    with contextlib.suppress(OSError):
                        asker.sendall(b"no\n")


def fork_jobs(payload: Sequence[list], parallel: int, run_job: Callable[[dict, str, int | None, int], dict],
              describe: Callable[[dict, int | None], tuple[str, str]]) -> list[dict]:
    """In the child: fork a process per job, ``parallel`` at a time; the results in the jobs' order, each
    ``run_job``'s, or ``{"error": ...}`` if its process died."""

    def start(fields, cap, threads, steps):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # not the child's command pipe: input() gets EOF
            # Nor its answers: a builder's print without a newline would run into the next progress line (an audit).
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            try:
                out = run_job(fields, cap, threads, steps)
                with os.fdopen(write, "w") as pipe:
                    pipe.write(json.dumps(out))
            finally:  # whatever it raised, it must not go on as a copy of the process that forked it (an audit)
                os._exit(0)
        os.close(write)
        return pid, os.fdopen(read), describe(fields, threads)[0]

    def finish(pid, pipe, label):
        with pipe:
            text = pipe.read()
        os.waitpid(pid, 0)
        try:
            return json.loads(text) if text else {"error": f"the process measuring {label} died"}
        except ValueError:
            return {"error": f"the process measuring {label} died while replying"}

    began = time.perf_counter()
    results: list[dict | None] = [None] * len(payload)
    waiting, running, ends = list(enumerate(payload)), {}, select.poll()  # poll: select stops at descriptor 1024

    def done(index, child, fields, threads):
        result = results[index] = finish(*child)
        peak = result.get("step_peak")
        if peak is not None:
            figure = f"step peak {units.human_bytes(peak)}"
        elif result.get("failed_phase"):
            figure = f"ran out of its cap ({result['failed_phase']})"
        else:
            figure = "failed: " + result.get("refused", result.get("error", "no reply"))
        print(f"{PROGRESS}run {sum(r is not None for r in results)} of {len(payload)} done "
              f"({describe(fields, threads)[1]}): {figure}, {time.perf_counter() - began:.0f} s since these runs began",
              flush=True)

    while waiting or running:
        while waiting and len(running) < parallel:
            index, job = waiting.pop(0)
            child = start(*job)
            running[child[1].fileno()] = (index, child, job[0], job[2])
            ends.register(child[1].fileno(), select.POLLIN)
        # The next job starts when any run ends, not the oldest: a core would wait idle behind a longer run.
        ended = ends.poll(HEARTBEAT * 1000)
        if not ended:  # helper-74: a ConvLSTM step compiled by XLA:CPU ran 12 minutes at 16 per device, in silence
            going = "; ".join(describe(fields, threads)[1] for _, _, fields, threads in running.values())
            print(f"{PROGRESS}still running ({going}), {time.perf_counter() - began:.0f} s since these runs began",
                  flush=True)
            continue
        fd = ended[0][0]
        ends.unregister(fd)
        done(*running.pop(fd))
    return results
