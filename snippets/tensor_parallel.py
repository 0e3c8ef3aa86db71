"""The Tensor parallelism chapter: split one Dense layer's kernel over devices with ``tf.device``.

MirroredStrategy keeps a full copy of the [131072, 65536] float32 kernel
(32 GiB) on every GPU. The chapter's layers (:mod:`snippets.lib.layers`:
``ColumnParallelDense`` ``W[D, F_model]``, ``RowParallelDense``
``W[D_model, F]``, and the Megatron-LM pairing of the two) keep one *shard*
per device instead. This module runs the chapter: the split by hand with
plain ``tf.device``, the layers against ``Dense``, training with ``fit``,
where TensorFlow really puts each op (:func:`snippets.lib.trace.placement`),
and the seed kernel at full shape.

Run it::

    python -m snippets.tensor_parallel                  # CI scale: compare with Dense, train
    python -m snippets.tensor_parallel --full-shape     # reserve the seed kernel's 4 shards
    python -m snippets.tensor_parallel --seed-layer     # GPUs: build the seed layer for real
    python -m snippets.tensor_parallel --help

Sources: ``tf.device`` and ``tf.custom_gradient`` API pages (TensorFlow 2.21);
Keras 3 "Making new layers and models via subclassing" guide; Shoeybi et al.,
"Megatron-LM", arXiv:1909.08053, section 3.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from snippets.lib import allocator, cli, devices, full_size, pieces, planner, splits, units
from snippets.lib.optimizers import colocate_updates, compile_sharded
from snippets.lib.seed import SEED_SHAPE


# --- the command line, checked before Keras (and so TensorFlow) is imported -------------


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m snippets.tensor_parallel`` parser (no TensorFlow needed)."""
    parser = argparse.ArgumentParser(
        prog="python -m snippets.tensor_parallel",
        description="Column- and row-parallel Keras Dense layers built with tf.device.",
    )
    cli.add_device_arguments(parser)
    parser.add_argument("--full-shape", action="store_true",
                        help="reserve the seed kernel [131072, 65536] float32 as N shards "
                             "(pages untouched) and print per-device bytes")
    parser.add_argument("--seed-layer", action="store_true",
                        help="GPUs only: build the seed layer for real (Glorot initialisation), run one "
                             "forward and backward pass, and print each GPU's allocator peak")
    parser.add_argument("--in-dim", type=int, default=64, help="CI scale: input width D (default 64)")
    parser.add_argument("--units", type=int, default=32, help="CI scale: output width F (default 32)")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """Parse and check the command line; bad input exits 2 with one line (pure arithmetic)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        splits.check_count(args.devices)
        if args.full_shape:
            # --full-shape splits the seed kernel, so name its dimensions, not the CI-scale ones.
            seed = f"the seed kernel W{list(SEED_SHAPE)}"
            splits.check_split(f"the units of {seed}", SEED_SHAPE[1], args.devices)
            splits.check_split(f"the input width of {seed}", SEED_SHAPE[0], args.devices)
        else:
            units.check_shape([args.in_dim, args.units])
            splits.check_split("units", args.units, args.devices)
            splits.check_split("input width", args.in_dim, args.devices)
    except ValueError as error:
        parser.error(str(error))
    return parser, args


if __name__ == "__main__":
    # Run as a script: --help and bad input answer here, before the ~7 s Keras/TensorFlow import.
    _CLI = parse_args()

import keras  # noqa: E402  (after the command-line check above, on purpose)

from snippets.lib import initializers, layers  # noqa: E402  (import Keras)


# --- where things are --------------------------------------------------------------------


def shard_table(layer) -> str:
    """A table of ``layer``'s variables: name, device, shape, dtype, bytes."""
    from tabulate import tabulate

    rows = [(p.name, pieces.short_device(p.device), list(p.shape), p.dtype, p.nbytes)
            for p in pieces.of_variables(layer.weights)]
    return tabulate(rows, headers=["variable", "device", "shape", "dtype", "bytes"], intfmt=",")


# --- CI-scale demonstrations ----------------------------------------------------------


def column_by_hand(x, kernel, devices_: Sequence[str]):
    """``x @ kernel`` with the kernel split by columns over ``devices_``, no Keras.

    Device i gets ``kernel[:, F/N*i : F/N*(i+1)]`` as its own variable and
    computes that slice of the output; ``tf.concat`` gathers the slices.
    Returns ``(y, shards)``: the output (numpy) and the shard variables.

    Raises:
        ValueError: if the device count does not divide the kernel's columns.
    """
    import tensorflow as tf

    width = splits.check_split("kernel columns", int(kernel.shape[1]), len(devices_))
    blocks, outputs = [], []
    for i, device in enumerate(devices_):
        with tf.device(device):
            piece = tf.Variable(kernel[:, width * i : width * (i + 1)])
            outputs.append(tf.matmul(x, piece))
        blocks.append(piece)
    return tf.concat(outputs, axis=1).numpy(), blocks


