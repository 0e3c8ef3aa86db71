"""The seed layer on tf_keras (Keras 2): a DTensor layout map, or parameter servers, under ``Model.fit``.

The page ``docs/tf-keras.md`` runs these. Run it: ``python -m snippets.tf_keras --help``.
At CI scale (the seed layer ``W[1024, 512]`` float32, batch 16, RMSprop, mean
squared error) it shows:

* **DTensor**: ``tf_keras.dtensor.experimental.LayoutMap(mesh)`` and its
  ``scope()`` build the Dense kernel as a ``DVariable`` with layout
  ``[UNSHARDED, "model"]`` (``W[D, F_model]``) on a ``batch=1 x model=4``
  mesh; the optimizer's RMSprop velocity (its **slot**) gets the same layout,
  and ``Model.fit`` trains it from a ``tf.experimental.dtensor.DTensorDataset``
  (from NumPy arrays it fails: :func:`numpy_fit_refusal`);
* **ParameterServerStrategy** with ``FixedShardsPartitioner``: the kernel is a
  ``ShardedVariable`` over the ps tasks, the legacy RMSprop keeps one slot
  per shard next to it, and ``Model.fit`` trains from a ``tf.data.Dataset``;
  but the step that ``fit`` schedules on the worker concatenates the shards
  into the whole kernel and computes the whole kernel gradient
  (:func:`worker_full_tensors`, and :func:`worker_peak` under the capped
  allocator);
* both trained for a few steps give the losses of an unsharded tf_keras
  model started from the same weights, within :data:`TOLERANCE`.

tf_keras is imported directly (``import tf_keras``), so ``tf.keras`` stays
Keras 3 in the same process: ``TF_USE_LEGACY_KERAS`` is never set
(``tensorflow/python/util/lazy_loader.py`` reads it to route ``tf.keras``).

Sources (tf-keras 2.21.0, tensorflow 2.21.0):
``tf_keras/src/dtensor/layout_map.py`` (``LayoutMap``, ``layout_map_scope``),
``tf_keras/src/engine/training.py`` (``make_train_function``: ``fit``'s
step is ``strategy.run(train_step)``, scheduled by the cluster coordinator
under ParameterServerStrategy), ``tf_keras/src/optimizers/legacy/rmsprop.py``
(``ResourceApplyRMSProp`` when momentum > 0), ``tensorflow/dtensor/python/
input_util.py`` (``DTensorDataset``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from snippets.lib import allocator, cluster, devices, errors, optimizers, pieces, placements, planner, private, units
from snippets.lib.seed import SEED_SHAPE

#: CI scale of the seed layer W[D, F]; the batch; the steps ``fit`` trains.
D, F, BATCH, STEPS = 1024, 512, 16, 3
#: Shards of the kernel: mesh axis "model" for DTensor, ps tasks for ParameterServerStrategy.
SHARDS = 4
#: Sharded and unsharded training agree to this (absolute; losses of order 1, float32).
TOLERANCE = 1e-5
#: The layout map's one key: the Dense layer named "dense", attribute "kernel" ("dense.kernel").
KERNEL_KEY = "dense.*kernel"
#: RMSprop's learning rate on every model here.
LEARNING_RATE = 1e-3


def tf_keras():
    """``import tf_keras`` and return it, checking ``tf.keras`` is still Keras 3 afterwards.

    Raises:
        RuntimeError: if ``tf.keras`` is tf_keras (``TF_USE_LEGACY_KERAS`` was
            set before TensorFlow was imported), since the rest of the site
            expects Keras 3 there.
    """
    import tensorflow as tf
    import tf_keras as tfk

    if tf.keras.__version__.startswith("2."):
        raise RuntimeError("tf.keras is Keras 2 in this process (TF_USE_LEGACY_KERAS is set); "
                           "unset it: this module imports tf_keras by its own name")
    return tfk


def versions() -> dict[str, str]:
    """``{"tf_keras": "2.21.0", "tf.keras": "3.15.1", "tensorflow": "2.21.0"}`` as installed."""
    import tensorflow as tf

    return {"tf_keras": tf_keras().__version__, "tf.keras": tf.keras.__version__, "tensorflow": tf.__version__}


def batch(seed: int = 0, size: int = BATCH, d: int = D, f: int = F):
    """One batch ``(x[size, d], y[size, f])``, float32, standard normal, from NumPy's ``seed``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.standard_normal((size, d), dtype=np.float32), rng.standard_normal((size, f), dtype=np.float32)


