"""Run examples and test code in fresh processes, one per device configuration.

TensorFlow can configure its devices only once per process, and the allocator
cap (``TF_CPU_BFC_MEM_LIMIT_IN_MB``) is per process too. So the pytest process
never imports TensorFlow; each chapter, each module's docstrings and each
test that needs its own devices gets a :class:`Kernel`: a fresh process,
which keeps one namespace across the requests it is sent, like a notebook
kernel. Kernels are forked from a zygote that has imported TensorFlow once
(see ``tests/harness/zygote.py``), so a new kernel costs milliseconds, not
TensorFlow's 6-10 s import.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ZYGOTE = Path(__file__).with_name("zygote.py")


class RemoteError(Exception):
    """An exception raised inside a kernel, carried back by name and message."""

    def __init__(self, type_name: str, message: str, traceback: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
        self.traceback = traceback


class KernelDied(RuntimeError):
    """The kernel process ended without replying (crash, os._exit, kill)."""


def kernel_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The test process's environment plus ``env``, with TensorFlow's INFO logs off."""
    environ = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    return environ


class Zygote:
    """The process kernels are forked from; one per pytest process, started on first use."""

    _instance: Zygote | None = None

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(ZYGOTE)], cwd=ROOT, env=kernel_environment(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.lock = threading.Lock()
        atexit.register(self.stop)

    @classmethod
    def shared(cls) -> Zygote:
        if cls._instance is None or cls._instance.process.poll() is not None:
            cls._instance = cls()
        return cls._instance

    def fork(self, env: dict[str, str], socket_path: str, log_path: str) -> int:
        """Fork a kernel that connects to ``socket_path``; return its pid."""
        with self.lock:
            self.process.stdin.write(json.dumps({"env": env, "socket": socket_path, "log": log_path}) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        if not line:
            raise KernelDied(f"the zygote exited with code {self.process.wait()} before forking a kernel")
        return json.loads(line)["pid"]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


class Kernel:
    """A fresh process that keeps one namespace across requests.

    The environment is the test process's own, plus ``env``; TensorFlow's INFO
    logs are silenced. What the kernel prints goes to a log file whose tail is
    shown if it dies. A kernel still alive after ``deadline`` seconds is
    killed, so a hung TensorFlow call fails its test with :class:`KernelDied`
    instead of hanging the suite.
    """

    def __init__(self, env: dict[str, str] | None = None, deadline: float = 600) -> None:
        self.log = tempfile.NamedTemporaryFile("w+", prefix="kernel-", suffix=".log", delete=False)
        self.folder = tempfile.mkdtemp(prefix="kernel-")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path = os.path.join(self.folder, "socket")
        listener.bind(path)
        listener.listen(1)
        listener.settimeout(120)
        self.pid = Zygote.shared().fork(kernel_environment(env), path, self.log.name)
        try:
            self.connection, _ = listener.accept()
        except socket.timeout:
            self.kill()
            raise KernelDied(f"kernel did not connect within 120 s; its output:\n{self._tail()}") from None
        finally:
            listener.close()
        self.connection.settimeout(None)
        self.requests = self.connection.makefile("wb")
        self.replies = self.connection.makefile("rb")
        self.watchdog = threading.Timer(deadline, self.kill)
        self.watchdog.daemon = True
        self.watchdog.start()

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _tail(self) -> str:
        self.log.seek(0)
        return self.log.read()[-3000:]

    def request(self, *request) -> tuple[str, object, str]:
        """Send one request; return ``(status, value, printed)``."""
        try:
            self.requests.write(pickle.dumps(request))
            self.requests.flush()
            header = self.replies.read(8)
            if len(header) < 8:
                raise BrokenPipeError
            return pickle.loads(self.replies.read(int.from_bytes(header, "big")))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            raise KernelDied(f"kernel exited without replying; its last output:\n{self._tail()}") from None

    def call(self, target: str, *args, **kwargs):
        """Call ``"package.module:function"`` in the kernel and return its (picklable) result.

        Raises:
            RemoteError: whatever the function raised, by type name and message.
        """
        status, value, printed = self.request("call", target, args, kwargs)
        if printed:
            print(printed, end="")
        if status == "error":
            raise RemoteError(*value)
        return value

    def close(self) -> None:
        self.watchdog.cancel()
        try:
            self.connection.shutdown(socket.SHUT_WR)  # end of input: the kernel returns and exits
        except OSError:
            pass
        deadline = time.monotonic() + 30
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.kill()
        for stream in (self.requests, self.replies, self.connection):
            stream.close()
        self.log.close()
        os.unlink(self.log.name)
        os.unlink(os.path.join(self.folder, "socket"))
        os.rmdir(self.folder)

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
