"""Timing a child process, medians, and the machine a figure was measured on.

Peak resident memory of a child comes from ``os.wait4``, which returns the
``rusage`` of exactly that child (``ru_maxrss`` is in KiB on Linux: see
getrusage(2)), so figures for one command are not mixed with other children
of the benchmark process.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class ChildRun:
    """One finished child process.

    Attributes:
        wall_s: wall-clock seconds from start to exit.
        cpu_s: CPU seconds the child used (user + system, its own waited-for
            children included): less skewed than wall time on a busy machine.
        peak_rss_bytes: the child's peak resident set size in bytes.
        returncode: its exit status.
        output: what it printed (stdout and stderr together).
    """

    wall_s: float
    cpu_s: float
    peak_rss_bytes: int
    returncode: int
    output: str


def run_child(argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 1800) -> ChildRun:
    """Run ``argv`` from the repository root; time it and read its peak RSS.

    Raises:
        subprocess.TimeoutExpired: if it runs longer than ``timeout`` seconds
            (the child is killed first).
    """
    environ = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "NO_MKDOCS_2_WARNING": "1", **(env or {})}
    log = tempfile.TemporaryFile("w+")
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=ROOT, env=environ, stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
    deadline = start + timeout
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            process.kill()
            os.wait4(process.pid, 0)
            log.close()
            raise subprocess.TimeoutExpired(argv, timeout)
        time.sleep(0.02)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait again
    log.seek(0)
    output = log.read()
    log.close()
    return ChildRun(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, process.returncode, output)


def python(*args: str) -> list[str]:
    """``[sys.executable, *args]``: run with the benchmark's own interpreter (the venv's)."""
    return [sys.executable, *args]


def summary(values: Sequence[float | int]) -> dict:
    """``{"median": m, "runs": [...]}``; the median of an even count is the mean of the middle two."""
    if not values:
        raise ValueError("no runs to summarise")
    return {"median": statistics.median(values), "runs": list(values)}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine() -> dict:
    """The machine figures were measured on: CPU, cores, RAM, OS, Python and key versions."""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "ram_bytes": psutil.virtual_memory().total,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "tensorflow": _version("tensorflow"),
        "keras": _version("keras"),
        "mkdocs": _version("mkdocs"),
        "gpu": "none",
    }


def commit() -> str:
    """The checked-out commit, with ``+dirty`` if tracked files differ from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return head + ("+dirty" if dirty else "")


def load() -> float:
    """1-minute load average: how busy the machine was (other work skews wall times)."""
    return os.getloadavg()[0]