def seed_model(d: int = D, f: int = F, name: str = "dense"):
    """The seed model as a user writes it in tf_keras: ``Sequential([Input((d,)), Dense(f, name=name)])``.

    Builds its variables under whatever scope is open (a layout map's, a strategy's).
    """
    tfk = tf_keras()
    return tfk.Sequential([tfk.Input((d,)), tfk.layers.Dense(f, name=name)])


def unsharded_losses(weights: list, x, y, steps: int = STEPS, optimizer: str = "rmsprop",
                     momentum: float = 0.0) -> list[float]:
    """The reference: ``fit`` of the seed model on one device from ``weights``, one loss per step.

    Args:
        weights: ``[kernel, bias]`` NumPy arrays, the sharded model's start.
        optimizer: ``"rmsprop"`` (tf_keras's RMSprop, the one DTensor uses) or
            ``"legacy"`` (``tf_keras.optimizers.legacy.RMSprop``, the one used
            under ParameterServerStrategy) with ``momentum``.
    """
    model = seed_model(x.shape[1], y.shape[1])
    model.set_weights(weights)
    model.compile(optimizer=_rmsprop(optimizer, momentum), loss="mse")
    return fit_losses(model, _dataset(x, y), steps)


def _rmsprop(kind: str, momentum: float = 0.0, mesh=None):
    tfk = tf_keras()
    if kind == "legacy":
        return tfk.optimizers.legacy.RMSprop(LEARNING_RATE, momentum=momentum)
    if mesh is not None:
        return as_on_gpu_host(tfk.dtensor.experimental.optimizers.RMSprop(LEARNING_RATE, mesh=mesh))
    return as_on_gpu_host(tfk.optimizers.RMSprop(LEARNING_RATE))


def host_optimizer_jit(requested: bool = True) -> bool:
    """What a tf_keras optimizer made here with ``jit_compile=requested`` resolves to, on this machine.

    tf_keras's rule (:func:`snippets.lib.placements.tf_keras_optimizer_jit`)
    applied to what ``tf.config.list_physical_devices("GPU")`` lists and to
    ``tf_utils.can_jit_compile()``: True on a GPU host, False on a CPU-only one.
    """
    import tensorflow as tf

    return placements.tf_keras_optimizer_jit(requested, bool(tf.config.list_physical_devices("GPU")),
                                             private.tf_keras_can_jit_compile())


def as_on_gpu_host(optimizer):
    """``optimizer`` (a tf_keras 2.21 optimizer, not a legacy one) with its update compiled as on a GPU host.

    On a GPU host tf_keras keeps the constructor's default ``jit_compile=True``
    and sends every update through ``_update_step_xla``, a
    ``tf.function(jit_compile=True)``, whatever ``Model.compile`` says; on a
    CPU-only host it turns it off. The CPU emulation plays the GPU host, so
    this sets the answer of :func:`snippets.lib.placements.resolve_xla` for
    ``tf_keras_dtensor`` (the planner's, from the same rule). Returns ``optimizer``.
    """
    optimizer.jit_compile = placements.resolve_xla("auto", "tf_keras_dtensor")
    return optimizer


def compiled_updates(model) -> int:
    """How many variables' updates ``model``'s optimizer has traced through ``_update_step_xla`` (XLA)."""
    return private.tf_keras_xla_update_traces(model.optimizer)


def _dataset(x, y):
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(len(x))


def fit_losses(model, data, steps: int = STEPS) -> list[float]:
    """``steps`` steps of ``model.fit`` (one per epoch, so ``history["loss"]`` has each step's loss)."""
    history = model.fit(data, epochs=steps, steps_per_epoch=1, verbose=0)
    return [float(loss) for loss in history.history["loss"]]