def row_by_hand(x, kernel, devices_: Sequence[str]):
    """``x @ kernel`` with the kernel split by rows over ``devices_``, no Keras.

    Device i gets ``kernel[D/N*i : D/N*(i+1)]`` and the matching columns of
    ``x``; the N partial products are summed. Returns ``(y, shards)``.

    Raises:
        ValueError: if the device count does not divide the kernel's rows.
    """
    import tensorflow as tf

    height = splits.check_split("kernel rows", int(kernel.shape[0]), len(devices_))
    blocks, partials = [], []
    for i, device in enumerate(devices_):
        rows = slice(height * i, height * (i + 1))
        with tf.device(device):
            piece = tf.Variable(kernel[rows])
            partials.append(tf.matmul(x[:, rows], piece))
        blocks.append(piece)
    return tf.add_n(partials).numpy(), blocks


def compare_with_dense(setup: devices.DeviceSetup, kind: str = "column", batch: int = 4,
                       in_dim: int = 64, units: int = 32, seed: int = 0) -> dict:
    """Build ``kind`` ("column" or "row") and ``keras.layers.Dense`` with the same weights; compare.

    Returns a dict with the largest absolute difference of the outputs
    (``max_abs_diff``) and of the kernel gradients (``max_grad_diff``, the
    sharded gradients reassembled on the host), and the layer's shards.
    """
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, in_dim)).astype("float32")
    dense = keras.layers.Dense(units)
    dense.build((None, in_dim))
    dense.bias.assign(rng.standard_normal(units).astype("float32"))
    layer = layers.make_layer(kind, units, setup.devices)
    layer.build((None, in_dim))
    layer.set_full_weights(*[w.numpy() for w in dense.weights])

    def value_and_kernel_grad(model, kernels):
        with tf.GradientTape() as tape:
            y = model(x)
            loss = tf.reduce_sum(y * y)
        grads = tape.gradient(loss, kernels)
        return y.numpy(), grads

    y_ref, (g_ref,) = value_and_kernel_grad(dense, [dense.kernel])
    y, grads = value_and_kernel_grad(layer, layer.kernel_shards)
    g = np.concatenate([g.numpy() for g in grads], axis=layer.split_axis)
    return {
        "max_abs_diff": float(np.max(np.abs(y - y_ref))),
        "max_grad_diff": float(np.max(np.abs(g - g_ref.numpy()))),
        "grad_devices": [pieces.short_device(g.device) for g in grads],
        "shards": pieces.of_variables(layer.weights),
    }


def megatron_model(setup: devices.DeviceSetup, in_dim: int = 64, hidden: int = 128, out: int = 32):
    """Input -> layers.ColumnParallelDense(hidden, relu, no gather) -> layers.RowParallelDense(out), uncompiled.

    The hidden activation h[B, hidden] exists only as N slices h[B, hidden_model],
    each on its own device.
    """
    return keras.Sequential([
        keras.Input((in_dim,)),
        layers.ColumnParallelDense(hidden, setup.devices, activation="relu", gather_output=False, name="column"),
        layers.RowParallelDense(out, setup.devices, input_is_parallel=True, name="row"),
    ])


def train(model, steps: int = 20, batch: int = 16, seed: int = 0, learning_rate: float = 1e-2) -> list[float]:
    """Compile ``model`` with colocated RMSprop and MSE, ``fit`` a random linear target; return losses per epoch."""
    import numpy as np

    rng = np.random.default_rng(seed)
    in_dim = model.inputs[0].shape[-1]
    out_dim = model.outputs[0].shape[-1]
    x = rng.standard_normal((batch * steps, in_dim)).astype("float32")
    y = (x @ rng.standard_normal((in_dim, out_dim)).astype("float32")) / np.sqrt(in_dim)
    compile_sharded(model, keras.optimizers.RMSprop(learning_rate), "mse")
    history = model.fit(x, y, batch_size=batch, epochs=3, verbose=0, shuffle=False)
    return [float(v) for v in history.history["loss"]]


def shard_summary(setup: devices.DeviceSetup, shape: Sequence[int] = (1024, 512)) -> dict:
    """For the overview's comparison table: where this module puts a kernel's shards, and their bytes.

    Builds ``ColumnParallelDense`` with kernel ``W[shape]`` (no bias) over
    ``setup.devices``, runs one training step with a colocated RMSprop, and
    reads per device the kernel shard, its gradient and its RMSprop velocity
    with :mod:`snippets.lib.ledger` (the same reader the DTensor and parameter
    server summaries use).

    Returns:
        ``{"method": "tf.device layers", "where": [device per shard],
        "local_shape": (D, F/N), "kernel_bytes": [per device], "measured":
        [weights + gradients + slots per device, read], "planned": [the same
        from snippets.lib.planner.per_device for strategy "column", no reserve]}``.
    """
    import numpy as np
    import tensorflow as tf

    from snippets.lib import ledger

    d, f = units.check_shape(shape)
    layer = layers.ColumnParallelDense(f, setup.devices, use_bias=False)
    layer.build((None, d))
    optimizer = colocate_updates(keras.optimizers.RMSprop())
    optimizer.build(layer.trainable_variables)
    x = np.ones((2, d), "float32")
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(layer(x)))
    gradients = tape.gradient(loss, [v.value for v in layer.trainable_variables])
    optimizer.apply(gradients, layer.trainable_variables)
    held = (pieces.of_variables(layer.trainable_variables, "weights")
            + pieces.of_variables(gradients, "gradients")
            + pieces.of_variables(ledger.slot_variables(optimizer), "slots"))
    planned = planner.per_device((d, f), "float32", "rmsprop", "column", len(setup.devices),
                                initializer="glorot_uniform", reserve=0)
    return ledger.comparison_row("tf.device layers", held, setup.devices, planned)


