"""Float16 storage, ``mixed_float16`` and bfloat16: what each does to the seed kernel.

Run it: ``python -m snippets.precision --help``. It shows, for the seed
layer ``Dense(65536)`` on inputs of width 131072 (kernel ``W[131072, 65536]``):

* the kernel's storage dtype under each Keras dtype policy, read from Keras
  without allocating it: ``float16`` stores 2 bytes per weight (16 GiB),
  ``mixed_float16`` still stores float32 (32 GiB) and adds a float16 compute
  copy each step (field cases F10, F11):

  >>> [units.tensor_bytes([131072, 65536], d) // units.GiB for d in ("float16", "float32")]
  [16, 32]

* which of those tensors one 30976 MiB device (a V100-SXM2-32GB) can reserve,
  tried at full size on the capped allocator with ``tf.raw_ops.Empty`` (it
  reserves without touching a page);
* which 16-bit dtype the visible GPUs support: bfloat16 needs compute
  capability 8.0 or newer (a V100 is 7.0), otherwise float16 with loss scaling.

Per-device training budgets (weights + gradients + optimizer slots) come from
:func:`snippets.lib.planner.per_device`; this module only asks Keras and
TensorFlow what they actually do.

Sources: Keras API pages "Mixed precision" (``DTypePolicy``: variable dtype
vs compute dtype) and ``LossScaleOptimizer``; TensorFlow guide "Mixed
precision" (Tensor Cores on compute capability 7.0+);
``tf.config.experimental.get_device_details`` (``compute_capability`` as a
``(major, minor)`` tuple); NVIDIA Transformer Engine support matrix and the
A100 (Ampere) architecture whitepaper: BF16 Tensor Cores from compute
capability 8.0; Micikevicius et al. 2018, "Mixed Precision Training",
arXiv:1710.03740 (loss scaling, float32 master weights).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass

from snippets.lib import allocator, cli, hardware, optimizers, placements, planner, units

#: Keras dtype policies this module compares (``keras.DTypePolicy`` names).
DTYPE_POLICIES = ("float32", "mixed_float16", "float16", "mixed_bfloat16", "bfloat16")

#: Oldest NVIDIA compute capability with bfloat16 Tensor Cores: Ampere (A100 = 8.0).
BFLOAT16_MIN_CAPABILITY = (8, 0)

#: Compute capability of a Tesla V100 (Volta).
V100_CAPABILITY = (7, 0)


def check_policy(policy: str) -> str:
    """Return ``policy`` if it is one of :data:`DTYPE_POLICIES`, else raise ValueError naming them."""
    if policy not in DTYPE_POLICIES:
        raise ValueError(f"unknown dtype policy {policy!r}; use one of {', '.join(DTYPE_POLICIES)}")
    return policy


@dataclass(frozen=True)
class LayerDtypes:
    """What Keras made under one dtype policy (field cases F10, F11).

    Attributes:
        policy: the policy name the layers were built under.
        kernel: storage dtype of a ``Dense`` kernel.
        embeddings: storage dtype of an ``Embedding`` table.
        compute: the dtype the layer computes in (its inputs and outputs).
    """

    policy: str
    kernel: str
    embeddings: str
    compute: str


def layer_dtypes(policy: str) -> LayerDtypes:
    """Build a small ``Dense(8)`` and ``Embedding(100, 4)`` under ``policy``; read their dtypes.

    Sets the Keras global policy for the build and restores the previous one
    afterwards, so later cells are unaffected.

    Raises:
        ValueError: for a policy not in :data:`DTYPE_POLICIES`.
    """
    import keras

    check_policy(policy)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        dense = keras.layers.Dense(8)
        dense.build((None, 16))
        embedding = keras.layers.Embedding(100, 4)
        embedding.build((None,))
        return LayerDtypes(policy, dense.kernel.dtype, embedding.embeddings.dtype, dense.compute_dtype)
    finally:
        keras.config.set_dtype_policy(previous)


def seed_kernel(policy: str = "float32", input_dim: int = 131072, units: int = 65536):
    """Shape and storage dtype of the seed kernel under ``policy``, allocating nothing.

    Builds ``Dense(units, dtype=policy)`` on inputs of width ``input_dim``
    under ``keras.StatelessScope`` (see
    :func:`snippets.lib.seed.variable_specs`), so the full 131072 x 65536
    kernel is described in milliseconds without a byte of it existing.

    Returns:
        A :class:`snippets.lib.seed.VariableSpec` (``.shape``, ``.dtype``,
        ``.nbytes``).
    """
    from snippets.lib import seed

    check_policy(policy)
    specs = seed.variable_specs(seed.seed_model, input_dim, units, policy)
    return next(s for s in specs if s.path.endswith("kernel"))


def autocast_peak(shape: Sequence[int] = (16384, 1024), device: str = "CPU:0") -> int:
    """Measured bytes of the float16 copy ``mixed_float16`` makes of a float32 kernel per call.

    Under ``mixed_float16`` a layer casts each float32 variable to float16
    when it reads it in ``call``; this measures that cast alone, inside a
    ``tf.function`` as ``Model.fit`` runs it, as the allocator's peak above
    what was in use before. Measured with TF 2.21: 33554432 B for the
    default [16384, 1024] kernel (67108864 B in float32): half the kernel.

    (A whole ``Dense`` call on a CPU peaks higher: CPU float16 matmuls add a
    float32 workspace that a GPU does not need, so it is left out here.)

    Needs the capped CPU allocator (``snippets.lib.devices.configure`` in CPU
    mode) or a GPU, for ``tf.config.experimental.get_memory_info``.

    Returns:
        Peak bytes (int) the cast added.
    """
    import keras
    import tensorflow as tf

    dense = keras.layers.Dense(units.check_shape(shape)[-1], dtype="mixed_float16")
    dense.build((None, shape[0]))
    cast = tf.function(lambda: tf.cast(dense.kernel.value, dense.compute_dtype))
    cast()  # trace once, so tracing's own allocations are not counted
    tf.config.experimental.reset_memory_stats(device)
    before = tf.config.experimental.get_memory_info(device)["current"]
    copy = cast()
    peak = tf.config.experimental.get_memory_info(device)["peak"] - before
    del copy
    return peak


@dataclass(frozen=True)
class Reservation:
    """One tensor tried on the allocator: what, how many bytes, and whether it fitted."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    reserved: bool


