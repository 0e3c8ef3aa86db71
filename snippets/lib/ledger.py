"""Ledger: what each device really holds, read from variables TensorFlow built.

The planner (:func:`snippets.lib.planner.plan`) says what each device *will* hold;
this module reads what each device *does* hold once a model is built for real
at a scale that fits, so the two can be compared byte for byte:

* a mirrored variable (``tf.distribute`` ``DistributedValues``) has one
  component per replica: ``variable.values``;
* a ``ShardedVariable`` (ParameterServerStrategy with a partitioner) has one
  shard per parameter server: ``variable.variables``;
* a DTensor variable has one component per mesh device:
  ``tf.experimental.dtensor.unpack(variable)``;
* anything else is one tensor on ``variable.device``.

Optimizer slots are read from the Keras optimizer's own variables (not the
``iteration`` and ``learning_rate`` scalars), gradients from the per-replica
tensors ``strategy.run`` returns.

It also measures the capped allocator's peak for one phase (initialising
variables, building an optimizer, computing gradients) with
``tf.config.experimental.get_memory_info`` after ``reset_memory_stats``, so
tests can hold the planner to the allocator within 2%.

Run it: ``python -m snippets.lib.ledger --help`` builds the seed layer at a
small shape under a strategy on N logical devices and prints the ledger next
to the plan.

Sources: ``tf.distribute.MirroredStrategy``, ``tf.distribute.experimental.
ParameterServerStrategy`` (``variable_partitioner``), ``tf.experimental.dtensor.
unpack`` and ``tf.config.experimental.get_memory_info`` API pages (TF 2.21).
"""

from __future__ import annotations

import argparse
import gc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from snippets.lib import allocator, devices, optimizers, placements, planner, splits, units


@dataclass(frozen=True)
class Holding:
    """One per-device piece of a variable or gradient.

    Attributes:
        device: full device name, e.g. ``/job:localhost/replica:0/task:0/device:CPU:1``.
        kind: ``"weights"``, ``"slots"`` or ``"gradients"``.
        name: the variable's name or path.
        shape: the piece's shape.
        dtype: dtype name.
        nbytes: ``units.tensor_bytes(shape, dtype)``.
    """

    device: str
    kind: str
    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


def _tf_variable(variable):
    # A Keras 3 variable on the TF backend wraps a tf.Variable in ``.value``
    # (keras/src/backend/tensorflow/core.py); the wrapper itself has no device.
    import keras

    if isinstance(variable, keras.Variable):
        return variable.value
    return variable


def pieces(variable) -> list:
    """The per-device tensors behind ``variable`` (see the module docstring)."""
    from tensorflow.experimental import dtensor

    value = _tf_variable(variable)
    if hasattr(value, "variables") and type(value).__name__ == "ShardedVariable":
        return list(value.variables)
    if getattr(value, "values", None) is not None and not callable(value.values):
        return list(value.values)
    if dtensor.is_dtensor(value):
        # unpack() takes a tensor, not a DVariable: read it (one copy per
        # component, fine at the scales the ledger builds).
        tensor = value.read_value() if hasattr(value, "read_value") else value
        return list(dtensor.unpack(tensor))
    return [value]


def holdings(variables: Iterable, kind: str) -> list[Holding]:
    """One :class:`Holding` per device piece of each of ``variables``."""
    result = []
    for variable in variables:
        name = getattr(variable, "path", None) or getattr(variable, "name", "?")
        for piece in pieces(variable):
            shape = tuple(int(d) for d in piece.shape)
            dtype = piece.dtype.name
            result.append(Holding(piece.device, kind, name, shape, dtype, units.tensor_bytes(shape, dtype)))
    return result


