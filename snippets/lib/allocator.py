"""The allocator and the host: what a run may allocate for real.

The host guard refuses, before allocating, anything that would page the host; :func:`refused_at` says how far a run
got when its allocator refused.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import psutil

from snippets.lib.errors import refusal_line
from snippets.lib.units import format_bytes


def host_available_bytes() -> int:
    """Bytes of RAM the host can give without swapping (``MemAvailable``, via psutil)."""
    return psutil.virtual_memory().available


class HostMemoryError(MemoryError):
    """A run would need more real RAM than this host can spare."""


def check_host_can_hold(nbytes: int, what: str, available: int | None = None) -> None:
    """Refuse, before allocating, anything that would page the host.

    Raises:
        HostMemoryError: if ``nbytes`` exceeds 80% of the available RAM; the
            message names ``what``, both figures and the way out.
    """
    available = host_available_bytes() if available is None else available
    if nbytes > 0.8 * available:
        raise HostMemoryError(
            f"{what} needs {format_bytes(nbytes)} of real memory but this host has "
            f"{format_bytes(available)} available; refusing so as not to page the host. "
            "Use a smaller shape, or a device cap below the tensor's size so the "
            "allocator refuses it instead."
        )


def measure(action: Callable[[], object], device: str = "CPU:0", collect: bool = True) -> dict:
    """The allocator of ``device`` while ``action()`` runs: its peak and what stays, over its starting level.

    Resets the peak (``tf.config.experimental.reset_memory_stats``), runs
    ``action()`` and reads ``get_memory_info(device)``. Needs allocator
    statistics: a GPU, or CPU mode of :mod:`snippets.lib.devices` (capped
    BFC allocator; there all logical CPUs share one allocator, so any of
    them reads the whole pool).

    ``collect`` runs Python's garbage collector first, so that tensors held
    only by reference cycles are not freed during the measured phase.

    Returns:
        ``{"peak": bytes, "current": bytes, "result": action()}``; keep the
        result alive if the next phase should count it as resident.
    """
    import tensorflow as tf

    if collect:
        gc.collect()
    before = tf.config.experimental.get_memory_info(device)["current"]
    tf.config.experimental.reset_memory_stats(device)
    result = action()
    info = tf.config.experimental.get_memory_info(device)
    return {"peak": info["peak"] - before, "current": info["current"] - before, "result": result}


def allocator_peak(action: Callable[[], object], device: str = "CPU:0", collect: bool = True) -> tuple[int, object]:
    """``(peak bytes, action())`` of :func:`measure`."""
    measured = measure(action, device, collect)
    return measured["peak"], measured["result"]


def reserve(shape, dtype: str = "float32", device: str | None = None):
    """A tensor of ``shape`` taken from the allocator without writing a page: ``tf.raw_ops.Empty(init=False)``.

    The allocator counts every byte (a full-size OOM reproduces), but the
    host's RAM is touched only when something writes the tensor, so an 8 GiB
    shard costs no RAM on a CPU host. The values are whatever the memory
    held: for proving that pieces *fit*, never for training.

    Args:
        shape: dimensions, positive ints.
        dtype: a TensorFlow dtype name.
        device: where to allocate (default: the current device scope).

    Raises:
        tf.errors.ResourceExhaustedError: when the allocator refuses (the OOM).

    Source: ``tf.raw_ops.Empty`` API page (TensorFlow 2.21).
    """
    import contextlib

    import tensorflow as tf

    with tf.device(device) if device else contextlib.nullcontext():
        return tf.raw_ops.Empty(shape=tuple(int(d) for d in shape), dtype=tf.as_dtype(dtype), init=False)


def refused_at(error: BaseException, device: str, start: int) -> dict:
    """How far a phase got before ``device``'s allocator refused (helper-81 could not tell by how much a run ran out):
    ``{"peak_at_refusal"``: the pool's peak since the phase began, bytes above ``start``, ``"refusal"``: the line of
    ``error`` naming the tensor (:func:`snippets.lib.errors.refusal_line`)``}``."""
    import tensorflow as tf

    return {"peak_at_refusal": tf.config.experimental.get_memory_info(device)["peak"] - start,
            "refusal": refusal_line(error)}
