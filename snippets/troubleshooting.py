"""Raise, on a CPU, each error message the troubleshooting index lists.

``docs/troubleshooting.md`` quotes every error message this site covers.
Each message that a CPU-only machine can produce has a function here that
produces it for real, and a test compares what TensorFlow (or this site's
own code) raises with the text the index quotes, so the index cannot drift
from TensorFlow. Messages only a GPU can produce are listed in
:data:`GPU_ONLY` with the TensorFlow function whose source holds them; the
test checks the quoted text is still in that source.

Run one (each needs a fresh process; ``--list`` shows which process each needs)::

    python -m snippets.troubleshooting --list
    python -m snippets.troubleshooting virtual-devices
    python -m snippets.troubleshooting --help

Two kinds of process:

``emulated``
    :func:`snippets.lib.devices.configure` made 4 logical CPUs sharing a
    30976 MiB BFC cap (one V100-SXM2-32GB): the seed's OOM, and what goes
    wrong once devices are configured.
``plain``
    TensorFlow with its default CPU allocator and one CPU device, nothing
    configured: what goes wrong when devices are *not* configured.
``uncapped``
    4 logical CPUs on TensorFlow's default CPU allocator, for tf_keras's
    DTensor models (the capped allocator breaks their ``compile``, see
    ``docs/tf-keras.md``).
``jax``
    Keras on the JAX backend over 4 emulated CPU devices
    (``KERAS_BACKEND=jax``, ``XLA_FLAGS=--xla_force_host_platform_device_count=4``,
    set before Keras is imported; the command line sets them itself).

Sources: ``tensorflow/python/eager/context.py`` (``Context.set_memory_growth``,
``set_logical_device_configuration``, ``set_visible_devices``,
``_compute_device_options``); ``TFE_GetMemoryInfo`` in
``tensorflow/c/eager/c_api_experimental.cc`` for "Allocator stats not
available"; Keras 3's ``keras/src/backend/tensorflow/trainer.py`` for the
parameter-server dataset check.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence

from snippets.lib import cluster, devices, errors, planner

#: The parameter-server entries' variable: W[1024, 512] float32, 2 MiB.
PROBE_SHAPE = (1024, 512)

#: The emulated process: 4 devices of one V100-SXM2-32GB each, CPU mode.
EMULATED = (4, "30976MiB")


def _emulated() -> devices.DeviceSetup:
    """Configure the emulated process (idempotent), and start the runtime."""
    import tensorflow as tf

    setup = devices.configure(*EMULATED)
    tf.constant(1.0)  # the runtime starts at the first op
    return setup


def _plain():
    """Import TensorFlow in a process that has not configured devices.

    Raises:
        devices.DeviceConfigError: if this process configured them (the
            "plain" messages need TensorFlow's defaults).
    """
    if os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"):
        raise devices.DeviceConfigError(
            "this message needs a process whose devices were not configured; "
            "run it in a fresh Python (python -m snippets.troubleshooting ID)"
        )
    import tensorflow as tf

    return tf


# --- emulated process ---------------------------------------------------------


def oom() -> None:
    """The seed: Dense(65536) on inputs of width 131072 inside MirroredStrategy over 4 x 30976 MiB.

    Raises:
        tf.errors.ResourceExhaustedError: "OOM when allocating tensor with
            shape[131072,65536] and type float ...": the 34359738368 B kernel
            is more than one device's 34057748480 B. The capped allocator
            refuses before touching a page.
    """
    import tensorflow as tf

    from snippets.lib import seed

    setup = _emulated()
    with tf.distribute.MirroredStrategy(setup.devices).scope():
        seed.build_seed_model()


def virtual_devices() -> None:
    """Split the CPU into 2 logical devices after the runtime started with 4.

    Raises:
        RuntimeError: "Virtual devices cannot be modified after being initialized".
    """
    import tensorflow as tf

    _emulated()
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


def visible_devices() -> None:
    """Change the visible devices after the runtime started.

    Raises:
        RuntimeError: "Visible devices cannot be modified after being initialized".
    """
    import tensorflow as tf

    _emulated()
    tf.config.set_visible_devices([], "CPU")


def growth_with_virtual_devices() -> None:
    """Ask for memory growth on a device already split into logical devices.

    Raises:
        ValueError: "Cannot set memory growth on device when virtual devices configured".
    """
    import tensorflow as tf

    _emulated()
    tf.config.experimental.set_memory_growth(tf.config.list_physical_devices("CPU")[0], True)


def uneven_tf_split() -> None:
    """``tf.split`` of a [4, 64] tensor into 3 column blocks.

    Raises:
        tf.errors.InvalidArgumentError: "Number of ways to split should evenly divide ...".
    """
    import tensorflow as tf

    _emulated()
    tf.split(tf.zeros([4, 64]), 3, axis=1)


def uneven_dtensor() -> None:
    """A DTensor layout that shards a dimension of 6 over a 4-device mesh axis.

    Raises:
        tf.errors.UnknownError: "... requires dimension 1 to be divisible by
            sharding specified in DTensorLayout ...".
    """
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    setup = _emulated()
    mesh = dtensor.create_mesh(
        [("model", len(setup.devices))], devices=[n.replace("/device:", "") for n in setup.devices]
    )
    dtensor.call_with_layout(tf.zeros, dtensor.Layout([dtensor.UNSHARDED, "model"], mesh), shape=[8, 6])


def uneven_split() -> None:
    """This site's planner asked to split 65537 columns over 4 devices.

    The tensor-parallel layers, the DTensor layout arithmetic and the
    parameter-server shard check raise the same message: all four ask
    :func:`snippets.lib.splits.check_split`.

    Raises:
        ValueError: "cannot split dimension 1 of shape [131072, 65537] (size 65537) into 4 equal shards ...".
    """
    planner.per_device([131072, 65537], "float32", None, "column", 4)


def per_worker_dataset() -> None:
    """Keras 3 ``Model.fit`` on NumPy arrays under a ParameterServerStrategy.

    Starts an in-process localhost cluster (1 worker, 2 parameter servers;
    :func:`snippets.lib.cluster.start_in_process_cluster`), so run it last in a process.

    Raises:
        ValueError: "To use this dataset, you need to pass this dataset to
            ClusterCoordinator.create_per_worker_dataset."
    """

    _emulated()
    strategy = cluster.ps_strategy()
    model = cluster.ps_model(strategy, PROBE_SHAPE, compile=True)
    x, y = cluster.ones_batch(PROBE_SHAPE)
    model.fit(x, y, steps_per_epoch=1, epochs=1, verbose=0)


def per_worker_fit() -> None:
    """Keras 3 ``Model.fit`` on the per-worker dataset the previous message asks for.

    Raises:
        ValueError: "Unrecognized data type: x=<...PerWorkerDatasetFromDatasetFunction ...>":
            Keras 3.15's ``fit`` accepts no input under ParameterServerStrategy.
    """
    import numpy as np
    import tensorflow as tf


    _emulated()
    strategy = cluster.ps_strategy()
    model = cluster.ps_model(strategy, PROBE_SHAPE)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model.compile(optimizer="sgd", loss="mean_squared_error")
    x = np.ones((8, PROBE_SHAPE[0]), "float32")
    y = np.ones((8, PROBE_SHAPE[1]), "float32")
    per_worker = coordinator.create_per_worker_dataset(
        lambda: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(4)
    )
    model.fit(per_worker, steps_per_epoch=1, verbose=0)


def keras_optimizer_on_shards() -> None:
    """A Keras 3 RMSprop applying gradients to sharded weights in a ``ClusterCoordinator`` step.

    The gradients are taken with respect to each weight's shards (a
    GradientTape cannot watch a ShardedVariable) and concatenated back.

    Raises:
        NotImplementedError: "... ShardedVariable doesn't support being used as
            a reference." (after TensorFlow's "in user code" trace).
    """
    import keras
    import tensorflow as tf


    _emulated()
    strategy = cluster.ps_strategy()
    model = cluster.ps_model(strategy, PROBE_SHAPE)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        optimizer = keras.optimizers.RMSprop()
        optimizer.build(model.trainable_variables)

    @tf.function
    def step(x, y):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x) - y) ** 2)
            grads = cluster.gradients_by_shard(tape, loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return strategy.run(replica_step, args=(x, y))

    coordinator.schedule(step, args=(tf.ones((8, PROBE_SHAPE[0])), tf.ones((8, PROBE_SHAPE[1]))))
    coordinator.join()


# --- plain process ------------------------------------------------------------


def allocator_stats() -> None:
    """``get_memory_info("CPU:0")`` with TensorFlow's default CPU allocator.

    Raises:
        ValueError: "Allocator stats not available for device 'CPU:0'"; the
            BFC variables that :mod:`snippets.lib.devices` sets make it work.
    """
    _plain().config.experimental.get_memory_info("CPU:0")


def growth_on_cpu() -> None:
    """``set_memory_growth`` on the (unsplit) CPU.

    Raises:
        ValueError: "Cannot set memory growth on non-GPU and non-Pluggable devices".
    """
    tf = _plain()
    tf.config.experimental.set_memory_growth(tf.config.list_physical_devices("CPU")[0], True)


def cpu_memory_limit() -> None:
    """A logical CPU with a ``memory_limit`` (the way GPUs are capped).

    Raises:
        ValueError: "Setting memory limit on CPU virtual devices is currently not supported".
    """
    tf = _plain()
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration(memory_limit=100)]
    )


def model_parallelism() -> None:
    """Look up ``tf.distribute.experimental.ModelParallelism``.

    Raises:
        AttributeError: "module 'tensorflow._api.v2.distribute.experimental'
            has no attribute 'ModelParallelism'".
    """
    _plain().distribute.experimental.ModelParallelism  # noqa: B018 - the lookup raises


def unknown_device() -> None:
    """A DTensor mesh over CPU:0 and CPU:1 when only one CPU exists (field case F14).

    ``create_mesh`` accepts the device names; the first op on the mesh fails.

    Raises:
        InvalidArgumentError: "/job:localhost/replica:0/task:0/device:CPU:1 unknown device."
    """
    tf = _plain()
    from tensorflow.experimental import dtensor

    mesh = dtensor.create_mesh([("x", 2)], devices=["CPU:0", "CPU:1"])
    dtensor.pack([tf.ones([4]), tf.ones([4])], dtensor.Layout.replicated(mesh, 1))


def configure_too_late() -> None:
    """``snippets.lib.devices.configure`` after an op ran.

    Raises:
        devices.DeviceConfigError: "TensorFlow's runtime already started in this process ...".
    """
    _plain().constant(1.0)
    devices.configure(4)


# --- Keras outside the TensorFlow backend's defaults ----------------------------------


def distribution_after_optimizer() -> None:
    """Keras on JAX: an optimizer made before ``set_distribution``, then ``fit`` (a ``jax`` process).

    The optimizer's variables (its step counter first) were placed on one
    device when it was made; the model's on the mesh. Keras 3.15 warns
    ("Detected a mix of local ... and distributed ... variables"), then jit
    refuses to compile the step.
    """
    import warnings

    import keras
    import numpy as np

    if keras.backend.backend() != "jax":
        raise devices.DeviceConfigError("this message needs Keras on JAX: set KERAS_BACKEND=jax before "
                                        "importing keras (python -m snippets.troubleshooting does it)")
    optimizer = keras.optimizers.RMSprop()  # the mistake: made before the distribution is set
    mesh = keras.distribution.DeviceMesh((1, 4), ("batch", "model"), devices=keras.distribution.list_devices()[:4])
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*dense.*kernel"] = (None, "model")
    keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch"))
    try:
        model = keras.Sequential([keras.Input((PROBE_SHAPE[0],)), keras.layers.Dense(PROBE_SHAPE[1], name="dense")])
        model.compile(optimizer=optimizer, loss="mse")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the warning says the same at length
            model.fit(np.ones((16, PROBE_SHAPE[0]), "float32"), np.ones((16, PROBE_SHAPE[1]), "float32"), verbose=0)
    finally:
        keras.distribution.set_distribution(None)


def tf_keras_dtensor_numpy_fit() -> None:
    """tf_keras with a DTensor ``LayoutMap``: ``fit`` on NumPy arrays (an ``uncapped`` process).

    ``fit`` builds a plain ``tf.data`` iterator whose elements carry no
    DTensor layout; DTensor's layout propagation then fails on the first
    batch. A ``dtensor.DTensorDataset`` gives them one (docs/tf-keras.md).
    """
    import numpy as np
    import tf_keras
    from tensorflow.experimental import dtensor

    names = devices.configure(*EMULATED, capped=False).devices
    mesh = dtensor.create_mesh([("batch", 1), ("model", len(names))], devices=[n.replace("/device:", "") for n in names])
    layout_map = tf_keras.dtensor.experimental.LayoutMap(mesh)
    layout_map["dense.*kernel"] = dtensor.Layout([dtensor.UNSHARDED, "model"], mesh)
    layout_map["dense.*bias"] = dtensor.Layout(["model"], mesh)
    with layout_map.scope():
        model = tf_keras.Sequential([tf_keras.Input((PROBE_SHAPE[0],)), tf_keras.layers.Dense(PROBE_SHAPE[1], name="dense")])
    model.compile(optimizer=tf_keras.dtensor.experimental.optimizers.SGD(0.01, mesh=mesh), loss="mse")
    model.fit(np.ones((16, PROBE_SHAPE[0]), "float32"), np.ones((16, PROBE_SHAPE[1]), "float32"), verbose=0)


#: Entries that start an in-process parameter-server cluster: run them last in a process.
CLUSTER = ("per-worker-dataset", "per-worker-fit", "sharded-keras-optimizer")

#: index anchor -> (process kind, function raising the message on a CPU).
RAISERS: dict[str, tuple[str, Callable[[], None]]] = {
    "oom": ("emulated", oom),
    "virtual-devices": ("emulated", virtual_devices),
    "visible-devices": ("emulated", visible_devices),
    "growth-virtual-devices": ("emulated", growth_with_virtual_devices),
    "uneven-tf-split": ("emulated", uneven_tf_split),
    "uneven-dtensor": ("emulated", uneven_dtensor),
    "uneven-split": ("emulated", uneven_split),
    "per-worker-dataset": ("emulated", per_worker_dataset),
    "per-worker-fit": ("emulated", per_worker_fit),
    "sharded-keras-optimizer": ("emulated", keras_optimizer_on_shards),
    "allocator-stats": ("plain", allocator_stats),
    "growth-on-cpu": ("plain", growth_on_cpu),
    "cpu-memory-limit": ("plain", cpu_memory_limit),
    "model-parallelism": ("plain", model_parallelism),
    "unknown-device": ("plain", unknown_device),
    "configure-too-late": ("plain", configure_too_late),
    "jit-incompatible-devices": ("jax", distribution_after_optimizer),
    "element-layouts": ("uncapped", tf_keras_dtensor_numpy_fit),
}

#: What a ``jax`` process needs before Keras is imported (the test's JAX kernel has it already).
JAX_ENVIRONMENT = {"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
                   "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}

#: index anchor -> "module:Class.function" in TensorFlow whose source raises
#: the message; only a GPU reaches it.
GPU_ONLY: dict[str, str] = {
    # set_memory_growth refuses a CPU ("non-GPU and non-Pluggable") before
    # it checks whether the runtime started.
    "physical-devices": "tensorflow.python.eager.context:Context.set_memory_growth",
    # Checked while building the GPU options: needs two GPUs with different settings.
    "growth-differ": "tensorflow.python.eager.context:Context._compute_device_options",
}


def trigger(anchor: str) -> None:
    """Raise the message of index entry ``anchor`` in this process.

    Raises:
        KeyError: for an anchor with no CPU raiser (see :data:`GPU_ONLY`).
        whatever the entry's message is.
    """
    kind, raiser = RAISERS[anchor]
    raiser()
    raise AssertionError(f"{raiser.__name__} returned without raising its message")


def tf_source(target: str) -> str:
    """Source text of a TensorFlow function given as ``"module:Class.function"``."""
    import importlib
    import inspect

    module_name, _, qualname = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return inspect.getsource(obj)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snippets.troubleshooting",
        description="Raise one of the error messages of docs/troubleshooting.md on this machine.",
    )
    # Exclusive, so ``--list extra`` is refused instead of silently ignoring "extra".
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("anchor", nargs="?", help="the entry, e.g. virtual-devices (see --list)")
    choice.add_argument("--list", action="store_true", help="list the entries and exit")
    args = parser.parse_args(argv)
    if args.list or not args.anchor:
        for anchor, (kind, raiser) in RAISERS.items():
            print(f"{anchor:24} {kind:9} {raiser.__doc__.splitlines()[0]}")
        for anchor, target in GPU_ONLY.items():
            print(f"{anchor:24} {'GPU only':9} raised in {target}")
        return 0
    if args.anchor in GPU_ONLY:
        parser.error(f"{args.anchor!r} needs a GPU; TensorFlow raises it in {GPU_ONLY[args.anchor]}")
    if args.anchor not in RAISERS:
        parser.error(f"unknown entry {args.anchor!r}; see --list")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if RAISERS[args.anchor][0] == "jax":
        for name, value in JAX_ENVIRONMENT.items():
            os.environ.setdefault(name, value)
    try:
        trigger(args.anchor)
    except Exception as error:  # printing the message is the point
        print(errors.summary(error))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
