"""Tensor parallelism with tf.device (snippets.tensor_parallel) and field case F13.

Everything that needs TensorFlow runs in a kernel (harness.Kernel). Each
kernel-side function sits above the test that calls it; it configures devices
first (calling again with the same arguments is a no-op) and returns plain
data. It imports snippets.tensor_parallel itself: that module imports
TensorFlow, which the test process never does.
"""

import re

import pytest

from harness import Kernel
from snippets.lib import allocator, communication, devices, hardware, planner, units

DEVICES = [f"CPU:{i}" for i in range(1, 5)]  # CPU:0 plays the host
SEED_SHARD = 8589934592  # [131072, 16384] or [32768, 65536] float32

#: CI scale: 4 logical CPUs sharing a 200 MiB capped pool.
CI = (4, "200MiB")


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


def configure_ci() -> devices.DeviceSetup:
    """Kernel side: the :data:`CI` devices (a no-op after the first call)."""
    return devices.configure(*CI)


def shard_rows(variables) -> list[tuple]:
    """Kernel side: (device, shape) of each shard variable."""
    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    return [(pieces.short_device(v.device), tuple(int(d) for d in v.shape)) for v in variables]


# --- field case F13 --------------------------------------------------------------


def f13_split_by_hand(seed: int = 0) -> dict:
    """F13: x[4, 64] @ W[64, 32] split 4 ways by columns and by rows, with plain tf.device."""
    import numpy as np

    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    setup = configure_ci()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 64)).astype("float32")
    w = rng.standard_normal((64, 32)).astype("float32")
    reference = x @ w
    y_col, col = tp.column_by_hand(x, w, setup.devices)
    y_row, row = tp.row_by_hand(x, w, setup.devices)
    return {
        "column_diff": float(np.max(np.abs(y_col - reference))),
        "row_diff": float(np.max(np.abs(y_row - reference))),
        "column_shards": shard_rows(col),
        "row_shards": shard_rows(row),
        "column_piece_equal": [bool(np.array_equal(v.numpy(), w[:, 8 * i : 8 * i + 8])) for i, v in enumerate(col)],
        "row_piece_equal": [bool(np.array_equal(v.numpy(), w[16 * i : 16 * i + 16])) for i, v in enumerate(row)],
    }


def test_F13_split_by_hand_equals_matmul_with_each_shard_on_its_device(ci):
    result = ci.call(f13_split_by_hand)
    assert result["column_diff"] < 1e-4
    assert result["row_diff"] < 1e-4
    assert result["column_shards"] == [(d, (64, 8)) for d in DEVICES]
    assert result["row_shards"] == [(d, (16, 32)) for d in DEVICES]
    # W[:, 8i:8i+8] and W[16i:16i+16]: the pieces are the slices F13 names.
    assert all(result["column_piece_equal"]) and all(result["row_piece_equal"])


def f13_seed_kernel_shards(strategy: str) -> dict:
    """The seed kernel's 4 shards reserved through the capped pool (pages untouched), per device."""
    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    setup = devices.configure(4, "30976MiB", cpu_pool=full_size.full_shape_pool())
    report = tp.full_shape(setup, strategy)
    return {
        "shards": [(pieces.short_device(s.device), s.shape, s.nbytes) for s in report.shards],
        "state": [planner.training_state(b) for b in report.budgets],
        "step": [b.total for b in report.budgets],
        "unfused": report.unfused.total,
        "mirrored": report.mirrored.total,
        "device_bytes": report.device_bytes,
        "allocated": report.allocated,
        "rss": report.rss,
    }


@pytest.mark.parametrize("strategy, shape", [("column", (131072, 16384)), ("row", (32768, 65536))])
def test_F13_seed_kernel_split_4_ways_is_8589934592_B_per_device(full, strategy, shape):
    result = full.call(f13_seed_kernel_shards, strategy)
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


def compare_with_dense(kind: str) -> dict:
    """A sharded layer against keras.layers.Dense with the same weights (outputs and kernel gradients)."""
    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    result = tp.compare_with_dense(configure_ci(), kind)
    result["shards"] = [(s.name, pieces.short_device(s.device), s.shape, s.nbytes) for s in result["shards"]]
    return result


@pytest.mark.parametrize("kind, shard_shape", [("column", (64, 8)), ("row", (16, 32))])
def test_layer_equals_dense_with_same_weights_and_gradients(ci, kind, shard_shape):
    result = ci.call(compare_with_dense, kind)
    assert result["max_abs_diff"] < 1e-4
    assert result["max_grad_diff"] < 1e-4
    kernels = [(device, shape) for name, device, shape, _ in result["shards"] if "kernel" in name]
    assert kernels == [(d, shard_shape) for d in DEVICES]
    # Each shard's gradient is computed on the shard's device.
    assert result["grad_devices"] == DEVICES


