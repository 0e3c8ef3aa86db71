"""CPU offload: keep the big variable in host RAM, and count what each step moves.

Run it: ``python -m snippets.offload --help``. At CI scale it builds a Dense
layer ``W[D, F]`` three ways and runs one training step of each, listing
every tensor TensorFlow sends between devices:

``host-compute``
    the layer's variables created *outside* any strategy scope under
    ``tf.device(host)``, and the layer computed on the host too: only
    activations cross the link.
``host-variable``
    the same host variables, but the layer computed on an accelerator: each
    step reads all of W over the link and sends its gradient back.
``central-storage``
    ``tf.distribute.experimental.CentralStorageStrategy``: Keras 3 variables
    become ``AggregatingVariable`` objects on the host (the optimizer's slots
    too) and every replica reads W over its link, every step.

The trap (field case F12, shown in the placement chapter): ``tf.device("CPU:0")``
*inside* ``MirroredStrategy.scope()`` does not offload anything; the
strategy's variable creator still mirrors the variable onto every replica.

On a CPU-only machine (see :mod:`snippets.lib.devices`) logical CPU 0 plays the
host and CPU 1..N play the GPUs, the first of them the default device, as
GPU:0 is on a GPU host; TensorFlow moves tensors between them with
the same ``_Send``/``_Recv`` pairs it uses for host-GPU copies, which is what
:func:`measure_transfers` counts. Times come from bytes and the PCIe 3.0 x16
peak (:data:`snippets.lib.hardware.PCIE3_X16_BYTES_PER_S`), never from a clock.

Sources: ``tf.distribute.experimental.CentralStorageStrategy`` API page
("Variables are assigned to local CPU or the only GPU. If there is more than
one GPU, compute operations (other than variable update operations) will be
replicated across all GPUs"); the TensorFlow "Distributed training" guide;
``tensorflow/core/graph/graph_partition.cc`` (cross-device edges become
``_Send``/``_Recv`` pairs).
"""

from __future__ import annotations

import argparse
import contextlib

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from snippets.lib import allocator, cli, communication, devices, hardware, optimizers, pieces, trace, units
from snippets.lib.seed import SEED_SHAPE
from snippets.lib.units import check_shape  # a Dense layer's "units" argument shadows the module in two functions

MODES = ("host-compute", "host-variable", "central-storage")


def roles(setup: devices.DeviceSetup) -> tuple[str, tuple[str, ...]]:
    """``(host, compute_devices)`` for ``setup``: ``setup.host`` and ``setup.devices``.

    On GPUs the host is ``CPU:0`` and every GPU computes; in CPU mode logical
    CPU 0 plays the host and CPU 1..N play the GPUs (:mod:`snippets.lib.devices`).
    """
    return setup.host, setup.devices


def mirrored_despite_device(setup: devices.DeviceSetup, shape: Sequence[int] = (8,)):
    """The trap: ``tf.device(host)`` inside ``MirroredStrategy(compute).scope()``.

    Returns the variable, which is a ``MirroredVariable`` with one component
    per compute device: the strategy's variable creator ignores the device
    scope (field case F12).
    """
    import tensorflow as tf

    host, compute = roles(setup)
    strategy = tf.distribute.MirroredStrategy(compute)
    with strategy.scope(), tf.device(host):
        return tf.Variable(tf.zeros(units.check_shape(shape)))


def host_dense(setup: devices.DeviceSetup, input_dim: int, units: int, name: str | None = None):
    """A Keras ``Dense(units)`` built for width ``input_dim`` with its variables in host memory.

    Built under ``tf.device(host)`` and *outside* any strategy scope, so the
    kernel ``W[input_dim, units]`` is one plain variable on the host.
    """
    import keras
    import tensorflow as tf

    check_shape((input_dim, units))
    host, _ = roles(setup)
    if tf.distribute.has_strategy():
        raise RuntimeError("host_dense must be called outside any strategy scope, "
                           "or the strategy decides where the variables go")
    layer = keras.layers.Dense(units, name=name)
    with tf.device(host):
        layer.build((None, input_dim))
    return layer


