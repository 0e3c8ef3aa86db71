"""Shard variables over parameter servers: ParameterServerStrategy with a variable_partitioner.

Run it: ``python -m snippets.parameter_server --help``. It shows:

* an **in-process cluster** on free loopback ports (``127.0.0.1`` only): one
  ``tf.distribute.Server`` per task, all in this Python process, which is
  the coordinator (the "chief"). Good for CI and for reading the code;
* ``ParameterServerStrategy(resolver, variable_partitioner=...)`` with
  ``FixedShardsPartitioner``, ``MinSizePartitioner`` or
  ``MaxSizePartitioner``: a variable created in its scope becomes a
  ``ShardedVariable`` whose shards (split along axis 0) are placed round-robin
  on the ps tasks; Keras 3 layers honour it (an ``Embedding``'s table is a
  ``ShardedVariable``);
* training through ``ClusterCoordinator`` with a per-worker dataset
  (``coordinator.create_per_worker_dataset``) and a hand-written RMSprop
  whose velocity shards are colocated with the variable shards. Keras 3's
  ``Model.fit`` refuses a plain dataset under this strategy (it asks for
  ``create_per_worker_dataset``, and Keras 3 has no ``DatasetCreator``), then
  refuses the per-worker dataset too ("Unrecognized data type"); and the
  Keras 3 optimizer cannot update a ``ShardedVariable``
  ("ShardedVariable doesn't support being used as a reference"), hence the
  custom loop;
* the **multi-process form**: the same script run as ps, worker and chief,
  each reading its role from ``TF_CONFIG``. ``--launch-local`` starts that
  cluster as separate processes on localhost, waits for the chief and kills
  the ps and worker processes afterwards (they serve until killed).

Where it applies: the shards live on the ps tasks (usually CPU hosts), but
a worker that runs a ``Dense`` layer reads the whole kernel: the
``ShardedVariable`` is concatenated before the matmul (a ``ConcatV2`` of the
full shape in the traced graph). Lookups into a sharded ``Embedding`` read
only their rows. So this strategy stores a huge embedding, not a huge dense
kernel on a 32 GiB GPU worker.

Sources: "Parameter server training with ParameterServerStrategy" tutorial
(tensorflow.org/tutorials/distribute/parameter_server_training); API pages
``tf.distribute.experimental.ParameterServerStrategy``,
``tf.distribute.experimental.partitioners.*``,
``tf.distribute.experimental.coordinator.ClusterCoordinator``,
``tf.distribute.cluster_resolver.TFConfigClusterResolver``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from snippets.lib import allocator, cli, cluster, devices, ledger, pieces, placements, planner, splits, units
from snippets.lib.cluster import ClusterError, LOOPBACK, PARTITIONERS, make_partitioner, make_strategy, start_in_process_cluster


ROOT = Path(__file__).resolve().parents[1]


def check_even_shards(shape: Sequence[int], shards: int) -> tuple[int, ...]:
    """Shape of one shard when ``shape`` is split into ``shards`` along axis 0, evenly.

    TensorFlow itself accepts uneven splits (3 shards of 2048 rows are
    683, 683 and 682 rows, measured), but then the ps tasks hold different
    amounts; this site asks for even splits so that per-task bytes are equal.

    >>> check_even_shards([2048, 1024], 2)
    (1024, 1024)

    Raises:
        ValueError: for a shard count that does not divide ``shape[0]`` (:func:`snippets.lib.splits.check_split`).
    """
    return placements.local_shape(shape, "parameter_server", shards)


def build_model(vocabulary: int = 8192, width: int = 64, length: int = 4):
    """``Sequential(Input((length,), int32), Embedding(vocabulary, width), Flatten, Dense(1))``.

    Call it inside ``strategy.scope()``; under a partitioner the embedding
    table ``[vocabulary, width]`` and the Dense kernel ``[length * width, 1]``
    become ShardedVariables.
    """
    import keras

    return keras.Sequential([
        keras.Input((length,), dtype="int32"),
        keras.layers.Embedding(vocabulary, width),
        keras.layers.Flatten(),
        keras.layers.Dense(1),
    ])


def example_data(examples: int = 256, vocabulary: int = 8192, length: int = 4, seed: int = 0):
    """Seeded token ids ``x[examples, length]`` int32 and targets ``y[examples, 1]`` float32."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.integers(0, vocabulary, (examples, length)).astype("int32")
    y = rng.random((examples, 1)).astype("float32")
    return x, y


