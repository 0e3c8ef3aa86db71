"""The planner: each device's peak, phase by phase, of a training step under a placement.

For every weight it counts what a device holds (its piece of the weight, the
gradient, the optimizer's slots) and what a step adds on top (activations,
the all-reduce's buffer, the update's temporaries), phase by phase: init,
forward, backward, aggregation, update. Capacities are what TensorFlow's
allocator gets (:mod:`snippets.lib.hardware`).

>>> b = per_device([131072, 65536], "float32", "rmsprop", "mirrored", 4)[0]
>>> human_bytes(b.step_peak), b.peak_phase, human_bytes(b.step_peak - b.margin)
('224.02 GiB', 'update', '192.02 GiB')

224.02 GiB is an upper bound: it holds :data:`SCHEDULE_MARGIN`; the order
the update's ops were measured in gives 192.02 GiB.

Nothing here imports TensorFlow: slot layouts and update temporaries come
from the probe cache (:mod:`snippets.lib.step_probe`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from snippets.lib import optimizers, placements, probe_cache
from snippets.lib.optimizers import check_optimizer
from snippets.lib.placements import local_shape, resolve_xla, xla_mode
from snippets.lib.splits import check_count
from snippets.lib.units import GiB, POLICIES, check_shape, dtype_bytes, human_bytes, tensor_bytes  # noqa: F401 (GiB, human_bytes: doctests)


# --- per-device budgets of a training step -----------------------------------


#: Update temporaries beyond the probe's, in units of the variable, for an
#: update that runs without XLA: an upper bound, not a measured peak. Its
#: cause is the BFC allocator's split rule: a free chunk is split only when
#: it is at least twice the request or leaves at least 128 MiB
#: (``BFCAllocator::FindChunkPtr``, tensorflow/core/common_runtime/bfc_allocator.cc),
#: so a request for a variable under about 256 MiB can be handed, and
#: counted as, a chunk up to twice its size; the planner's agreement
#: configurations sit there and measured up to about one variable above the
#: probe (benchmarks, ``planner_vs_step_peak``). At 384 and 512 MiB, where the
#: rule wastes at most 128 MiB a buffer, no run of RMSprop, Adam or SGD with
#: momentum measured a buffer above the probe, at 1, 2 or 8 inter-op threads,
#: with the slots built before ``fit`` or inside it; one inter-op thread
#: measured one buffer below it (benchmarks, ``schedule_margin``). So for
#: GPU-sized variables the margin is up to one variable of headroom the
#: measured order does not use: figures that hold it are said as "up to"
#: (:attr:`DeviceBudget.margin` is how much of a figure it is). It is kept
#: because it changes no verdict of the seed's options (docs/decide.md tests
#: that) and it holds the small configurations the planner is checked
#: against. A compiled update has one buffer assignment and gets no margin.
SCHEDULE_MARGIN = 1


#: Peak bytes while initialising one variable, as a multiple of the variable,
#: measured under the capped CPU allocator (field case F18): a constant fill
#: hands its buffer to the variable (1x); a random initializer draws a
#: uniform or normal sample, then scales and shifts it, each step a new
#: full-size tensor, before the variable takes the result (3x).
INIT_PEAK = {
    "zeros": 1,
    "ones": 1,
    "constant": 1,
    "glorot_uniform": 3,
    "glorot_normal": 3,
    "he_uniform": 3,
    "he_normal": 3,
    "lecun_uniform": 3,
    "lecun_normal": 3,
    "random_uniform": 3,
    "random_normal": 3,
    "truncated_normal": 3,
}


#: The same for Keras 3 on JAX (placements whose ``init_compiled`` is set), which
#: draws a variable with a layout by ``jax.jit(initializer, out_shardings=layout)``
#: once it is 250 MiB or more over the mesh (``should_shard_at_init``,
#: keras/src/backend/jax/core.py): XLA:CPU's buffer assignment, read by
#: compile-only analysis at the seed's full shape (:func:`snippets.keep_fit.initializer_bytes`,
#: checked by tests/test_keep_fit.py): every random initializer holds three
#: more temporaries the size of the device's piece (4x), a constant none (1x),
#: and the site's ``BlockwiseGlorotUniform`` (:mod:`snippets.keep_fit`, 128 blocks
#: of rows drawn one after the other) six temporaries of one block's piece.
#: XLA:GPU compiles the draw differently; it is not measured here. Unknown
#: initializers count as 4x.
XLA_INIT_PEAK = {
    "zeros": 1,
    "ones": 1,
    "constant": 1,
    "blockwise_glorot_uniform": 1 + 6 / 128,
}


def _initializer_name(initializer) -> str:
    name = getattr(initializer, "__name__", None) or type(initializer).__name__
    if isinstance(initializer, str):
        name = initializer
    # "GlorotUniform" -> "glorot_uniform"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower() if not name.islower() else name


def init_multiplier(initializer, compiled: bool = False) -> float:
    """Peak while initialising one variable, as a multiple of it (see :data:`INIT_PEAK`).

    Accepts a Keras initializer name (``"glorot_uniform"``), class name
    (``"GlorotUniform"``) or instance; unknown initializers count as 3x, the
    worst measured. ``compiled``: drawn by XLA, as Keras on JAX draws a large
    variable with a layout (:data:`XLA_INIT_PEAK`; unknown ones 4x).

    >>> init_multiplier("glorot_uniform"), init_multiplier("glorot_uniform", compiled=True)
    (3, 4)
    """
    if initializer is None:
        return 1
    if compiled:
        return XLA_INIT_PEAK.get(_initializer_name(initializer), 4)
    return INIT_PEAK.get(_initializer_name(initializer), 3)


@dataclass(frozen=True)
class Weight:
    """A model variable as the planner sees it (shape, dtype, initializer, trainable).

    Anything with ``.shape`` and ``.dtype`` works as a weight (for example
    ``snippets.lib.seed.VariableSpec``); ``initializer`` and
    ``trainable`` are read if present.
    """

    shape: tuple[int, ...]
    dtype: str = "float32"
    initializer: str | None = "glorot_uniform"
    trainable: bool = True
    #: The variable's Keras path (``"sequential/dense/kernel"``), when it came from a model.
    path: str | None = None

    @property
    def dense_kernel(self) -> bool:
        """Whether the rule counts this weight's activations: a rank-2 ``kernel`` outside a recurrent cell.

        An ``Embedding``'s table reads ``batch`` rows, not a ``[batch, vocab]``
        input; a recurrent cell's kernels run once per time step; neither is
        a Dense layer's ``x @ W``. A weight without a path (plain shapes) counts.
        """
        if len(self.shape) != 2:
            return False
        if self.path is None:
            return True
        parts = self.path.split("/")
        return parts[-1] == "kernel" and not any("cell" in part for part in parts[:-1])

    @property
    def embedding_table(self) -> bool:
        """Whether this is an ``Embedding``'s table: a rank-2 variable Keras names ``embeddings``, which a step reads one
        row of per looked-up id (:func:`snippets.lib.model_rule.lookup_slope`)."""
        return len(self.shape) == 2 and self.path is not None and self.path.split("/")[-1] == "embeddings"


@dataclass(frozen=True)
class DeviceBudget:
    """Bytes one device needs during a training step, by kind and by phase. All fields are ints in bytes.

    Attributes:
        device: device index (0 .. N-1).
        weights: the variables (or their shards) the device holds or reads.
        gradients: one gradient per trainable weight, in the variable dtype.
        slots: optimizer slots (per weight; the optimizer's own scalars,
            e.g. ``iteration``, are a few bytes and left out).
        transient: what the peak adds to weights + gradients + slots: the
            step's extra (activations + update temporaries, or the gradient
            aggregation's buffer), or the initialisation scratch where that
            is larger. ``weights + gradients + slots + transient == peak``.
        reserve: what TensorFlow keeps back from the allocator on this card
            (``MinSystemMemory``), already outside the capacity the budget is
            held against (:mod:`snippets.lib.hardware`); 0 under emulation.
        init_transient: what initialisation adds to all the weights at its
            peak. Variables are made one after another in the order given,
            so the peak is the largest, over variables, of the ones made so
            far plus that variable's initialiser temporaries.
        step_transient: activations + the larger of the update temporaries
            and the aggregation buffer.
        activations: the batch's activations on this device.
        update_temporaries: what the optimizer update allocates beyond the
            gradient (measured by :mod:`snippets.lib.step_probe`; with a mixed
            policy it includes the compute copy and loss scaling).
        aggregation: the all-reduced gradient buffer (MirroredStrategy over
            more than one replica), held while the gradient still exists.
        margin: the part of ``update_temporaries`` that is
            :data:`SCHEDULE_MARGIN` (an update without XLA): a peak that
            holds it is an upper bound ("up to"), and
            ``step_peak - margin`` is the measured order's.
        hosted: the variables live elsewhere (parameter servers, host RAM):
            the device holds ``weights`` only as the copies a step reads,
            so nothing is on it while they are initialised.
    """

    device: int
    weights: int
    gradients: int
    slots: int
    transient: int
    reserve: int
    init_transient: int = 0
    step_transient: int = 0
    activations: int = 0
    update_temporaries: int = 0
    aggregation: int = 0
    hosted: bool = False
    margin: int = 0

    @property
    def init_peak(self) -> int:
        """Allocator peak while initialising (weights + initialiser temporaries; 0 if ``hosted``)."""
        return 0 if self.hosted else self.weights + self.init_transient

    @property
    def step_peak(self) -> int:
        """Allocator peak during a training step: resident state + gradients + the step's transients.

        The phases of a step, in order: forward (weights + slots +
        activations), backward (+ gradients), aggregation (+ the reduced
        gradient, MirroredStrategy), update (+ the update's temporaries);
        the peak is the largest.
        """
        return self.weights + self.gradients + self.slots + self.step_transient

    @property
    def phases(self) -> dict[str, int]:
        """Peak bytes of each phase: init, forward, backward, aggregation, update."""
        resident = self.weights + self.slots + self.activations
        return {
            "init": self.init_peak,
            "forward": resident,
            "backward": resident + self.gradients,
            "aggregation": resident + self.gradients + self.aggregation,
            "update": resident + self.gradients + self.update_temporaries,
        }

    @property
    def peak_phase(self) -> str:
        """The phase that peaks (the first of equals, in step order)."""
        phases = self.phases
        return max(phases, key=lambda name: phases[name])

    @property
    def total(self) -> int:
        """Peak bytes the device's allocator must give: the larger of the init and step peaks."""
        return max(self.init_peak, self.step_peak)


def _as_weight(item) -> Weight:
    if isinstance(item, Weight):
        return item
    if isinstance(item, (tuple, list)):
        return Weight(check_shape(item))
    return Weight(
        check_shape(tuple(int(d) for d in item.shape)),
        str(getattr(item.dtype, "name", item.dtype)),
        getattr(item, "initializer", "glorot_uniform"),
        bool(getattr(item, "trainable", True)),
        getattr(item, "path", None),
    )


def dense_activations(shape: Sequence[int], strategy: str, devices: int, batch: int,
                      training: bool = True) -> int:
    """Activation bytes one device holds for a Dense kernel ``W[D, F]`` at global batch ``batch``.

    The layer's input ``x[b, D_in]`` plus three ``[b, F]`` tensors when
    ``training`` (output, target, output gradient), one otherwise (the
    output), float32, where ``b`` is the device's part of
    the batch (``ceil(batch / N)`` for ``mirrored``: the fullest replica's share of a batch that does not
    divide evenly, as ``tf.distribute`` splits it; the whole batch otherwise:
    a ``column`` layout broadcasts the whole ``x[B, D]`` to every device)
    and ``D_in`` is ``D / N`` for ``row`` (each device reads its slice of x).
    An estimate for one Dense layer feeding the loss; 0 for weights of
    other ranks.
    """
    if len(shape) != 2:
        return 0
    d, f = shape
    placement = placements.get(strategy)
    local_batch = -(-batch // devices) if placement.batch_split else batch
    d_in = d // devices if placement.reads_input_slice else d
    outputs = 3 if training else 1
    return (tensor_bytes((max(local_batch, 1), d_in), "float32")
            + outputs * tensor_bytes((max(local_batch, 1), f), "float32"))


def plan(
    weights,
    optimizer: str | None = None,
    strategy: str = "mirrored",
    devices: int = 4,
    policy: str | None = None,
    reserve: int = 0,
    *,
    batch: int = 64,
    xla: str | bool = "auto",
    accumulation: int = 1,
) -> list[DeviceBudget]:
    """Per-device budgets of one training step for a whole model: one :class:`DeviceBudget` per device.

    Args:
        weights: the model's variables: :class:`Weight` objects, plain shapes
            (float32, Glorot-initialised, trainable), or anything with
            ``.shape`` and ``.dtype`` such as
            :func:`snippets.lib.seed.variable_specs`' results.
        optimizer: None (inference: no gradients, no slots) or a name in
            :data:`OPTIMIZERS`; slots are counted by Keras (snippets.lib.optimizers),
            the update's temporaries were measured on the installed Keras
            (snippets.lib.step_probe).
        strategy: one of :data:`STRATEGIES`. ``parameter_server`` plans the
            worker's device: it reads the whole of each variable (the shards
            concatenated) and computes the whole gradient; the update runs on
            the parameter servers. A model's weight (one with a ``path``) that a split placement
            cannot divide is held whole where the placement keeps it (:func:`held_whole`); a bare
            shape is refused, except by ``parameter_server``, whose partitioner splits unevenly.
        devices: number of devices N.
        policy: None or a name in :data:`POLICIES`; float variables are then
            stored in float32 and each device also holds compute copies.
        reserve: what the card keeps outside its allocator, for the record
            (not added: capacities are the allocator's, see snippets.lib.hardware).
        batch: global batch size (activations).
        xla: ``"auto"``, ``"on"``, ``"off"`` or a bool (:func:`resolve_xla`).
        accumulation: the optimizer's ``gradient_accumulation_steps`` (1: none). Above 1, each
            trainable variable gets an accumulator of its own shape and dtype, counted with the
            slots (Keras 3.15 ``BaseOptimizer.build``: ``add_variable_from_reference(variable,
            name="gradient_accumulator")``); the update's temporaries stay those probed without
            accumulation.

    Raises:
        ValueError: for a bad shape, dtype, optimizer, strategy, policy,
            batch, xla, accumulation or device count, or a split that does not divide a
            dimension of a bare shape.
    """
    check_optimizer(optimizer)
    check_count(accumulation, "gradient_accumulation_steps")
    placement = placements.get(strategy)
    check_count(devices)
    check_count(batch, "batch size")
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; use None or one of {', '.join(POLICIES)}")
    jit = resolve_xla(xla, strategy)
    items = [_as_weight(w) for w in weights]
    if not items:
        raise ValueError("the model has no weights to plan")
    kept_whole = set(held_whole(items, strategy, devices))

    budgets = []
    for device in range(devices):
        resident = grads = slot_total = update_tmp = init_peak = activations = aggregation = margin = 0
        for w in items:
            var_dtype = w.dtype
            dtype_bytes(var_dtype)
            compute = var_dtype
            if policy is not None and var_dtype.startswith(("float", "bfloat")):
                var_dtype, compute = POLICIES[policy]
            if placement.only_device_0 and device:
                continue
            whole = w in kept_whole
            if whole and placement.uneven == "first" and device:
                continue
            # A partitioner splits unevenly (FixedShardsPartitioner), and the worker reads the weight whole.
            split_unevenly = placement.uneven == "shards"
            shape = tuple(w.shape) if whole or split_unevenly else local_shape(w.shape, strategy, devices)
            if placement.reads_whole:
                # The device that runs the layer reads the whole variable.
                shape = tuple(w.shape)
            nbytes = tensor_bytes(shape, var_dtype)
            trains = optimizer is not None and w.trainable
            if w.dense_kernel:
                # A kernel held whole runs its layer whole, on the whole batch (no split placement splits it).
                activations += dense_activations(w.shape, strategy, 1 if whole else devices, batch, trains)
            resident += nbytes
            if trains:
                grads += nbytes
            if trains and placement.updates_on_device:
                slot_total += (optimizers.slot_bytes(optimizer, shape, var_dtype)
                               + accumulator_bytes(shape, var_dtype, accumulation))
                precision = policy if policy is not None and compute != var_dtype else var_dtype
                if precision in probe_cache.PRECISIONS:
                    units = probe_cache.transient_units(optimizer, precision, xla_mode(jit, strategy))
                    update_tmp += round((units - 1) * nbytes)
                    if not jit and units > 1:
                        # An upper bound's headroom, not a measured buffer (SCHEDULE_MARGIN).
                        update_tmp += SCHEDULE_MARGIN * nbytes
                        margin += SCHEDULE_MARGIN * nbytes
            elif compute != var_dtype:
                update_tmp += tensor_bytes(shape, compute)
            if trains and placement.all_reduce and devices > 1:
                aggregation += nbytes
            # MirroredStrategy runs the initializer on replica 0 only; the
            # other replicas start from tf.identity of replica 0's value
            # (_get_variable_creator_initial_value in
            # tensorflow/python/distribute/mirrored_strategy.py, TF 2.21).
            scratch = 0
            if placement.initialises == "each" or (placement.initialises == "first" and device == 0):
                scratch = round((init_multiplier(w.initializer, placement.init_compiled) - 1) * nbytes)
            # The variables made before this one are resident while it is drawn.
            init_peak = max(init_peak, resident + scratch)
        init_tmp = init_peak - resident
        step_tmp = activations + max(update_tmp, aggregation)
        transient = max(step_tmp, init_tmp - grads - slot_total, 0)
        budgets.append(DeviceBudget(device, resident, grads, slot_total, transient, reserve, init_tmp,
                                    step_tmp, activations, update_tmp, aggregation, placement.hosted,
                                    margin if update_tmp >= aggregation else 0))
    return budgets


def held_whole(weights, strategy: str, devices: int) -> list[Weight]:
    """A model's weights that ``strategy`` keeps whole over ``devices``, as a reader could build it.

    Tensor parallelism splits what it can and keeps the rest whole (Megatron-LM keeps its
    LayerNorms and its row-parallel biases whole; Keras's ``ModelParallel`` replicates any variable
    its ``LayoutMap`` does not match). Which weights, by :attr:`snippets.lib.placements.Placement.uneven`:

    - ``"first"`` (``column``, ``row``: the site's ``tf.device`` layers, docs/tensor-parallel.md):
      the layers split ``Dense`` layers only, so every other weight is kept whole on device 0, the
      default device, and so is a Dense weight with no split axis (``RowParallelDense`` keeps its
      bias on its first device) or one whose split axis N does not divide;
    - ``"each"`` (``model_parallel``, ``tf_keras_dtensor``: a ``LayoutMap`` that splits each
      weight's last axis): a weight whose last axis N does not divide, or a scalar, is replicated on
      every device;
    - ``parameter_server`` keeps none whole: its partitioner splits unevenly and its worker reads
      every variable whole anyway.

    Only a model's weights (with a ``path``) are kept whole: a bare shape is the one weight the
    reader asked to split, so :func:`plan` refuses it. Over one device nothing is kept whole.

    >>> mlp = [Weight((64, 32), path="m/dense/kernel"), Weight((32, 1), path="m/head/kernel"), Weight((1,), path="m/head/bias")]
    >>> [w.path for w in held_whole(mlp, "column", 2)], [w.path for w in held_whole(mlp, "row", 2)]
    (['m/head/kernel', 'm/head/bias'], ['m/head/bias'])
    >>> conv = [Weight((3, 3, 8, 16), path="m/conv2d/kernel"), Weight((16,), path="m/conv2d/bias")]
    >>> [w.path for w in held_whole(conv, "column", 2)], held_whole(conv, "model_parallel", 2), held_whole(mlp, "mirrored", 2)
    (['m/conv2d/kernel', 'm/conv2d/bias'], [], [])

    Args:
        weights: as :func:`plan` accepts them.
        strategy: a name in :data:`STRATEGIES`.
        devices: N, a positive int.

    Returns:
        The :class:`Weight` objects kept whole, in the model's order.
    """
    placement = placements.get(strategy)
    if check_count(devices) == 1 or placement.uneven not in ("first", "each"):
        return []
    items = [_as_weight(w) for w in weights]
    # The site's layers replace Dense layers: a weight is theirs when its layer has a Dense kernel.
    dense = {w.path.rsplit("/", 1)[0] for w in items if w.path is not None and w.dense_kernel}
    return [w for w in items if w.path is not None and (
        not placements.split_divides(w.shape, strategy, devices)
        or placements.shard_axis(w.shape, strategy) is None  # a scalar, or a vector under a row split
        or (placement.uneven == "first" and w.path.rsplit("/", 1)[0] not in dense))]


def trainable_bytes(weights: Sequence[Weight]) -> int:
    """Bytes of the trainable ``weights``: the size of the gradients, of one slot per variable, or of the EMA copies."""
    return sum(tensor_bytes(w.shape, w.dtype) for w in weights if w.trainable)


def accumulator_bytes(shape: Sequence[int], dtype: str, accumulation: int = 1) -> int:
    """Bytes of the gradient accumulator Keras keeps for one trainable variable of ``shape`` and
    ``dtype`` when ``gradient_accumulation_steps`` is ``accumulation`` (0 for 1: none); :func:`plan`
    gives the source."""
    return tensor_bytes(shape, dtype) if accumulation > 1 else 0


def host_bytes(
    weights,
    optimizer: str | None = None,
    strategy: str = "mirrored",
    devices: int = 4,
    policy: str | None = None,
    accumulation: int = 1,
) -> int:
    """Bytes that live in host RAM (or on the coordinator) rather than on the devices.

    ``offload``: all variables and their optimizer slots (and gradient accumulators, with
    ``accumulation`` above 1, which the optimizer makes beside its slots). ``parameter_server``:
    the optimizer slots, full-size, which Keras 3.15 creates on the
    coordinator (measured by :mod:`snippets.lib.ledger`). Other strategies: 0.
    Accepts ``weights`` as :func:`plan` does.
    """
    placement = placements.get(strategy)
    if not placement.hosted:
        return 0
    total = 0
    for w in (_as_weight(item) for item in weights):
        var_dtype = POLICIES[policy][0] if policy and w.dtype.startswith(("float", "bfloat")) else w.dtype
        if placement.holds_variables_on_host:
            total += tensor_bytes(w.shape, var_dtype)
        if optimizer is not None and w.trainable:
            total += optimizers.slot_bytes(optimizer, w.shape, var_dtype)
            total += accumulator_bytes(w.shape, var_dtype, accumulation)
    return total


def per_device(
    shape: Sequence[int],
    dtype: str = "float32",
    optimizer: str | None = None,
    strategy: str = "mirrored",
    devices: int = 4,
    policy: str | None = None,
    *,
    initializer: str | None = "glorot_uniform",
    reserve: int = 0,
    batch: int = 64,
    xla: str | bool = "auto",
) -> list[DeviceBudget]:
    """Per-device budgets for one weight of ``shape`` and ``dtype``: one :class:`DeviceBudget` per device.

    The seed: a float32 [131072, 65536] kernel trained with RMSprop under
    MirroredStrategy over 4 devices needs, on every replica, 32 GiB of
    weights, 32 GiB of gradients and a 32 GiB RMSprop velocity; split
    column-wise over 4 devices, a quarter of each.

    A step needs more than that state: the RMSprop update without XLA
    (MirroredStrategy turns XLA off) makes three more full-size temporaries,
    and the planner adds :data:`SCHEDULE_MARGIN`'s one more (so the step peak,
    224 GiB, is "up to"; ``margin`` says how much of it is headroom).

    >>> b = per_device([131072, 65536], "float32", "rmsprop", "mirrored", 4)
    >>> len(b), b[0].weights // GiB, b[0].gradients // GiB, b[0].slots // GiB
    (4, 32, 32, 32)
    >>> b[0].update_temporaries // GiB, b[0].margin // GiB, b[0].step_peak // GiB, b[0].peak_phase
    (128, 32, 224, 'update')
    >>> [(x.weights + x.gradients + x.slots) // GiB for x in per_device(
    ...     [131072, 65536], "float32", "rmsprop", "column", 4)]
    [24, 24, 24, 24]

    Args:
        shape: the weight's shape, positive ints.
        dtype: variable dtype: ``float32``, ``float16``, ``bfloat16`` (or any
            of :data:`DTYPE_BYTES`).
        optimizer: None (inference) or a name in :data:`OPTIMIZERS`.
        strategy: one of :data:`STRATEGIES`.
        devices: number of devices N.
        policy: None or ``"mixed_float16"`` (float32 variable + float16 compute copy).
        initializer: the weight's initializer (default Keras Dense's
            ``glorot_uniform``, peaking at 3x the variable; ``"zeros"``: 1x).
        reserve: what the card keeps outside its allocator, for the record
            (see :func:`plan`).
        batch: global batch size (activations).
        xla: ``"auto"``, ``"on"`` or ``"off"`` (:func:`resolve_xla`).

    Raises:
        ValueError: for a bad shape, dtype, optimizer, strategy, policy or
            count, and for an uneven split (naming the dimension, its size and
            the count).
    """
    check_shape(shape)
    dtype_bytes(dtype)
    if policy is not None and dtype != POLICIES.get(policy, (dtype,))[0]:
        raise ValueError(
            f"policy {policy!r} stores {POLICIES[policy][0]} variables, not {dtype}; "
            "drop the dtype or the policy"
        )
    weight = Weight(tuple(shape), dtype, initializer)
    return plan([weight], optimizer, strategy, devices, policy, reserve, batch=batch, xla=xla)


# --- sharding/precision helpers (other helpers append functions below) ------

# CPU offload and smaller layers (snippets.offload, snippets.smaller_layers): pure
# arithmetic on shapes and dtypes, no TensorFlow.


# DTensor layouts (snippets.dtensor): which piece of a tensor each
# device of a mesh holds. Pure arithmetic on shapes, no TensorFlow.


# Tensor parallelism (snippets.tensor_parallel, docs/sharding.md): bytes each
# device sends per training step, and the least time that takes on NVLink.
# Pure arithmetic on shapes, no TensorFlow.


def training_state(budget: DeviceBudget) -> int:
    """Bytes one device keeps from step to step: weights + gradients + optimizer slots.

    Leaves out the transient peak and the CUDA reserve of :class:`DeviceBudget`
    (its ``total`` has them): the figure to hold against a device's capacity
    when asking "does the sharded state fit at all".

    >>> training_state(per_device([131072, 65536], "float32", "rmsprop", "column", 4, reserve=0)[0])
    25769803776
    """
    return budget.weights + budget.gradients + budget.slots