def central_storage(setup: devices.DeviceSetup):
    """``CentralStorageStrategy`` with the host as parameter device and the rest computing."""
    import tensorflow as tf

    host, compute = roles(setup)
    return tf.distribute.experimental.CentralStorageStrategy(
        compute_devices=list(compute), parameter_device=host
    )


def variable_devices(layer_or_model) -> list[tuple[str, str, str]]:
    """``(path, variable class, device)`` for each variable, looking through Keras 3's wrapper.

    A Keras 3 variable wraps a TensorFlow one (``.value``); its class tells
    how it is distributed: ``ResourceVariable`` (plain), ``MirroredVariable``,
    ``AggregatingVariable`` (CentralStorageStrategy).
    """
    rows = []
    for v in layer_or_model.weights if hasattr(layer_or_model, "weights") else layer_or_model:
        inner = getattr(v, "value", v)
        rows.append((v.path, type(inner).__name__, pieces.short_device(inner.device)))
    return rows


# --- one training step, and what it moves ---------------------------------


def train_step(layer, optimizer, compute_device: str | None = None,
               layer_device: str | None = None) -> Callable:
    """One step of mean-squared-error training of ``layer`` on ``(x, y)``, as a plain function.

    ``layer_device``: where the layer's forward and backward run;
    ``compute_device``: where the loss (standing in for the rest of the
    model) and its backward run; None lets the surrounding scope decide
    (a replica's device under ``strategy.run``). The backward pass is split
    at the device boundary by the chain rule (``output_gradients``), so each
    half runs where its forward half ran: TensorFlow 2's tape does not
    colocate gradient ops with their forward ops, and an unpinned op would go
    to the default device (GPU:0 on a GPU machine, CPU:1 in the CPU
    emulation). So does the arithmetic of a stock Keras optimizer update,
    wherever the variable lives (only the reads and the final assignment run
    on the variable's device); :func:`run_mode` colocates the update with the
    variable in ``host-compute`` mode.
    """
    import tensorflow as tf

    def on(device):
        return tf.device(device) if device else contextlib.nullcontext()

    def step(x, y):
        with tf.GradientTape(persistent=True) as tape:
            with on(layer_device):
                h = layer(x)
            with on(compute_device):
                loss = tf.reduce_mean((h - y) ** 2)
        with on(compute_device):
            dh = tape.gradient(loss, h)
        with on(layer_device):
            grads = tape.gradient(h, layer.trainable_variables, output_gradients=dh)
        optimizer.apply_gradients(zip(grads, layer.trainable_variables))
        return loss

    return step


def measure_transfers(step: Callable, *args) -> list[trace.Transfer]:
    """Run ``step(*args)`` once as a fresh ``tf.function`` and list its cross-device sends.

    TensorFlow's partitioner cuts a function's graph per device and joins
    the pieces with ``_Send``/``_Recv`` pairs; with run metadata on, the
    runtime records those partition graphs when it instantiates the
    function (``tf.compat.v1.RunMetadata.FunctionGraphs``). Each ``_Send``
    whose two devices differ is one copy per call: on a GPU machine, a
    PCIe (or NVLink) transfer. Shapes come from the traced graph.

    Must see the function's first call, so it wraps ``step`` itself.

    Returns:
        One :class:`snippets.lib.trace.Transfer` per send of this step, sorted by (source, destination, tensor).
    """
    import tensorflow as tf

    # The first call also records other functions' graphs (a strategy's or Keras'
    # helpers): their sends carry tensors this step's graph does not have.
    return [t for t in trace.placement(tf.function(step), *args).transfers if t.nbytes is not None]


def transfer_table(transfers: Sequence[trace.Transfer], host: str) -> str:
    """Transfers grouped by kind and direction (``in``: host to device, ``out``: device to host).

    Columns: kind, direction, number of sends, bytes in all.
    """
    from tabulate import tabulate

    host = pieces.short_device(host)
    groups: dict[tuple[str, str], list[trace.Transfer]] = {}
    for t in transfers:
        direction = "in" if t.source == host else "out" if t.destination == host else "between devices"
        groups.setdefault((t.kind, direction), []).append(t)
    rows = [(kind, direction, len(ts), sum(t.nbytes for t in ts))
            for (kind, direction), ts in sorted(groups.items())]
    return tabulate(rows, headers=["kind", "direction", "sends", "bytes"], intfmt=",")