# --- DTensor: a layout map ---------------------------------------------------


def mesh(setup: devices.DeviceSetup, model: int = SHARDS):
    """A DTensor mesh ``batch=1 x model=N`` over ``setup.devices`` (N = ``model``)."""
    from tensorflow.experimental import dtensor

    return dtensor.create_mesh([("batch", 1), ("model", model)], devices=list(setup.devices[:model]))


def layout_map(device_mesh, key: str = KERNEL_KEY):
    """``tf_keras.dtensor.experimental.LayoutMap`` with one entry: ``key`` -> ``[UNSHARDED, "model"]``.

    The key is a regular expression matched (``re.match``) against
    ``"<layer name>.<attribute>"`` for a Sequential model, e.g.
    ``"dense.kernel"`` (``tf_keras/src/dtensor/layout_map.py``); variables it
    does not match are replicated over the mesh.
    """
    from tensorflow.experimental import dtensor

    layouts = tf_keras().dtensor.experimental.LayoutMap(device_mesh)
    layouts[key] = dtensor.Layout([dtensor.UNSHARDED, "model"], device_mesh)
    return layouts


def dtensor_model(device_mesh, weights: list | None = None, key: str = KERNEL_KEY):
    """The seed model built in :func:`layout_map`'s ``scope()``, compiled with RMSprop on the mesh.

    The optimizer is ``tf_keras.dtensor.experimental.optimizers.RMSprop(mesh=...)``:
    its velocity slots take their variables' layouts. ``weights`` (NumPy
    ``[kernel, bias]``) are copied in with ``set_weights``.
    """
    with layout_map(device_mesh, key).scope():
        model = seed_model()
    if weights is not None:
        model.set_weights(weights)
    model.compile(optimizer=_rmsprop("rmsprop", mesh=device_mesh), loss="mse")
    model.optimizer.build(model.trainable_variables)  # the slots exist before the first step
    return model