class Trainer:
    """A training loop for ``model`` under ParameterServerStrategy, driven by a ClusterCoordinator.

    The RMSprop velocity of each shard is created with
    ``strategy.extended.colocate_vars_with(shard)``, so it lives on the same
    ps task as its shard (and is never partitioned again). Each step runs on
    a worker: it pulls the variables, computes the loss and gradients, and
    updates each shard in place on its ps task.
    """

    def __init__(self, strategy, model, learning_rate: float = 1e-3, rho: float = 0.9,
                 epsilon: float = 1e-7) -> None:
        import tensorflow as tf

        self.strategy = strategy
        self.model = model
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        self.pieces = [p for v in model.trainable_variables for p in pieces.tensors_of(v)]
        self.velocities = []
        with strategy.scope():
            for piece in self.pieces:
                with strategy.extended.colocate_vars_with(piece):
                    self.velocities.append(tf.Variable(tf.zeros(piece.shape, piece.dtype), trainable=False))
        self.hyper = (learning_rate, rho, epsilon)
        self._step = None

    def per_worker_iterator(self, x, y, batch: int = 32):
        """``iter(coordinator.create_per_worker_dataset(fn))``: each worker builds its own pipeline."""
        import tensorflow as tf

        def dataset_fn():
            return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch)

        return iter(self.coordinator.create_per_worker_dataset(dataset_fn))

    def _make_step(self):
        import tensorflow as tf

        from snippets.lib.optimizers import rmsprop_update

        learning_rate, rho, epsilon = self.hyper

        @tf.function
        def train_step(iterator):
            def replica_step(x, y):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
                # Gradients with respect to the shards (tf.Variables): the tape
                # cannot watch a ShardedVariable itself ("no attribute 'handle'").
                gradients = tape.gradient(loss, self.pieces)
                for piece, velocity, gradient in zip(self.pieces, self.velocities, gradients):
                    # An embedding shard's gradient is IndexedSlices; RMSprop
                    # decays the whole velocity each step, so use it densely.
                    rmsprop_update(piece, velocity, gradient, learning_rate, rho, epsilon)
                return loss

            x, y = next(iterator)
            return self.strategy.run(replica_step, args=(x, y))

        return train_step

    def fit(self, iterator, steps: int) -> list[float]:
        """Schedule ``steps`` steps on the workers, wait for all, return their losses in order."""
        if self._step is None:
            self._step = self._make_step()
        results = [self.coordinator.schedule(self._step, args=(iterator,)) for _ in range(steps)]
        self.coordinator.join()
        return [float(r.fetch()) for r in results]


def model_weights(model) -> list:
    """The model's weights as NumPy arrays, shards concatenated (CI scale only)."""
    import numpy as np

    return [np.concatenate([p.numpy() for p in pieces.tensors_of(v)], axis=0) for v in model.weights]


def keras_reference(weights: list, x, y, steps: int, batch: int = 32, learning_rate: float = 1e-3,
                    vocabulary: int = 8192, width: int = 64, length: int = 4) -> dict:
    """The same steps with no strategy: an unsharded model, ``keras.optimizers.RMSprop``.

    Batches are taken in order from the start of ``x``, as the per-worker
    dataset of a single worker yields them.

    Returns:
        ``{"losses": [float], "weights": [ndarray]}``.
    """
    import keras
    import numpy as np
    import tensorflow as tf

    model = build_model(vocabulary, width, length)
    model.set_weights(weights)
    optimizer = keras.optimizers.RMSprop(learning_rate)
    losses = []
    for i in range(steps):
        start = (i * batch) % len(x)
        xb, yb = x[start:start + batch], y[start:start + batch]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        # Dense gradients, as the coordinator loop applies them: Keras's
        # RMSprop squares an embedding's IndexedSlices row by row, before
        # repeated token ids are summed, which is a different update.
        gradients = [tf.convert_to_tensor(g) for g in tape.gradient(loss, model.trainable_variables)]
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        losses.append(float(loss))
    return {"losses": losses, "weights": [np.asarray(w) for w in model.get_weights()]}