def run_mode(setup: devices.DeviceSetup, mode: str, input_dim: int = 1024, units: int = 256,
             batch: int = 32, name: str = "big") -> tuple[list[tuple[str, str, str]], list[trace.Transfer]]:
    """Build ``Dense(units, name=name)`` for ``mode`` (one of :data:`MODES`), run one RMSprop step, measure it.

    Returns:
        ``(variable_devices, transfers)``: where each variable (optimizer
        slots included) lives, and what the step sent between devices.

    Raises:
        ValueError: for an unknown mode or a bad shape.
    """
    import keras
    import tensorflow as tf

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    check_shape((batch, input_dim, units))
    host, compute = roles(setup)
    x = tf.random.stateless_normal((batch, input_dim), (0, 1))
    y = tf.random.stateless_normal((batch, units), (0, 2))
    if mode == "central-storage":
        strategy = central_storage(setup)
        with strategy.scope():
            layer = keras.layers.Dense(units, name=name)
            layer.build((None, input_dim))
            optimizer = keras.optimizers.RMSprop(name="rmsprop")
            optimizer.build(layer.trainable_variables)
        replica_step = train_step(layer, optimizer)
        # Each replica gets the whole (x, y) here: the point is the weights' traffic.
        transfers = measure_transfers(lambda x, y: strategy.run(replica_step, args=(x, y)), x, y)
    else:
        layer = host_dense(setup, input_dim, units, name)
        with tf.device(host):
            optimizer = keras.optimizers.RMSprop(name="rmsprop")
            optimizer.build(layer.trainable_variables)
        if mode == "host-compute":
            # Keras runs the update's arithmetic on the default device (GPU:0 on a GPU
            # host), wherever the variable lives; keep it next to the variable instead.
            optimizers.colocate_updates(optimizer, jit_compile=False)
        layer_device = host if mode == "host-compute" else compute[0]
        transfers = measure_transfers(train_step(layer, optimizer, compute[0], layer_device), x, y)
    placed = variable_devices(layer) + variable_devices(optimizer.variables)
    return placed, transfers


# --- the same step at full size: bytes and seconds ------------------------


@dataclass(frozen=True)
class StepCost:
    """Least PCIe cost of one training step for one replica's link.

    Attributes:
        compute: ``"device"`` (layer on the GPU, W read over the link) or
            ``"host"`` (layer on the host, activations over the link).
        host_to_device, device_to_host: bytes per replica per step.
        seconds: least time on the link: in and out are serial (the read is
            needed before the forward pass, the gradient exists only after
            the backward pass), so the two directions add up.
        layer_seconds: the layer's 6BDF FLOPs at a V100's float32 peak, for scale.
    """

    compute: str
    host_to_device: int
    device_to_host: int
    seconds: float
    layer_seconds: float


def step_cost(kernel_shape: Sequence[int] = SEED_SHAPE, batch: int = 64,
              compute: str = "device", dtype: str = "float32",
              bytes_per_s: float = hardware.PCIE3_X16_BYTES_PER_S) -> StepCost:
    """:class:`StepCost` of ``W[D, F]`` kept on the host, from :mod:`snippets.lib.communication` arithmetic.

    ``t_step >= bytes_in / BW + bytes_out / BW`` per replica link, with BW =
    :data:`snippets.lib.hardware.PCIE3_X16_BYTES_PER_S` by default. Replicas that
    share one host link (two GPUs behind one PCIe switch) divide it: pass
    ``bytes_per_s / 2``.

    >>> cost = step_cost([131072, 65536], batch=64, compute="device")
    >>> cost.host_to_device, round(cost.seconds, 3), round(cost.layer_seconds, 3)
    (34359738368, 4.362, 0.14)
    >>> step_cost([131072, 65536], batch=64, compute="host").host_to_device
    16777216
    """
    moved = communication.offload_step_bytes(kernel_shape, dtype, batch, compute)
    seconds = (communication.transfer_seconds(moved["host_to_device"], bytes_per_s)
               + communication.transfer_seconds(moved["device_to_host"], bytes_per_s))
    d, f = kernel_shape
    layer = communication.dense_train_flops(batch, d, f) / hardware.V100_FP32_FLOPS
    return StepCost(compute, moved["host_to_device"], moved["device_to_host"], seconds, layer)


