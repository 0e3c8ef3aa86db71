"""The inside of a kernel: runs examples and calls for the test process.

TensorFlow fixes its devices once per process, and each chapter states its
own devices (4 logical CPUs, a 200 MB cap, a 30976 MiB cap...). So every
chapter, and every test that needs its own devices, runs in one of these.
The parent (:mod:`tests.harness`) sends pickled requests over a Unix socket
and reads pickled replies from it; anything the examples print is captured
and sent back, anything TensorFlow's C++ code writes goes to the kernel's log.
"""

import contextlib
import importlib
import io
import pickle
import traceback
from pathlib import Path
from types import SimpleNamespace


def serve(requests, replies) -> None:
    """Answer pickled requests from ``requests`` on ``replies`` until end of input.

    Each reply is ``(status, value, printed)``, length-prefixed (8 bytes,
    big-endian); ``printed`` is what the request wrote to ``sys.stdout``.
    """
    namespace: dict = {"__name__": "__main__"}
    while True:
        try:
            request = pickle.load(requests)
        except EOFError:
            return
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            try:
                reply = ("ok", handle(request, namespace))
            except BaseException as error:  # reported to the parent, which decides
                reply = ("error", (type(error).__name__, str(error), traceback.format_exc()))
        try:
            payload = pickle.dumps(reply + (printed.getvalue(),))
        except Exception as error:
            payload = pickle.dumps(("error", ("PicklingError", str(error), ""), printed.getvalue()))
        replies.write(len(payload).to_bytes(8, "big") + payload)
        replies.flush()


def handle(request: tuple, namespace: dict):
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
        target, call_args, call_kwargs = args
        module, _, name = target.partition(":")
        return getattr(importlib.import_module(module), name)(*call_args, **call_kwargs)
    raise ValueError(f"unknown request {kind!r}")


def module_name(path: Path) -> str:
    """Dotted module name of a file under the repository root (the cwd)."""
    parts = path.resolve().relative_to(Path.cwd().resolve()).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