def train(strategy, steps: int = 20, batch: int = 32, learning_rate: float = 1e-3,
          vocabulary: int = 8192, width: int = 64, length: int = 4, seed: int = 0) -> dict:
    """Build :func:`build_model` in ``strategy.scope()`` and train it for ``steps`` coordinator steps.

    Returns:
        ``{"losses": [float], "initial": [ndarray], "final": [ndarray],
        "embedding": [snippets.lib.pieces.Piece], "kernel": [snippets.lib.pieces.Piece], "velocity": [snippets.lib.pieces.Piece]}``:
        initial and final weights (shards concatenated) and where the
        embedding, the Dense kernel and their velocities live.
    """
    x, y = example_data(8 * batch, vocabulary, length, seed)
    with strategy.scope():
        model = build_model(vocabulary, width, length)
    initial = model_weights(model)
    trainer = Trainer(strategy, model, learning_rate)
    losses = trainer.fit(trainer.per_worker_iterator(x, y, batch), steps)
    return {
        "losses": losses,
        "initial": initial,
        "final": model_weights(model),
        "embedding": pieces.of_variable(model.layers[0].embeddings),
        "kernel": pieces.of_variable(model.layers[2].kernel),
        "velocity": [pieces.of_variable(v)[0] for v in trainer.velocities],
    }


def fit_refusal(strategy, steps_per_epoch: int = 2) -> str:
    """Try Keras 3 ``Model.fit(numpy_x, numpy_y)`` under ``strategy``; return the error message.

    Raises:
        AssertionError: if ``fit`` does not raise ValueError (it did on Keras 3.15 / TF 2.21).
    """
    x, y = example_data(64)
    with strategy.scope():
        model = build_model()
        model.compile(optimizer="rmsprop", loss="mean_squared_error")
    try:
        model.fit(x, y, steps_per_epoch=steps_per_epoch, verbose=0)
    except ValueError as error:
        return str(error)
    raise AssertionError("Model.fit accepted a plain dataset under ParameterServerStrategy")


def fit_per_worker_refusal(strategy, steps_per_epoch: int = 2) -> str:
    """Try Keras 3 ``Model.fit`` on what the first error asks for, a per-worker dataset; return the error.

    Keras 3.15 does not recognise ``ClusterCoordinator.create_per_worker_dataset``'s
    result either ("Unrecognized data type"), so under this strategy
    ``Model.fit`` has no input it accepts: train with a coordinator loop.

    Raises:
        AssertionError: if ``fit`` does not raise ValueError.
    """
    import tensorflow as tf

    x, y = example_data(64)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = build_model()
        model.compile(optimizer="rmsprop", loss="mean_squared_error")
    per_worker = coordinator.create_per_worker_dataset(
        lambda: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32))
    try:
        model.fit(per_worker, steps_per_epoch=steps_per_epoch, verbose=0)
    except ValueError as error:
        return str(error)
    raise AssertionError("Model.fit accepted a per-worker dataset under ParameterServerStrategy")


