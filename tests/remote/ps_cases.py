"""Remote side of tests/test_parameter_server.py: an in-process localhost cluster (F15, F16).

The kernel that runs these starts one cluster (1 worker, 2 ps tasks on free
127.0.0.1 ports) on first use and keeps it: tf.distribute.Server cannot be
stopped, and several strategies can share its resolver.
"""

from snippets.lib import cluster, pieces
from snippets import parameter_server as ps

_resolver = None


def resolver():
    """The kernel's cluster; the in-process ps tasks share one allocator capped at 200 MiB."""
    global _resolver
    if _resolver is None:
        from snippets.lib import devices

        devices.configure(1, "200MiB", mode="cpu")
        _resolver = cluster.start_in_process_cluster(workers=1, ps=2)
    return _resolver


def reserve(shape):
    """:func:`snippets.parameter_server.reserve_ps_state` on the 2 ps tasks under the 200 MiB cap."""
    import tensorflow as tf

    try:
        return "ok", ps.reserve_ps_state(resolver(), shape, 2)
    except tf.errors.ResourceExhaustedError as error:
        return type(error).__name__, error.message.splitlines()[0]


def _rows(variable):
    return [(s.device, s.shape, s.nbytes) for s in pieces.of_variable(variable)]


def f15_partitioned_variables():
    """MinSizePartitioner(256 KiB, max 2): a [2048, 1024] tf.Variable and a Keras 3 Embedding(8192, 64)."""
    import tensorflow as tf

    strategy = cluster.make_strategy(resolver(), cluster.make_partitioner("min_size", 256 << 10, max_shards=2))
    with strategy.scope():
        variable = tf.Variable(tf.zeros([2048, 1024]))
        embedding = ps.build_model().layers[0]
    table = embedding.embeddings.value
    return {
        "variable": (type(variable).__name__, _rows(variable)),
        "embedding": (type(table).__name__, tuple(table.shape), _rows(embedding.embeddings)),
    }


def partitioner_shards(kind, value, max_shards=None, shape=(2048, 1024)):
    """Shard shapes and ps tasks of ``tf.Variable(zeros(shape))`` under one partitioner."""
    import tensorflow as tf

    strategy = cluster.make_strategy(resolver(), cluster.make_partitioner(kind, value, max_shards))
    with strategy.scope():
        variable = tf.Variable(tf.zeros(shape))
    return [(s.device.split("/")[3], s.shape) for s in pieces.of_variable(variable)]


def f16_fit_refusal():
    """Keras 3 Model.fit(numpy) under the strategy, and whether Keras 3 has a DatasetCreator."""
    import keras

    strategy = cluster.make_strategy(resolver(), cluster.make_partitioner("fixed", 2))
    message = ps.fit_refusal(strategy)
    per_worker = ps.fit_per_worker_refusal(strategy)
    has_creator = hasattr(keras.utils, "experimental") or hasattr(keras.utils, "DatasetCreator")
    return message, per_worker, has_creator, ps.keras_optimizer_refusal(strategy)


def train(steps=5):
    """Coordinator training vs the unsharded Keras RMSprop replay of the same batches."""
    import numpy as np

    strategy = cluster.make_strategy(resolver(), cluster.make_partitioner("fixed", 2))
    result = ps.train(strategy, steps=steps)
    x, y = ps.example_data(8 * 32)
    reference = ps.keras_reference(result["initial"], x, y, steps)
    return {
        "losses": result["losses"],
        "reference_losses": reference["losses"],
        "max_weight_error": max(float(np.abs(a - b).max()) for a, b in zip(result["final"], reference["weights"])),
        "moved": max(float(np.abs(a - b).max()) for a, b in zip(result["final"], result["initial"])),
        "embedding": [(s.device, s.shape) for s in result["embedding"]],
        "kernel": [(s.device, s.shape) for s in result["kernel"]],
        "velocity": [(s.device, s.shape) for s in result["velocity"]],
    }


def dense_concat(shape=(1024, 512)):
    strategy = cluster.make_strategy(resolver(), cluster.make_partitioner("fixed", 2))
    return ps.dense_reads_full_kernel(strategy, shape)


def summary(shape=(1024, 512)):
    return ps.shard_summary(resolver(), shape, ps=2)