# --- full shape without the memory -----------------------------------------------------


def full_shape(setup: devices.DeviceSetup, strategy: str = "column",
               shape: Sequence[int] = SEED_SHAPE) -> full_size.FullShapeReport:
    """Build the seed-shaped sharded layer with :class:`snippets.lib.initializers.Uninitialized` weights.

    The N kernel shards go through the allocator but no page is written;
    :func:`snippets.lib.full_size.report` sets the planner's step peak per
    device beside them.

    Raises:
        ValueError: for an uneven split.
        tf.errors.ResourceExhaustedError: if the pool cannot hold the shards.
    """
    d, f = units.check_shape(shape)
    kind = "column" if strategy == "column" else "row"
    layer = layers.make_layer(kind, f, setup.devices, use_bias=False, kernel_initializer=initializers.Uninitialized())
    measured = allocator.measure(lambda: layer.build((None, d)), setup.devices[0])
    return full_size.report(setup, kind, pieces.of_variables(layer.weights), measured["current"], (d, f))


def seed_layer(setup: devices.DeviceSetup, batch: int = 8) -> list[str]:
    """On GPUs: the seed ``ColumnParallelDense(65536)`` on inputs of width 131072, for real.

    Builds it (Glorot uniform, each shard drawn on its own GPU), then runs one
    forward and backward pass on a batch of ``batch`` and reads each GPU's
    allocator (``tf.config.experimental.get_memory_info``): resident bytes
    and the peak since the build started. Each GPU holds its 8 GiB shard and,
    after the backward pass, its 8 GiB gradient; no GPU ever holds the
    32 GiB kernel. Returns one line per GPU.

    Raises:
        tf.errors.ResourceExhaustedError: if a GPU cannot hold its shard.
    """
    import numpy as np
    import tensorflow as tf

    names = [pieces.short_device(d) for d in setup.devices]
    for name in names:
        tf.config.experimental.reset_memory_stats(name)
    layer = layers.ColumnParallelDense(SEED_SHAPE[1], setup.devices)
    layer.build((None, SEED_SHAPE[0]))
    x = tf.constant(np.ones((batch, SEED_SHAPE[0]), "float32"))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(layer(x)))
    gradients = tape.gradient(loss, layer.kernel_shards)
    lines = []
    kernels = [s for s in pieces.of_variables(layer.weights) if "/kernel_" in s.name]
    for name, shard, gradient in zip(names, kernels, gradients):
        info = tf.config.experimental.get_memory_info(name)
        lines.append(f"{name}: {shard.name} {list(shard.shape)} = {shard.nbytes} B, gradient on "
                     f"{pieces.short_device(gradient.device)}; allocator now {units.format_bytes(info['current'])}, "
                     f"peak {units.format_bytes(info['peak'])}")
    return lines


# --- command line ------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None, parsed=None) -> int:
    """The command line; ``parsed`` is :func:`parse_args`' result when the module runs as a script."""
    parser, args = parsed or parse_args(argv)
    if args.full_shape:
        setup = cli.configure_from_args(args, parser, cpu_pool=full_size.full_shape_pool())
        print(setup.describe())
        for strategy in ("column", "row"):
            # The first layout's shards are freed before the second is built (init_peak collects).
            print("\n".join(full_shape(setup, strategy).lines()))
        return 0
    setup = cli.configure_from_args(args, parser)
    if args.seed_layer:
        if setup.mode == "cpu":
            parser.error("--seed-layer initialises the 32 GiB seed kernel for real and needs GPUs "
                         "(4 x 30976 MiB); without them use --full-shape, which reserves it untouched")
        print(setup.describe())
        for line in seed_layer(setup):
            print(line)
        return 0
    print(setup.describe())
    for kind in ("column", "row"):
        result = compare_with_dense(setup, kind, in_dim=args.in_dim, units=args.units)
        print(f"\n{kind}-parallel Dense({args.units}) on x[4, {args.in_dim}]: max |y - y_dense| = "
              f"{result['max_abs_diff']:.2e}, max |dW - dW_dense| = {result['max_grad_diff']:.2e}")
        from tabulate import tabulate

        print(tabulate([(s.name, pieces.short_device(s.device), list(s.shape), s.nbytes) for s in result["shards"]],
                       headers=["variable", "device", "shape", "bytes"]))
    model = megatron_model(setup, args.in_dim, 4 * args.units, args.units)
    losses = train(model)
    print(f"\ncolumn -> row (Megatron pairing) trained with fit: loss per epoch {[round(v, 4) for v in losses]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(parsed=_CLI))
