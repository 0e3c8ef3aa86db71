"""Where a variable really lives: one piece per device, whatever made it.

Every placement on this site ends in the same question, "which device holds
which part of this variable?", and every kind of variable answers it
differently:

- a mirrored variable (``MirroredStrategy``) has ``.values``, one full copy per replica;
- a ``ShardedVariable`` (ParameterServerStrategy with a partitioner) has
  ``.variables``, one shard per ps task;
- a DTensor ``DVariable`` is unpacked with ``dtensor.unpack`` into one
  component per mesh device;
- a plain ``tf.Variable`` (under ``tf.device`` or nothing) is one piece;
- a Keras 3 variable on the TensorFlow backend wraps one of the above in
  ``.value`` (``keras/src/backend/tensorflow/core.py``).

:func:`of_variable` reads all of them into :class:`Piece` records,
:func:`short_device` names a device the way the chapters print it, and
:func:`describe` says where the pieces are in one short line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from snippets.lib.units import tensor_bytes


@dataclass(frozen=True)
class Piece:
    """One per-device buffer of a variable, a gradient or an optimizer slot.

    Attributes:
        device: full device name, e.g. ``/job:localhost/replica:0/task:0/device:CPU:1``.
        shape: the piece's own shape (a shard's, not the whole variable's).
        dtype: dtype name, e.g. ``"float32"``.
        nbytes: ``tensor_bytes(shape, dtype)``: bytes from the shape, not from
            an allocator.
        name: the variable's path or name ("" for a bare tensor).
        kind: ``"weights"``, ``"gradients"`` or ``"slots"``.
    """

    device: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    name: str = ""
    kind: str = "weights"


def short_device(name: str) -> str:
    """A device name as the chapters print it: ``CPU:3``, or ``ps:1/CPU:0`` on another job.

    >>> short_device("/job:localhost/replica:0/task:0/device:CPU:3")
    'CPU:3'
    >>> short_device("/job:ps/replica:0/task:1/device:CPU:0")
    'ps:1/CPU:0'
    >>> short_device("")  # an op with no device assigned
    '(default)'
    """
    if not name:
        return "(default)"
    device = name.rsplit("device:", 1)[-1]
    job = re.search(r"/job:(\w+)", name)
    task = re.search(r"/task:(\d+)", name)
    if job and job.group(1) != "localhost":
        return f"{job.group(1)}:{task.group(1) if task else 0}/{device}"
    return device


def unwrap(variable):
    """The TensorFlow variable behind a Keras 3 variable (itself for anything else).

    Keras 3's wrapper has no device of its own; its ``.value`` is the
    ``tf.Variable`` (or ``ShardedVariable``, ``DVariable``) that holds the bytes.
    """
    import keras

    if isinstance(variable, keras.Variable):
        return variable.value
    return variable


def tensors_of(variable) -> list:
    """The per-device TensorFlow objects behind ``variable``, in device order.

    Raises nothing: an object with none of the shapes listed in the module
    docstring is its own single piece.
    """
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    value = unwrap(variable)
    if hasattr(value, "variables") and type(value).__name__ == "ShardedVariable":
        return list(value.variables)
    if getattr(value, "values", None) is not None and not callable(value.values):
        return list(value.values)
    # is_dtensor works eagerly only; inside a traced function nothing is unpacked anyway.
    if tf.executing_eagerly() and dtensor.is_dtensor(value):
        # unpack() takes a tensor, not a DVariable: read it (one copy per
        # component, fine at the scales the chapters build).
        tensor = value.read_value() if hasattr(value, "read_value") else value
        return list(dtensor.unpack(tensor))
    return [value]


def of_tensors(tensors: Iterable, name: str = "", kind: str = "weights") -> list[Piece]:
    """One :class:`Piece` per tensor or variable in ``tensors`` (anything with ``.device``,
    ``.shape`` and ``.dtype``), in order."""
    result = []
    for tensor in tensors:
        shape = tuple(int(d) for d in tensor.shape)
        dtype = tensor.dtype.name if hasattr(tensor.dtype, "name") else str(tensor.dtype)
        result.append(Piece(tensor.device, shape, dtype, tensor_bytes(shape, dtype), name, kind))
    return result


def of_variable(variable, kind: str = "weights") -> list[Piece]:
    """The pieces of one variable (mirrored, sharded, DTensor, Keras or plain), in device order."""
    name = getattr(variable, "path", None) or getattr(variable, "name", "")
    return of_tensors(tensors_of(variable), name, kind)


def of_variables(variables: Iterable, kind: str = "weights") -> list[Piece]:
    """:func:`of_variable` for each of ``variables``, concatenated."""
    return [piece for variable in variables for piece in of_variable(variable, kind)]


def bytes_per_device(items: Iterable[Piece]) -> dict[str, int]:
    """Bytes on each device (by :func:`short_device`), in order of first appearance."""
    totals: dict[str, int] = {}
    for piece in items:
        device = short_device(piece.device)
        totals[device] = totals.get(device, 0) + piece.nbytes
    return totals


def device_span(names: Sequence[str]) -> str:
    """``CPU:1-4`` for consecutive devices of one kind, else the names joined by commas.

    >>> device_span(["CPU:1", "CPU:2", "CPU:3", "CPU:4"]), device_span(["ps:0/CPU:0", "ps:1/CPU:0"])
    ('CPU:1-4', 'ps:0/CPU:0, ps:1/CPU:0')
    """
    kinds = {name.rpartition(":")[0] for name in names}
    numbers = [name.rpartition(":")[2] for name in names]
    if len(names) > 2 and len(kinds) == 1 and all(n.isdigit() for n in numbers):
        first, last = int(numbers[0]), int(numbers[-1])
        if [int(n) for n in numbers] == list(range(first, last + 1)):
            return f"{kinds.pop()}:{first}-{last}"
    return ", ".join(names)


def describe(held: Sequence[Piece]) -> str:
    """``[1024, 128] on CPU:1-4`` with pieces of one shape grouped."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for p in held:
        groups.setdefault(p.shape, []).append(short_device(p.device))
    return "; ".join(f"{list(shape)} on {device_span(where)}" for shape, where in groups.items())
