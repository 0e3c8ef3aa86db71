"""Even splits: one check and one message for every shard count, mesh axis and partitioner.

>>> check_split("units", 65536, 4)
16384
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from snippets.lib.units import check_shape


def check_count(devices: int, what: str = "device count") -> int:
    """Return ``devices`` if it is a positive int, else raise ValueError naming ``what``."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ValueError(f"{what} must be a positive integer, not {devices!r}")
    return devices


#: The spelling of "not split along this dimension" in a DTensor layout
#: (``tf.experimental.dtensor.UNSHARDED``); ``None`` is accepted as well.
UNSHARDED = "unsharded"


def layout_local_shape(shape: Sequence[int], sharding: Sequence[str | None],
                       mesh: dict[str, int]) -> tuple[int, ...]:
    """Shape of the piece of a tensor one device holds under a DTensor layout.

    ``sharding`` has one entry per dimension: a mesh axis name (that
    dimension is split into as many pieces as the axis has devices) or
    ``"unsharded"``/``None``. ``mesh`` maps axis names to sizes. This is the
    rule of ``tf.experimental.dtensor.Layout`` (DTensor concepts guide,
    "Layout"): ``W[D, F]`` with layout ``[UNSHARDED, "model"]`` on a mesh
    ``model=4`` is ``W[D, F_model]``, a ``[D, F/4]`` piece per device.

    >>> layout_local_shape([131072, 65536], [UNSHARDED, "model"], {"model": 4})
    (131072, 16384)
    >>> layout_local_shape([64, 1024], ["batch", None], {"batch": 2, "model": 2})
    (32, 1024)
    >>> layout_local_shape([1024, 510], [None, "model"], {"model": 4})
    Traceback (most recent call last):
    ...
    ValueError: cannot split dimension 1 of shape [1024, 510] over mesh axis 'model' (size 510) into 4 equal shards: 4 does not divide 510; use a shard count that divides 510, or pad it to 512

    Raises:
        ValueError: for a bad shape, a sharding whose length is not the
            rank, an axis the mesh does not have or used twice, or a
            dimension the axis size does not divide.
    """
    dims = check_shape(shape)
    specs = [UNSHARDED if s is None else str(s) for s in sharding]
    if len(specs) != len(dims):
        raise ValueError(f"layout {specs} has {len(specs)} entries but shape {list(dims)} has rank {len(dims)}")
    used = [s for s in specs if s != UNSHARDED]
    for axis_name in used:
        if axis_name not in mesh:
            raise ValueError(f"layout {specs} names mesh axis {axis_name!r}, but the mesh has only {list(mesh)}")
        if used.count(axis_name) > 1:
            raise ValueError(f"layout {specs} uses mesh axis {axis_name!r} twice; a mesh axis can split one dimension only")
    local = []
    for axis, (dim, spec) in enumerate(zip(dims, specs)):
        pieces = 1 if spec == UNSHARDED else check_count(mesh[spec], f"mesh axis {spec!r} size")
        local.append(check_split(f"dimension {axis} of shape {list(dims)} over mesh axis {spec!r}", dim, pieces))
    return tuple(local)


def layout_copies(sharding: Sequence[str | None], mesh: dict[str, int]) -> int:
    """How many devices hold each piece: the product of the mesh axes the layout does not use.

    A kernel ``[UNSHARDED, "model"]`` on a ``batch=2 x model=2`` mesh is
    stored twice (once per batch row of the mesh), as in data parallelism.

    >>> layout_copies([UNSHARDED, "model"], {"batch": 2, "model": 2})
    2
    """
    used = {str(s) for s in sharding if s is not None and s != UNSHARDED}
    return math.prod(size for name, size in mesh.items() if name not in used)


def check_split(name: str, size: int, count: int) -> int:
    """Size of one of ``count`` equal shards of a dimension called ``name`` of ``size``.

    >>> check_split("units", 65536, 4)
    16384
    >>> check_split("units", 10, 4)
    Traceback (most recent call last):
    ...
    ValueError: cannot split units (size 10) into 4 equal shards: 4 does not divide 10; use a shard count that divides 10, or pad it to 12

    Raises:
        ValueError: if ``count`` is not a positive int or does not divide
            ``size``; the message names the dimension, its size and the count.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"shard count must be a positive integer, not {count!r}")
    if size % count:
        padded = math.ceil(size / count) * count
        raise ValueError(
            f"cannot split {name} (size {size}) into {count} equal shards: {count} does not "
            f"divide {size}; use a shard count that divides {size}, or pad it to {padded}"
        )
    return size // count