def uneven_split_error(kind: str, units: int = 30, in_dim: int = 64) -> str:
    """Build a layer whose split dimension 4 does not divide; return the error message."""
    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    setup = configure_ci()
    layer = layers.make_layer(kind, units, setup.devices)
    try:
        layer.build((None, in_dim))
    except ValueError as error:
        return str(error)
    return "no error"


@pytest.mark.parametrize("kind, message", [
    ("column", "cannot split units (size 30) into 4 equal shards: 4 does not divide 30"),
    ("row", "cannot split input width (size 66) into 4 equal shards: 4 does not divide 66"),
])
def test_uneven_split_names_dimension_size_and_count(ci, kind, message):
    units, in_dim = (30, 64) if kind == "column" else (32, 66)
    assert ci.call(uneven_split_error, kind, units, in_dim).startswith(message)


def fit_losses(kind: str) -> dict:
    """Train a one-layer model (column or row) or the column -> row pair with compile/fit."""
    import keras

    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    setup = configure_ci()
    if kind == "column_row":
        model = tp.megatron_model(setup)
    else:
        model = keras.Sequential([keras.Input((64,)), layers.make_layer(kind, 32, setup.devices)])
    losses = tp.train(model)
    velocity = [
        (v.path, pieces.short_device(v.value.device)) for v in model.optimizer.variables if "velocity" in v.path
    ]
    return {"losses": losses, "velocity": velocity, "weights": [(s.name, pieces.short_device(s.device)) for s in pieces.of_variables(model.weights)]}


@pytest.mark.parametrize("kind", ["column", "row", "column_row"])
def test_fit_trains_and_keeps_slots_next_to_shards(ci, kind):
    result = ci.call(fit_losses, kind)
    losses = result["losses"]
    assert losses[-1] < 0.5 * losses[0], losses
    # RMSprop's velocity for kernel_i lives where kernel_i lives.
    kernels = [(n, d) for n, d in result["weights"] if "kernel_" in n]
    assert len(kernels) == (8 if kind == "column_row" else 4)
    for name, device in kernels:
        slot = [d for p, d in result["velocity"] if p.endswith(name.replace("/", "_") + "_velocity")]
        assert slot == [device], (name, result["velocity"])


def train_step(model):
    """Kernel side: ``model``'s train step function and its arguments for one batch of 16 ones."""
    import numpy as np

    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    x = np.ones((16, 64), "float32")
    y = np.ones((16, model.outputs[0].shape[-1]), "float32")
    return trace.train_step_function(model), ((x, y),)


def column_row_step(pinned: bool = True) -> dict:
    """Where the column -> row train step runs its ops and what it copies between devices.

    ``pinned=False`` builds the same model with plain ``tf.device`` (forward
    only) and a stock RMSprop, the naive way.
    """
    import keras

    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    setup = configure_ci()
    model = keras.Sequential([
        keras.Input((64,)),
        layers.ColumnParallelDense(128, setup.devices, activation="relu", gather_output=False,
                               pin_backward=pinned, name="column"),
        layers.RowParallelDense(32, setup.devices, input_is_parallel=True, pin_backward=pinned, name="row"),
    ])
    optimizer = keras.optimizers.RMSprop()
    # Updates without XLA here, so the update's own ops (Square, ...) show where they run;
    # XLA-compiled, each update is one cluster on the same device.
    model.compile(optimizer=optimizers.colocate_updates(optimizer, jit_compile=False) if pinned else optimizer,
                  loss="mse", jit_compile=False)
    step, args = train_step(model)
    found = trace.placement(step, *args)
    placed, moved = found.ops, found.transfers
    return {
        "grad_matmul": sorted((n, d) for t, n, d in placed if t == "MatMul" and n.startswith("gradient_tape")),
        "concat": [(n, d) for t, n, d in placed if t == "ConcatV2"],
        # g**2 in RMSprop's update (Grappler keeps Square; it turns sqrt into Rsqrt).
        "update_square": sorted(d for t, n, d in placed if t == "Square" and "rm_sprop" in n),
        "transfers": [(m.tensor, m.source, m.destination) for m in moved],
        "bytes": [(m.tensor, m.nbytes) for m in moved],
    }


def test_column_then_row_never_gathers_the_hidden_activation(ci):
    result = ci.call(column_row_step, True)
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
    result = ci.call(column_row_step, False)
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


