"""Memory arithmetic: the only module in the project that computes bytes.

Every figure the site states about memory (tensor sizes, per-device bytes,
capacities) is computed here, so GiB (2**30 bytes) and GB (10**9 bytes) are
kept apart in one place.

>>> tensor_bytes([131072, 65536], "float32")
34359738368
>>> format_bytes(34359738368)
'34359738368 B (32 GiB)'
>>> parse_size("32480MiB") // MiB
32480

Nothing here imports TensorFlow: sizes of dtypes are fixed by IEEE 754 and
the bfloat16 format, and do not need a runtime.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import psutil

#: Binary units (IEC 80000-13): what allocators and ``nvidia-smi`` count in.
KiB = 2**10
MiB = 2**20
GiB = 2**30
#: Decimal units (SI): what GPU and RAM vendors print on the box.
KB = 10**3
MB = 10**6
GB = 10**9

_UNITS = {
    "b": 1,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": 2**40,
    "kb": KB,
    "mb": MB,
    "gb": GB,
    "tb": 10**12,
}

#: Bytes per element of the dtypes this site discusses. bfloat16 keeps
#: float32's 8 exponent bits in 16 bits (Kalamkar et al., 2019,
#: arXiv:1905.12322); float16 is IEEE 754 binary16.
DTYPE_BYTES = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int8": 1,
    "uint8": 1,
}

#: Memory of one V100-SXM2-32GB as the CUDA driver reports it
#: (``nvidia-smi --query-gpu=memory.total``): 32480 MiB, not 32 GiB.
V100_32GB_MIB = 32480

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Parse a memory size such as ``"32480MiB"``, ``"32GiB"`` or ``"32GB"``.

    Units are case-insensitive: B, KiB, MiB, GiB, TiB (powers of 2) and
    KB, MB, GB, TB (powers of 10). A bare number is taken as MiB, the unit
    of ``TF_CPU_BFC_MEM_LIMIT_IN_MB`` and of a logical device's
    ``memory_limit``.

    Returns:
        The size in bytes (int), rounded down to a whole byte.

    Raises:
        ValueError: for text that is not a positive size with a known unit;
            the message names the accepted units.

    >>> parse_size("32GiB") == 32 * GiB, parse_size("32GB") == 32 * GB
    (True, True)
    >>> parse_size("12 parsecs")
    Traceback (most recent call last):
    ...
    ValueError: '12 parsecs' is not a memory size; write e.g. 32480MiB, 32GiB or 32GB (units: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value, unit = float(text), "mib"
    else:
        match = _SIZE.match(str(text))
        unit = match.group(2).lower() if match else ""
        if not match or (unit and unit not in _UNITS):
            raise ValueError(
                f"{text!r} is not a memory size; write e.g. 32480MiB, 32GiB or 32GB "
                "(units: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            )
        value, unit = float(match.group(1)), unit or "mib"
    size = int(value * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"{text!r} is not a positive memory size")
    return size


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype`` (a name such as ``"float16"``).

    Raises:
        ValueError: for a dtype name not in :data:`DTYPE_BYTES`.
    """
    name = getattr(dtype, "name", dtype)
    try:
        return DTYPE_BYTES[str(name)]
    except KeyError:
        known = ", ".join(DTYPE_BYTES)
        raise ValueError(f"unknown dtype {dtype!r}; use one of {known}") from None


def check_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """Return ``shape`` as a tuple of positive ints, or raise ValueError naming the bad dim."""
    dims = tuple(shape)
    for axis, dim in enumerate(dims):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise ValueError(
                f"dimension {axis} of shape {list(dims)} is {dim!r}; "
                "every dimension must be a positive integer"
            )
    return dims


def tensor_bytes(shape: Sequence[int], dtype: str = "float32") -> int:
    """Bytes of one dense tensor of ``shape`` and ``dtype``, without padding.

    TensorFlow's BFC allocator rounds each request up to a multiple of
    256 bytes (``kMinAllocationSize`` in ``bfc_allocator.h``); for the shapes on
    this site that rounding is zero.

    >>> tensor_bytes([16384, 1024]) // MiB
    64
    """
    return math.prod(check_shape(shape)) * dtype_bytes(dtype)


def format_bytes(nbytes: int) -> str:
    """Exact byte count followed by the largest binary unit that keeps it >= 1.

    >>> format_bytes(32480 * MiB)
    '34057748480 B (31.72 GiB)'
    >>> format_bytes(536870912)
    '536870912 B (512 MiB)'
    """
    return f"{nbytes} B ({human_bytes(nbytes)})"


def human_bytes(nbytes: int) -> str:
    """Short binary-unit form: ``32 GiB``, ``31.72 GiB``, ``512 MiB``, ``100 B``."""
    for unit, name in ((2**40, "TiB"), (GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if abs(nbytes) >= unit:
            value = nbytes / unit
            text = f"{value:.2f}".rstrip("0").rstrip(".")
            return f"{text} {name}"
    return f"{nbytes} B"


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
