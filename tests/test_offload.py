"""CPU offload (snippets.offload) and field case F12.

TensorFlow runs in one kernel (harness.Kernel) with 4 logical CPUs: CPU:0
plays the host, CPU:1-4 the GPUs (CPU:1 the default device, as GPU:0 is on a
GPU host). Each kernel-side function sits above the test that calls it; it
configures devices first (calling again with the same arguments is a no-op)
and returns plain data. The arithmetic is tested here directly.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from harness import Kernel
from snippets.lib import devices, hardware, pieces
from snippets import offload

ROOT = Path(__file__).resolve().parents[1]
KERNEL_BYTES = 1024 * 256 * 4  # the CI-scale kernel W[1024, 256] float32
BIAS_BYTES = 256 * 4
SEED_W = 34359738368  # W[131072, 65536] float32

#: 4 logical CPUs sharing a 200 MiB pool: CPU:0 plays the host, CPU:1-3 the GPUs.
CI = (4, "200MiB")


@pytest.fixture(scope="module")
def ci():
    with Kernel() as kernel:
        yield kernel


def sends_of(moved, shape):
    return [(src, dst) for src, dst, s, _, _, _ in moved if s == shape]


def configure_ci() -> devices.DeviceSetup:
    """Kernel side: the :data:`CI` devices (a no-op after the first call)."""
    return devices.configure(*CI)


# --- field case F12 ----------------------------------------------------------------


def f12_device_inside_and_outside_scope() -> dict:
    """F12: tf.device("CPU:3") inside MirroredStrategy.scope() vs tf.device("CPU:0") outside it."""
    import tensorflow as tf

    setup = configure_ci()
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


def test_F12_tf_device_inside_scope_is_mirrored_outside_scope_is_plain_on_CPU0(ci):
    result = ci.call(f12_device_inside_and_outside_scope)
    assert result["w"] == ("MirroredVariable", ["CPU:1", "CPU:2", "CPU:3", "CPU:4"])
    assert result["big"] == ("ResourceVariable", "CPU:0", (1024, 256))
    # The snippet's version of the trap: asking for the host inside the scope
    # still mirrors onto every compute device, none on the host.
    assert result["trap"] == ("MirroredVariable", ["CPU:1", "CPU:2", "CPU:3", "CPU:4"])


# --- what a step moves, measured from the partitioned graph ------------------------


def step_transfers(mode: str, input_dim: int = 1024, units: int = 256, batch: int = 32) -> dict:
    """Run one step in ``mode`` and return where variables live and every cross-device send."""
    setup = configure_ci()
    placed, moved = offload.run_mode(setup, mode, input_dim, units, batch)
    return {
        "placed": placed,
        "moved": [(t.source, t.destination, t.shape, t.dtype, t.nbytes, t.kind) for t in moved],
    }


def test_host_variable_step_moves_the_kernel_five_times(ci):
    # Stock Keras on a GPU host: the update's arithmetic runs on the default device (GPU:0),
    # so the kernel and its velocity are read over the link and the new values sent back.
    result = ci.call(step_transfers, "host-variable")
    assert {(cls, dev) for _, cls, dev in result["placed"]} == {("ResourceVariable", "CPU:0")}
    assert len(result["placed"]) == 6  # kernel, bias, iteration, learning rate, 2 velocities
    moved = result["moved"]
    assert sends_of(moved, (1024, 256)) == [("CPU:0", "CPU:1")] * 3 + [("CPU:1", "CPU:0")] * 2
    into = sum(b for src, _, shape, _, b, _ in moved if src == "CPU:0" and shape in ((1024, 256), (256,)))
    out = sum(b for src, _, shape, _, b, _ in moved if src == "CPU:1" and shape in ((1024, 256), (256,)))
    assert (into, out) == (3 * (KERNEL_BYTES + BIAS_BYTES), 2 * (KERNEL_BYTES + BIAS_BYTES))


def test_host_compute_step_moves_activations_only(ci):
    result = ci.call(step_transfers, "host-compute")
    moved = result["moved"]
    assert [m for m in moved if m[5] == "weights" and m[4] > 8] == []  # the int64 step counter only
    assert sends_of(moved, (1024, 256)) == []
    # h[32, 256] in, dh[32, 256] out, and here x[32, 1024], made on the default device; no weight.
    assert ("CPU:1", "CPU:0", (32, 256), "float32", 32 * 256 * 4, "gradients") in moved
    assert max(m[4] for m in moved) == 32 * 1024 * 4 < KERNEL_BYTES


def test_central_storage_step_reads_the_kernel_once_per_replica(ci):
    result = ci.call(step_transfers, "central-storage")
    assert {(cls, dev) for _, cls, dev in result["placed"]} == {("AggregatingVariable", "CPU:0")}
    pairs = sorted(sends_of(result["moved"], (1024, 256)))
    assert pairs == sorted([("CPU:0", f"CPU:{i}") for i in (1, 2, 3, 4)]
                           + [(f"CPU:{i}", "CPU:0") for i in (1, 2, 3, 4)])


def central_storage_fit() -> dict:
    """Keras 3 Model.fit under CentralStorageStrategy: where the variables are, and the loss."""
    import keras
    import numpy as np

    setup = configure_ci()
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


def test_keras_fit_runs_under_central_storage_with_variables_and_slots_on_the_host(ci):
    result = ci.call(central_storage_fit)
    assert result["replicas"] == 4
    assert [p for p, _, _ in result["placed"]] == [
        "m/d/kernel", "m/d/bias", "rmsprop/iteration", "rmsprop/learning_rate",
        "rmsprop/m_d_kernel_velocity", "rmsprop/m_d_bias_velocity",
    ]
    assert {(cls, dev) for _, cls, dev in result["placed"]} == {("AggregatingVariable", "CPU:0")}
    assert len(result["loss"]) == 2 and result["loss"][1] < result["loss"][0]


def host_dense_in_scope() -> str:
    """host_dense called inside a strategy scope: the error message."""
    import tensorflow as tf

    setup = configure_ci()
    with tf.distribute.MirroredStrategy(setup.devices).scope():
        try:
            offload.host_dense(setup, 8, 4)
        except RuntimeError as error:
            return str(error)
    return "no error"


def test_host_dense_refuses_to_build_inside_a_strategy_scope(ci):
    assert "outside any strategy scope" in ci.call(host_dense_in_scope)


def copy_seconds_check() -> dict:
    """copy_seconds between two logical CPUs (the code path a GPU run takes), and its input check."""
    setup = configure_ci()
    seconds = offload.copy_seconds(setup.devices[1], 1 << 20, repeats=2)
    try:
        offload.copy_seconds(setup.devices[1], 2)
        error = "no error"
    except ValueError as e:
        error = str(e)
    return {"positive": seconds > 0, "error": error}


def test_copy_seconds_runs_the_copy_and_rejects_a_tiny_size(ci):
    # The chapter's GPU-only bandwidth block uses this; here between logical CPUs.
    result = ci.call(copy_seconds_check)
    assert result == {"positive": True, "error": "need nbytes >= 4 and repeats >= 1, got 2 and 5"}


# --- arithmetic: bytes and seconds at full size --------------------------------------


def test_pcie3_x16_bandwidth_is_8GTs_times_16_lanes_times_128_130_over_8():
    assert hardware.PCIE3_X16_BYTES_PER_S == pytest.approx(15753846153.846, rel=1e-12)


def test_seed_kernel_on_the_gpu_costs_2W_over_PCIe_per_step():
    cost = offload.step_cost([131072, 65536], batch=64, compute="device")
    assert (cost.host_to_device, cost.device_to_host) == (SEED_W, SEED_W)
    assert cost.seconds == pytest.approx(2 * SEED_W / hardware.PCIE3_X16_BYTES_PER_S)
    assert round(cost.seconds, 3) == 4.362
    # A first layer computes no dx: 2BDF forward + 2BDF for dW.
    assert cost.layer_seconds == pytest.approx(4 * 64 * 131072 * 65536 / 15.7e12)
    shared = offload.step_cost(bytes_per_s=hardware.PCIE3_X16_BYTES_PER_S / 2)
    assert shared.seconds == pytest.approx(2 * cost.seconds)


def test_seed_layer_on_the_host_moves_only_activations():
    cost = offload.step_cost([131072, 65536], batch=64, compute="host")
    assert (cost.host_to_device, cost.device_to_host) == (64 * 65536 * 4,) * 2 == (16777216,) * 2


def test_float16_halves_the_traffic():
    cost = offload.step_cost([131072, 65536], compute="device", dtype="float16")
    assert cost.host_to_device == SEED_W // 2


@pytest.mark.parametrize("bad, error", [
    (dict(compute="gpu"), "compute must be 'device' or 'host'"),
    (dict(kernel_shape=[131072, 0]), "dimension 1"),
])
def test_bad_step_cost_input_names_the_fix(bad, error):
    with pytest.raises(ValueError, match=error):
        offload.step_cost(**bad)


def test_roles_are_the_setups_host_and_devices():
    one = devices.DeviceSetup(devices.DevicePlan("cpu", 1, 256), ("/device:CPU:1",), 256, "/device:CPU:0")
    assert offload.roles(one) == ("/device:CPU:0", ("/device:CPU:1",))
    gpus = devices.DeviceSetup(devices.DevicePlan("gpu", 2, 30976, ((30976,), (30976,))),
                               ("/device:GPU:0", "/device:GPU:1"), host="/device:CPU:0")
    assert offload.roles(gpus) == ("/device:CPU:0", ("/device:GPU:0", "/device:GPU:1"))


@pytest.mark.parametrize("argv, message", [
    (["--shape", "1024", "0"], "dimension 1"),
    (["--offload", "ram"], "invalid choice"),
    (["--batch", "0"], "error: --batch must be a positive integer, not 0"),
    (["--batch", "-2"], "error: --batch must be a positive integer, not -2"),
    (["--shape", "0", "256"], "error: --shape 0 256: dimension 0 of shape [0, 256] is 0"),
])
def test_cli_bad_input_exits_2_with_one_line(argv, message):
    run = subprocess.run([sys.executable, "-m", "snippets.offload", *argv], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    last = run.stderr.strip().splitlines()[-1]
    assert message in last and "Traceback" not in run.stderr
