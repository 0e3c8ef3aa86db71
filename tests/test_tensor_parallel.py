"""Tensor parallelism with tf.device (snippets.tensor_parallel) and field case F13.

Everything that needs TensorFlow runs in a kernel (tests.harness.Kernel);
the remote functions are in tests/remote/tensor_parallel.py.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from snippets.lib import communication, hardware, units
from tests.harness import Kernel

REMOTE = "tests.remote.tensor_parallel"
ROOT = Path(__file__).resolve().parents[1]
DEVICES = [f"CPU:{i}" for i in range(1, 5)]  # CPU:0 plays the host
SEED_SHARD = 8589934592  # [131072, 16384] or [32768, 65536] float32


@pytest.fixture(scope="module")
def ci():
    """4 logical CPUs, 200 MiB pool: one kernel for every CI-scale test here."""
    with Kernel() as kernel:
        yield kernel


@pytest.fixture(scope="module")
def full():
    """4 logical CPUs of 30976 MiB with a pool that holds the 4 seed shards (32 GiB + 1 GiB)."""
    with Kernel() as kernel:
        yield kernel


# --- field case F13 --------------------------------------------------------------


def test_F13_split_by_hand_equals_matmul_with_each_shard_on_its_device(ci):
    result = ci.call(f"{REMOTE}:f13_by_hand")
    assert result["column_diff"] < 1e-4
    assert result["row_diff"] < 1e-4
    assert result["column_shards"] == [(d, (64, 8)) for d in DEVICES]
    assert result["row_shards"] == [(d, (16, 32)) for d in DEVICES]
    # W[:, 8i:8i+8] and W[16i:16i+16]: the pieces are the slices F13 names.
    assert all(result["column_piece_equal"]) and all(result["row_piece_equal"])


@pytest.mark.parametrize("strategy, shape", [("column", (131072, 16384)), ("row", (32768, 65536))])
def test_F13_seed_kernel_split_4_ways_is_8589934592_B_per_device(full, strategy, shape):
    result = full.call(f"{REMOTE}:full_shape", strategy)
    assert result["shards"] == [(d, shape, SEED_SHARD) for d in DEVICES]
    # The 4 shards really went through the capped allocator...
    assert 4 * SEED_SHARD <= result["allocated"] < 4 * SEED_SHARD + units.MiB
    # ...without touching their pages (32 GiB reserved; the process stays far below).
    assert result["rss"] < 4 * units.GiB
    # Weights + gradients + RMSprop velocity: 24 GiB per device; a step with each shard's update
    # compiled by XLA adds only the batch and fits 30976 MiB; without XLA, or mirrored, it does not.
    assert result["state"] == [3 * SEED_SHARD] * 4 == [24 * units.GiB] * 4
    assert result["device_bytes"] == 30976 * units.MiB
    assert all(24 * units.GiB < step < 24.1 * units.GiB for step in result["step"])
    assert result["step"][0] < result["device_bytes"] < result["unfused"] < result["mirrored"]
    assert result["unfused"] > 48 * units.GiB and result["mirrored"] > 192 * units.GiB


# --- the layers ---------------------------------------------------------------------


@pytest.mark.parametrize("kind, shard_shape", [("column", (64, 8)), ("row", (16, 32))])
def test_layer_equals_dense_with_same_weights_and_gradients(ci, kind, shard_shape):
    result = ci.call(f"{REMOTE}:compare", kind)
    assert result["max_abs_diff"] < 1e-4
    assert result["max_grad_diff"] < 1e-4
    kernels = [(device, shape) for name, device, shape, _ in result["shards"] if "kernel" in name]
    assert kernels == [(d, shard_shape) for d in DEVICES]
    # Each shard's gradient is computed on the shard's device.
    assert result["grad_devices"] == DEVICES


@pytest.mark.parametrize("kind, message", [
    ("column", "cannot split units (size 30) into 4 equal shards: 4 does not divide 30"),
    ("row", "cannot split input width (size 66) into 4 equal shards: 4 does not divide 66"),
])
def test_uneven_split_names_dimension_size_and_count(ci, kind, message):
    units, in_dim = (30, 64) if kind == "column" else (32, 66)
    assert ci.call(f"{REMOTE}:uneven", kind, units, in_dim).startswith(message)


@pytest.mark.parametrize("kind", ["column", "row", "column_row"])
def test_fit_trains_and_keeps_slots_next_to_shards(ci, kind):
    result = ci.call(f"{REMOTE}:fit_losses", kind)
    losses = result["losses"]
    assert losses[-1] < 0.5 * losses[0], losses
    # RMSprop's velocity for kernel_i lives where kernel_i lives.
    kernels = [(n, d) for n, d in result["weights"] if "kernel_" in n]
    assert len(kernels) == (8 if kind == "column_row" else 4)
    for name, device in kernels:
        slot = [d for p, d in result["velocity"] if p.endswith(name.replace("/", "_") + "_velocity")]
        assert slot == [device], (name, result["velocity"])


def test_column_then_row_never_gathers_the_hidden_activation(ci):
    result = ci.call(f"{REMOTE}:megatron_step", True)
    assert result["concat"] == []
    # Forward and backward matmuls of shard i run on device i: 3 per device (dW1, dW2, dh).
    devices_used = sorted(d for _, d in result["grad_matmul"])
    assert devices_used == sorted(DEVICES * 3)
    # RMSprop's update arithmetic runs next to each variable: a column kernel, a column bias
    # and a row kernel per device, plus the row bias on CPU:1.
    assert result["update_square"] == ["CPU:1"] * 4 + ["CPU:2"] * 3 + ["CPU:3"] * 3 + ["CPU:4"] * 3
    # What crosses devices: the input x out of CPU:1, the output gradient back out (one each),
    # the learning-rate scalar, and the partial products into CPU:1. No shard-sized tensor.
    moved = result["transfers"]
    assert not [t for t in moved if "Relu" in t[0]]  # the hidden activation stays put
    assert not [t for t in moved if "gradient_tape" in t[0] and "MatMul" in t[0]]  # so do dW, dh
    partials = sorted(src for name, src, dst in moved if "row" in name and "MatMul" in name and dst == "CPU:1")
    assert partials == DEVICES[1:]
    inputs = sorted(dst for name, src, dst in moved if name == "data")
    assert inputs == DEVICES[1:]
    output_grads = sorted(dst for name, src, dst in moved if "unstack" in name)
    assert output_grads == DEVICES[1:]
    # Learning rate and iteration, read as scalars (the scope is rm_sprop_<k> for later optimizers).
    scalars = [t for t in moved if re.match(r"rm_sprop(_\d+)?/Cast_\d+/ReadVariableOp$", t[0])]
    assert len(partials) + len(inputs) + len(output_grads) + len(scalars) == len(moved), moved
    # Sized from the traced graph: x[16, 64], y_i and dy [16, 32] float32, 4-byte scalars.
    sizes = dict(result["bytes"])
    assert [sizes[name] for name, _, _ in moved if name == "data"] == [16 * 64 * 4] * 3
    assert {sizes[name] for name, _, _ in moved if "unstack" in name or "MatMul" in name} == {16 * 32 * 4}
    assert {sizes[name] for name, *_ in scalars} == {4}
    # Partial products in + output gradient out = a ring all-reduce of y[16, 32] over 4 devices.
    ring = communication.step_communication([64, 128], 16, "column_row", 4, out_width=32)["all_reduce"]
    measured = sum(sizes[name] for name, _, _ in moved if "unstack" in name or "MatMul" in name)
    assert measured == 4 * ring == 12288


def test_naive_tf_device_puts_every_gradient_on_device_0(ci):
    # The pitfall on_device and colocate_updates exist for (TensorFlow 2.21's placer).
    result = ci.call(f"{REMOTE}:megatron_step", False)
    devices_used = {d for _, d in result["grad_matmul"]}
    assert devices_used == {"CPU:1"}
    assert result["update_square"] == ["CPU:1"] * 13
    moved = result["transfers"]
    # The hidden activation slices travel to CPU:1 (for the gradients computed there)...
    assert sorted(src for name, src, dst in moved if "column" in name and "Relu" in name) == DEVICES[1:]
    # ...and so do the row kernel shards themselves (dh = dy @ W2_i^T runs on CPU:1):
    # at full size, device 0 would receive every shard.
    assert sorted(src for name, src, dst in moved
                  if "row" in name and "ReadVariableOp" in name and dst == "CPU:1") == DEVICES[1:]


def test_gathered_column_layer_concatenates_on_device_0_only(ci):
    result = ci.call(f"{REMOTE}:column_gather_step")
    assert result["concat"] == ["CPU:1"]
    assert result["grad_matmul"] == DEVICES


def test_initialisation_has_no_full_size_temporary(ci):
    result = ci.call(f"{REMOTE}:init_peaks")
    kernel = result["kernel"]  # [4096, 1024] float32 = 16 MiB
    shard = kernel // 4
    dense_peak, dense_now = result["dense"]
    # Dense: Glorot draws, scales and shifts full-size tensors: peak 3x the kernel (F18).
    assert dense_peak >= 3 * kernel
    for kind in ("column", "row"):
        peak, now = result[kind]
        assert kernel <= now < kernel + units.MiB  # all four shards (+ bias) are resident
        # The temporaries are at most two shards, never a full-size tensor.
        assert peak - now <= 2 * shard + units.MiB, (kind, peak, now)
        assert peak < 2 * kernel


def test_stock_optimizer_under_fit_puts_every_slot_on_device_0(ci):
    # Why colocate_updates also creates the slots itself (Keras 3.15 under fit).
    assert ci.call(f"{REMOTE}:stock_optimizer_slots") == ["CPU:1"] * 8


def test_save_and_load_keeps_outputs_and_shard_placement(ci):
    result = ci.call(f"{REMOTE}:save_and_load")
    assert result["max_abs_diff"] == 0.0
    assert result["shards"] == result["original"]
    assert [d for name, d, _ in result["shards"] if "kernel" in name] == DEVICES * 2


def test_row_layer_asks_for_slices_when_input_is_parallel(ci):
    message = ci.call(f"{REMOTE}:parallel_input_mismatch")
    assert message.startswith("input_is_parallel=True needs a list of 4 input slices")
    assert message.endswith("put ColumnParallelDense(gather_output=False) before this layer")


@pytest.mark.parametrize("kind", ["column", "row"])
def test_mixed_float16_keeps_float32_variables_and_computes_in_float16(ci, kind):
    result = ci.call(f"{REMOTE}:mixed_precision", kind)
    assert result["variables"] == ["float32"]
    assert result["output"] == "float16"
    assert result["max_abs_diff"] < 1e-2  # float16 rounding, summed in a different order


def test_config_round_trip(ci):
    assert ci.call(f"{REMOTE}:config_round_trip") == {
        "units": 32, "devices": [f"/device:CPU:{i}" for i in range(1, 5)], "gather": False,
        "activation": "relu",
    }


# --- the command line -----------------------------------------------------------------


def run_cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, "-m", "snippets.tensor_parallel", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_cli_uneven_split_is_one_line_and_exit_2():
    result = run_cli("--devices", "3")
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert "cannot split units (size 32) into 3 equal shards" in last
    assert "Traceback" not in result.stderr


def test_cli_full_shape_uneven_split_names_the_seed_dimension():
    result = run_cli("--full-shape", "--devices", "3")
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "python -m snippets.tensor_parallel: error: cannot split the units of the seed kernel "
        "W[131072, 65536] (size 65536) into 3 equal shards: 3 does not divide 65536; use a shard count "
        "that divides 65536, or pad it to 65538")


@pytest.mark.parametrize("args, code", [(("--help",), 0), (("--devices", "3"), 2),
                                        (("--full-shape", "--devices", "3"), 2), (("--units", "0"), 2)])
def test_cli_help_and_bad_input_answer_before_tensorflow_is_imported(args, code):
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "snippets.tensor_parallel", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == code and "Traceback" not in result.stderr
    # -X importtime lists every imported module on stderr.
    assert "tensorflow" not in result.stderr and "keras" not in result.stderr


def test_cli_seed_layer_refuses_cpu_mode_in_one_line():
    result = run_cli("--seed-layer", "--mode", "cpu")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(
        "needs GPUs (4 x 30976 MiB); without them use --full-shape, which reserves it untouched")


def test_cli_full_shape_prints_per_device_figures():
    result = run_cli("--full-shape")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    per_device = [line for line in lines if "step peak" in line and "with XLA updates" in line]
    assert len(per_device) == 8  # 4 devices x (column, row)
    assert all("fits in 30976 MiB" in line for line in per_device), per_device
    assert sum("without XLA: step peak" in line and "does NOT fit in 30976 MiB" in line for line in lines) == 2
    assert sum("MirroredStrategy instead" in line and "does NOT fit in 30976 MiB" in line for line in lines) == 2
    assert sum("reserved 32 GiB for the shards, pages untouched" in line for line in lines) == 2


# --- the communication arithmetic (snippets.lib.communication, no TensorFlow) ----------------------------


def test_ring_collectives_send_the_nccl_bus_factors():
    assert communication.ring_bytes("all_reduce", 4096, 4) == 6144  # 2 (N-1)/N
    assert communication.ring_bytes("all_gather", 4096, 4) == 3072  # (N-1)/N
    assert communication.ring_bytes("reduce_scatter", 4096, 4) == 3072
    assert communication.ring_bytes("all_reduce", 4096, 1) == 0  # one device sends nothing
    with pytest.raises(ValueError, match="unknown collective 'broadcast'"):
        communication.ring_bytes("broadcast", 4096, 4)


def test_step_communication_per_layout():
    seed = (131072, 65536)
    y = 64 * 65536 * 4  # y[64, 65536] float32
    x = 64 * 131072 * 4
    assert communication.step_communication(seed, 64, "row") == {"all_reduce": 3 * y // 2, "total": 3 * y // 2}
    with_dx = communication.step_communication(seed, 64, "column", input_grad=True)
    # The column layout also gathers the whole input x[B, D] onto every device.
    assert with_dx == {"all_gather": 3 * y // 4 + 3 * x // 4, "all_reduce": 3 * x // 2,
                       "total": 3 * y // 4 + 3 * x // 4 + 3 * x // 2}
    pair = communication.step_communication((4096, 16384), 8, "column_row", out_width=4096)
    assert pair["total"] == 3 * (8 * 4096 * 4) // 2
    # Data parallelism does not depend on the batch; sharding does.
    assert (communication.step_communication(seed, 1, "mirrored")
            == communication.step_communication(seed, 4096, "mirrored"))
    with pytest.raises(ValueError, match="unknown strategy 'pipeline'"):
        communication.step_communication(seed, 64, "pipeline")


def test_step_seconds_on_v100_nvlink():
    assert hardware.V100_NVLINK_BYTES_PER_S == 150e9
    assert communication.step_seconds(150 * 10**9) == 1.0


def test_xla_auto_compiles_each_shards_update_and_never_the_whole_model():
    # jit_compile="auto" means XLA on a GPU machine; the emulation resolves it the same way.
    with Kernel() as kernel:
        peaks = kernel.call("tests.remote.tensor_parallel:update_peaks")
    # Compiled whole, the multi-device model fails, as it would on a GPU host left to Keras's "auto".
    assert "Trying to access resource" in peaks["whole"] or "located in device" in peaks["whole"], peaks
    # Per-shard XLA updates: weights + velocities + gradients, no shard-sized temporaries.
    assert peaks["auto"]["resident"] < 2.1 and peaks["auto"]["peak"] < 3.1, peaks
    # Without XLA the same step needs the update's temporaries on top.
    assert peaks["off"]["peak"] > peaks["auto"]["peak"] + 0.5, peaks
