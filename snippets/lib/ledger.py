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

Run it: ``python -m snippets.memory_budget --help`` builds the seed layer at a
small shape under a strategy on N logical devices and prints the ledger next
to the plan.

Sources: ``tf.distribute.MirroredStrategy``, ``tf.distribute.experimental.
ParameterServerStrategy`` (``variable_partitioner``), ``tf.experimental.dtensor.
unpack`` and ``tf.config.experimental.get_memory_info`` API pages (TF 2.21).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from snippets.lib import cluster, devices, optimizers, pieces, placements, planner, private, units


def slot_variables(optimizer) -> list:
    """The optimizer's per-weight slots: its variables except ``iterations`` and the learning rate."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer wraps one
    skip = {id(pieces.unwrap(v)) for v in (inner.iterations, private.learning_rate_variable(inner)) if v is not None}
    return [v for v in inner.variables if id(pieces.unwrap(v)) not in skip]


def model_ledger(model, device_names: Sequence[str], optimizer=None) -> list[planner.DeviceBudget]:
    """What each device holds for a built Keras ``model``: its weights and its optimizer's slots.

    ``optimizer`` defaults to ``model.optimizer`` (from ``compile``); its
    slots count only once it is built (``optimizer.build(model.trainable_variables)``
    or after the first step). Gradients are not resident between steps, so
    they are not read here (see :func:`build` for per-replica gradients).

    Raises:
        ValueError: if a piece sits on a device not in ``device_names``.
    """
    held = pieces.of_variables(model.weights, "weights")
    optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
    if optimizer is not None and optimizer.built:
        held += pieces.of_variables(slot_variables(optimizer), "slots")
    return by_device(held, device_names)


def comparison_row(method: str, held: Sequence[pieces.Piece], device_names: Sequence[str], planned) -> dict:
    """One row of the sharding comparison (docs/sharding.md): where a kernel's pieces live and what each device holds.

    Args:
        method: the method's name as the table shows it.
        held: the pieces read from the built variables (:func:`snippets.lib.pieces.of_variables`),
            the kernel as ``"weights"``, its gradient and its optimizer slots.
        device_names: the devices, in the order of ``planned``.
        planned: :func:`snippets.lib.planner.per_device` rows for the same placement.

    Returns:
        ``{"method", "where", "local_shape", "kernel_bytes", "measured", "planned"}``;
        ``measured`` (read) and ``planned`` are weights + gradients + slots per device, in bytes.
    """
    kernel = [p for p in held if p.kind == "weights"]
    measured = by_device(held, device_names)
    return {
        "method": method,
        "where": [p.device for p in kernel],
        "local_shape": kernel[0].shape,
        "kernel_bytes": [p.nbytes for p in kernel],
        "measured": [b.weights + b.gradients + b.slots for b in measured],
        "planned": [b.weights + b.gradients + b.slots for b in planned],
    }


def by_device(items: Iterable[pieces.Piece], device_names: Sequence[str], reserve: int = 0) -> list[planner.DeviceBudget]:
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
) -> list[pieces.Piece]:
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
        The :class:`snippets.lib.pieces.Piece` list (weights, slots, gradients).

    Raises:
        ValueError: for a bad shape, an uneven split, or an unknown placement.
    """
    import keras
    import tensorflow as tf

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

    layer = keras.layers.Dense(shape[1], kernel_initializer=initializer, dtype=dtype)
    layer.build((None, shape[0]))
    opt = optimizers.make_optimizer(optimizer) if optimizer else None
    if opt:
        opt.build(layer.trainable_variables)
    return layer, opt


def _weights_and_slots(weights, opt) -> list[pieces.Piece]:
    result = pieces.of_variables(weights, "weights")
    if opt:
        result += pieces.of_variables(slot_variables(opt), "slots")
    return result


def _gradients(layers, strategy, names, shape, batch, dist) -> list[pieces.Piece]:
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
                items.extend(pieces.of_tensors([piece], variable.path, "gradients"))
        return items
    for layer in layers:
        kernel = layer.kernel
        with tf.device(pieces.unwrap(kernel).device):
            x = tf.ones((batch, kernel.shape[0]))
            for variable, grad in zip(layer.trainable_variables, step(layer, x)):
                items.extend(pieces.of_tensors([grad], variable.path, "gradients"))
    return items


def _build_offload(host, accelerators, shape, dtype, optimizer, initializer, batch, policy) -> list[pieces.Piece]:
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
                    result.extend(pieces.of_tensors([grad], variable.path, "gradients"))
    return result


def _build_dtensor(names, shape, dtype, split) -> list[pieces.Piece]:
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
    return pieces.of_variables([kernel, bias], "weights")


def _build_parameter_server(shape, dtype, optimizer, count, initializer) -> list[pieces.Piece]:
    placements.local_shape(shape, "parameter_server", count)
    strategy = cluster.make_strategy(cluster.start_in_process_cluster(1, count),
                                     cluster.make_partitioner("fixed", count))
    with strategy.scope():
        layer, opt = _dense_and_optimizer(shape, initializer, dtype, optimizer)
    return _weights_and_slots(layer.weights, opt)


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
        names = cluster.ps_devices(len(setup.devices))
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
