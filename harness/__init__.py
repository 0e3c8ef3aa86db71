"""Run examples and test code in fresh processes, one per device configuration.

TensorFlow can configure its devices only once per process, and the allocator
cap (``TF_CPU_BFC_MEM_LIMIT_IN_MB``) is per process too. So the pytest process
never imports TensorFlow; each chapter, each module's docstrings, each test
that needs its own devices and each benchmark run gets a :class:`Kernel`: a
fresh process, which keeps one namespace across the requests it is sent,
like a notebook kernel.

Kernels are started by :mod:`multiprocessing`'s "forkserver" method. The
fork server imports TensorFlow and Keras once (:mod:`harness.preload`), so a
new kernel is a ``fork`` of it and costs milliseconds, not TensorFlow's
6-10 s import. Requests and replies travel over a :func:`multiprocessing.Pipe`;
what runs inside a kernel is :mod:`harness.kernel`.

A second kind of kernel runs Keras on the JAX backend (``Kernel(backend="jax")``):
the fork server's Keras is bound to TensorFlow for good, so a JAX kernel is a
plain new interpreter (:mod:`multiprocessing`'s "spawn" method) whose
environment (:data:`JAX_ENV`: ``KERAS_BACKEND=jax``, 4 emulated CPU devices)
is set before it imports JAX and Keras (:mod:`harness.preload_jax`). It costs
JAX's import (a few seconds) instead of a fork, and serves the same requests.

Used by ``tests/``, by ``conftest.py`` (through :mod:`harness.sybil_remote`)
and by ``benchmarks/``.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from pathlib import Path

from harness import kernel

ROOT = Path(__file__).resolve().parents[1]

#: Characters of a dead kernel's output shown in :class:`KernelDied`.
TAIL = 3000

_forkserver = multiprocessing.get_context("forkserver")
# Process-wide, and read only when the server starts: set before any kernel exists. A kernel
# imports a test module to unpickle its functions, and test modules import pytest (0.1 s each
# time): under pytest the server imports it once. kernel.PRELOAD goes last, so its check that
# the server is still single-threaded covers every preloaded module.
_forkserver.set_forkserver_preload((["pytest"] if "pytest" in sys.modules else []) + [kernel.PRELOAD])
_spawn = multiprocessing.get_context("spawn")
_starting = threading.Lock()

#: What a JAX kernel's environment adds (``env`` given to :class:`Kernel` wins): Keras on JAX,
#: JAX on the CPU only, with XLA's host platform split into 4 devices (read when JAX's CPU
#: backend starts, i.e. after the import and before the first array).
JAX_ENV = {
    "KERAS_BACKEND": "jax",
    "JAX_PLATFORMS": "cpu",
    "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
}

#: Backend name -> (multiprocessing context, module the kernel needs imported before it serves,
#: environment it adds). The TensorFlow kernel's module is imported by the fork server.
BACKENDS = {
    "tensorflow": (_forkserver, kernel.PRELOAD, {}),
    "jax": (_spawn, kernel.PRELOAD_JAX, JAX_ENV),
}


class RemoteError(Exception):
    """An exception raised inside a kernel, carried back by type name, message and traceback."""

    def __init__(self, type_name: str, message: str, traceback: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
        self.traceback = traceback


class KernelDied(RuntimeError):
    """The kernel process ended without replying (crash, ``os._exit``, killed at its deadline)."""


def kernel_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The test process's environment plus ``env``, with TensorFlow's INFO logs off.

    ``PYTHONPATH`` starts with the repository root, so processes a kernel
    starts (``python -m snippets.x``) import the same code.
    """
    environ = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    return environ


def _start(process: multiprocessing.Process) -> None:
    # The fork server imports harness.preload before it has the parent's sys.path (CPython's
    # forkserver.main ignores its sys_path argument, 3.11-3.13), so it finds the package through
    # PYTHONPATH, which it inherits when Process.start() (re)starts it. Kept only for the start.
    with _starting:
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), saved]))
        try:
            process.start()
        finally:
            if saved is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = saved


