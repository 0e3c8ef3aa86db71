"""Sizes: bytes per dtype, parsing "30976MiB", formatting, GiB vs GB.

Every byte count the site states goes through here, so GiB (2**30 bytes) and
GB (10**9 bytes) are kept apart in one place.

>>> tensor_bytes([131072, 65536], "float32")
34359738368
>>> format_bytes(34359738368)
'34359738368 B (32 GiB)'
>>> parse_size("30976MiB") // MiB
30976

Nothing here imports TensorFlow: sizes of dtypes are fixed by IEEE 754 and
the bfloat16 format, and do not need a runtime.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence


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


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Parse a memory size such as ``"30976MiB"``, ``"32GiB"`` or ``"32GB"``.

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
    ValueError: '12 parsecs' is not a memory size; write e.g. 30976MiB, 32GiB or 32GB (units: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value, unit = float(text), "mib"
    else:
        match = _SIZE.match(str(text))
        unit = match.group(2).lower() if match else ""
        if not match or (unit and unit not in _UNITS):
            raise ValueError(
                f"{text!r} is not a memory size; write e.g. 30976MiB, 32GiB or 32GB "
                "(units: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            )
        value, unit = float(match.group(1)), unit or "mib"
    size = int(value * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"{text!r} is not a positive memory size")
    return size


def parse_size_with_unit(text: str, option: str) -> int:
    """:func:`parse_size` for an option whose figure a reader may paste from ``decide --json``, whose sizes are bytes:
    there a bare number, which :func:`parse_size` reads as MiB, is refused (helper-58: 0.8 x ``plan.step_peak`` passed
    to ``model_step --cap`` read as 868 TiB; helper-77: ``decide --device-memory 909680640`` planned for 867 TiB).

    Returns:
        The size in bytes (int).

    Raises:
        ValueError: as :func:`parse_size`, or for a bare number: the message names ``option`` and how to write it.

    >>> parse_size_with_unit("909680640B", "--cap") == 909680640
    True
    >>> parse_size_with_unit("512", "--cap")
    Traceback (most recent call last):
    ...
    ValueError: --cap 512 has no unit: write 512B for bytes (decide --json's figures are bytes) or a size with its unit, such as 512MiB or 4GiB
    """
    size = parse_size(text)
    if (bare := str(text).strip()).replace(".", "", 1).isdigit():
        as_mib = f"{bare}MiB or " if float(bare) < MiB else ""  # helper-71: not "909680640MiB", 867 TiB
        raise ValueError(f"{option} {bare} has no unit: write {bare}B for bytes (decide --json's figures are bytes) or "
                         f"a size with its unit, such as {as_mib}4GiB")
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

    >>> format_bytes(30976 * MiB)
    '32480690176 B (30.25 GiB)'
    >>> format_bytes(536870912)
    '536870912 B (512 MiB)'
    """
    return f"{nbytes} B ({human_bytes(nbytes)})"


def human_bytes(nbytes: int) -> str:
    """Short binary-unit form: ``32 GiB``, ``30.25 GiB``, ``512 MiB``, ``100 B``."""
    for unit, name in ((2**40, "TiB"), (GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if abs(nbytes) >= unit:
            value = nbytes / unit
            text = f"{value:.2f}".rstrip("0").rstrip(".")
            return f"{text} {name}"
    return f"{nbytes} B"


def against(nbytes: int, capacity: int) -> str:
    """``nbytes`` in :func:`human_bytes`, with how far over or under ``capacity`` it is where both read the same.

    >>> against(4 * GiB + MiB, 4 * GiB), against(3 * GiB, 4 * GiB)
    ('4 GiB (1 MiB over)', '3 GiB')
    """
    if human_bytes(nbytes) != human_bytes(capacity) or nbytes == capacity:
        return human_bytes(nbytes)
    return f"{human_bytes(nbytes)} ({human_bytes(abs(nbytes - capacity))} {'over' if nbytes > capacity else 'under'})"


#: Mixed-precision policies: (variable dtype, compute dtype). Keras keeps the
#: variables in float32 and casts a float16 copy for each layer call
#: (Keras API page "Mixed precision"; field case F10).
POLICIES = {"mixed_float16": ("float32", "float16"), "mixed_bfloat16": ("float32", "bfloat16")}


def computes_in_16_bits(policy: str | None) -> bool:
    """Whether a Keras dtype policy named ``policy`` computes in 16 bits: a mixed one (:data:`POLICIES`) or
    ``float16`` / ``bfloat16`` throughout.

    >>> [computes_in_16_bits(p) for p in ("mixed_bfloat16", "float16", "float32", None)]
    [True, True, False, False]
    """
    return policy in POLICIES or policy in ("float16", "bfloat16")