def reserve(tensors: Sequence[tuple[str, Sequence[int], str]], device: str = "CPU:0") -> list[Reservation]:
    """Reserve each ``(name, shape, dtype)`` in turn on ``device``, keeping the earlier ones.

    Uses ``tf.raw_ops.Empty(init=False)``, which takes the memory from the
    allocator without writing to it, so a 16 GiB tensor costs address space,
    not RAM. Stops at the first tensor the allocator refuses (the rest are
    not tried), then frees everything.

    Returns:
        One :class:`Reservation` per tensor tried, the last one refused if any was.
    """
    import tensorflow as tf

    held, rows = [], []
    try:
        for name, shape, dtype in tensors:
            dims = units.check_shape(shape)
            nbytes = units.tensor_bytes(dims, dtype)
            try:
                held.append(allocator.reserve(dims, dtype, device))
            except tf.errors.ResourceExhaustedError:
                rows.append(Reservation(name, dims, dtype, nbytes, False))
                break
            rows.append(Reservation(name, dims, dtype, nbytes, True))
    finally:
        del held
    return rows


def training_tensors(shape: Sequence[int], dtype: str, slots: int = 1) -> list[tuple[str, tuple[int, ...], str]]:
    """The per-replica tensors of one weight in training: weight, gradient, ``slots`` optimizer slots.

    Gradients and Keras optimizer slots take the variable's dtype (measured
    for RMSprop on a float16 variable: its velocity is float16). RMSprop
    keeps 1 slot (field case F19).
    """
    dims = units.check_shape(shape)
    return [("weight", dims, dtype), ("gradient", dims, dtype)] + [
        (f"slot {i + 1}", dims, dtype) for i in range(slots)
    ]


def table(rows: Sequence[Reservation]) -> str:
    """The reservations as a table: tensor, shape, dtype, bytes, result."""
    from tabulate import tabulate

    body = [
        (r.name, list(r.shape), r.dtype, r.nbytes, "reserved" if r.reserved else "OOM")
        for r in rows
    ]
    return tabulate(body, headers=["tensor", "shape", "dtype", "bytes", "result"], intfmt=",")


# --- loss scaling -------------------------------------------------------------


@dataclass(frozen=True)
class Float16Step:
    """One SGD step on a float16 weight whose gradient underflows in the backward pass.

    Attributes:
        gradient: the gradient as the backward pass produced it (scaled, if
            loss scaling was on), a Python float.
        before: the weight before the step.
        after: the weight after ``optimizer.apply`` (which unscales first).
    """

    gradient: float
    before: float
    after: float