def dtensor_dataset(device_mesh, x, y):
    """``DTensorDataset`` of ``(x, y)`` repeated, global batch ``len(x)``, split on mesh axis ``batch``."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    layout = dtensor.Layout(["batch", dtensor.UNSHARDED], device_mesh)
    return dtensor.DTensorDataset(tf.data.Dataset.from_tensor_slices((x, y)).repeat(), mesh=device_mesh,
                                  layouts=(layout, layout), global_batch_size=len(x), batch_dim="batch")


def numpy_fit_refusal(model, x, y) -> str:
    """What ``fit`` on NumPy arrays raises for a DTensor model, as one line without its file location.

    Measured (TF 2.21, tf_keras 2.21): ``UnknownError: 'tf.IteratorGetNext'
    op ComputeLayoutForward error: Could not find `tf._element_layouts`
    attribute of 0-th input to op: tf.DTensorLayout``: ``fit`` made a plain
    ``tf.data`` iterator, whose elements carry no layout.

    Raises:
        AssertionError: if ``fit`` accepted the arrays.
    """
    try:
        model.fit(x, y, batch_size=len(x), epochs=1, verbose=0)
    except Exception as error:  # noqa: BLE001 - reported by type, whatever TF raises
        return errors.summary(error)  # without the traced op's source location
    raise AssertionError("tf_keras fit accepted NumPy arrays for a DTensor model")


def kernel_and_slots(model) -> dict[str, list[pieces.Piece]]:
    """Pieces of the Dense kernel and of every optimizer slot made for it, by name.

    Works for a DVariable kernel (the DTensor optimizer's velocity is one
    DVariable) and a ShardedVariable kernel (the legacy optimizer keeps one
    slot variable per shard: ``RMSprop/dense/kernel/part_0/rms``).

    Returns:
        ``{"kernel": [Piece], "<slot name>": [Piece], ...}``; each slot name
        is the variable's name without the ``:0``.
    """
    optimizer = model.optimizer
    variables = optimizer.variables() if callable(optimizer.variables) else optimizer.variables
    found = {"kernel": pieces.of_variable(model.layers[0].kernel)}
    for variable in variables:
        if "kernel" in variable.name:
            found[variable.name.split(":")[0]] = pieces.of_variable(variable, "slots")
    return found


def weights(model) -> list:
    """``model``'s weights as NumPy arrays, gathered whole (``get_weights`` refuses a sharded DVariable).

    Measured (TF 2.21): ``model.get_weights()`` on the layout-mapped model
    raises ``UnimplementedError: Trying to copy a non-single-device and
    non-replicated DTensor is not supported``; a DVariable is relaid out
    replicated first and one device's copy read. Other variables are read as they are.
    """
    from tensorflow.experimental import dtensor

    arrays = []
    for variable in model.weights:
        value = variable.read_value()
        if dtensor.is_dtensor(value):
            layout = dtensor.fetch_layout(value)
            value = dtensor.unpack(dtensor.relayout(value, dtensor.Layout.replicated(layout.mesh, layout.rank)))[0]
        arrays.append(value.numpy())
    return arrays


def show(found: dict[str, list[pieces.Piece]]) -> None:
    """Print :func:`kernel_and_slots`: one line per variable, its pieces as :func:`snippets.lib.pieces.describe` says."""
    width = max(len(name) for name in found)
    for name, parts in found.items():
        print(f"{name:{width}} {pieces.describe(parts)}")


# --- ParameterServerStrategy: shards on ps tasks ----------------------------


def ps_strategy(ps: int = SHARDS):
    """ParameterServerStrategy on the in-process loopback cluster (1 worker, ``ps`` ps tasks), ``FixedShardsPartitioner(ps)``."""
    resolver = cluster.start_in_process_cluster(workers=1, ps=ps)
    return cluster.make_strategy(resolver, cluster.make_partitioner("fixed", ps))


def ps_model(strategy, weights: list | None = None, momentum: float = 0.0, d: int = D, f: int = F):
    """The seed model built and compiled in ``strategy.scope()`` with the legacy RMSprop.

    ``tf_keras.optimizers.legacy.RMSprop`` makes one slot per shard, on the
    shard's ps task; with ``momentum > 0`` it updates each shard with the
    fused ``ResourceApplyRMSProp`` op on that task, with ``momentum == 0``
    with separate ops (``tf_keras/src/optimizers/legacy/rmsprop.py``).
    """
    with strategy.scope():
        model = seed_model(d, f)
        if weights is not None:
            # set_weights counts shards (8 here), not variables: assign each whole
            # variable; a ShardedVariable splits the value over its shards.
            layer = model.layers[0]
            layer.kernel.assign(weights[0])
            layer.bias.assign(weights[1])
        model.compile(optimizer=_rmsprop("legacy", momentum), loss="mse")
    return model


def ps_train(model, x, y, steps: int = STEPS) -> list[float]:
    """:func:`fit_losses` from a ``tf.data.Dataset`` of ``(x, y)`` (one batch, repeated)."""
    return fit_losses(model, _dataset(x, y), steps)


def worker_full_tensors(strategy, model, d: int = D, f: int = F) -> dict:
    """What the worker computes in ``fit``'s step: the ops whose output is a whole ``[d, f]`` kernel, and the update ops.

    ``fit``'s step function is ``strategy.run(train_step, args=(data,))``
    (``make_train_function`` in ``tf_keras/src/engine/training.py``), which
    the coordinator schedules, whole, on a worker. This traces the same call
    (tracing runs nothing) and reads its graph.

    Returns:
        ``{"full": [(op type, op name)] of ops with a [d, f] output,
        "updates": {op type: count} of the ops that write the variables}``.
    """
    import tensorflow as tf

    step = tf.function(lambda x, y: strategy.run(model.train_step, args=((x, y),)))
    graph = step.get_concrete_function(tf.TensorSpec([BATCH, d]), tf.TensorSpec([BATCH, f])).graph
    full = [(op.type, op.name) for op in graph.get_operations()
            if any(out.shape.as_list() == [d, f] for out in op.outputs)]
    updates: dict[str, int] = {}
    for op in graph.get_operations():
        if op.type.startswith("ResourceApply") or op.type == "AssignVariableOp":
            updates[op.type] = updates.get(op.type, 0) + 1
    return {"full": full, "updates": updates}


def worker_peak(momentum: float = 0.9, ps: int = SHARDS, steps: int = 3, d: int = D, f: int = F) -> dict:
    """The allocator's peak during one ``fit`` step under ParameterServerStrategy, over what was resident.

    Needs the capped CPU allocator (``devices.configure(1, ..., mode="cpu")``
    first in the process). The in-process cluster's worker and ps tasks
    share this process's one allocator, so the peak covers both; with
    ``momentum > 0`` the ps update is the in-place fused op, so what the
    step adds is the worker's: the whole kernel (``ConcatV2``), the whole
    gradient, the shard gradients sliced from it and the activations.
    Takes the lowest of ``steps`` measured steps (after one warm-up step).

    Returns:
        ``{"peak": bytes, "kernel": bytes of W[d, f], "planned": the planner's
        parameter_server step peak for the worker at this batch}``.
    """
    strategy = ps_strategy(ps)
    model = ps_model(strategy, momentum=momentum, d=d, f=f)
    x, y = batch(d=d, f=f)
    data = _dataset(x, y)
    model.fit(data, epochs=1, steps_per_epoch=1, verbose=0)
    peaks = [allocator.measure(lambda: model.fit(data, epochs=1, steps_per_epoch=1, verbose=0))["peak"]
             for _ in range(steps)]
    plan = planner.per_device((d, f), "float32", "rmsprop", "parameter_server", ps, batch=BATCH)[0]
    return {"peak": min(peaks), "kernel": units.tensor_bytes((d, f)), "planned": plan.step_peak}


# --- tf_keras's compiled update, measured ------------------------------------


#: The update probe's variable, ``[16384, 8192]`` float32: 512 MiB, twice the size
#: below which BFC's split rule can count a whole chunk for a smaller request.
UPDATE_SHAPE = (16384, 8192)
#: The probe's allocator cap: the variable, its velocity, the gradient and the update's temporaries.
UPDATE_CAP = "3GiB"


def update_peak(jit: bool, shape: Sequence[int] = UPDATE_SHAPE) -> dict:
    """What tf_keras's RMSprop update allocates beyond the gradient, with its own XLA on or off.

    Needs the capped CPU allocator (``devices.configure(1, ..., mode="cpu")``
    first in a fresh process): DTensor cannot run under it (the page's
    warning), so this is one variable on one device, updated through the
    same ``_update_step_xla`` (``jit=True``) or ``_update_step`` the DTensor
    optimizer calls from ``_internal_apply_gradients``. A ``float32`` zeros
    variable, a ones gradient; one warm-up ``apply_gradients`` (traces,
    compiles), then the allocator's peak during a second, over what was in
    use before it (variable, velocity, gradient). These are XLA:CPU's and
    TensorFlow's CPU executor's buffers; XLA:GPU's are not measured here.

    Returns:
        ``{"jit": bool, "traces": XLA traces (1 when compiled, else 0),
        "units": (peak - in use) / variable bytes, "variable": bytes}``.
    """
    import tensorflow as tf

    shape = tuple(int(n) for n in shape)
    pool = "CPU:0"
    with tf.device(pool):
        variable = tf.Variable(tf.zeros(shape))
        gradient = tf.ones(shape)
        optimizer = tf_keras().optimizers.RMSprop(LEARNING_RATE)
        optimizer.jit_compile = jit
        optimizer.build([variable])
        step = tf.function(lambda: optimizer.apply_gradients([(gradient, variable)]))
        step()
        before = tf.config.experimental.get_memory_info(pool)["current"]
        tf.config.experimental.reset_memory_stats(pool)
        step()
        peak = tf.config.experimental.get_memory_info(pool)["peak"]
    nbytes = units.tensor_bytes(shape)
    return {"jit": jit, "traces": private.tf_keras_xla_update_traces(optimizer),
            "units": (peak - before) / nbytes, "variable": nbytes}


# --- the seed at full shape: arithmetic only --------------------------------


def full_shape(shards: int = SHARDS) -> dict[str, int]:
    """Bytes for the seed ``W[131072, 65536]`` float32 with RMSprop at ``shards`` shards, from the shared layer.

    Returns (bytes):
        ``dtensor_piece``: one device's ``W[D, F_model]`` kernel piece (and
        its velocity, and its gradient: the same size each);
        ``dtensor_state``: piece + gradient + velocity per device;
        ``ps_shard``: one ps task's shard, ``ps_slot``: its RMSprop slot;
        ``worker_kernel``, ``worker_gradient``: the whole kernel and gradient
        the worker holds (the planner's ``parameter_server`` device);
        ``capacity``: a V100-32GB's allocator.
    """
    from snippets.lib import hardware

    piece = units.tensor_bytes(placements.local_shape(SEED_SHAPE, "column", shards))
    shard_shape = placements.local_shape(SEED_SHAPE, "parameter_server", shards)
    worker = planner.per_device(SEED_SHAPE, "float32", "rmsprop", "parameter_server", shards)[0]
    column = planner.per_device(SEED_SHAPE, "float32", "rmsprop", "column", shards)[0]
    return {
        "dtensor_piece": piece,
        "dtensor_state": column.weights + column.gradients + column.slots,
        "ps_shard": units.tensor_bytes(shard_shape),
        "ps_slot": optimizers.slot_bytes("rmsprop", shard_shape),
        "worker_kernel": worker.weights,
        "worker_gradient": worker.gradients,
        "capacity": hardware.V100_CAPACITY,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snippets.tf_keras", description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker-peak", action="store_true",
                        help="measure the allocator peak of one fit step under ParameterServerStrategy "
                             "(in-process cluster, capped CPU allocator) and print it as JSON")
    parser.add_argument("--momentum", type=float, default=0.9,
                        help="legacy RMSprop momentum for --worker-peak (default 0.9: the fused update)")
    parser.add_argument("--update-peak", choices=("xla", "no-xla"),
                        help="measure what tf_keras's RMSprop update allocates beyond the gradient for a "
                             f"{list(UPDATE_SHAPE)} float32 variable (capped CPU allocator) and print it as JSON")
    args = parser.parse_args(argv)
    if not args.momentum >= 0:
        parser.error(f"--momentum must be >= 0, not {args.momentum:g}")
    if args.update_peak:
        devices.configure(1, UPDATE_CAP, mode="cpu")
        print(json.dumps(update_peak(args.update_peak == "xla")), flush=True)
        return 0
    if args.worker_peak:
        devices.configure(1, "200MiB", mode="cpu")
        print(json.dumps(worker_peak(args.momentum)), flush=True)
        return 0
    setup = devices.configure(SHARDS, "200MiB", mode="cpu", capped=False)
    x, y = batch()
    tf_keras().utils.set_random_seed(0)
    start = seed_model().get_weights()
    device_mesh = mesh(setup)
    model = dtensor_model(device_mesh, start)
    losses = fit_losses(model, dtensor_dataset(device_mesh, x, y))
    print("DTensor, layout map:")
    show(kernel_and_slots(model))
    print("losses", " ".join(f"{v:.4f}" for v in losses),
          "| unsharded", " ".join(f"{v:.4f}" for v in unsharded_losses(start, x, y)))
    strategy = ps_strategy()
    ps = ps_model(strategy, start)
    ps_losses = ps_train(ps, x, y)
    print("\nParameterServerStrategy:")
    show(kernel_and_slots(ps))
    print("losses", " ".join(f"{v:.4f}" for v in ps_losses),
          "| unsharded", " ".join(f"{v:.4f}" for v in unsharded_losses(start, x, y, optimizer="legacy")))
    print("worker's whole-kernel tensors:", worker_full_tensors(strategy, ps)["full"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
