"""Optimizer slots counted by Keras itself, not from a table.

An optimizer keeps per-weight state ("slots"): RMSprop a velocity, Adam a
momentum and a velocity, and so on. How many, and of what shape, is whatever
the installed Keras creates, so this module asks Keras: it builds the real
optimizer on a tiny probe variable of the same rank and dtype and reads the
shapes of the variables the optimizer made for it. The probe's dimensions
are distinct primes (2, 3, 5, ...), so each slot dimension can be traced back
to the weight axis it came from; Adafactor's factored rows ``r[D]`` and
columns ``c[F]`` are then scaled to the real shape exactly.

The probe is built inside ``tf.Graph().as_default()``: graph variables do not
start TensorFlow's eager runtime, so counting slots never stops a later
:func:`snippets.lib.devices.configure` from configuring devices. One build per
(optimizer, rank, dtype) is cached.

Measured with Keras 3.15 (field case F19: same-shape slots of a
``[1000, 10]`` variable): SGD 0, SGD with momentum 1, RMSprop 1, RMSprop with
momentum 2, centered RMSprop 2, Adam 2, Adam with amsgrad 3; Adafactor keeps a
full-size velocity besides its factored rows and columns.

>>> full_size_slots("rmsprop"), full_size_slots("adam_amsgrad")
(1, 3)
>>> slots_per_weight("adafactor")  # (10000 + 1000 + 10) / 10000
1.101

Sources: ``keras.optimizers`` API pages (RMSprop ``momentum``/``centered``,
Adam ``amsgrad``); Shazeer & Stern 2018, "Adafactor", arXiv:1804.04235.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from snippets.lib.units import check_shape, dtype_bytes

#: Probe dimensions: distinct primes, so a slot dimension names its weight axis.
_PROBE_DIMS = (2, 3, 5, 7, 11, 13, 17, 19)
_PROBE_NAME = "slot_probe"

#: The F19 probe: one [1000, 10] variable.
F19_SHAPE = (1000, 10)


@dataclass(frozen=True)
class SlotShape:
    """One per-weight slot: its dimensions and dtype.

    Attributes:
        dims: for each slot dimension, ``("axis", i)`` (the weight's axis i)
            or ``("size", n)`` (a fixed size, e.g. Adafactor's scalar
            placeholders for rank < 2 weights have no dims at all).
        dtype: the slot's dtype name (Keras makes slots in the weight's dtype).
    """

    dims: tuple[tuple[str, int], ...]
    dtype: str

    def elements(self, shape: Sequence[int]) -> int:
        """Elements of this slot for a weight of ``shape``."""
        return math.prod(shape[n] if kind == "axis" else n for kind, n in self.dims)

    def nbytes(self, shape: Sequence[int]) -> int:
        """Bytes of this slot for a weight of ``shape``."""
        return self.elements(shape) * dtype_bytes(self.dtype)


def make_optimizer(name: str):
    """The Keras optimizer ``name`` stands for (see :data:`snippets.lib.optimizers.OPTIMIZERS`)."""
    import keras

    class_name, kwargs = OPTIMIZERS[check_optimizer(name)]
    return getattr(keras.optimizers, class_name)(**kwargs)


@functools.lru_cache(maxsize=None)
def slot_layout(optimizer: str, rank: int, dtype: str = "float32") -> tuple[SlotShape, ...]:
    """The per-weight slots Keras creates for a weight of ``rank`` and ``dtype``.

    Read from the probe cache (``snippets/data/step_probes.json``, written by
    ``python -m snippets.lib.step_probe --write`` from :func:`probe_slot_layout`,
    re-probed by the tests), so planning does not import TensorFlow; a rank
    or dtype the cache lacks is probed live.

    Raises:
        ValueError: for an unknown optimizer name, or rank > 8.
    """
    check_optimizer(optimizer)
    from snippets.lib import step_probe

    cached = step_probe.load_cache()["slots"].get(f"{optimizer}/{rank}/{dtype}")
    if cached is None:
        return probe_slot_layout(optimizer, rank, dtype)
    return tuple(SlotShape(tuple((kind, n) for kind, n in dims), slot_dtype) for dims, slot_dtype in cached)


@functools.lru_cache(maxsize=None)
def probe_slot_layout(optimizer: str, rank: int, dtype: str = "float32") -> tuple[SlotShape, ...]:
    """The per-weight slots the installed Keras creates for a weight of ``rank`` and ``dtype``, probed live.

    Builds ``optimizer`` on one probe variable of shape ``(2, 3, 5, ...)[:rank]``
    in a throw-away graph and keeps the optimizer variables named after the
    probe (global ones such as ``iteration`` and ``learning_rate`` are not
    per weight and are left out).

    Raises:
        ValueError: for an unknown optimizer name, or rank > 8.
    """
    import keras
    import tensorflow as tf

    check_optimizer(optimizer)
    if not 0 <= rank <= len(_PROBE_DIMS):
        raise ValueError(f"weights of rank {rank} are not supported (0 to {len(_PROBE_DIMS)})")
    probe_shape = _PROBE_DIMS[:rank]
    with tf.Graph().as_default():
        probe = keras.Variable(initializer="zeros", shape=probe_shape, dtype=dtype, name=_PROBE_NAME)
        opt = make_optimizer(optimizer)
        opt.build([probe])
        made = [v for v in opt.variables if _PROBE_NAME in v.path]
    layout = []
    for slot in made:
        dims = tuple(
            ("axis", probe_shape.index(d)) if d in probe_shape else ("size", int(d))
            for d in (int(d) for d in slot.shape)
        )
        layout.append(SlotShape(dims, str(slot.dtype)))
    return tuple(layout)


def slot_elements(optimizer: str | None, shape: Sequence[int], dtype: str = "float32") -> int:
    """Elements of all slots ``optimizer`` keeps for one weight of ``shape`` (0 if None)."""
    if optimizer is None:
        return 0
    shape = check_shape(shape)
    return sum(s.elements(shape) for s in slot_layout(optimizer, len(shape), dtype))


def slot_bytes(optimizer: str | None, shape: Sequence[int], dtype: str = "float32") -> int:
    """Bytes of all slots ``optimizer`` keeps for one weight of ``shape`` and ``dtype``.

    >>> slot_bytes("rmsprop", [131072, 65536]) == 32 * 2**30
    True
    """
    if optimizer is None:
        return 0
    shape = check_shape(shape)
    return sum(s.nbytes(shape) for s in slot_layout(optimizer, len(shape), dtype))


def full_size_slots(optimizer: str | None, shape: Sequence[int] = F19_SHAPE) -> int:
    """Number of slots with the weight's own shape (field case F19's count)."""
    if optimizer is None:
        return 0
    full = tuple(("axis", i) for i in range(len(shape)))
    return sum(s.dims == full for s in slot_layout(optimizer, len(shape)))


def slots_per_weight(optimizer: str | None, shape: Sequence[int] = F19_SHAPE) -> int | float:
    """Slot elements per weight element, for one weight of ``shape`` (default [1000, 10]).

    An int when the slots are whole copies of the weight (SGD 0, RMSprop 1,
    Adam 2, ...); a float for Adafactor, whose factored row and column
    statistics add ``(D + F) / (D * F)``.

    Raises:
        ValueError: for an unknown optimizer name.
    """
    ratio = slot_elements(optimizer, shape) / math.prod(shape)
    return int(ratio) if ratio.is_integer() else round(ratio, 6)


#: Optimizer names the planner accepts -> (Keras class, constructor kwargs).
#: Their slots are counted by building the real optimizer (snippets.lib.optimizers).
OPTIMIZERS = {
    "sgd": ("SGD", {}),
    "sgd_momentum": ("SGD", {"momentum": 0.9}),
    "rmsprop": ("RMSprop", {}),
    "rmsprop_momentum": ("RMSprop", {"momentum": 0.9}),
    "rmsprop_centered": ("RMSprop", {"centered": True}),
    "adam": ("Adam", {}),
    "adam_amsgrad": ("Adam", {"amsgrad": True}),
    "adamw": ("AdamW", {}),
    "adagrad": ("Adagrad", {}),
    "adafactor": ("Adafactor", {}),
    "lion": ("Lion", {}),
}


def check_optimizer(name: str | None) -> str | None:
    """Return ``name`` if the planner knows it (None means inference), else raise ValueError."""
    if name is not None and name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; use one of {', '.join(OPTIMIZERS)}")
    return name
