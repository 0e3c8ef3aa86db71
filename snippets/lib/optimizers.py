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

from snippets.lib import placements, private, probe_cache
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

    Read from the probe cache (``snippets/lib/data/step_probes.json``, written by
    ``python -m snippets.lib.step_probe --write`` from :func:`probe_slot_layout`,
    re-probed by the tests), so planning does not import TensorFlow; a rank
    or dtype the cache lacks is probed live.

    Raises:
        ValueError: for an unknown optimizer name, or rank > 8.
    """
    check_optimizer(optimizer)
    cached = probe_cache.load_cache()["slots"].get(f"{optimizer}/{rank}/{dtype}")
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


def name_of(optimizer) -> str:
    """The :data:`OPTIMIZERS` name whose slots a Keras optimizer object has, else its class name.

    The settings that add slots decide (``SGD(momentum=0.9)`` is ``"sgd_momentum"``: a momentum slot
    per variable; ``RMSprop(centered=True)`` a mean-gradient slot; ``Adam(amsgrad=True)`` a max slot);
    the learning rate and its schedule do not. A string is returned as given; a ``LossScaleOptimizer`` is
    named by the optimizer it wraps (its own state is two scalars: keras/src/optimizers/loss_scale_optimizer.py).
    """
    if isinstance(optimizer, str):
        return optimizer
    if getattr(optimizer, "inner_optimizer", None) is not None:
        return name_of(optimizer.inner_optimizer)
    class_name = type(optimizer).__name__
    found = [name for name, (cls, kwargs) in OPTIMIZERS.items() if cls == class_name
             and all(bool(getattr(optimizer, key, None)) == bool(value) for key, value in kwargs.items())]
    # The one with the most settings matched: SGD with momentum is sgd_momentum, not sgd.
    return max(found, key=lambda name: len(OPTIMIZERS[name][1]), default=class_name)


def check_optimizer(name: str | None) -> str | None:
    """Return ``name`` if the planner knows it (None means inference), else raise ValueError."""
    if name is not None and name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; use one of {', '.join(OPTIMIZERS)}")
    return name


def colocate_updates(optimizer, jit_compile: bool | str = "auto"):
    """Make ``optimizer`` compute each variable's update on that variable's device, XLA-compiled there.

    Three things in Keras 3's TensorFlow optimizer path end up on device 0
    for variables placed with ``tf.device``:

    * the slots (RMSprop's velocity) when ``fit`` builds the optimizer: it
      colocates them with their variable through the strategy's
      ``colocate_vars_with``, which does not hold there (measured: every
      velocity on device 0 after ``fit``; on its variable's device after an
      eager ``optimizer.build``);
    * ``_all_reduce_sum_gradients`` passes *all* gradients through one
      ``IdentityN`` op (the default strategy's all-reduce over its single
      replica, a ``tf.custom_gradient``): every shard's gradient is copied to
      device 0, so device 0 would hold the full-size gradient;
    * the arithmetic of each update (``rho * v + (1 - rho) * g**2`` ...).

    This creates each slot under ``tf.device`` of its variable, skips the
    all-reduce when no ``tf.distribute`` strategy is active (a sum over one
    replica is the identity; under a real strategy it is kept) and runs each
    ``update_step`` under ``tf.device(variable.device)`` (:func:`placement`
    shows the result). All three patch this optimizer instance only
    (``_all_reduce_sum_gradients`` is private Keras API, checked against
    Keras 3.15).

    XLA: a model whose variables sit on several devices cannot be compiled
    whole (``InvalidArgumentError: Trying to access resource ... located in
    device CPU:2 from device CPU:1``), yet ``jit_compile="auto"`` turns XLA
    on for it on a GPU machine. So compile the model with
    ``jit_compile=False`` (:func:`compile_sharded` does) and let this patch
    compile each shard's update alone, on its device: with ``jit_compile``
    True (what ``"auto"`` means here, :func:`snippets.lib.placements.resolve_xla`)
    each ``update_step`` is a ``tf.function(jit_compile=True)`` per variable,
    which fuses RMSprop's temporaries away (the step's transient drops from
    4 to 1 variable, :mod:`snippets.lib.step_probe`).

    Returns:
        The same optimizer, for ``model.compile(optimizer=colocate_updates(...))``.
    """
    import tensorflow as tf

    jit = placements.resolve_xla(jit_compile, "column")
    update_step = optimizer.update_step
    all_reduce = private.gradient_aggregation(optimizer)
    add_slot = optimizer.add_variable_from_reference
    compiled = {}

    def colocated_slot(reference_variable, *args, **kwargs):
        with tf.device(getattr(reference_variable, "value", reference_variable).device):
            return add_slot(reference_variable, *args, **kwargs)

    def colocated_update_step(gradient, variable, learning_rate):
        with tf.device(variable.device):
            if not jit:
                return update_step(gradient, variable, learning_rate)
            # One XLA cluster per variable, traced with that variable captured.
            step = compiled.get(id(variable))
            if step is None:
                step = compiled[id(variable)] = tf.function(
                    lambda g, lr: update_step(g, variable, lr), jit_compile=True, autograph=False)
            return step(tf.convert_to_tensor(gradient), tf.convert_to_tensor(learning_rate))

    def all_reduce_if_distributed(grads_and_vars):
        if tf.distribute.has_strategy():
            return all_reduce(grads_and_vars)
        return list(grads_and_vars)

    optimizer.update_step = colocated_update_step
    optimizer.add_variable_from_reference = colocated_slot
    private.set_gradient_aggregation(optimizer, all_reduce_if_distributed)
    return optimizer


def compile_sharded(model, optimizer, loss, jit_compile: bool | str = "auto", **kwargs):
    """``model.compile`` for a model with ``tf.device``-sharded layers, safe on a GPU machine.

    Compiles the model without XLA (it cannot be compiled whole, see
    :func:`colocate_updates`) and the optimizer's updates per device, with
    XLA when ``jit_compile`` resolves to True (``"auto"``: as Keras would on a
    GPU host). Returns the model.
    """
    model.compile(optimizer=colocate_updates(optimizer, jit_compile), loss=loss, jit_compile=False, **kwargs)
    return model


def rmsprop_update(variable, velocity, gradient, learning_rate=1e-3, rho=0.9, epsilon=1e-7):
    """One RMSprop step, Keras 3's rule without momentum or centering.

    ``velocity = rho * velocity + (1 - rho) * g**2``;
    ``variable -= learning_rate * g / sqrt(velocity + epsilon)``
    (keras.optimizers.RMSprop, ``update_step``; Hinton, Coursera lecture 6e).
    Elementwise, so on DTensors each device updates its own piece and no
    communication happens.
    """
    import tensorflow as tf

    gradient = tf.convert_to_tensor(gradient)
    velocity.assign(rho * velocity + (1.0 - rho) * tf.square(gradient))
    variable.assign_sub(learning_rate * gradient / tf.sqrt(velocity + epsilon))


def applied(optimizer) -> bool:
    """Whether ``optimizer``, a model's compiled one read after ``fit``'s steps, applied a step: its ``iterations``
    counted one (``apply`` counts every call, keras/src/optimizers/base_optimizer.py), or, a ``LossScaleOptimizer``, its
    loss scale or step counter moved (a step with non-finite gradients counts no iteration:
    keras/src/optimizers/loss_scale_optimizer.py). False for None. helper-98: keras-io's DCGAN's own ``train_step``
    applies a ``d_optimizer`` and a ``g_optimizer``, never the optimizer ``compile`` was given."""
    if optimizer is None:
        return False
    if int(optimizer.iterations.numpy()) > 0:
        return True
    scale = getattr(optimizer, "dynamic_scale", None)
    return scale is not None and (int(optimizer.step_counter.numpy()) > 0
                                  or float(scale.numpy()) != float(optimizer.initial_scale))