class Kernel:
    """A fresh process that keeps one namespace across requests.

    Args:
        env: variables added to the test process's environment inside the
            kernel (after the backend's own, :data:`JAX_ENV` for JAX), set before its first TensorFlow op (TensorFlow reads
            ``TF_CPU_*`` and the like when its runtime starts, not on import).
            TensorFlow's INFO logs are silenced unless ``env`` says otherwise.
        deadline: seconds the kernel may live once it is ready (its start, which
            can include the fork server's TensorFlow import on a loaded host, is
            bounded by as many again). A request still running past it kills the
            kernel and raises :class:`KernelDied`, so a hung TensorFlow call fails
            its test instead of hanging the suite.
        backend: ``"tensorflow"`` (the default: a fork of the server that
            preloaded TensorFlow and Keras) or ``"jax"`` (a new interpreter
            with :data:`JAX_ENV` that imports JAX and Keras on the JAX backend).

    What requests print to ``sys.stdout`` is printed again in the calling
    process; everything else the kernel writes to its fd 1 and 2 (TensorFlow's
    C++ logs, C-level prints) goes to a log whose tail :class:`KernelDied` shows.

    As with every start method but "fork", a script that starts kernels must
    keep its top-level code under ``if __name__ == "__main__":`` (each kernel
    imports the script as ``__mp_main__``); pytest and ``python -m`` need nothing.

    Raises:
        KernelDied: the kernel ended before it was ready.
        RuntimeError: the fork server cannot fork safely (see :mod:`harness.preload`), or
            the JAX kernel's Keras is not on the JAX backend.
        ValueError: an unknown ``backend``.
    """

    def __init__(self, env: dict[str, str] | None = None, deadline: float = 600,
                 backend: str = "tensorflow") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown kernel backend {backend!r}; known: {', '.join(BACKENDS)}")
        context, preload, backend_env = BACKENDS[backend]
        self.backend = backend
        self.deadline = deadline
        self._closed = False
        self._deadline_at = time.monotonic() + deadline
        self.log = tempfile.NamedTemporaryFile("w+", prefix="kernel-", suffix=".log", delete=False)
        self.connection, theirs = context.Pipe()
        # daemon: a kernel a test forgot to close is killed when the test process exits.
        self.process = context.Process(
            target=kernel.main,
            args=(theirs, kernel_environment({**backend_env, **(env or {})}), self.log.name, str(ROOT), preload),
            name="kernel", daemon=True,
        )
        _start(self.process)
        theirs.close()  # the kernel holds the only other end: its death reads as end of input here
        self.pid = self.process.pid
        try:
            status, value, _ = self._receive()
        except KernelDied:
            self.close()
            raise
        if status == "refused":
            self.close()
            raise RuntimeError(f"cannot start a kernel: {value}")
        # From ready: a hung-request test's 3 s were spent on a cold fork server's import (an audit).
        self._deadline_at = time.monotonic() + deadline

    def alive(self) -> bool:
        """True while the kernel process runs."""
        return not self._closed and self.process.is_alive()

    def kill(self) -> None:
        """End the kernel at once (SIGKILL); it answers no more requests."""
        if self.alive():
            self.process.kill()
            self.process.join()

    def _tail(self) -> str:
        self.log.seek(0)
        return self.log.read()[-TAIL:]

    def _receive(self) -> tuple[str, object, str]:
        remaining = max(0.0, self._deadline_at - time.monotonic())
        ready = wait([self.connection, self.process.sentinel], timeout=remaining)
        if self.connection in ready:
            try:
                return self.connection.recv()
            except EOFError:
                pass
        if not ready:
            self.kill()
            raise KernelDied(f"kernel {self.pid} had not replied by its {self.deadline:g} s deadline and "
                             f"was killed; its last output:\n{self._tail()}")
        self.process.join()
        raise KernelDied(f"kernel {self.pid} exited (code {self.process.exitcode}) without replying; "
                         f"its last output:\n{self._tail()}")

    def request(self, *request) -> tuple[str, object, str]:
        """Send one request (see :func:`harness.kernel.handle`); return ``(status, value, printed)``.

        ``status`` is ``"ok"`` (``value`` is the result) or ``"error"``
        (``value`` is ``(type name, message, traceback)``); ``printed`` is what
        the request wrote to ``sys.stdout``.

        Raises:
            KernelDied: the kernel ended, or passed its deadline, before replying.
        """
        try:
            self.connection.send(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # it died: _receive says how, with its output
        return self._receive()

    def call(self, function: Callable | str, *args, **kwargs):
        """Call ``function(*args, **kwargs)`` in the kernel and return its (picklable) result.

        Args:
            function: a module-level function, sent by reference (its module
                is imported in the kernel), or a ``"package.module:function"`` string.

        Raises:
            RemoteError: whatever the function raised, by type name, message and traceback.
            KernelDied: the kernel ended, or passed its deadline, before replying.
        """
        status, value, printed = self.request("call", function, args, kwargs)
        if printed:
            print(printed, end="")
        if status == "error":
            raise RemoteError(*value)
        return value

    def close(self) -> None:
        """End the kernel: end of input lets it exit; it is killed if it has not within 30 s."""
        if self._closed:
            return
        self.connection.close()
        self.process.join(30)
        self.kill()
        self._closed = True
        self.process.close()
        self.log.close()
        os.unlink(self.log.name)

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
