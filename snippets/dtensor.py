"""Shard the Dense kernel with DTensor: a mesh, a layout, a hand-written training step.

Run it: ``python -m snippets.dtensor --help``. At CI scale it shows,
on N logical devices (real GPUs, a split GPU or logical CPUs, see
:mod:`snippets.lib.devices`):

* a DTensor **mesh** over the devices, e.g. ``model=4``, and a **layout**
  ``[UNSHARDED, "model"]`` that splits a kernel ``W[D, F]`` into
  ``W[D, F_model]``: one ``[D, F/4]`` piece per device, each created on its
  own device (initialisation included: no full-size temporary);
* a training step written by hand on DVariables: forward ``x @ W + b``,
  backward with ``tf.GradientTape``, and an RMSprop update whose velocity
  has the kernel's layout, so the optimizer slot is sharded too. Its losses
  and weights match ``keras.optimizers.RMSprop`` on unsharded variables;
* a ``batch=2 x model=2`` mesh that combines data parallelism (the batch is
  split over the ``batch`` axis) and model parallelism (the kernel over
  ``model``); DTensor inserts the all-reduce of the kernel gradient over
  ``batch`` itself;
* ``--full-shape``: the seed kernel ``W[131072, 65536]`` float32 plus its
  gradient and RMSprop velocity, reserved piece by piece under the capped
  allocator without touching a page (``tf.raw_ops.Empty``), 8 GiB of each
  per device, 24 GiB in all per device.

Keras 3 has no DTensor support on the TensorFlow backend (its
``keras.distribution`` API creates full-size variables there), so the layer
here is two DVariables and a matmul, and the optimizer is the RMSprop rule
written out.

Sources: DTensor concepts guide and "Distributed training with DTensors"
tutorial (tensorflow.org/guide/dtensor_overview,
tensorflow.org/tutorials/distribute/dtensor_ml_tutorial); API pages
``tf.experimental.dtensor.create_mesh``, ``Layout``, ``DVariable``,
``call_with_layout``, ``pack``/``unpack``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from snippets.lib import allocator, cli, devices, pieces, planner, splits, units
from snippets.lib.optimizers import rmsprop_update
from snippets.lib.seed import SEED_SHAPE

#: Mesh axis names used on this site: ``batch`` splits examples (data
#: parallelism), ``model`` splits weights (model parallelism).
BATCH, MODEL = "batch", "model"



class MeshError(ValueError):
    """A mesh or layout that cannot be built as asked; the message names the fix."""


def parse_mesh(text: str) -> dict[str, int]:
    """``"batch=2,model=2"`` -> ``{"batch": 2, "model": 2}`` (order kept).

    >>> parse_mesh("batch=2,model=2")
    {'batch': 2, 'model': 2}
    >>> parse_mesh("model=four")
    Traceback (most recent call last):
    ...
    snippets.dtensor.MeshError: mesh 'model=four' is not a list of axis=size; write e.g. model=4 or batch=2,model=2

    Raises:
        MeshError: for text that is not ``name=size`` pairs with positive sizes.
    """
    axes: dict[str, int] = {}
    for part in text.split(","):
        name, _, size = part.partition("=")
        name = name.strip()
        if not name or not size.strip().isdigit() or int(size) < 1 or name in axes:
            raise MeshError(
                f"mesh {text!r} is not a list of axis=size; write e.g. model=4 or batch=2,model=2"
            )
        axes[name] = int(size)
    return axes


def check_mesh(axes: dict[str, int], device_names: Sequence[str]) -> None:
    """Raise :class:`MeshError` unless the axis sizes multiply to the device count.

    >>> check_mesh({"batch": 2, "model": 3}, ["CPU:0", "CPU:1", "CPU:2", "CPU:3"])
    Traceback (most recent call last):
    ...
    snippets.dtensor.MeshError: mesh batch=2 x model=3 has 6 positions but 4 devices are configured; choose axis sizes whose product is 4, or configure 6 devices
    """
    positions = 1
    for size in axes.values():
        positions *= size
    if positions != len(device_names):
        shape = " x ".join(f"{k}={v}" for k, v in axes.items())
        raise MeshError(
            f"mesh {shape} has {positions} positions but {len(device_names)} devices are "
            f"configured; choose axis sizes whose product is {len(device_names)}, "
            f"or configure {positions} devices"
        )


def make_mesh(setup: devices.DeviceSetup | Sequence[str], axes: dict[str, int] | None = None):
    """A DTensor mesh over ``setup.devices`` (or a list of device names) with the named axes.

    The default axes are ``model=N``. Devices are laid out row-major: on
    ``batch=2 x model=2``, devices 0 and 1 form batch row 0 (``model`` 0
    and 1), devices 2 and 3 batch row 1.

    Raises:
        MeshError: if the axis sizes do not multiply to the device count
            (``dtensor.create_mesh`` would say only "length of devices (4)
            must be equal to total size of the mesh"), or if a device does
            not exist: ``create_mesh`` accepts such a mesh, and the first op
            on it fails with "CPU:1 unknown device" (field case F14).
    """
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    names = list(getattr(setup, "devices", setup))
    axes = dict(axes or {MODEL: len(names)})
    check_mesh(axes, names)
    def kind_and_index(name):
        spec = tf.DeviceSpec.from_string(name if name.startswith("/") else f"/device:{name}")
        return spec.device_type, spec.device_index

    known = {kind_and_index(d.name) for d in tf.config.list_logical_devices()}
    for name in names:
        if kind_and_index(name) not in known:
            raise MeshError(
                f"device {name} does not exist here ({len(known)} logical devices); configure the "
                "devices first, e.g. snippets.lib.devices.configure(4, ...), and build the mesh from setup.devices"
            )
    return dtensor.create_mesh(list(axes.items()), devices=names)


def mesh_axes(mesh) -> dict[str, int]:
    """``{axis name: size}`` of a DTensor mesh."""
    return {name: mesh.dim_size(name) for name in mesh.dim_names}


def kernel_layout(mesh, axis: str = MODEL):
    """``Layout([UNSHARDED, axis], mesh)``: ``W[D, F]`` split along F into ``W[D, F_axis]``."""
    from tensorflow.experimental import dtensor

    return dtensor.Layout([dtensor.UNSHARDED, axis], mesh)


def data_layout(mesh, rank: int, last: str | None = None):
    """Layout for a batch of rank ``rank``: dimension 0 on ``batch`` if the mesh has it.

    ``last`` shards the last dimension too (e.g. the targets ``y[B, F]`` on
    ``model``, matching the layer output ``x @ W[D, F_model]``).
    """
    from tensorflow.experimental import dtensor

    specs = [dtensor.UNSHARDED] * rank
    if BATCH in mesh.dim_names:
        specs[0] = BATCH
    if last is not None:
        specs[-1] = last
    return dtensor.Layout(specs, mesh)


def to_mesh(array, layout):
    """Put a host array on the mesh with ``layout``.

    Copies it replicated to every device, then relayouts: fine for batches;
    never do this with a full-size weight (every device would get all of it).
    """
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    replicated = dtensor.Layout.replicated(layout.mesh, len(layout.sharding_specs))
    return dtensor.relayout(dtensor.copy_to_mesh(tf.constant(array), replicated), layout)


def gather(value):
    """The full value of a DTensor or DVariable as a NumPy array (all-gather; CI scale only)."""
    from tensorflow.experimental import dtensor

    tensor = value.read_value() if hasattr(value, "read_value") else value
    layout = dtensor.fetch_layout(tensor)
    full = dtensor.relayout(tensor, dtensor.Layout.replicated(layout.mesh, layout.rank))
    return dtensor.unpack(full)[0].numpy()


@dataclass
class MeshDense:
    """A Dense layer ``y = x @ W + b`` whose variables are DVariables on a mesh.

    Attributes:
        kernel: ``W[D, F_model]``, DVariable, layout ``[UNSHARDED, "model"]``.
        bias: ``b[F_model]``, DVariable, layout ``["model"]``.
        kernel_velocity, bias_velocity: the RMSprop slots, same layouts.
    """

    kernel: object
    bias: object
    kernel_velocity: object
    bias_velocity: object

    def __call__(self, x):
        import tensorflow as tf

        return tf.matmul(x, self.kernel) + self.bias

    @property
    def variables(self) -> list:
        return [self.kernel, self.bias]

    @property
    def velocities(self) -> list:
        return [self.kernel_velocity, self.bias_velocity]


def dense_on_mesh(mesh, input_dim: int, units: int, seed: int = 0, axis: str = MODEL,
                  kernel=None) -> MeshDense:
    """A :class:`MeshDense` of ``W[input_dim, units]`` split along ``units`` over mesh axis ``axis``.

    The kernel is Glorot-uniform, limit ``sqrt(6 / (input_dim + units))``
    (Glorot & Bengio 2010; Keras ``GlorotUniform``), drawn with
    ``call_with_layout`` on a ``tf.function``: DTensor's SPMD expansion runs
    the random op on each device for its own piece, so no device ever holds
    the full kernel. Pass ``kernel`` (a host array) to start from given
    weights instead (CI comparisons; copied replicated first, so small only).

    Raises:
        MeshError: if ``units`` (or ``input_dim``) does not split evenly over
            the axis, naming the dimension, its size and the device count.
    """
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    try:
        splits.layout_local_shape((input_dim, units), [None, axis], mesh_axes(mesh))
    except ValueError as error:
        raise MeshError(str(error)) from None
    w_layout = kernel_layout(mesh, axis)
    b_layout = dtensor.Layout([axis], mesh)
    if kernel is None:
        limit = (6.0 / (input_dim + units)) ** 0.5
        draw = tf.function(lambda: tf.random.stateless_uniform(
            (input_dim, units), seed=(seed, 0), minval=-limit, maxval=limit))
        w0 = dtensor.call_with_layout(draw, w_layout)
    else:
        w0 = to_mesh(kernel, w_layout)

    def zeros(shape, layout):
        return dtensor.DVariable(dtensor.call_with_layout(tf.zeros, layout, shape=shape))

    return MeshDense(
        kernel=dtensor.DVariable(w0),
        bias=zeros((units,), b_layout),
        kernel_velocity=zeros((input_dim, units), w_layout),
        bias_velocity=zeros((units,), b_layout),
    )


def make_train_step(layer: MeshDense, learning_rate: float = 1e-3, rho: float = 0.9,
                    epsilon: float = 1e-7, relayout_gradients: bool = True):
    """A ``tf.function`` ``step(x, y) -> loss``: forward, backward, RMSprop update.

    The loss is the mean squared error over the global batch, as Keras's
    ``"mean_squared_error"``. On a mesh with a ``batch`` axis, the mean
    reduces over all batch shards, and the kernel gradient (sharded on
    ``model``, replicated on ``batch``) is summed over ``batch`` by DTensor.

    ``relayout_gradients``: pin each gradient to its variable's layout with
    ``dtensor.relayout`` before the update. Measured on TF 2.21 with a
    ``batch=2 x model=2`` mesh: without it, an update fused into the same
    ``tf.function`` as the backward pass gives weights that differ from
    Keras's RMSprop by more than 1e-3 after one step (0.024 in one run; the
    velocity is right, the step is not); with it, or with the update in a
    separate function, they agree within 1e-6 (tests/test_dtensor.py checks
    both). On a mesh without a ``batch`` axis it changes nothing.
    """
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(layer(x) - y))
        gradients = tape.gradient(loss, layer.variables)
        for variable, velocity, gradient in zip(layer.variables, layer.velocities, gradients):
            if relayout_gradients:
                gradient = dtensor.relayout(gradient, variable.layout)
            rmsprop_update(variable, velocity, gradient, learning_rate, rho, epsilon)
        return loss

    return step


def train(setup: devices.DeviceSetup, axes: dict[str, int] | None = None, batch: int = 16,
          input_dim: int = 1024, units: int = 512, steps: int = 3, learning_rate: float = 1e-3,
          seed: int = 0, relayout_gradients: bool = True) -> dict:
    """Train a :class:`MeshDense` on random data for ``steps`` steps; report losses and placement.

    The starting kernel and the data are NumPy arrays (seeded) so that
    :func:`keras_reference` can replay the same steps unsharded.

    Returns:
        ``{"mesh": {axis: size}, "losses": [float], "kernel": [snippets.lib.pieces.Piece],
        "velocity": [snippets.lib.pieces.Piece], "x": [snippets.lib.pieces.Piece], "weights": ndarray [D, F]}``.

    Raises:
        MeshError: for a mesh that does not match the devices, or sizes the
            mesh axes do not divide (batch over ``batch``, units over ``model``).
    """
    import numpy as np

    mesh = make_mesh(setup, axes)
    w0, x, y = example_data(batch, input_dim, units, seed)
    if BATCH in mesh.dim_names:
        try:
            splits.layout_local_shape(x.shape, [BATCH, None], mesh_axes(mesh))
        except ValueError as error:
            raise MeshError(str(error)) from None
    layer = dense_on_mesh(mesh, input_dim, units, kernel=w0)
    step = make_train_step(layer, learning_rate, relayout_gradients=relayout_gradients)
    xd = to_mesh(x, data_layout(mesh, 2))
    yd = to_mesh(y, data_layout(mesh, 2, last=MODEL))
    losses = [float(step(xd, yd)) for _ in range(steps)]
    return {
        "mesh": mesh_axes(mesh),
        "losses": losses,
        "kernel": pieces.of_variable(layer.kernel),
        "velocity": pieces.of_variable(layer.kernel_velocity),
        "x": pieces.of_variable(xd),
        "weights": np.asarray(gather(layer.kernel)),
    }


def example_data(batch: int = 16, input_dim: int = 1024, units: int = 512, seed: int = 0):
    """Seeded NumPy arrays: a starting kernel ``w0[D, F]``, inputs ``x[B, D]``, targets ``y[B, F]``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    limit = (6.0 / (input_dim + units)) ** 0.5
    w0 = rng.uniform(-limit, limit, (input_dim, units)).astype("float32")
    x = rng.standard_normal((batch, input_dim)).astype("float32")
    y = rng.standard_normal((batch, units)).astype("float32")
    return w0, x, y