def keras_optimizer_refusal(strategy) -> str:
    """Schedule one step that applies ``keras.optimizers.RMSprop`` to sharded weights; return the error.

    The gradients are taken with respect to the shards (the tape cannot
    watch a ShardedVariable) and concatenated back per weight; Keras 3.15's
    distributed update then colocates with the weight, which a
    ShardedVariable refuses. Returns ``"<type>: <first line>"``.

    Raises:
        AssertionError: if the step runs.
    """
    import keras
    import tensorflow as tf

    x, y = example_data(64)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.RMSprop()
        optimizer.build(model.trainable_variables)
    per_worker = iter(coordinator.create_per_worker_dataset(
        lambda: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)))

    @tf.function
    def train_step(iterator):
        def replica_step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
            grads = cluster.gradients_by_shard(tape, loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        xb, yb = next(iterator)
        return strategy.run(replica_step, args=(xb, yb))

    try:
        coordinator.schedule(train_step, args=(per_worker,))
        coordinator.join()
    except Exception as error:  # noqa: BLE001 - reported by type, whatever TF raises
        # TF re-raises the tracing error with the user-code trace in front:
        # the last line is "<Type>: <message>".
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        last = lines[-1] if lines else ""
        return last if last.startswith(type(error).__name__) else f"{type(error).__name__}: {last}"
    raise AssertionError("keras RMSprop updated ShardedVariables under ParameterServerStrategy")


def dense_reads_full_kernel(strategy, shape: Sequence[int] = (1024, 512)) -> list[tuple[int, ...]]:
    """Shapes of the ``ConcatV2`` ops in a traced ``Dense`` call on a sharded kernel ``W[shape]``.

    The worker runs exactly this graph: it concatenates the shards into the
    full kernel before the ``MatMul``, so it needs the whole kernel's bytes.
    """
    import keras
    import tensorflow as tf

    with strategy.scope():
        layer = keras.layers.Dense(shape[1])
        layer.build((None, shape[0]))
    traced = tf.function(lambda x: layer(x)).get_concrete_function(tf.TensorSpec([None, shape[0]]))
    return [tuple(op.outputs[0].shape.as_list()) for op in traced.graph.get_operations()
            if op.type == "ConcatV2"]


def shard_summary(resolver, shape: Sequence[int] = (1024, 512), ps: int = 2) -> dict:
    """For the overview's comparison table: where a kernel's shards live under this strategy.

    Creates ``tf.Variable(zeros(shape))`` under ``FixedShardsPartitioner(ps)``
    on the cluster of ``resolver`` (which must have ``ps`` ps tasks), and its
    RMSprop velocity colocated shard by shard, as :class:`Trainer` does.

    Returns:
        ``{"method": "ParameterServerStrategy", "where": [ps device per shard],
        "local_shape": shard shape, "kernel_bytes": [per shard],
        "measured": [weights + slots per ps task, read by snippets.lib.ledger],
        "planned": [the planned weight shard per ps task],
        "worker_kernel_bytes": bytes a worker concatenates to run Dense}``.
        The planner's ``parameter_server`` row counts only the weight shards:
        it models Keras's optimizer, whose slots stay on the coordinator; the
        hand-written loop here puts each velocity next to its shard.

    Raises:
        ValueError: if ``ps`` does not divide ``shape[0]``.
    """
    import tensorflow as tf

    check_even_shards(shape, ps)
    strategy = make_strategy(resolver, make_partitioner("fixed", ps))
    with strategy.scope():
        variable = tf.Variable(tf.zeros(shape))
        velocities = []
        for piece in pieces.tensors_of(variable):
            with strategy.extended.colocate_vars_with(piece):
                velocities.append(tf.Variable(tf.zeros(piece.shape)))
    held = pieces.of_variables([variable], "weights") + pieces.of_variables(velocities, "slots")
    # The planner's parameter_server budget is the worker's device; a ps task plans its shard.
    shard = units.tensor_bytes(placements.local_shape(shape, "parameter_server", ps))
    planned = [planner.DeviceBudget(i, shard, 0, 0, 0, 0) for i in range(ps)]
    concat = dense_reads_full_kernel(strategy, shape)
    row = ledger.comparison_row("ParameterServerStrategy", held, [p.device for p in held[:ps]], planned)
    row["worker_kernel_bytes"] = max(units.tensor_bytes(s) for s in concat)
    return row


def reserve_ps_state(resolver, shape: Sequence[int], ps: int, dtype: str = "float32") -> list[dict]:
    """Reserve a kernel's shards and their colocated RMSprop velocities on ``ps`` ps tasks.

    Uses ``FixedShardsPartitioner(ps)``; each shard's initial value is
    ``tf.raw_ops.Empty(init=False)`` of the shard's shape (the partitioner
    passes ``shard_info`` to a callable initial value), so the ps task's
    allocator reserves it without touching a page, and no full-size value
    exists anywhere. Measured: reserving 4 GiB this way grew the process's
    resident memory by about 134 MiB. For an in-process cluster, the ps
    tasks share this process's allocator, so configure its cap first
    (``snippets.lib.devices.configure(1, ..., cpu_pool=...)``).

    Returns:
        One dict per ps task: ``device``, ``shape`` (of the shard),
        ``kernel`` and ``velocity`` (bytes, from the shapes) and ``total``.

    Raises:
        ValueError: if ``ps`` does not divide ``shape[0]``.
        tf.errors.ResourceExhaustedError: if the allocator refuses.
    """
    import tensorflow as tf

    check_even_shards(shape, ps)
    strategy = make_strategy(resolver, make_partitioner("fixed", ps))

    def empty(shard_shape):
        return allocator.reserve(shard_shape, dtype)

    with strategy.scope():
        kernel = tf.Variable(lambda shard_info: empty(shard_info.shape), shape=tuple(shape), dtype=dtype)
        velocities = []
        for piece in pieces.tensors_of(kernel):
            with strategy.extended.colocate_vars_with(piece):
                velocities.append(tf.Variable(lambda: empty(piece.shape), shape=piece.shape, dtype=dtype))
    rows = []
    for piece, velocity in zip(pieces.of_variable(kernel), velocities):
        rows.append({"device": piece.device, "shape": piece.shape, "kernel": piece.nbytes,
                     "velocity": pieces.of_variable(velocity)[0].nbytes,
                     "velocity_device": pieces.of_variable(velocity)[0].device})
        rows[-1]["total"] = rows[-1]["kernel"] + rows[-1]["velocity"]
    return rows


# --- multi-process form: the same script as ps, worker and chief (TF_CONFIG) ---


def run_task(steps: int = 10, num_shards: int = 2) -> int:
    """Run this process's role from ``TF_CONFIG``.

    ps and worker tasks start a ``tf.distribute.Server`` and serve until
    killed. The chief builds the strategy (``FixedShardsPartitioner(num_shards)``),
    trains :func:`build_model` for ``steps`` coordinator steps, and prints
    one JSON line: losses and where the embedding's shards live.

    Raises:
        ValueError: if ``TF_CONFIG`` is missing or names another role.
    """
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")  # the tutorial's setting for PS training
    import tensorflow as tf

    if "TF_CONFIG" not in os.environ:
        raise ValueError("TF_CONFIG is not set; --task reads the cluster and this task's role from it")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    role = resolver.task_type
    if role in ("worker", "ps"):
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=role,
                                      task_index=resolver.task_id,
                                      protocol=resolver.rpc_layer or "grpc", start=True)
        server.join()
        return 0
    if role != "chief":
        raise ValueError(f"TF_CONFIG names task type {role!r}; use chief, worker or ps")
    strategy = make_strategy(resolver, make_partitioner("fixed", num_shards))
    result = train(strategy, steps)
    print(json.dumps({"losses": result["losses"],
                      "embedding": [asdict(s) for s in result["embedding"]]}), flush=True)
    return 0