def column_gather_step() -> dict:
    """The gathered column layer's train step: the concat and where it runs."""
    import keras

    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    setup = configure_ci()
    model = keras.Sequential([keras.Input((64,)), layers.ColumnParallelDense(32, setup.devices, name="column")])
    model.compile(optimizer=optimizers.colocate_updates(keras.optimizers.RMSprop()), loss="mse")
    step, args = train_step(model)
    placed = trace.placement(step, *args).ops
    return {"concat": sorted(d for t, n, d in placed if t == "ConcatV2"),
            "grad_matmul": sorted(d for t, n, d in placed if t == "MatMul" and n.startswith("gradient_tape"))}


def test_gathered_column_layer_concatenates_on_device_0_only(ci):
    result = ci.call(column_gather_step)
    assert result["concat"] == ["CPU:1"]
    assert result["grad_matmul"] == DEVICES


def init_peaks(in_dim: int = 4096, units: int = 1024) -> dict:
    """Allocator peak and resident bytes while building Dense, column and row layers of [in_dim, units]."""
    import keras

    from snippets.lib import layers

    setup = configure_ci()

    def dense():
        layer = keras.layers.Dense(units)
        layer.build((None, in_dim))
        return layer

    def sharded(kind):
        def build():
            layer = layers.make_layer(kind, units, setup.devices)
            layer.build((None, in_dim))
            return layer
        return build

    result = {"kernel": in_dim * units * 4}  # float32; "units" is the layer width here
    for name, build in (("dense", dense), ("column", sharded("column")), ("row", sharded("row"))):
        measured = allocator.measure(build, setup.devices[0])
        result[name] = (measured["peak"], measured["current"])
        del measured
    return result


def test_initialisation_has_no_full_size_temporary(ci):
    result = ci.call(init_peaks)
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


def stock_optimizer_slots() -> list[str]:
    """fit with a plain keras.optimizers.RMSprop: the devices of the velocity slots it creates."""
    import keras
    import numpy as np

    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    setup = configure_ci()
    model = keras.Sequential([keras.Input((64,)), layers.ColumnParallelDense(32, setup.devices)])
    model.compile(optimizer=keras.optimizers.RMSprop(), loss="mse")
    model.fit(np.ones((4, 64), "float32"), np.zeros((4, 32), "float32"), verbose=0)
    return sorted(pieces.short_device(v.value.device) for v in model.optimizer.variables if "velocity" in v.path)


def test_stock_optimizer_under_fit_puts_every_slot_on_device_0(ci):
    # Why colocate_updates also creates the slots itself (Keras 3.15 under fit).
    assert ci.call(stock_optimizer_slots) == ["CPU:1"] * 8


def save_and_load() -> dict:
    """Train the column -> row pair, save it as .keras, load it: outputs and shard placement."""
    import os
    import tempfile

    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    import keras
    import numpy as np

    setup = configure_ci()
    model = tp.megatron_model(setup)
    tp.train(model)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.keras")
        model.save(path)
        clone = keras.models.load_model(path, compile=False)
    x = np.random.default_rng(1).standard_normal((4, 64)).astype("float32")
    return {
        "max_abs_diff": float(np.max(np.abs(clone(x).numpy() - model(x).numpy()))),
        "shards": [("/".join(s.name.split("/")[-2:]), pieces.short_device(s.device), s.shape) for s in pieces.of_variables(clone.weights)],
        "original": [("/".join(s.name.split("/")[-2:]), pieces.short_device(s.device), s.shape) for s in pieces.of_variables(model.weights)],
    }


def test_save_and_load_keeps_outputs_and_shard_placement(ci):
    result = ci.call(save_and_load)
    assert result["max_abs_diff"] == 0.0
    assert result["shards"] == result["original"]
    assert [d for name, d, _ in result["shards"] if "kernel" in name] == DEVICES * 2


def parallel_input_mismatch() -> str:
    """RowParallelDense(input_is_parallel=True) fed one tensor instead of N slices: the error."""
    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    setup = configure_ci()
    layer = layers.RowParallelDense(32, setup.devices, input_is_parallel=True)
    try:
        layer.build((None, 64))
    except ValueError as error:
        return str(error)
    return "no error"


def test_row_layer_asks_for_slices_when_input_is_parallel(ci):
    message = ci.call(parallel_input_mismatch)
    assert message.startswith("input_is_parallel=True needs a list of 4 input slices")
    assert message.endswith("put ColumnParallelDense(gather_output=False) before this layer")


