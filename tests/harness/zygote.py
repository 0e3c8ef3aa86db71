"""Fork kernels from a process that has already imported TensorFlow.

Importing TensorFlow and Keras takes 6-10 s of CPU, and the suite starts
dozens of kernels. Importing does not start TensorFlow's runtime: devices and
the CPU allocator's ``TF_CPU_*`` variables are read when the first op runs
(measured on TF 2.21, see ``snippets/lib/devices.py``). So this process imports
both once, then forks one child per kernel; each child sets its own
environment, configures its own devices and is as fresh as a new process
for everything the chapters do. Import leaves TensorFlow with no threads of
its own running, which is what makes ``fork`` safe here.

Protocol (on stdin/stdout, one JSON object per line): the parent sends
``{"env": {...}, "socket": path, "log": path}``, the zygote answers
``{"pid": N}``; the child connects to the parent's Unix socket at ``path``
and serves :func:`tests.harness.kernel.serve` on it.
"""

import json
import os
import signal
import socket
import sys
import traceback


def read_line(fd: int) -> bytes:
    # Unbuffered on purpose: a forked child must not inherit queued requests.
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            return b""
        line += chunk
    return line


def child(request: dict) -> None:
    os.setsid()  # out of the zygote's process group: a kill reaches this kernel only
    os.environ.clear()
    os.environ.update(request["env"])
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND)
    os.dup2(log, 2)
    os.dup2(log, 1)  # C-level prints must not reach the zygote's reply pipe
    os.close(0)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(request["socket"])
    from tests.harness.kernel import serve

    serve(connection.makefile("rb"), connection.makefile("wb"))


def main() -> None:
    import keras  # noqa: F401  (the import is the point)
    import tensorflow  # noqa: F401

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel itself
    out = os.fdopen(os.dup(1), "w")
    while True:
        line = read_line(0)
        if not line:
            return
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                child(request)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stderr.flush()
                os._exit(code)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    main()
