"""What every ``python -m snippets.<page>`` shares: device options and one convention for bad input.

Bad input exits with status 2 and one line naming the fix (argparse's
``parser.error`` for the options, :func:`fail` for what fails after them),
never a traceback; a run that fails on its own terms (an OOM it set out to
show, a cluster that did not finish) exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import NoReturn

from snippets.lib import devices
from snippets.lib.errors import startup_noise


class Parser(argparse.ArgumentParser):
    """An argparse parser whose "expected one argument" says how to give a value that starts with "-": argparse takes
    ``--device-memory -5GiB``'s value for an option (helper-57), and reads it as the value after "=" only."""

    given: list[str] = []

    def parse_known_args(self, args=None, namespace=None):
        self.given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        if message.endswith("expected one argument"):
            options = message.removeprefix("argument ").split(":")[0].split("/")
            after = [self.given[i + 1] for i, token in enumerate(self.given[:-1]) if token in options]
            if after and after[0][:1] == "-" and after[0][1:2].isdigit():
                message += f" (a value that starts with \"-\" goes after \"=\": {options[-1]}={after[0]})"
        super().error(message)


def add_device_arguments(parser) -> None:
    """Add ``--devices``, ``--device-memory`` and ``--mode`` to an argparse parser."""
    parser.add_argument("--devices", type=int, default=4, metavar="N",
                        help="number of devices (replicas); default 4")
    parser.add_argument("--device-memory", default=devices.DEFAULT_DEVICE_MEMORY, metavar="SIZE",
                        help=f"memory per device: {devices.DEFAULT_DEVICE_MEMORY} (what TensorFlow's allocator gets on a "
                        "V100-SXM2-32GB, default), 32GiB (2^30 B), 32GB (10^9 B); a bare number is MiB")
    parser.add_argument("--mode", choices=devices.MODES, default="auto",
                        help="auto: real GPUs, else one GPU split, else CPU emulation")


def configure_from_args(args, parser, **kwargs) -> devices.DeviceSetup:
    """:func:`configure` from parsed arguments; bad input exits 2 with one line."""
    # A command-line run wants its own output, not TensorFlow's start-up INFO lines.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return devices.configure(args.devices, args.device_memory, args.mode, **kwargs)
    except (devices.DeviceConfigError, ValueError) as error:
        parser.error(str(error))


#: Seconds of silence before :func:`quiet_tensorflow_start` shows its ``waiting`` line on a terminal.
WAITING_AFTER = 2.0


@contextlib.contextmanager
def quiet_tensorflow_start(waiting: str | None = None) -> Iterator[None]:
    """Import TensorFlow inside this block, and stderr keeps every line but its start-up ones.

    What TensorFlow logs before abseil is initialised ignores ``TF_CPP_MIN_LOG_LEVEL``
    (:data:`snippets.lib.errors.STARTUP_LOG`), so a command's first lines on a machine without a
    GPU driver would be TensorFlow's, not its own; they are held at the file descriptor (C++ writes
    there, not to ``sys.stderr``), and everything else written in the block is written again after it.
    Its INFO lines are turned off too, unless ``TF_CPP_MIN_LOG_LEVEL`` is set (as
    :func:`configure_from_args` does).

    Args:
        waiting: shown on stderr after :data:`WAITING_AFTER` seconds in the block, and erased when it ends, if
            stderr is a terminal: a reader's model takes 15-30 s to import and read on 2 cores, which would
            otherwise pass in silence before the first run's progress line. Erased, it leaves a refusal its one
            line; a log (not a terminal) gets no line at all, as a refusal's is the only one a script reads.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    saved = os.dup(2)
    shown = threading.Event()

    def show() -> None:
        os.write(saved, waiting.encode())
        shown.set()

    timer = threading.Timer(WAITING_AFTER, show) if waiting and os.isatty(saved) else None
    if timer:
        timer.daemon = True
        timer.start()
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            if timer:
                timer.cancel()
                timer.join()
                if shown.is_set():
                    os.write(saved, b"\r\x1b[K")  # back to the line's start, and clear it
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode(errors="replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if not startup_noise(line)))
            sys.stderr.flush()


def fail(parser, message: str, as_json: bool = False, usage: bool = False) -> NoReturn:
    """Exit 2 with ``prog: error: <message>`` alone, for input that parsed but failed later (a
    reader's model that cannot be planned): argparse's ``parser.error`` would print the usage block
    first, which is about the options, and bury the one line that names the fix.

    Args:
        as_json: the command's ``--json`` was given: ``{"error": message}`` is printed on stdout too, so a
            script that reads the output as JSON reads why there is none (helper-48: it read nothing).
        usage: print the usage block first, as ``parser.error`` does, for a refusal of the options themselves.
    """
    if as_json:
        import json

        print(json.dumps({"error": message}), flush=True)
    if usage:
        parser.print_usage(sys.stderr)
    parser.exit(2, f"{parser.prog}: error: {message}\n")


def check_positive(parser, **options: int | None) -> None:
    """Exit 2 with ``--name must be a positive integer, not N`` for the first option below 1.

    Keyword names are the options without dashes (``check_positive(parser, batch=args.batch)``);
    None means "not given" and passes.
    """
    for name, value in options.items():
        if value is not None and (isinstance(value, bool) or value < 1):
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, not {value}")


def add_shape(parser, default, what: str, kernel: bool = True) -> None:
    """Add ``--shape``: ``D F`` for a Dense kernel ``W[D, F]`` (``kernel=True``), else any rank.

    ``what`` completes the help: "--shape D F: <what> (default D F)".
    """
    dims = " ".join(map(str, default))
    if kernel:
        parser.add_argument("--shape", type=int, nargs=2, default=list(default), metavar=("D", "F"),
                            help=f"{what}, a kernel W[D, F] (default {dims})")
    else:
        parser.add_argument("--shape", type=int, nargs="+", default=list(default), metavar="DIM",
                            help=f"{what} (default {dims})")


def exit_on_signals() -> None:
    """Make SIGTERM and SIGHUP (a killed job, a closed terminal) end this process through Python, ``SystemExit`` with
    status 128 + the signal's number, as the shell reports it: what the process holds is let go on the way out. A
    planner's measuring child and its runs, in a session of their own, are ended with it
    (:meth:`snippets.lib.fork_server.Server.run`), as after Ctrl-C; killed by the default action, they went on to the
    end of their set of runs (helper-74). For a command's ``__main__`` only: a kernel that calls ``main`` keeps its own."""
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda received, frame: sys.exit(128 + received))