def launch_local(workers: int = 1, ps: int = 2, steps: int = 10, timeout: float = 120.0,
                 log_dir: str | None = None) -> dict:
    """This module's multi-process form on localhost (:func:`snippets.lib.cluster.launch_local`).

    Each task runs ``python -m snippets.parameter_server --task``; the chief
    trains ``steps`` steps with ``ps`` shards and prints its result.

    Raises:
        ValueError: for a step count that is not a positive int.
        ClusterError: as :func:`snippets.lib.cluster.launch_local`.
    """
    splits.check_count(steps, "step count")
    task = ["-m", "snippets.parameter_server", "--task", "--steps", str(steps), "--shards", str(ps)]
    return cluster.launch_local(task, workers, ps, timeout, log_dir)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snippets.parameter_server", description=__doc__.split("\n\n")[0]
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--launch-local", action="store_true",
                      help="run ps, worker and chief as separate processes on localhost")
    mode.add_argument("--task", action="store_true",
                      help="run the role TF_CONFIG gives this process (chief, worker or ps); "
                           "this is what each host runs in a real cluster")
    parser.add_argument("--workers", type=int, default=1, help="worker tasks (default 1)")
    parser.add_argument("--ps", type=int, default=2, help="parameter-server tasks (default 2)")
    parser.add_argument("--partitioner", choices=PARTITIONERS, default="fixed",
                        help="fixed: --shards shards; min_size/max_size: shards of at least / "
                             "at most --shard-bytes bytes (default fixed)")
    parser.add_argument("--shards", type=int, default=None,
                        help="shard count for fixed, max shards for min_size (default: --ps) "
                             "and for max_size (default: no cap)")
    parser.add_argument("--shard-bytes", type=int, default=256 << 10,
                        help="bytes for min_size/max_size (default 262144)")
    cli.add_shape(parser, [2048, 1024], 'the variable to partition in the in-process demo')
    parser.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds to wait for the chief with --launch-local (default 180)")
    parser.add_argument("--full-shape", action="store_true",
                        help="reserve the seed kernel W[131072, 65536] in --ps shards (use --ps 4) "
                             "plus colocated RMSprop velocities, allocation only, and print per task")
    parser.add_argument("--device-memory", default="30976MiB", metavar="SIZE",
                        help="with --full-shape: memory per ps task and per worker (default 30976MiB)")
    args = parser.parse_args(argv)
    num_shards = args.ps if args.shards is None else args.shards
    cli.check_positive(parser, workers=args.workers, ps=args.ps, steps=args.steps, shards=args.shards,
                       shard_bytes=args.shard_bytes if args.partitioner != "fixed" or args.full_shape else None)
    if not args.timeout > 0:  # also refuses nan
        parser.error(f"--timeout must be a positive number of seconds, not {args.timeout:g}")
    try:
        splits.check_count(num_shards)
        if args.partitioner == "fixed" and not args.full_shape:
            check_even_shards(args.shape, num_shards)
        allocator.check_host_can_hold(3 * units.tensor_bytes(args.shape), "this variable")
        if args.task and "TF_CONFIG" not in os.environ:
            raise ValueError("--task needs TF_CONFIG set (cluster and this task's role)")
    except (ValueError, allocator.HostMemoryError) as error:
        parser.error(str(error))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.full_shape:
        return _full_shape(parser, args)
    if args.task:
        return run_task(args.steps, num_shards)
    if args.launch_local:
        try:
            result = launch_local(args.workers, args.ps, args.steps, args.timeout)
        except ClusterError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        print("Embedding shards:")
        for s in result["chief"]["embedding"]:
            print(f"  {s['device']}: {s['shape']} {s['nbytes']} B")
        print("Losses:", ", ".join(f"{v:.4f}" for v in result["chief"]["losses"]))
        return 0

    import tensorflow as tf
    from tabulate import tabulate

    resolver = start_in_process_cluster(args.workers, args.ps)
    if args.partitioner == "fixed":
        partitioner = make_partitioner("fixed", num_shards)
    elif args.partitioner == "min_size":   # at most --shards (default: one per ps task)
        partitioner = make_partitioner("min_size", args.shard_bytes, num_shards)
    else:                                  # no cap unless --shards is given
        partitioner = make_partitioner("max_size", args.shard_bytes, args.shards)
    strategy = make_strategy(resolver, partitioner)
    with strategy.scope():
        variable = tf.Variable(tf.zeros(args.shape))
    print(f"In-process cluster: {args.workers} worker(s), {args.ps} ps task(s) on {LOOPBACK}")
    print(f"tf.Variable(zeros({args.shape})) is a {type(variable).__name__}:")
    print(tabulate([(s.device, list(s.shape), s.nbytes) for s in pieces.of_variable(variable)],
                   headers=["device", "shape", "bytes"]))
    result = train(strategy, args.steps)
    print("\nLosses:", ", ".join(f"{v:.4f}" for v in result["losses"]))
    return 0