def mixed_precision(kind: str) -> dict:
    """A sharded layer under the mixed_float16 policy: variable and output dtypes, and closeness to Dense."""
    import keras
    import numpy as np

    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    setup = configure_ci()
    x = np.random.default_rng(0).standard_normal((4, 64)).astype("float32")
    dense = keras.layers.Dense(32, dtype="mixed_float16")
    dense.build((None, 64))
    layer = layers.make_layer(kind, 32, setup.devices, dtype="mixed_float16")
    layer.build((None, 64))
    layer.set_full_weights(*[w.numpy() for w in dense.weights])
    y, y_ref = layer(x), dense(x)
    return {
        "variables": sorted({str(v.dtype) for v in layer.weights}),
        "output": y.dtype.name,
        "max_abs_diff": float(np.max(np.abs(np.asarray(y, "float32") - np.asarray(y_ref, "float32")))),
    }


@pytest.mark.parametrize("kind", ["column", "row"])
def test_mixed_float16_keeps_float32_variables_and_computes_in_float16(ci, kind):
    result = ci.call(mixed_precision, kind)
    assert result["variables"] == ["float32"]
    assert result["output"] == "float16"
    assert result["max_abs_diff"] < 1e-2  # float16 rounding, summed in a different order


def config_round_trip() -> dict:
    """get_config / from_config keep units, devices and the gather flag."""
    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    setup = configure_ci()
    layer = layers.ColumnParallelDense(32, setup.devices, activation="relu", gather_output=False)
    clone = layers.ColumnParallelDense.from_config(layer.get_config())
    return {"units": clone.units, "devices": list(clone.shard_devices), "gather": clone.gather_output,
            "activation": clone.activation.__name__}


def test_config_round_trip(ci):
    assert ci.call(config_round_trip) == {
        "units": 32, "devices": [f"/device:CPU:{i}" for i in range(1, 5)], "gather": False,
        "activation": "relu",
    }


# --- the communication arithmetic (snippets.lib.planner, no TensorFlow) ----------------------------


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


def update_peaks(shape=(8192, 4096)) -> dict:
    """Pool peak of a fit step of a 4-way column layer, in units of the whole kernel, per XLA choice.

    Runs in its own kernel (a 1024 MiB pool): ``"auto"`` and ``"off"`` through
    :func:`snippets.lib.optimizers.compile_sharded`, and ``"whole"``, the
    model compiled with ``jit_compile=True`` as Keras's ``"auto"`` would on a
    GPU machine (it raises; its error's first line is returned).
    """
    import keras
    import numpy as np

    from snippets.lib import full_size, layers, optimizers, pieces, trace
    from snippets import tensor_parallel as tp

    setup = devices.configure(4, "1024MiB")
    import tensorflow as tf

    d, f = shape
    x, y = np.ones((2, d), "float32"), np.ones((2, f), "float32")
    kernel = units.tensor_bytes(shape)
    result = {}
    for mode in ("auto", "off", "whole"):
        model = keras.Sequential([keras.Input((d,)), layers.ColumnParallelDense(f, setup.devices, use_bias=False,
                                                                          kernel_initializer="zeros")])
        if mode == "whole":
            model.compile(optimizers.colocate_updates(keras.optimizers.RMSprop(), False), "mse", jit_compile=True)
        else:
            optimizers.compile_sharded(model, keras.optimizers.RMSprop(), "mse", jit_compile=mode)
        try:
            model.fit(x, y, batch_size=2, verbose=0)
        except tf.errors.InvalidArgumentError as error:
            result[mode] = next((line for line in str(error).splitlines() if "resource" in line), str(error))
            continue
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        tf.config.experimental.reset_memory_stats("CPU:0")
        model.fit(x, y, batch_size=2, verbose=0)
        peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
        result[mode] = {"resident": before / kernel, "peak": peak / kernel}
        del model
    return result


def test_xla_auto_compiles_each_shards_update_and_never_the_whole_model():
    # jit_compile="auto" means XLA on a GPU machine; the emulation resolves it the same way.
    with Kernel() as kernel:
        peaks = kernel.call(update_peaks)
    # Compiled whole, the multi-device model fails, as it would on a GPU host left to Keras's "auto".
    assert "Trying to access resource" in peaks["whole"] or "located in device" in peaks["whole"], peaks
    # Per-shard XLA updates: weights + velocities + gradients, no shard-sized temporaries.
    assert peaks["auto"]["resident"] < 2.1 and peaks["auto"]["peak"] < 3.1, peaks
    # Without XLA the same step needs the update's temporaries on top.
    # At least one shard's full-size temporary: the order of the four updates moves how many are live at once.
    assert peaks["off"]["peak"] >= peaks["auto"]["peak"] + 0.25, peaks
