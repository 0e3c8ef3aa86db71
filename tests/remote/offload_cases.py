"""Remote side of tests/test_offload.py (field case F12 and the three ways to offload).

Each function runs in a kernel (tests.harness.Kernel), configures devices
first (calling again with the same arguments is a no-op) and returns plain
data for the test process to assert on.
"""

from __future__ import annotations

from snippets.lib import devices, pieces
from snippets import offload

#: 4 logical CPUs sharing a 200 MiB pool: CPU:0 plays the host, CPU:1-3 the GPUs.
CI = (4, "200MiB")


def _ci() -> devices.DeviceSetup:
    return devices.configure(*CI)


def f12() -> dict:
    """F12: tf.device("CPU:3") inside MirroredStrategy.scope() vs tf.device("CPU:0") outside it."""
    import tensorflow as tf

    setup = _ci()
    strategy = tf.distribute.MirroredStrategy(setup.devices)
    with strategy.scope():
        with tf.device("CPU:3"):
            w = tf.Variable(tf.zeros([8]))
    with tf.device("CPU:0"):
        big = tf.Variable(tf.zeros([1024, 256]))
    trap = offload.mirrored_despite_device(setup)
    return {
        "w": (type(w).__name__, [pieces.short_device(c.device) for c in w.values]),
        "big": (type(big).__name__, pieces.short_device(big.device), tuple(big.shape)),
        "trap": (type(trap).__name__, [pieces.short_device(c.device) for c in trap.values]),
    }


def transfers(mode: str, input_dim: int = 1024, units: int = 256, batch: int = 32) -> dict:
    """Run one step in ``mode`` and return where variables live and every cross-device send."""
    setup = _ci()
    placed, moved = offload.run_mode(setup, mode, input_dim, units, batch)
    return {
        "placed": placed,
        "moved": [(t.source, t.destination, t.shape, t.dtype, t.nbytes, t.kind) for t in moved],
    }


def central_storage_fit() -> dict:
    """Keras 3 Model.fit under CentralStorageStrategy: where the variables are, and the loss."""
    import keras
    import numpy as np

    setup = _ci()
    strategy = offload.central_storage(setup)
    with strategy.scope():
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(4, name="d")], name="m")
        model.compile(optimizer=keras.optimizers.RMSprop(name="rmsprop"), loss="mean_squared_error")
    x = np.random.default_rng(0).normal(size=(64, 16)).astype("float32")
    # 64 examples in batches of 16: about 4x faster to trace here than 48 in 12s (measured).
    history = model.fit(x, x[:, :4] * 2.0, batch_size=16, epochs=2, verbose=0, shuffle=False)
    return {
        "replicas": strategy.num_replicas_in_sync,
        "placed": offload.variable_devices(model) + offload.variable_devices(model.optimizer.variables),
        "loss": history.history["loss"],
    }


def host_dense_in_scope() -> str:
    """host_dense called inside a strategy scope: the error message."""
    import tensorflow as tf

    setup = _ci()
    with tf.distribute.MirroredStrategy(setup.devices).scope():
        try:
            offload.host_dense(setup, 8, 4)
        except RuntimeError as error:
            return str(error)
    return "no error"


def copy_check() -> dict:
    """copy_seconds between two logical CPUs (the code path a GPU run takes), and its input check."""
    setup = _ci()
    seconds = offload.copy_seconds(setup.devices[1], 1 << 20, repeats=2)
    try:
        offload.copy_seconds(setup.devices[1], 2)
        error = "no error"
    except ValueError as e:
        error = str(e)
    return {"positive": seconds > 0, "error": error}