def keras_reference(batch: int = 16, input_dim: int = 1024, units: int = 512, steps: int = 3,
                    learning_rate: float = 1e-3, seed: int = 0) -> dict:
    """The same steps as :func:`train`, unsharded, with ``keras.optimizers.RMSprop``.

    Returns:
        ``{"losses": [float], "weights": ndarray [D, F]}``.
    """
    import keras
    import numpy as np
    import tensorflow as tf

    w0, x, y = example_data(batch, input_dim, units, seed)
    kernel = keras.Variable(w0)
    bias = keras.Variable(np.zeros(units, "float32"))
    optimizer = keras.optimizers.RMSprop(learning_rate)
    losses = []
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, kernel) + bias - y))
        optimizer.apply_gradients(zip(tape.gradient(loss, [kernel, bias]), [kernel, bias]))
        losses.append(float(loss))
    return {"losses": losses, "weights": kernel.numpy()}


def reserve_training_state(setup: devices.DeviceSetup, shape: Sequence[int] = SEED_SHAPE,
                           dtype: str = "float32") -> list[dict]:
    """Reserve, on a ``model=N`` mesh, a kernel's pieces plus its gradient and RMSprop velocity.

    Each device gets three ``[D, F/N]`` tensors made with
    ``tf.raw_ops.Empty(init=False)`` on that device (the allocator reserves
    them without touching a page), packed into DTensors with layout
    ``[UNSHARDED, "model"]``. So the capped allocator must accept
    ``3 * D * F * 4 / N`` bytes per device, and the host needs no such RAM.
    For the seed on 4 devices that is 3 x 8 GiB; configure a ``cpu_pool`` of
    at least 4 x 24 GiB (the cap is per process, see :mod:`snippets.lib.devices`).

    Returns:
        One dict per device: ``device``, ``kernel``, ``gradient``,
        ``velocity`` and ``total`` (bytes, from the pieces' shapes) and
        ``shape`` (the local shape).

    Raises:
        MeshError: if the devices do not split F evenly.
        tf.errors.ResourceExhaustedError: if the allocator cap is too small.
    """
    from tensorflow.experimental import dtensor

    mesh = make_mesh(setup)
    try:
        local = splits.layout_local_shape(shape, [None, MODEL], mesh_axes(mesh))
    except ValueError as error:
        raise MeshError(str(error)) from None
    layout = kernel_layout(mesh)
    state = {}
    for name in ("kernel", "gradient", "velocity"):
        parts = []
        for device in setup.devices:
            parts.append(allocator.reserve(local, dtype, device))
        state[name] = dtensor.pack(parts, layout)
        del parts
    per_device = [dict(device=d, shape=local) for d in setup.devices]
    for name, value in state.items():
        for row, piece in zip(per_device, pieces.of_variable(value)):
            row[name] = piece.nbytes
    for row in per_device:
        row["total"] = row["kernel"] + row["gradient"] + row["velocity"]
    return per_device