def underflow_step(scaled: bool) -> Float16Step:
    """One ``SGD(learning_rate=1)`` step on a float16 weight, with or without loss scaling.

    ``loss = ((w * x) * a) * b`` with ``w = 2**-14``, ``x = 2**10`` and
    ``a = b = 2**-14``, all float16, so ``dloss/dw = x * a * b = 2**-18``
    (about 3.8e-6, a float16 subnormal) and the step should take ``w`` to
    ``2**-14 - 2**-18``. The backward pass first forms ``a * b = 2**-28``,
    below float16's smallest subnormal ``2**-24``: it becomes 0, and so do
    the gradient and the update.

    With ``scaled=True`` the optimizer is wrapped in
    ``keras.optimizers.LossScaleOptimizer``: ``scale_loss`` multiplies the
    loss by its scale (2**15 to start) before the backward pass, so the
    intermediate is ``2**-13``, and ``apply`` divides the gradient by the
    scale before the update. Measured with Keras 3.15: the raw gradient is
    0.125 and the weight moves by exactly ``2**-18``.
    """
    import keras
    import tensorflow as tf

    half = tf.float16
    w = keras.Variable(2.0**-14, dtype="float16")
    x = tf.constant(2.0**10, half)
    a = b = tf.constant(2.0**-14, half)
    optimizer = keras.optimizers.SGD(learning_rate=1.0)
    if scaled:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    before = float(w.numpy())
    with tf.GradientTape() as tape:
        loss = ((w.value * x) * a) * b
        if scaled:
            loss = optimizer.scale_loss(loss)
    (grad,) = tape.gradient(loss, [w.value])
    optimizer.apply([grad], [w])
    return Float16Step(float(grad), before, float(w.numpy()))


@dataclass(frozen=True)
class Float16Training:
    """What a few ``fit`` steps of a float16-policy model with loss scaling left behind.

    Attributes:
        optimizer: class name of ``model.optimizer``.
        weights: ``(path, dtype)`` of each model variable.
        slots: ``(path, dtype)`` of each optimizer variable shaped like a weight.
        loss_scale: the dynamic loss scale after training.
        loss: the last epoch's loss (finite if training worked).
    """

    optimizer: str
    weights: tuple[tuple[str, str], ...]
    slots: tuple[tuple[str, str], ...]
    loss_scale: float
    loss: float


def compiled_optimizer(policy: str, optimizer: str = "rmsprop") -> str:
    """Class name of ``model.optimizer`` after ``compile`` under ``policy``.

    Keras 3 wraps the optimizer in ``LossScaleOptimizer`` by itself only
    under ``mixed_float16`` (``Trainer.compile``); under ``float16`` it does
    not, so with float16 variables you wrap it yourself.
    """
    import keras

    check_policy(policy)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)  # compile reads the model's policy, i.e. this one
    try:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile(optimizer=optimizer, loss="mse")
    finally:
        keras.config.set_dtype_policy(previous)
    return type(model.optimizer).__name__


def train_float16(steps: int = 4, seed: int = 0) -> Float16Training:
    """Train ``Dense(4)`` with float16 variables and ``LossScaleOptimizer(RMSprop())`` for ``steps`` steps.

    The recipe for float16 storage: the ``float16`` policy (or
    ``dtype="float16"`` per layer) plus an explicit
    ``keras.optimizers.LossScaleOptimizer``. Measured with Keras 3.15: the
    kernel, the bias and RMSprop's velocities are all float16.
    """
    import keras
    import numpy as np

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float16")
    try:
        keras.utils.set_random_seed(seed)
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(4)])
        model.compile(
            optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.RMSprop()), loss="mse"
        )
        rng = np.random.default_rng(seed)
        x = rng.random((16 * steps, 16)).astype("float16")
        y = rng.random((16 * steps, 4)).astype("float16")
        history = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    finally:
        keras.config.set_dtype_policy(previous)
    shapes = {tuple(w.shape) for w in model.weights}
    slots = tuple(
        (v.path, str(v.dtype)) for v in model.optimizer.variables if tuple(v.shape) in shapes
    )
    return Float16Training(
        type(model.optimizer).__name__,
        tuple((w.path, str(w.dtype)) for w in model.weights),
        slots,
        float(model.optimizer.dynamic_scale.numpy()),
        float(history.history["loss"][-1]),
    )


# --- bfloat16 or float16? -----------------------------------------------------


def supports_bfloat16(capability: tuple[int, int] | None) -> bool:
    """True if a GPU of compute ``capability`` ``(major, minor)`` has bfloat16 Tensor Cores (8.0+).

    >>> supports_bfloat16((7, 0)), supports_bfloat16((8, 0)), supports_bfloat16((9, 0))
    (False, True, True)
    """
    return capability is not None and tuple(capability) >= BFLOAT16_MIN_CAPABILITY


