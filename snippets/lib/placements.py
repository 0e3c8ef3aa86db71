"""Placements: where each weight, gradient, slot and update of a training step lives.

A placement is a way to put a model on N devices: ``single``, ``mirrored``
(MirroredStrategy), ``column`` / ``row`` (tensor-parallel shards, tf.device
or DTensor), ``parameter_server``, ``offload``. This module is the one place
that knows how each splits a weight.
"""

from __future__ import annotations

from collections.abc import Sequence

from snippets.lib.splits import check_count, check_split
from snippets.lib.units import check_shape


def shard_axis(shape: Sequence[int], strategy: str) -> int | None:
    """Axis of ``shape`` that ``strategy`` splits across devices, or None if replicated."""
    if strategy == "column" and len(shape) >= 1:
        return len(shape) - 1
    if strategy == "row" and len(shape) >= 2:
        return 0
    if strategy == "parameter_server" and len(shape) >= 1:
        return 0
    return None


def local_shape(shape: Sequence[int], strategy: str = "mirrored", devices: int = 4) -> tuple[int, ...]:
    """Shape of the piece of a weight that one device holds under ``strategy``.

    >>> local_shape([131072, 65536], "column", 4)
    (131072, 16384)
    >>> local_shape([131072, 65536], "row", 3)
    Traceback (most recent call last):
    ...
    ValueError: cannot split dimension 0 of shape [131072, 65536] (size 131072) into 3 equal shards: 3 does not divide 131072; use a shard count that divides 131072, or pad it to 131073

    Raises:
        ValueError: for a bad shape, strategy or count, or a split that does
            not divide the dimension evenly (the message names the dimension,
            its size and the count).
    """
    dims = check_shape(shape)
    check_strategy(strategy)
    check_count(devices)
    axis = shard_axis(dims, strategy)
    if axis is None or devices == 1:
        return dims
    check_split(f"dimension {axis} of shape {list(dims)}", dims[axis], devices)
    return dims[:axis] + (dims[axis] // devices,) + dims[axis + 1 :]


#: Placements the planner knows. ``single``: everything on device 0;
#: ``mirrored``: MirroredStrategy, a full copy per replica; ``column``: each
#: weight split along its last axis, ``W[D, F_N]`` (DTensor layout
#: ``[UNSHARDED, "model"]``); ``row``: split along its first axis, ``W[D_N, F]``,
#: rank-1 weights replicated; ``parameter_server``: ParameterServerStrategy with
#: ``FixedShardsPartitioner(N)``: the plan is the worker's device, which
#: concatenates the shards to run the layer and computes the whole gradient
#: (the shards and, with Keras 3.15, the full-size slots live elsewhere, see
#: :func:`host_bytes`); ``offload``: variables and slots in host RAM, each
#: device reading a copy of the variables and, since on a GPU host the
#: update's arithmetic runs on the default device, of the slots.
STRATEGIES = ("single", "mirrored", "column", "row", "parameter_server", "offload")


def check_strategy(strategy: str) -> str:
    """Return ``strategy`` if it is one of :data:`STRATEGIES`, else raise ValueError."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    return strategy


#: Values of ``xla``: ``"auto"`` resolves as Keras would on a GPU host (:func:`resolve_xla`).
XLA_CHOICES = ("auto", "on", "off")


def resolve_xla(xla: str | bool, strategy: str) -> bool:
    """Whether the step's update is XLA-compiled, as Keras decides on a machine with a GPU.

    ``jit_compile="auto"`` (``Model.compile``'s default) resolves in
    ``_resolve_auto_jit_compile`` (keras/src/trainers/trainer.py, Keras 3.15):
    False under any ``tf.distribute`` strategy and on CPU-only machines,
    True on a GPU machine otherwise. So on a GPU host: ``single`` -> True;
    ``mirrored``, ``parameter_server`` -> False (a strategy is active);
    ``offload`` -> False (a model whose variables sit on another device
    cannot be compiled whole; its ``compile`` must say ``jit_compile=False``);
    ``column`` / ``row`` -> True: the site's ``tf.device`` layers
    (:mod:`snippets.tensor_parallel`) compile the model without XLA and each
    shard's update with XLA on its own device. The CPU emulation uses this
    function, not Keras's CPU answer.

    >>> resolve_xla("auto", "mirrored"), resolve_xla("auto", "column"), resolve_xla("off", "single")
    (False, True, False)

    Raises:
        ValueError: for an ``xla`` not in :data:`XLA_CHOICES` (or a bool) or an unknown strategy.
    """
    check_strategy(strategy)
    if isinstance(xla, bool):
        return xla
    if xla not in XLA_CHOICES:
        raise ValueError(f"xla must be one of {', '.join(XLA_CHOICES)}, not {xla!r}")
    if xla != "auto":
        return xla == "on"
    return strategy in ("single", "column", "row")


def xla_mode(jit: bool, strategy: str) -> str:
    """How XLA applies to a step of ``strategy``: ``"no-xla"``, ``"xla"`` (the whole step) or
    ``"xla-update"`` (each variable's update alone, on its device: the ``tf.device`` layers,
    whose model cannot be compiled whole)."""
    if not jit:
        return "no-xla"
    return "xla-update" if strategy in ("column", "row") else "xla"
