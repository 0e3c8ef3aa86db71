"""Run examples and test code in fresh processes, one per device configuration.

TensorFlow can configure its devices only once per process, and the allocator
cap (``TF_CPU_BFC_MEM_LIMIT_IN_MB``) is per process too. So the pytest process
never imports TensorFlow; each chapter, each module's docstrings and each
test that needs its own devices gets a :class:`Kernel`: a fresh Python running
``tests/harness/kernel.py``, which keeps one namespace across the requests it
is sent, like a notebook kernel.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNEL = Path(__file__).with_name("kernel.py")


class RemoteError(Exception):
    """An exception raised inside a kernel, carried back by name and message."""

    def __init__(self, type_name: str, message: str, traceback: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
        self.traceback = traceback


class KernelDied(RuntimeError):
    """The kernel process ended without replying (crash, os._exit, kill)."""


class Kernel:
    """A fresh Python process that keeps one namespace across requests.

    The environment is the test process's own, plus ``env``; TensorFlow's INFO
    logs are silenced. What the kernel prints goes to a log file whose tail is
    shown if it dies. A kernel still alive after ``deadline`` seconds is
    killed, so a hung TensorFlow call fails its test with :class:`KernelDied`
    instead of hanging the suite.
    """

    def __init__(self, env: dict[str, str] | None = None, deadline: float = 600) -> None:
        self.log = tempfile.NamedTemporaryFile("w+", prefix="kernel-", suffix=".log", delete=False)
        environ = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, str(KERNEL)],
            cwd=ROOT, env=environ, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
        )
        self.watchdog = threading.Timer(deadline, self.process.kill)
        self.watchdog.daemon = True
        self.watchdog.start()

    def request(self, *request) -> tuple[str, object, str]:
        """Send one request; return ``(status, value, printed)``."""
        try:
            self.process.stdin.write(pickle.dumps(request))
            self.process.stdin.flush()
            header = self.process.stdout.read(8)
            if len(header) < 8:
                raise BrokenPipeError
            return pickle.loads(self.process.stdout.read(int.from_bytes(header, "big")))
        except (BrokenPipeError, EOFError):
            self.process.wait()
            self.log.seek(0)
            tail = self.log.read()[-3000:]
            raise KernelDied(
                f"kernel exited with code {self.process.returncode}; its last output:\n{tail}"
            ) from None

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
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        os.unlink(self.log.name)

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