def slot_variables(optimizer) -> list:
    """The optimizer's per-weight slots: its variables except ``iterations`` and the learning rate."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer wraps one
    skip = {id(_tf_variable(v)) for v in (inner.iterations, getattr(inner, "_learning_rate", None)) if v is not None}
    return [v for v in inner.variables if id(_tf_variable(v)) not in skip]


def model_ledger(model, device_names: Sequence[str], optimizer=None) -> list[planner.DeviceBudget]:
    """What each device holds for a built Keras ``model``: its weights and its optimizer's slots.

    ``optimizer`` defaults to ``model.optimizer`` (from ``compile``); its
    slots count only once it is built (``optimizer.build(model.trainable_variables)``
    or after the first step). Gradients are not resident between steps, so
    they are not read here (see :func:`build` for per-replica gradients).

    Raises:
        ValueError: if a piece sits on a device not in ``device_names``.
    """
    held = holdings(model.weights, "weights")
    optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
    if optimizer is not None and optimizer.built:
        held += holdings(slot_variables(optimizer), "slots")
    return by_device(held, device_names)


def comparison_row(method: str, kernel_pieces, measured, planned) -> dict:
    """One row of the sharding comparison (docs/sharding.md): where a kernel's pieces live and what each device holds.

    Args:
        method: the method's name as the table shows it.
        kernel_pieces: the kernel's per-device pieces (``placement.Component``).
        measured: :func:`by_device` rows read from the built variables.
        planned: :func:`snippets.lib.planner.per_device` rows for the same placement.

    Returns:
        ``{"method", "where", "local_shape", "kernel_bytes", "measured", "ledger"}``;
        ``measured`` and ``ledger`` are weights + gradients + slots per device, in bytes.
    """
    return {
        "method": method,
        "where": [p.device for p in kernel_pieces],
        "local_shape": kernel_pieces[0].shape,
        "kernel_bytes": [p.nbytes for p in kernel_pieces],
        "measured": [b.weights + b.gradients + b.slots for b in measured],
        "ledger": [b.weights + b.gradients + b.slots for b in planned],
    }


def by_device(items: Iterable[Holding], device_names: Sequence[str], reserve: int = 0) -> list[planner.DeviceBudget]:
    """Sum holdings per device into :class:`snippets.lib.planner.DeviceBudget` rows, in ``device_names`` order.

    ``transient`` is 0: the ledger reads what is resident, not temporaries.

    Raises:
        ValueError: if a holding sits on a device not in ``device_names``.
    """
    index = {_canonical(name): i for i, name in enumerate(device_names)}
    sums = [{"weights": 0, "gradients": 0, "slots": 0} for _ in device_names]
    for item in items:
        key = _canonical(item.device)
        if key not in index:
            raise ValueError(f"{item.name} has a piece on {item.device}, not one of {list(device_names)}")
        sums[index[key]][item.kind] += item.nbytes
    return [planner.DeviceBudget(i, s["weights"], s["gradients"], s["slots"], 0, reserve) for i, s in enumerate(sums)]


def _canonical(device: str) -> str:
    import tensorflow as tf

    spec = tf.DeviceSpec.from_string(device)
    return f"/job:{spec.job or 'localhost'}/task:{spec.task or 0}/{spec.device_type}:{spec.device_index or 0}"


# --- building the seed layer at CI scale under each placement ---------------


def _dense_shards(shape, dtype, strategy, count):
    """Layer specs (device index, kernel shape, use_bias) for a placement by tf.device slices."""
    input_dim, units = shape
    if strategy == "column":
        return [(i, (input_dim, units // count), True) for i in range(count)]
    if strategy == "row":
        return [(i, (input_dim // count, units), True) for i in range(count)]
    return [(0, (input_dim, units), True)]


def build(
    setup: devices.DeviceSetup,
    shape: Sequence[int],
    dtype: str = "float32",
    optimizer: str | None = None,
    strategy: str = "mirrored",
    initializer: str = "zeros",
    batch: int = 2,
    policy: str | None = None,
) -> list[Holding]:
    """Build a ``Dense`` layer with kernel ``shape`` for real under ``strategy``, and read its ledger.

    Placements: ``single`` (no strategy, device 0), ``mirrored``
    (MirroredStrategy over ``setup.devices``), ``column`` / ``row`` (one
    Dense per device on a slice of the kernel, placed with ``tf.device``,
    one Keras optimizer over all of them: Keras colocates each slot with
    its variable), ``offload`` (variables and slots on ``setup.host``;
    every device computes a full gradient),
    ``dtensor_column`` / ``dtensor_row`` (weights only, as
    DTensor variables on a 1-D mesh ``model``), ``parameter_server``
    (ParameterServerStrategy with ``FixedShardsPartitioner(N)`` over an
    in-process cluster of one worker and N parameter servers; it changes
    the process's device names, so use a process of its own).

    If ``optimizer`` is given, its slots are built and one gradient is
    computed per replica (a batch of ``batch`` ones) and read from the
    per-replica result.

    Returns:
        The :class:`Holding` list (weights, slots, gradients).

    Raises:
        ValueError: for a bad shape, an uneven split, or an unknown placement.
    """
    import keras
    import tensorflow as tf

    from snippets.lib import optimizers

    shape = placements.local_shape(shape, "mirrored", 1)
    if len(shape) != 2:
        raise ValueError(f"build() makes a Dense kernel, so shape must have 2 dims, not {list(shape)}")
    names = setup.devices
    count = len(names)
    layer_dtype = policy or dtype
    if strategy.startswith("dtensor_"):
        return _build_dtensor(names, shape, dtype, strategy.removeprefix("dtensor_"))
    if strategy == "parameter_server":
        return _build_parameter_server(shape, dtype, optimizer, count, initializer)
    if strategy == "offload":
        return _build_offload(setup.host, names, shape, dtype, optimizer, initializer, batch, policy)
    if strategy in ("column", "row"):
        placements.local_shape(shape, strategy, count)  # uneven splits raise here
    elif strategy not in ("single", "mirrored"):
        raise ValueError(f"build() cannot place {strategy!r}; use single, mirrored, column, row, "
                         "dtensor_column or dtensor_row")

    def make(units, device):
        layer = keras.layers.Dense(units, kernel_initializer=initializer, dtype=layer_dtype)
        with tf.device(device):
            layer.build((None, in_dim_of[device]))
        return layer

    in_dim_of = {}
    if strategy == "mirrored":
        dist = tf.distribute.MirroredStrategy(names)
        with dist.scope():
            layer, opt = _dense_and_optimizer(shape, initializer, layer_dtype, optimizer)
        layers = [layer]
    else:
        layers = []
        for index, kernel, _ in _dense_shards(shape, dtype, strategy, count):
            in_dim_of[names[index]] = kernel[0]
            layers.append(make(kernel[1], names[index]))
        opt = optimizers.make_optimizer(optimizer) if optimizer else None
        if opt:
            opt.build([v for layer in layers for v in layer.trainable_variables])

    result = _weights_and_slots([v for layer in layers for v in layer.weights], opt)
    if opt:
        result += _gradients(layers, strategy, names, shape, batch, dist if strategy == "mirrored" else None)
    return result


def _dense_and_optimizer(shape, initializer, dtype, optimizer):
    """A built ``Dense(shape[1])`` on inputs of width ``shape[0]``, and the optimizer built on it.

    Call it inside the scope or ``tf.device`` that decides where the
    variables go. The optimizer is None for ``optimizer=None``.
    """
    import keras

    from snippets.lib import optimizers

    layer = keras.layers.Dense(shape[1], kernel_initializer=initializer, dtype=dtype)
    layer.build((None, shape[0]))
    opt = optimizers.make_optimizer(optimizer) if optimizer else None
    if opt:
        opt.build(layer.trainable_variables)
    return layer, opt


def _weights_and_slots(weights, opt) -> list[Holding]:
    result = holdings(weights, "weights")
    if opt:
        result += holdings(slot_variables(opt), "slots")
    return result


def _gradients(layers, strategy, names, shape, batch, dist) -> list[Holding]:
    import tensorflow as tf

    def step(layer, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(layer(x), "float32"))
        return tape.gradient(loss, layer.trainable_variables)

    items = []
    if dist is not None:
        x = tf.ones((batch, shape[0]))
        per_replica = dist.run(step, args=(layers[0], x))
        for variable, grad in zip(layers[0].trainable_variables, per_replica):
            for piece in grad.values:
                items.append(_holding(piece, "gradients", variable.path))
        return items
    for layer in layers:
        kernel = layer.kernel
        with tf.device(_tf_variable(kernel).device):
            x = tf.ones((batch, kernel.shape[0]))
            for variable, grad in zip(layer.trainable_variables, step(layer, x)):
                items.append(_holding(grad, "gradients", variable.path))
    return items


def _build_offload(host, accelerators, shape, dtype, optimizer, initializer, batch, policy) -> list[Holding]:
    """Variables and slots on the host, each device computing a gradient."""
    import tensorflow as tf

    with tf.device(host):
        layer, opt = _dense_and_optimizer(shape, initializer, policy or dtype, optimizer)
    result = _weights_and_slots(layer.weights, opt)
    if opt:
        for device in accelerators:
            with tf.device(device):
                x = tf.ones((batch, shape[0]))
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(tf.cast(layer(x), "float32"))
                for variable, grad in zip(layer.trainable_variables,
                                          tape.gradient(loss, layer.trainable_variables)):
                    result.append(_holding(grad, "gradients", variable.path))
    return result


def _holding(tensor, kind, name) -> Holding:
    shape = tuple(int(d) for d in tensor.shape)
    dtype = tensor.dtype.name
    return Holding(tensor.device, kind, name, shape, dtype, units.tensor_bytes(shape, dtype))


def _build_dtensor(names, shape, dtype, split) -> list[Holding]:
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    count = len(names)
    placements.local_shape(shape, split, count)
    mesh = dtensor.create_mesh([("model", count)], devices=list(names))
    sharded = "model"
    kernel_layout = dtensor.Layout(
        [dtensor.UNSHARDED, sharded] if split == "column" else [sharded, dtensor.UNSHARDED], mesh
    )
    bias_layout = dtensor.Layout([sharded if split == "column" else dtensor.UNSHARDED], mesh)
    kernel = dtensor.DVariable(
        dtensor.call_with_layout(tf.zeros, kernel_layout, shape=shape, dtype=dtype), name="kernel"
    )
    bias = dtensor.DVariable(
        dtensor.call_with_layout(tf.zeros, bias_layout, shape=(shape[1],), dtype=dtype), name="bias"
    )
    return holdings([kernel, bias], "weights")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def parameter_server_strategy(count: int):
    """ParameterServerStrategy over an in-process cluster: one worker, ``count`` parameter servers.

    Variables are split along axis 0 by ``FixedShardsPartitioner(count)``.
    The servers live in this process (``tf.distribute.Server``), as in
    TensorFlow's own in-process cluster tests.
    """
    import tensorflow as tf

    spec = tf.train.ClusterSpec({
        "worker": [f"localhost:{_free_port()}"],
        "ps": [f"localhost:{_free_port()}" for _ in range(count)],
    })
    global _servers
    _servers = [tf.distribute.Server(spec, job_name="worker", task_index=0, start=True)]
    _servers += [tf.distribute.Server(spec, job_name="ps", task_index=i, start=True) for i in range(count)]
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
    partitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner(count)
    devices.leave_default_device()  # joining the cluster renames this process's devices
    return tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


_servers: list = []


def _build_parameter_server(shape, dtype, optimizer, count, initializer) -> list[Holding]:
    placements.local_shape(shape, "parameter_server", count)
    strategy = parameter_server_strategy(count)
    with strategy.scope():
        layer, opt = _dense_and_optimizer(shape, initializer, dtype, optimizer)
    return _weights_and_slots(layer.weights, opt)


def parameter_server_devices(count: int) -> tuple[str, ...]:
    """Names of the ``count`` parameter-server devices :func:`parameter_server_strategy` makes."""
    return tuple(f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(count))


def compare(
    setup: devices.DeviceSetup,
    shape: Sequence[int],
    dtype: str = "float32",
    optimizer: str | None = None,
    strategy: str = "mirrored",
    policy: str | None = None,
) -> tuple[list[planner.DeviceBudget], list[planner.DeviceBudget]]:
    """(planner, ledger) per-device budgets for the Dense layer with kernel ``shape``.

    Both have ``transient = 0`` and ``reserve = 0`` (the ledger reads resident
    bytes); planner rows for the seed layer's kernel and bias come from
    :func:`snippets.lib.planner.plan`. ``dtensor_*`` placements plan as
    ``column``/``row``; the planner's gradients and slots are zero without
    an optimizer. ``offload``: the devices hold the gradients they
    computed (the variables' copies are read and dropped within a step), the
    host's holdings are :func:`host_holdings`'s. ``parameter_server``: the
    rows are the parameter servers' shards (the planner's own figures are
    the worker's, which reads every variable whole during a step).
    """
    held = build(setup, shape, dtype, optimizer, strategy, policy=policy)
    names = setup.devices
    if strategy == "offload":
        # The host's holdings are planner.host_bytes's business.
        held = [h for h in held if _canonical(h.device) != _canonical(setup.host)]
    if strategy == "parameter_server":
        # The planner's devices are the parameter servers; what Keras puts
        # on the coordinator (the slots) is planner.host_bytes's business.
        names = parameter_server_devices(len(setup.devices))
        held = [h for h in held if h.device.startswith("/job:ps/")]
    ledger = by_device(held, names)
    placement = strategy.removeprefix("dtensor_")
    weights = [planner.Weight(tuple(shape), dtype, "zeros"), planner.Weight((shape[1],), dtype, "zeros")]
    if strategy == "parameter_server":
        shard = sum(units.tensor_bytes(placements.local_shape(w.shape, strategy, len(names)), dtype) for w in weights)
        return [planner.DeviceBudget(i, shard, 0, 0, 0, 0) for i in range(len(names))], ledger
    planned = planner.plan(weights, optimizer, placement, len(names), policy, reserve=0)
    if strategy == "offload":
        return [planner.DeviceBudget(b.device, 0, b.gradients, 0, 0, 0) for b in planned], ledger
    resident = [planner.DeviceBudget(b.device, b.weights, b.gradients, b.slots, 0, 0) for b in planned]
    return resident, ledger


def host_holdings(setup: devices.DeviceSetup, shape: Sequence[int], dtype: str = "float32",
                  optimizer: str | None = None) -> tuple[int, int]:
    """(planned, held) bytes on the host for ``offload``: variables and slots on ``setup.host``."""
    held = build(setup, shape, dtype, optimizer, "offload")
    on_host = sum(h.nbytes for h in held if _canonical(h.device) == _canonical(setup.host))
    weights = [planner.Weight(tuple(shape), dtype, "zeros"), planner.Weight((shape[1],), dtype, "zeros")]
    return planner.host_bytes(weights, optimizer, "offload", len(setup.devices)), on_host


# --- the capped allocator's peak ---------------------------------------------


def allocator_peak(action: Callable[[], object], device: str = "CPU:0", collect: bool = True) -> tuple[int, object]:
    """Bytes the allocator of ``device`` peaked at above its starting level while running ``action``.

    Resets the peak (``tf.config.experimental.reset_memory_stats``), runs
    ``action()`` and reads ``get_memory_info(device)["peak"]`` minus the
    bytes in use before. Needs allocator statistics: a GPU, or CPU mode of
    :mod:`snippets.lib.devices` (capped BFC allocator).

    ``collect`` runs Python's garbage collector first, so that tensors held
    only by reference cycles are not freed during the measured phase.

    Returns:
        ``(peak_bytes, result_of_action)``; keep the result alive if the
        next phase should count it as resident.
    """
    import tensorflow as tf

    if collect:
        gc.collect()
    before = tf.config.experimental.get_memory_info(device)["current"]
    tf.config.experimental.reset_memory_stats(device)
    result = action()
    return tf.config.experimental.get_memory_info(device)["peak"] - before, result


@dataclass(frozen=True)
class AllocatorCase:
    """One planner-versus-allocator configuration (a Dense layer, one phase).

    Attributes:
        name: short label.
        phase: ``"init"`` (create the variables) or ``"state"`` (build the
            optimizer's slots and compute one gradient per weight, keeping
            them).
        dtype: variable dtype, or None with ``policy``.
        policy: None or ``"mixed_float16"``.
        initializer: kernel initializer.
        optimizer: for the ``state`` phase.
        raw: ``init`` phase only: create a bare ``tf.Variable`` from the
            initializer (``"zeros"`` uses ``tf.zeros``) instead of a Dense layer.
    """

    name: str
    phase: str
    dtype: str | None = "float32"
    policy: str | None = None
    initializer: str = "zeros"
    optimizer: str | None = None
    raw: bool = False


#: The configurations the tests hold the planner to (field case F18 first).
ALLOCATOR_CASES = (
    AllocatorCase("tf.zeros variable", "init", raw=True),
    AllocatorCase("GlorotUniform variable", "init", initializer="glorot_uniform", raw=True),
    AllocatorCase("Dense glorot float32", "init", initializer="glorot_uniform"),
    AllocatorCase("Dense zeros float32", "init"),
    AllocatorCase("Dense he_normal float32", "init", initializer="he_normal"),
    AllocatorCase("Dense glorot float16", "init", "float16", initializer="glorot_uniform"),
    AllocatorCase("Dense glorot bfloat16", "init", "bfloat16", initializer="glorot_uniform"),
    AllocatorCase("Dense glorot mixed_float16", "init", None, "mixed_float16", "glorot_uniform"),
    AllocatorCase("state float32 sgd", "state", optimizer="sgd"),
    AllocatorCase("state float32 sgd_momentum", "state", optimizer="sgd_momentum"),
    AllocatorCase("state float32 rmsprop", "state", optimizer="rmsprop"),
    AllocatorCase("state float32 adam", "state", optimizer="adam"),
    AllocatorCase("state float32 adam_amsgrad", "state", optimizer="adam_amsgrad"),
    AllocatorCase("state float16 rmsprop", "state", "float16", optimizer="rmsprop"),
    AllocatorCase("state bfloat16 adam", "state", "bfloat16", optimizer="adam"),
    AllocatorCase("state mixed_float16 sgd", "state", None, "mixed_float16", optimizer="sgd"),
    AllocatorCase("state mixed_float16 rmsprop", "state", None, "mixed_float16", optimizer="rmsprop"),
)


def measure_case(case: AllocatorCase, shape: Sequence[int] = (16384, 1024)) -> dict:
    """Run ``case`` at ``shape`` on ``CPU:0`` and return planned and measured peak bytes.

    The layer is ``Dense(shape[1])`` on inputs of width ``shape[0]`` (kernel
    ``shape`` plus a bias), except ``raw`` cases (one bare variable). The
    measured figure is the allocator's peak during the phase minus its level
    before the layer existed, so resident weights count; the planned figure
    is :attr:`snippets.lib.planner.DeviceBudget.init_peak`, or for the ``state``
    phase the weights, slots and gradients of :func:`snippets.lib.planner.plan`
    (plus the compute copies under a mixed policy); the update's temporaries
    are :mod:`snippets.lib.step_ledger`'s business.

    Needs CPU mode of :mod:`snippets.lib.devices` (allocator statistics).

    Returns:
        ``{"name", "planned", "measured", "error"}``; ``error`` is
        ``(planned - measured) / measured``.
    """
    import keras
    import tensorflow as tf

    from snippets.lib import optimizers

    # Reference cycles (Keras layers) from earlier cases must not be freed
    # in the middle of this one, or the peak reads low: collect the young
    # generations (cheap), then keep the collector off while measuring.
    gc.collect(1)
    enabled = gc.isenabled()
    gc.disable()
    try:
        shape = units.check_shape(shape)
        dtype = case.dtype or units.POLICIES[case.policy][0]
        start = tf.config.experimental.get_memory_info("CPU:0")["current"]
        with tf.device("/CPU:0"):
            if case.raw:
                weights = [planner.Weight(shape, dtype, case.initializer)]
                init = keras.initializers.get(case.initializer)
                peak, variable = allocator_peak(collect=False, action=lambda: tf.Variable(
                    tf.zeros(shape, dtype) if case.initializer == "zeros" else init(shape, dtype=dtype)))
                planned = planner.plan(weights, None, "single", 1, None, reserve=0)[0].init_peak
                measured = peak
                del variable
            else:
                weights = [planner.Weight(shape, dtype, case.initializer), planner.Weight((shape[1],), dtype, "zeros")]

                def make():
                    layer = keras.layers.Dense(shape[1], kernel_initializer=case.initializer,
                                               dtype=case.policy or case.dtype)
                    layer.build((None, shape[0]))
                    return layer

                peak, layer = allocator_peak(make, collect=False)
                budget = planner.plan(weights, case.optimizer, "single", 1, case.policy, reserve=0)[0]
                if case.phase == "init":
                    planned, measured = budget.init_peak, peak
                else:
                    compute = units.POLICIES[case.policy][1] if case.policy else dtype

                    def state():
                        opt = optimizers.make_optimizer(case.optimizer) if case.optimizer else None
                        if opt:
                            opt.build(layer.trainable_variables)
                        # A gradient has its variable's shape whatever the loss, so
                        # the loss is a plain sum of the compute copies: a MatMul
                        # would add CPU-only temporaries (float16 MatMul on CPU
                        # computes through float32), which a GPU does not need.
                        with tf.GradientTape() as tape:
                            loss = tf.add_n([tf.cast(tf.reduce_sum(tf.cast(v, compute)), "float32")
                                             for v in layer.trainable_variables])
                        return opt, tape.gradient(loss, layer.trainable_variables)

                    base = tf.config.experimental.get_memory_info("CPU:0")["current"] - start
                    peak, kept = allocator_peak(state, collect=False)
                    # What this phase keeps: weights, slots, gradients and, under a mixed
                    # policy, the compute copies (no update has run, no batch exists).
                    copies = sum(units.tensor_bytes(w.shape, compute) for w in weights) if case.policy else 0
                    planned = budget.weights + budget.gradients + budget.slots + copies
                    measured = base + peak
                    del kept
                del layer
    finally:
        if enabled:
            gc.enable()
    return {"name": case.name, "planned": planned, "measured": measured,
            "error": (planned - measured) / measured}


def cases() -> tuple[AllocatorCase, ...]:
    """:data:`ALLOCATOR_CASES` (a function, so a test kernel can return them)."""
    return ALLOCATOR_CASES


def allocator_check(shape: Sequence[int] = (16384, 1024), cases=ALLOCATOR_CASES) -> list[dict]:
    """:func:`measure_case` for every case: the planner held to the capped allocator."""
    gc.collect()  # once: each case frees what it made by reference counting
    return [measure_case(case, shape) for case in cases]


def allocator_check_fresh(shape: Sequence[int] = (16384, 1024), cap: str = "1024MiB") -> list[dict]:
    """:func:`allocator_check` in a fresh Python process with its own capped allocator.

    The allocator's peak depends on its history: the BFC allocator hands a
    request a whole free chunk, without splitting it, when the chunk is
    less than twice the request and the slack is under 128 MiB
    (``kMaxInternalFragmentation``; ``BFCAllocator::SplitChunk`` is skipped
    in ``bfc_allocator.cc``), and counts the whole chunk as in use. After other
    work has left holes, a 32 MiB tensor can count as 63 MiB. A fresh process
    has no holes, so the check runs in one: ``python -m snippets.lib.ledger
    --allocator-check``.
    """
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    shape = units.check_shape(shape)
    command = [sys.executable, "-m", "snippets.lib.ledger", "--allocator-check", "--devices", "1",
               "--device-memory", cap, "--shape", *map(str, shape)]
    environ = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(command, capture_output=True, text=True, env=environ,
                          cwd=Path(__file__).resolve().parents[1], check=False)
    if done.returncode:
        raise RuntimeError(f"allocator check failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout)


def max_allocator_error(shape: Sequence[int] = (16384, 1024)) -> float:
    """Largest ``abs(planned - measured) / measured`` over :data:`ALLOCATOR_CASES` (a fraction).

    The benchmark quotes this figure. Needs CPU mode with a cap of at least
    about 8 x the kernel's bytes (1024 MiB for the default shape).
    """
    return max(abs(row["error"]) for row in allocator_check(shape))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snippets.lib.ledger",
        description="Build a Dense layer for real under a placement on N logical devices and "
        "print what each device holds next to the planner's figures.",
    )
    devices.add_arguments(parser)
    parser.set_defaults(devices=4, device_memory="1024MiB")
    parser.add_argument("--shape", type=int, nargs=2, default=[1024, 256], metavar=("INPUT_DIM", "UNITS"))
    parser.add_argument("--dtype", default="float32", choices=sorted(units.DTYPE_BYTES))
    parser.add_argument("--optimizer", default=None, choices=sorted(optimizers.OPTIMIZERS))
    parser.add_argument("--strategy", default="mirrored",
                        choices=["single", "mirrored", "column", "row", "dtensor_column", "dtensor_row",
                                 "parameter_server", "offload"])
    parser.add_argument("--allocator-check", action="store_true",
                        help="instead: print allocator_check() for --shape as JSON (CPU mode)")
    args = parser.parse_args(argv)
    if args.allocator_check:
        import json

        try:
            units.check_shape(args.shape)
        except ValueError as error:
            parser.error(str(error))
        devices.configure_from_args(args, parser)
        print(json.dumps(allocator_check(args.shape)))
        return 0
    try:
        splits.check_count(args.devices)
        placements.local_shape(args.shape, args.strategy.removeprefix("dtensor_"), args.devices)
        allocator.check_host_can_hold(units.tensor_bytes(args.shape, args.dtype) * 4 * args.devices,
                                   "building this layer for real")
    except (ValueError, allocator.HostMemoryError) as error:
        parser.error(str(error))
    setup = devices.configure_from_args(args, parser)
    from tabulate import tabulate

    planned, ledger = compare(setup, args.shape, args.dtype, args.optimizer, args.strategy)
    rows = [
        [f"ps:{p.device}" if args.strategy == "parameter_server" else
         setup.devices[p.device].rsplit("device:", 1)[-1], p.weights, l.weights, p.gradients, l.gradients,
         p.slots, l.slots, "yes" if p == l else "NO"]
        for p, l in zip(planned, ledger)
    ]
    print(tabulate(rows, headers=["device", "weights plan", "held", "grads plan", "held",
                                  "slots plan", "held", "equal"]))
    return 0 if planned == ledger else 1


if __name__ == "__main__":
    raise SystemExit(main())
