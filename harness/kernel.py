"""The inside of a kernel: runs examples and calls for the process that started it.

TensorFlow fixes its devices once per process, and each chapter states its
own devices (4 logical CPUs, a 200 MB cap, a 30976 MiB cap...). So every
chapter, and every test that needs its own devices, runs in one of these.
The parent (:class:`harness.Kernel`) sends requests over a
:func:`multiprocessing.Pipe` and reads the replies from it; anything the
examples print is captured and sent back, anything written to fd 1 or 2
(TensorFlow's C++ logs) goes to the kernel's log.

This module is imported by the parent too (for :func:`main`'s name), so it
imports nothing heavy at module level.
"""

import contextlib
import importlib
import io
import os
import pickle
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

#: The module the fork server imports before it forks (see :mod:`harness.preload`).
PRELOAD = "harness.preload"
#: The module a JAX kernel (a new interpreter, not a fork) imports itself once its environment is set.
PRELOAD_JAX = "harness.preload_jax"


def main(connection, env: dict[str, str], log: str, root: str, preload: str = PRELOAD) -> None:
    """Entry point of a kernel process, forked by the fork server: set up, then serve.

    Args:
        connection: this kernel's end of the parent's Pipe.
        env: the whole environment of the kernel (set before any TensorFlow op runs).
        log: file that receives fd 1 and 2, appended to.
        root: the repository root, the kernel's working directory.
        preload: :data:`PRELOAD` for a fork of the TensorFlow fork server (checked, not
            imported), or a module this process imports itself after setting ``env``
            (:data:`PRELOAD_JAX`, for a spawned JAX kernel).

    Never returns: the process ends with ``os._exit`` once the parent closes its end.
    """
    os.setsid()  # its own session: a Ctrl-C meant for pytest does not interrupt a request midway
    os.chdir(root)
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    # C-level writes (TensorFlow's logs, a crash's message) land in the log the parent shows on death.
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    problem = preload_problem() if preload == PRELOAD else import_problem(preload)
    if problem:
        connection.send(("refused", problem, ""))
    else:
        connection.send(("ready", os.getpid(), ""))
        serve(connection)
    sys.stdout.flush()
    sys.stderr.flush()
    # Not a normal exit: it would join threads TensorFlow or a test left running and run
    # TensorFlow's static destructors, which can hang or crash after the parent has moved on.
    os._exit(0)


def preload_problem() -> str | None:
    """Why this process was forked from a server unfit to fork, or None if it was fit."""
    server = sys.modules.get(PRELOAD)
    if server is None:
        return (f"the fork server did not import {PRELOAD} (multiprocessing ignores an ImportError "
                f"in a preload module; run `python -c 'import {PRELOAD}'` to see it)")
    python_threads, os_threads = server.THREADS_BEFORE_FORK
    if (python_threads, os_threads) != (1, 1):
        return (f"the fork server had {python_threads} Python thread(s) and {os_threads} OS thread(s) "
                f"after importing TensorFlow and Keras; forking a multi-threaded process can deadlock "
                f"its children, so no kernel is started. Some library imported by {PRELOAD} "
                f"started a thread pool: limit it with an environment variable there.")
    return None


def import_problem(module: str) -> str | None:
    """Import ``module`` (a JAX kernel's preload); why it failed or refused, or None.

    The module may define ``PROBLEM`` (a string, or None when all is well).
    """
    try:
        loaded = importlib.import_module(module)
    except Exception:
        return f"importing {module} failed:\n{traceback.format_exc()}"
    return getattr(loaded, "PROBLEM", None)


def serve(connection) -> None:
    """Answer requests from ``connection`` until the parent closes its end.

    Each reply is ``(status, value, printed)``: ``("ok", result, ...)`` or
    ``("error", (type name, message, traceback), ...)``; ``printed`` is what
    the request wrote to ``sys.stdout``.
    """
    namespace: dict = {"__name__": "__main__"}
    while True:
        try:
            message = connection.recv_bytes()
        except EOFError:
            return
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            try:
                # Unpickled here, not by recv(): a function whose module fails to import is
                # an error reply, not a dead kernel.
                reply = ("ok", handle(pickle.loads(message), namespace))
            except BaseException as error:  # reported to the parent, which decides
                reply = ("error", (type(error).__name__, str(error), traceback.format_exc()))
        try:
            connection.send(reply + (printed.getvalue(),))
        except Exception as error:  # an unpicklable result
            connection.send(("error", (type(error).__name__, str(error), ""), printed.getvalue()))


def handle(request: tuple, namespace: dict):
    """Run one request in the kernel's ``namespace`` and return its result.

    Requests: ``("code", source, path, line)`` executes a chapter's block;
    ``("doctest", parsed, path, line, flags)`` runs a Sybil doctest example
    (returns its failure text, or None); ``("import", path)`` imports the
    module at ``path`` into the namespace; ``("call", function, args, kwargs)``
    calls a function, or a ``"package.module:function"`` string.

    Raises:
        ValueError: an unknown request kind; anything the request itself raises.
    """
    kind, *args = request
    if kind == "code":
        source, path, line = args
        # Leading newlines make tracebacks point at the line in the chapter.
        exec(compile("\n" * line + source, path, "exec", dont_inherit=True), namespace)
        return None
    if kind == "doctest":
        from sybil.evaluators.doctest import DocTestEvaluator

        parsed, path, line, flags = args
        return DocTestEvaluator(flags)(SimpleNamespace(parsed=parsed, path=path, line=line, namespace=namespace))
    if kind == "import":
        (path,) = args
        module = importlib.import_module(module_name(Path(path)))
        namespace.update(module.__dict__)
        return None
    if kind == "call":
        function, call_args, call_kwargs = args
        if isinstance(function, str):
            module, _, name = function.partition(":")
            function = getattr(importlib.import_module(module), name)
        return function(*call_args, **call_kwargs)
    raise ValueError(f"unknown request {kind!r}")


def module_name(path: Path) -> str:
    """Dotted module name of a file under the repository root (the kernel's working directory)."""
    parts = path.resolve().relative_to(Path.cwd().resolve()).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