def shard_summary(setup: devices.DeviceSetup, shape: Sequence[int] = (1024, 512)) -> dict:
    """For the overview's comparison table: where DTensor puts a kernel's pieces, and their bytes.

    Builds ``W[shape]`` on a ``model=N`` mesh over ``setup.devices``, runs
    one forward/backward pass, and reads per device the kernel piece, its
    gradient piece and its RMSprop velocity piece with :mod:`snippets.lib.ledger`.

    Returns:
        ``{"method": "DTensor", "where": [device per piece], "local_shape": (D, F/N),
        "kernel_bytes": [per device], "measured": [weights + gradients + slots
        per device, read], "planned": [the same from snippets.lib.planner.per_device
        for strategy "column", no reserve]}``.
    """
    import numpy as np
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from snippets.lib import ledger

    mesh = make_mesh(setup)
    layer = dense_on_mesh(mesh, shape[0], shape[1])
    x = to_mesh(np.ones((2, shape[0]), "float32"), data_layout(mesh, 2))

    @tf.function
    def gradient():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(layer(x)))
        return dtensor.relayout(tape.gradient(loss, layer.kernel), layer.kernel.layout)

    held = (pieces.of_variables([layer.kernel], "weights") + pieces.of_variables([gradient()], "gradients")
            + pieces.of_variables([layer.kernel_velocity], "slots"))
    planned = planner.per_device(shape, "float32", "rmsprop", "column", len(setup.devices),
                                initializer="glorot_uniform", reserve=0)
    return ledger.comparison_row("DTensor", held, setup.devices, planned)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snippets.dtensor", description=__doc__.split("\n\n")[0]
    )
    cli.add_device_arguments(parser)
    parser.add_argument("--mesh", default=None, metavar="AXES",
                        help="mesh axes, e.g. model=4 (default: model=N) or batch=2,model=2")
    cli.add_shape(parser, [1024, 512], "the kernel to train at CI scale")
    parser.add_argument("--batch", type=int, default=16, help="global batch size (default 16)")
    parser.add_argument("--steps", type=int, default=3, help="training steps (default 3)")
    parser.add_argument("--full-shape", action="store_true",
                        help="reserve the seed kernel W[131072, 65536] + gradient + RMSprop "
                             "velocity piece by piece (allocation only) instead of training")
    args = parser.parse_args(argv)
    cli.check_positive(parser, batch=args.batch, steps=args.steps)
    try:
        axes = parse_mesh(args.mesh) if args.mesh else None
        if axes and BATCH in axes and not args.full_shape:
            # train() would refuse this after TensorFlow started; refuse it first, naming --batch.
            try:
                splits.layout_local_shape((args.batch, args.shape[0]), [BATCH, None], axes)
            except ValueError as error:
                raise MeshError(f"--batch {args.batch}: {error}") from None
        if args.full_shape:
            local = splits.layout_local_shape(SEED_SHAPE, [None, MODEL], {MODEL: args.devices})
            per_device = 3 * units.tensor_bytes(local)
            pool = f"{args.devices * units.parse_size(args.device_memory) // units.MiB}MiB"
            if per_device > units.parse_size(args.device_memory):
                parser.error(f"{units.format_bytes(per_device)} per device does not fit "
                             f"{args.device_memory}; use more devices")
            setup = cli.configure_from_args(args, parser, cpu_pool=pool)
        else:
            splits.layout_local_shape(args.shape, [None, MODEL], axes or {MODEL: args.devices})
            allocator.check_host_can_hold(4 * units.tensor_bytes(args.shape) * args.devices,
                                       "training this kernel")
            setup = cli.configure_from_args(args, parser)
            if axes:
                check_mesh(axes, setup.devices)
    except (ValueError, allocator.HostMemoryError) as error:
        parser.error(str(error))
    from tabulate import tabulate


    print(setup.describe())
    if args.full_shape:
        rows = reserve_training_state(setup)
        print(f"\nW{list(SEED_SHAPE)} float32 on mesh model={args.devices}, layout "
              "[UNSHARDED, 'model'], reserved with tf.raw_ops.Empty (pages untouched):")
        print(tabulate([(pieces.short_device(r["device"]), list(r["shape"]), r["kernel"], r["gradient"],
                         r["velocity"], units.human_bytes(r["total"])) for r in rows],
                       headers=["device", "piece", "kernel B", "gradient B", "velocity B", "total"]))
        capacity = units.parse_size(args.device_memory)
        mirrored = 3 * units.tensor_bytes(SEED_SHAPE)
        step = planner.per_device(SEED_SHAPE, "float32", "rmsprop", "column", args.devices, xla="off")[0]
        print(f"\nState per device {units.format_bytes(rows[0]['total'])} <= {units.format_bytes(capacity)}: "
              f"reserved. A step of this chapter's update (no XLA) peaks at {units.human_bytes(step.total)}: "
              f"{'fits' if step.total <= capacity else 'does not fit'}."
              f"\nMirrored, each device would need {units.format_bytes(mirrored)} of state alone: does not.")
        return 0
    try:
        result = train(setup, axes, args.batch, args.shape[0], args.shape[1], args.steps)
    except MeshError as error:
        parser.error(str(error).splitlines()[0])
    print(f"\nMesh {result['mesh']}; kernel pieces:")
    print(tabulate([(pieces.short_device(p.device), list(p.shape), p.nbytes) for p in result["kernel"]],
                   headers=["device", "shape", "bytes"]))
    print("\nLosses:", ", ".join(f"{loss:.4f}" for loss in result["losses"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
