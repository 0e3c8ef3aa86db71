"""The allocator and the host: what a run may allocate for real.

The host guard refuses, before allocating, anything that would page the host.
"""

from __future__ import annotations

import psutil

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
