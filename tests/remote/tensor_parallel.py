"""Remote side of tests/test_tensor_parallel.py (field case F13 and the tf.device layers).

Each function runs in a fresh kernel (tests.harness.Kernel), configures
devices first (calling again with the same arguments is a no-op), and
returns plain data for the test process to assert on.
"""

from __future__ import annotations

from snippets.lib import allocator, devices, full_size, optimizers, pieces, planner, trace, units
from snippets.lib import layers
from snippets import tensor_parallel as tp

#: CI scale: 4 logical CPUs sharing a 200 MiB capped pool.
CI = (4, "200MiB")


def _ci():
    return devices.configure(*CI)


def _shard_rows(variables):
    return [(pieces.short_device(v.device), tuple(int(d) for d in v.shape)) for v in variables]


def f13_by_hand(seed: int = 0) -> dict:
    """F13: x[4, 64] @ W[64, 32] split 4 ways by columns and by rows, with plain tf.device."""
    import numpy as np

    setup = _ci()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 64)).astype("float32")
    w = rng.standard_normal((64, 32)).astype("float32")
    reference = x @ w
    y_col, col = tp.column_by_hand(x, w, setup.devices)
    y_row, row = tp.row_by_hand(x, w, setup.devices)
    return {
        "column_diff": float(np.max(np.abs(y_col - reference))),
        "row_diff": float(np.max(np.abs(y_row - reference))),
        "column_shards": _shard_rows(col),
        "row_shards": _shard_rows(row),
        "column_piece_equal": [bool(np.array_equal(v.numpy(), w[:, 8 * i : 8 * i + 8])) for i, v in enumerate(col)],
        "row_piece_equal": [bool(np.array_equal(v.numpy(), w[16 * i : 16 * i + 16])) for i, v in enumerate(row)],
    }


def compare(kind: str) -> dict:
    """A sharded layer against keras.layers.Dense with the same weights (outputs and kernel gradients)."""
    result = tp.compare_with_dense(_ci(), kind)
    result["shards"] = [(s.name, pieces.short_device(s.device), s.shape, s.nbytes) for s in result["shards"]]
    return result


def uneven(kind: str, units: int = 30, in_dim: int = 64) -> str:
    """Build a layer whose split dimension 4 does not divide; return the error message."""
    setup = _ci()
    layer = layers.make_layer(kind, units, setup.devices)
    try:
        layer.build((None, in_dim))
    except ValueError as error:
        return str(error)
    return "no error"


def fit_losses(kind: str) -> dict:
    """Train a one-layer model (column or row) or the column -> row pair with compile/fit."""
    import keras

    setup = _ci()
    if kind == "column_row":
        model = tp.megatron_model(setup)
    else:
        model = keras.Sequential([keras.Input((64,)), layers.make_layer(kind, 32, setup.devices)])
    losses = tp.train(model)
    velocity = [
        (v.path, pieces.short_device(v.value.device)) for v in model.optimizer.variables if "velocity" in v.path
    ]
    return {"losses": losses, "velocity": velocity, "weights": [(s.name, pieces.short_device(s.device)) for s in pieces.of_variables(model.weights)]}


def _step(model):
    import numpy as np

    x = np.ones((16, 64), "float32")
    y = np.ones((16, model.outputs[0].shape[-1]), "float32")
    return trace.train_step_function(model), ((x, y),)


def megatron_step(pinned: bool = True) -> dict:
    """Where the column -> row train step runs its ops and what it copies between devices.

    ``pinned=False`` builds the same model with plain ``tf.device`` (forward
    only) and a stock RMSprop, the naive way.
    """
    import keras

    setup = _ci()
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
    step, args = _step(model)
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


def column_gather_step() -> dict:
    """The gathered column layer's train step: the concat and where it runs."""
    import keras

    setup = _ci()
    model = keras.Sequential([keras.Input((64,)), layers.ColumnParallelDense(32, setup.devices, name="column")])
    model.compile(optimizer=optimizers.colocate_updates(keras.optimizers.RMSprop()), loss="mse")
    step, args = _step(model)
    placed = trace.placement(step, *args).ops
    return {"concat": sorted(d for t, n, d in placed if t == "ConcatV2"),
            "grad_matmul": sorted(d for t, n, d in placed if t == "MatMul" and n.startswith("gradient_tape"))}


def init_peaks(in_dim: int = 4096, units: int = 1024) -> dict:
    """Allocator peak and resident bytes while building Dense, column and row layers of [in_dim, units]."""
    import keras

    setup = _ci()

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

    result = {"kernel": in_dim * units * 4}  # float32
    for name, build in (("dense", dense), ("column", sharded("column")), ("row", sharded("row"))):
        measured = allocator.measure(build, setup.devices[0])
        result[name] = (measured["peak"], measured["current"])
        del measured
    return result


def config_round_trip() -> dict:
    """get_config / from_config keep units, devices and the gather flag."""
    setup = _ci()
    layer = layers.ColumnParallelDense(32, setup.devices, activation="relu", gather_output=False)
    clone = layers.ColumnParallelDense.from_config(layer.get_config())
    return {"units": clone.units, "devices": list(clone.shard_devices), "gather": clone.gather_output,
            "activation": clone.activation.__name__}


def full_shape(strategy: str) -> dict:
    """The seed kernel's 4 shards reserved through the capped pool (pages untouched), per device."""
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


def save_and_load() -> dict:
    """Train the column -> row pair, save it as .keras, load it: outputs and shard placement."""
    import os
    import tempfile

    import keras
    import numpy as np

    setup = _ci()
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


def stock_optimizer_slots() -> list[str]:
    """fit with a plain keras.optimizers.RMSprop: the devices of the velocity slots it creates."""
    import keras
    import numpy as np

    setup = _ci()
    model = keras.Sequential([keras.Input((64,)), layers.ColumnParallelDense(32, setup.devices)])
    model.compile(optimizer=keras.optimizers.RMSprop(), loss="mse")
    model.fit(np.ones((4, 64), "float32"), np.zeros((4, 32), "float32"), verbose=0)
    return sorted(pieces.short_device(v.value.device) for v in model.optimizer.variables if "velocity" in v.path)


def parallel_input_mismatch() -> str:
    """RowParallelDense(input_is_parallel=True) fed one tensor instead of N slices: the error."""
    setup = _ci()
    layer = layers.RowParallelDense(32, setup.devices, input_is_parallel=True)
    try:
        layer.build((None, 64))
    except ValueError as error:
        return str(error)
    return "no error"


def mixed_precision(kind: str) -> dict:
    """A sharded layer under the mixed_float16 policy: variable and output dtypes, and closeness to Dense."""
    import keras
    import numpy as np

    setup = _ci()
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


def update_peaks(shape=(8192, 4096)) -> dict:
    """Pool peak of a fit step of a 4-way column layer, in units of the whole kernel, per XLA choice.

    Runs in its own kernel (a 1024 MiB pool): ``"auto"`` and ``"off"`` through
    :func:`snippets.lib.optimizers.compile_sharded`, and ``"whole"``, the
    model compiled with ``jit_compile=True`` as Keras's ``"auto"`` would on a
    GPU machine (it raises; its error's first line is returned).
    """
    import keras
    import numpy as np

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