def _full_shape(parser, args) -> int:
    """``--full-shape``: reserve the seed kernel's shards on the ps tasks, then compare with a worker."""
    from tabulate import tabulate

    from snippets.lib.seed import SEED_SHAPE

    try:
        local = check_even_shards(SEED_SHAPE, args.ps)
        capacity = units.parse_size(args.device_memory)
        per_task = 2 * units.tensor_bytes(local)
        if per_task > capacity:
            raise ValueError(f"{units.format_bytes(per_task)} per ps task does not fit "
                             f"{args.device_memory}; use more ps tasks (--ps)")
    except ValueError as error:
        parser.error(str(error))
    # The in-process ps tasks share this process's allocator: cap it at
    # ps x the memory of one task (see snippets.lib.devices, CPU mode).
    devices.configure(1, args.device_memory, mode="cpu",
                      cpu_pool=f"{args.ps * capacity // units.MiB}MiB")
    resolver = start_in_process_cluster(args.workers, args.ps)
    rows = reserve_ps_state(resolver, SEED_SHAPE, args.ps)
    print(f"W{list(SEED_SHAPE)} float32 in {args.ps} shards, reserved with tf.raw_ops.Empty "
          "(pages untouched), each with its RMSprop velocity on the same ps task:")
    print(tabulate([(r["device"], list(r["shape"]), r["kernel"], r["velocity"], units.human_bytes(r["total"]))
                    for r in rows], headers=["ps task", "shard", "kernel B", "velocity B", "total"]))
    worker = 2 * units.tensor_bytes(SEED_SHAPE)
    print(f"\nPer ps task {units.format_bytes(rows[0]['total'])}; "
          f"{'fits' if rows[0]['total'] <= capacity else 'does not fit'} {args.device_memory}.")
    print(f"A worker running Dense on it concatenates the whole kernel and computes its gradient: "
          f"{units.format_bytes(worker)}, {'fits' if worker <= capacity else 'does not fit'} "
          f"{args.device_memory}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