@dataclass(frozen=True)
class HalfChoice:
    """Which 16-bit dtype to use on the visible GPUs, and why.

    Attributes:
        dtype: ``"bfloat16"`` or ``"float16"``.
        loss_scaling: True if training needs ``LossScaleOptimizer`` (float16).
        capabilities: ``(gpu name, (major, minor) or None)`` for each GPU.
        reason: one sentence naming the GPU that decided it.
    """

    dtype: str
    loss_scaling: bool
    capabilities: tuple[tuple[str, tuple[int, int] | None], ...]
    reason: str


def gpu_capabilities(config=None) -> list[tuple[str, tuple[int, int] | None]]:
    """``(name, compute capability)`` of each physical GPU TensorFlow lists.

    Reads ``config.experimental.get_device_details(gpu)["compute_capability"]``;
    a GPU whose details lack it (a pluggable device, say) gets None.

    Args:
        config: ``tf.config`` (default) or an object with the same
            ``list_physical_devices`` and ``experimental.get_device_details``,
            which is how this is unit-tested without a GPU.
    """
    if config is None:
        import tensorflow as tf

        config = tf.config
    result = []
    for gpu in config.list_physical_devices("GPU"):
        capability = config.experimental.get_device_details(gpu).get("compute_capability")
        result.append((gpu.name, tuple(capability) if capability is not None else None))
    return result


def choose_half_dtype(config=None) -> HalfChoice:
    """bfloat16 if every visible GPU has compute capability 8.0+, else float16 with loss scaling.

    A MirroredStrategy runs the same program on every replica, so one GPU
    older than 8.0 decides for all of them. On a V100 (7.0) the answer is
    float16: bfloat16 has no Tensor Core path there.

    Args:
        config: ``tf.config`` (default) or a stand-in, see :func:`gpu_capabilities`.

    Raises:
        ValueError: if TensorFlow lists no GPU: there is nothing to decide for
            (the message says so and names the check to run on the GPU host).
    """
    capabilities = gpu_capabilities(config)
    if not capabilities:
        raise ValueError(
            "TensorFlow lists no GPU, so there is no compute capability to check; "
            "run this on the GPU host (tf.config.list_physical_devices('GPU') must not be empty)"
        )
    need = ".".join(map(str, BFLOAT16_MIN_CAPABILITY))
    for name, capability in capabilities:
        if not supports_bfloat16(capability):
            found = "unknown" if capability is None else ".".join(map(str, capability))
            return HalfChoice(
                "float16", True, tuple(capabilities),
                f"{name} has compute capability {found}, below {need}: use float16 "
                "with LossScaleOptimizer",
            )
    return HalfChoice(
        "bfloat16", False, tuple(capabilities),
        f"all {len(capabilities)} GPU(s) have compute capability {need} or newer: bfloat16 "
        "keeps float32's exponent range, so no loss scaling is needed",
    )


# --- command line -------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snippets.precision", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--policy", action="append", choices=DTYPE_POLICIES,
                        help="dtype policy to describe (repeatable; default: all)")
    cli.add_shape(parser, [131072, 65536], 'the Dense kernel')
    parser.add_argument("--optimizer", default="rmsprop",
                        help="optimizer for the per-replica budget (default rmsprop)")
    parser.add_argument("--devices", type=int, default=4, metavar="N",
                        help="devices for the sharded budget (default 4)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # our table, not TF's start-up lines
    try:
        units.check_shape(args.shape)
        optimizers.check_optimizer(args.optimizer)
        placements.local_shape(args.shape, "column", args.devices)
    except ValueError as error:
        parser.error(str(error))

    from tabulate import tabulate

    rows = []
    for policy in args.policy or DTYPE_POLICIES:
        spec = seed_kernel(policy, *args.shape)
        budget_policy = policy if policy in units.POLICIES else None
        mirrored = planner.per_device(args.shape, spec.dtype, args.optimizer, "mirrored", args.devices,
                                     budget_policy, reserve=0)[0]
        column = [planner.per_device(args.shape, spec.dtype, args.optimizer, "column", args.devices,
                                    budget_policy, xla=xla)[0] for xla in ("on", "off")]
        rows.append((policy, spec.dtype, units.human_bytes(spec.nbytes),
                     units.human_bytes(mirrored.total),
                     *(units.human_bytes(b.total) for b in column)))
    print(tabulate(rows, headers=["policy", "kernel dtype", "kernel",
                                  f"mirrored, {args.optimizer}",
                                  f"column / {args.devices}, XLA", "no XLA"]))
    print(f"\nPeaks per device of one step at batch 64 (or of initialisation, if larger). "
          f"One V100-SXM2-32GB's allocator: {units.format_bytes(hardware.V100_CAPACITY)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