def cost_table(kernel_shape: Sequence[int] = SEED_SHAPE, batch: int = 64) -> str:
    """Both ways of offloading ``W[D, F]``: bytes each way per step and least seconds, as a table."""
    from tabulate import tabulate

    rows = []
    for compute in ("device", "host"):
        c = step_cost(kernel_shape, batch, compute)
        rows.append((f"layer on the {'GPU' if compute == 'device' else 'host'}",
                     units.human_bytes(c.host_to_device), units.human_bytes(c.device_to_host),
                     f"{c.seconds:.4f}"))
    return tabulate(rows, headers=["offload", "in per step", "out per step", "PCIe s >="],
                    disable_numparse=True)


def copy_seconds(device: str, nbytes: int = 256 * units.MiB, repeats: int = 5) -> float:
    """Best wall time (s) of copying ``nbytes`` float32 from host memory to ``device``.

    For a GPU this measures the real host-to-device bandwidth to compare
    with :data:`snippets.lib.hardware.PCIE3_X16_BYTES_PER_S`: ``nbytes / copy_seconds(...)``.
    The source lives on ``/device:CPU:0``; ``tf.identity`` under
    ``tf.device(device)`` makes TensorFlow copy it, and reducing the copy to
    a scalar read back on the host waits for the copy to finish. The best of
    ``repeats`` runs (after one warm-up) leaves out allocation and start-up.
    It measures this machine; nothing on the site asserts a time.
    """
    import time

    import tensorflow as tf

    if nbytes < 4 or repeats < 1:
        raise ValueError(f"need nbytes >= 4 and repeats >= 1, got {nbytes} and {repeats}")
    with tf.device("/device:CPU:0"):
        source = tf.ones([nbytes // 4], tf.float32)

    @tf.function
    def copy(x):
        with tf.device(device):
            return tf.reduce_sum(tf.identity(x))

    copy(source).numpy()  # warm-up: trace, allocate
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        copy(source).numpy()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snippets.offload",
                                     description=__doc__.split("\n\n")[0])
    cli.add_device_arguments(parser)
    parser.set_defaults(devices=5)
    parser.add_argument("--offload", choices=MODES, default="central-storage",
                        help="how to keep the layer's variables on the host (default central-storage)")
    cli.add_shape(parser, [1024, 256], "the layer to run at CI scale")
    parser.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    args = parser.parse_args(argv)
    cli.check_positive(parser, batch=args.batch)
    try:
        units.check_shape(args.shape)
    except ValueError as error:
        parser.error(f"--shape {args.shape[0]} {args.shape[1]}: {error}")
    try:
        # Host copy + optimizer slot + a read copy and a gradient per device.
        allocator.check_host_can_hold(units.tensor_bytes(args.shape) * (2 + 2 * args.devices),
                                   "this offload run")
    except (ValueError, allocator.HostMemoryError) as error:
        parser.error(str(error))
    setup = cli.configure_from_args(args, parser)
    try:
        host, compute = roles(setup)
    except devices.DeviceConfigError as error:
        parser.error(str(error))
    print(setup.describe())
    print(f"host: {pieces.short_device(host)}; compute: {', '.join(pieces.short_device(d) for d in compute)}\n")
    placed, transfers = run_mode(setup, args.offload, *args.shape, args.batch)
    from tabulate import tabulate

    print(tabulate(placed, headers=["variable", "class", "device"]) + "\n")
    print(f"One training step ({args.offload}) sends between devices:")
    print(transfer_table(transfers, host))
    print(f"\nAt full size, W[131072, 65536] float32, batch 64, PCIe 3.0 x16 at "
          f"{hardware.PCIE3_X16_BYTES_PER_S / units.GB:.2f} GB/s each way:")
    print(cost_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
