# kernel: jax
"""Keep ``model.fit``: the seed model on Keras 3's JAX backend, its kernel sharded by a layout map.

The page ``docs/keep-fit.md`` runs these. The seed layer at CI scale: a
``Sequential`` of ``Input(D)`` and ``Dense(F, name="dense")``, float32, trained
with RMSprop on mean squared error, on 4 emulated devices (XLA's host platform
split in 4, ``XLA_FLAGS=--xla_force_host_platform_device_count=4``).

Keras picks its backend when it is imported, so this module must be imported
where ``KERAS_BACKEND=jax`` was set first: the harness's JAX kernel
(``Kernel(backend="jax")``), or ``python -m snippets.keep_fit``, which sets the
variables below if they are unset. Imported anywhere else, it raises
``RuntimeError``.

At the seed's full shape, ``W[131072, 65536]``, nothing is allocated: the
model is built without values (:func:`abstract_model`) and Keras's
``train_step`` compiled, not run (:func:`full_shape_step`); XLA's compiled
memory analysis gives each device's bytes (:func:`device_bytes`), which
:func:`against_planner` sets next to :mod:`snippets.lib.planner`'s.

Sources: ``keras/src/distribution/distribution_lib.py`` (``DeviceMesh``,
``LayoutMap``, ``ModelParallel``) and ``keras/src/backend/jax/trainer.py``
(``train_step``, ``make_train_function``), ``keras/src/backend/jax/core.py``
(``JaxVariable._initialize_with_initializer``), Keras 3.15.1; JAX 0.10.2
(``jax.stages.Compiled.memory_analysis``).
"""

import os
import re

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from snippets.lib import optimizers, planner, private, units  # noqa: E402
from snippets.lib.jax_step import device_bytes  # noqa: E402
from snippets.lib.seed import SEED_SHAPE  # noqa: E402

if keras.backend.backend() != "jax":
    raise RuntimeError(f"snippets.keep_fit needs Keras on JAX; Keras was imported on {keras.backend.backend()!r} "
                       "(set KERAS_BACKEND=jax before anything imports keras)")

#: CI scale of the seed layer W[D, F]; the batch; the steps ``fit`` trains.
D, F, BATCH, STEPS = 1024, 512, 16, 3
#: The layout map's one key: every variable path with "dense" and then "kernel" in it.
KERNEL_KEY = ".*dense.*kernel"
#: Sharded and unsharded training agree to this (absolute, float32 values of order 1).
TOLERANCE = 1e-5


def mesh(shape: tuple[int, ...] = (1, 4), axis_names: tuple[str, ...] = ("batch", "model")):
    """A ``keras.distribution.DeviceMesh`` over all of JAX's devices.

    Args:
        shape: devices per axis; their product must be the device count (4 here).
        axis_names: one name per axis.

    Raises:
        ValueError: from Keras, if ``shape`` does not cover the devices.
    """
    return keras.distribution.DeviceMesh(shape, axis_names, devices=keras.distribution.list_devices())


def model_parallel(device_mesh, key: str = KERNEL_KEY, batch_dim_name: str | None = "batch"):
    """A ``ModelParallel`` distribution that splits the columns (``F``) of every kernel ``key`` matches.

    Args:
        device_mesh: from :func:`mesh`; needs an axis named ``"model"``.
        key: a regular expression that must match a variable's whole path
            (``"sequential/dense/kernel"``); variables no key matches stay replicated.
        batch_dim_name: the mesh axis that splits the batch; None lets Keras take
            the mesh's first axis.
    """
    layout_map = keras.distribution.LayoutMap(device_mesh)
    layout_map[key] = (None, "model")
    return keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name=batch_dim_name)


def seed_model(name: str = "dense", d: int = D, f: int = F, weights: list | None = None):
    """The seed model as a user writes it, compiled with RMSprop and MSE.

    Builds its variables (and the optimizer's slots) under whatever distribution
    is set when it is called: set it first.

    Args:
        name: the Dense layer's name, which becomes part of its variables' paths.
        d, f: the kernel's shape ``[d, f]`` (float32).
        weights: ``[kernel, bias]`` as NumPy arrays to start from, or None for
            Keras's initializers (Glorot uniform, zeros).
    """
    model = keras.Sequential([keras.Input((d,)), keras.layers.Dense(f, name=name)])
    model.compile(optimizer=keras.optimizers.RMSprop(learning_rate=1e-3), loss="mse")
    model.optimizer.build(model.trainable_variables)  # the slots exist before the first step
    if weights is not None:
        model.set_weights(weights)
    return model


def batch(seed: int = 0, size: int = BATCH, d: int = D, f: int = F) -> tuple[np.ndarray, np.ndarray]:
    """One batch ``(x[size, d], y[size, f])``, float32, standard normal, from NumPy's ``seed``."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((size, d), dtype=np.float32), rng.standard_normal((size, f), dtype=np.float32)


def train(model, x: np.ndarray, y: np.ndarray, steps: int = STEPS) -> list[float]:
    """``steps`` steps of ``model.fit`` on the one batch ``(x, y)``: the loss of each step.

    One epoch per step, so ``history["loss"]`` holds each step's loss (before its update).
    """
    history = model.fit(x, y, batch_size=len(x), epochs=steps, shuffle=False, verbose=0)
    return [float(loss) for loss in history.history["loss"]]


def sharding(variable) -> tuple[str, list[tuple[int, ...]]]:
    """A Keras variable's partition spec and the shape each device holds, in device order.

    Returns:
        ``("P(None, 'model')", [(1024, 128)] * 4)`` for the sharded seed kernel;
        ``("P()", [(1024, 512)] * 4)`` for a replicated one;
        ``("one device", [(1024, 512)])`` with no distribution set.
    """
    value = variable.value
    shards = sorted(value.addressable_shards, key=lambda shard: shard.device.id)
    spec = getattr(value.sharding, "spec", None)
    return (str(spec) if spec is not None else "one device"), [tuple(shard.data.shape) for shard in shards]


def kernel_and_slot(model) -> dict[str, tuple[str, list[tuple[int, ...]]]]:
    """:func:`sharding` of the Dense kernel (``"kernel"``) and of its RMSprop velocity (``"velocity"``, the one slot).

    Raises:
        LookupError: the optimizer has no velocity for the kernel (not built yet).
    """
    kernel = model.layers[0].kernel
    slots = [v for v in model.optimizer.variables if v.path.endswith(kernel.path.replace("/", "_") + "_velocity")]
    if not slots:
        raise LookupError(f"no RMSprop velocity for {kernel.path}: build the optimizer first")
    return {"kernel": sharding(kernel), "velocity": sharding(slots[0])}


def show(model) -> None:
    """Print :func:`kernel_and_slot`: partition spec and per-device shard shapes, one line each."""
    for role, (spec, shapes) in kernel_and_slot(model).items():
        print(f"{role:8} {spec:16} {shapes}")


def replicated_matrices(model) -> list[str]:
    """Paths of the model's 2-D variables every device holds whole (a layout-map key missed them)."""
    return [v.path for v in model.weights if len(v.shape) == 2 and v.value.sharding.is_fully_replicated]


def compiled_step(model, x: np.ndarray, y: np.ndarray):
    """Keras's own ``train_step`` for ``model``, compiled by XLA for the inputs as ``fit`` places them.

    The state (trainable, non-trainable, optimizer and metric variables) is
    passed with its shardings; the batch is placed by the distribution's data
    layout (or replicated with no distribution set).

    Returns:
        a ``jax.stages.Compiled``; ``.as_text()`` is its HLO, ``.memory_analysis()`` its bytes.
    """
    distribution = keras.distribution.distribution()
    if distribution is not None:
        x, y = (jax.device_put(a, distribution.get_data_layout(a.shape).backend_layout) for a in (x, y))
    state = tuple([v.value for v in group] for group in (model.trainable_variables, model.non_trainable_variables,
                                                           model.optimizer.variables, model.metrics_variables))
    return jax.jit(model.train_step).lower(state, (x, y)).compile()


def gathers_of(compiled, shape: tuple[int, ...], dtype: str = "f32") -> int:
    """How many all-gathers in ``compiled``'s HLO produce a whole ``dtype[shape]`` (e.g. the kernel, ``f32[1024,512]``)."""
    pattern = re.compile(rf"=\s*{dtype}\[{','.join(map(str, shape))}\](?:\{{[^}}]*\}})?\s+all-gather\(")
    return sum(1 for line in compiled.as_text().splitlines() if pattern.search(line))


def temporaries(compiled) -> int:
    """Bytes of temporaries XLA's compiled memory analysis gives each device (``temp_size_in_bytes``)."""
    return int(compiled.memory_analysis().temp_size_in_bytes)


# --- at full shape: what XLA allocates on each device, without allocating it ----


#: The seed at full shape, ``W[131072, 65536]`` float32 (32 GiB), and the site's batch.
FULL_D, FULL_F = SEED_SHAPE
FULL_BATCH = 64


def abstract_model(d: int = FULL_D, f: int = FULL_F, optimizer: str = "rmsprop"):
    """The seed model compiled with ``optimizer``, its kernel and slots never allocated.

    The layers and the optimizer's slots are built under
    ``keras.StatelessScope(initialize_variables=False)``: each variable has a
    shape, a dtype and (through :func:`snippets.lib.private.variable_layout`,
    asked before the optimizer is built so each slot takes its variable's
    layout) the layout the current distribution gives it, but no value, for good
    (:func:`snippets.lib.private.shapes_only`). ``compile`` runs outside the scope: it makes the optimizer's and the
    loss tracker's scalars, which need values. Nothing of size ``d x f`` is
    allocated; about 0.1 s.

    Args:
        d, f: the kernel's shape ``[d, f]`` (float32).
        optimizer: a name in :data:`snippets.lib.optimizers.OPTIMIZERS` (``"rmsprop"``,
            ``"adam"``, ``"sgd_momentum"``).

    Raises:
        ValueError: for an unknown optimizer name.

    Returns:
        a ``keras.Sequential`` for :func:`abstract_state` and :func:`full_shape_step`
        only: it cannot train or predict (its variables have no values).
    """
    with private.shapes_only():
        model = keras.Sequential([keras.Input((d,)), keras.layers.Dense(f, name="dense")])
        for variable in model.weights:
            private.variable_layout(variable)
    model.compile(optimizer=optimizers.make_optimizer(optimizer), loss="mse")
    with private.shapes_only():
        model.optimizer.build(model.trainable_variables)
    return model


def abstract_state(model) -> tuple[list, list, list, list]:
    """``train_step``'s state for :func:`abstract_model`: ``jax.ShapeDtypeStruct`` per variable, with its sharding.

    The four groups ``fit`` passes (trainable, non-trainable, optimizer and
    metric variables, in that order: ``JAXTrainer.train_step`` in
    keras/src/backend/jax/trainer.py); each sharding is the variable's
    layout's ``jax.sharding.NamedSharding``, or a one-device sharding with
    no distribution set.
    """
    def spec(variable):
        layout = private.variable_layout(variable)
        sharding = layout.backend_layout if layout is not None else jax.sharding.SingleDeviceSharding(jax.devices()[0])
        return jax.ShapeDtypeStruct(tuple(variable.shape), variable.dtype, sharding=sharding)

    groups = (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
              model.metrics_variables)
    return tuple([spec(v) for v in group] for group in groups)


def full_shape_step(distribution, optimizer: str = "rmsprop",
                    d: int = FULL_D, f: int = FULL_F, batch_size: int = FULL_BATCH):
    """Keras's ``train_step`` for the seed at ``W[d, f]`` under ``distribution``, compiled and never run.

    Sets ``distribution`` (it stays set), builds :func:`abstract_model`, and
    compiles the step as ``fit`` does (``make_train_function`` in
    keras/src/backend/jax/trainer.py: ``jax.jit(train_step, donate_argnums=0,
    out_shardings=(None, state shardings))``), for a batch ``x[batch_size, d]``,
    ``y[batch_size, f]`` float32 placed by the distribution's data layout.
    About a second and 300 MB of host memory on CPU, whatever the shape.

    Returns:
        ``(compiled, state)``: a ``jax.stages.Compiled`` (see :func:`device_bytes`)
        and :func:`abstract_state`'s groups (their ``.sharding`` is what each variable gets).
    """
    keras.distribution.set_distribution(distribution)
    model = abstract_model(d, f, optimizer)
    state = abstract_state(model)
    shardings = tuple([s.sharding for s in group] for group in state)
    data = tuple(jax.ShapeDtypeStruct(shape, "float32", sharding=distribution.get_data_layout(shape).backend_layout)
                 for shape in ((batch_size, d), (batch_size, f)))
    step = jax.jit(model.train_step, donate_argnums=0, out_shardings=(None, shardings))
    return step.lower(state, data).compile(), state


def initializer_bytes(initializer: str, axes: tuple, device_mesh, shape: tuple[int, ...] = SEED_SHAPE) -> dict[str, int]:
    """:func:`device_bytes` of drawing a float32 ``shape`` variable's value with ``initializer``, as Keras does.

    A variable with a layout whose ``shape`` x 4 bytes x devices is at least
    250 MiB is drawn by ``jax.jit(initializer, out_shardings=layout)``, each
    device drawing its own piece (``JaxVariable._initialize_with_initializer``
    and ``should_shard_at_init``, keras/src/backend/jax/core.py).

    Args:
        initializer: a Keras initializer name (``"glorot_uniform"``, ``"zeros"``)
            or instance (:class:`BlockwiseGlorotUniform`).
        axes: the layout's axes, e.g. ``(None, "model")``.
        device_mesh: from :func:`mesh`.

    These are XLA:CPU's buffers; XLA:GPU compiles the draw differently and
    is not measured here.
    """
    layout = keras.distribution.TensorLayout(axes, device_mesh).backend_layout
    draw = jax.jit(keras.initializers.get(initializer).__call__, out_shardings=layout,
                   static_argnames=["shape", "dtype"])
    return device_bytes(draw.lower(shape=tuple(shape), dtype="float32").compile())


class BlockwiseGlorotUniform(keras.initializers.Initializer):
    """Keras's Glorot uniform distribution, drawn ``blocks`` blocks of rows at a time into the kernel.

    ``glorot_uniform`` draws the whole ``[D, F]`` sample at once, and XLA:CPU
    holds three more temporaries the size of each device's piece while it
    does (:func:`initializer_bytes`: 32 GiB per device for the seed's 8 GiB
    piece). This draws ``D / blocks`` rows at a time in a
    ``keras.ops.fori_loop``, each block from its own seed ``[seed, i]``, into
    a zero kernel, so the temporaries are one block's (for the seed at 128
    blocks, XLA:CPU holds 384 MiB of them per device). Same bounds
    (``+-sqrt(6 / (D + F))``), other values than ``glorot_uniform``. The
    diff in docs/keep-fit.md has a copy of it (a user's script cannot import
    this module). JAX backend: ``keras.random`` takes the uint32 ``[2]``
    seed as a JAX key.

    >>> kernel = BlockwiseGlorotUniform(blocks=4)((8, 4), "float32")
    >>> tuple(kernel.shape), bool(abs(kernel).max() <= (6 / 12) ** 0.5)
    ((8, 4), True)
    >>> BlockwiseGlorotUniform(blocks=3)((8, 4))
    Traceback (most recent call last):
    ...
    ValueError: 3 blocks do not divide the kernel's 8 rows; use a block count that divides 8

    Args:
        blocks: how many blocks of rows; must divide the kernel's first dimension.
        seed: the first word of every block's seed.

    Raises:
        ValueError: for a shape that is not 2-D or a block count that does not divide its rows.
    """

    def __init__(self, blocks: int = 128, seed: int = 0):
        self.blocks, self.seed = int(blocks), int(seed)

    def __call__(self, shape, dtype=None):
        if len(shape) != 2:
            raise ValueError(f"BlockwiseGlorotUniform draws 2-D kernels, not shape {list(shape)}")
        if shape[0] % self.blocks:
            raise ValueError(f"{self.blocks} blocks do not divide the kernel's {shape[0]} rows; "
                             f"use a block count that divides {shape[0]}")
        rows, limit = shape[0] // self.blocks, (6 / (shape[0] + shape[1])) ** 0.5

        def draw(i, kernel):
            seed = keras.ops.cast(keras.ops.stack([self.seed, i]), "uint32")
            block = keras.random.uniform((rows, shape[1]), -limit, limit, dtype, seed=seed)
            return keras.ops.slice_update(kernel, (i * rows, 0), block)

        return keras.ops.fori_loop(0, self.blocks, draw, keras.ops.zeros(shape, dtype))

    def get_config(self) -> dict:
        return {"blocks": self.blocks, "seed": self.seed}


def full_shape_configs() -> list[tuple[str, object, str | None]]:
    """The distributions :func:`against_planner` compiles: ``(label, distribution, planner placement)``.

    ``ModelParallel`` on the page's ``(1, 4)`` mesh (planner: ``model_parallel``);
    ``DataParallel`` over the 4 devices, the ``MirroredStrategy`` analogue
    (``data_parallel``); trap 1's ``("model",)`` mesh, which no placement
    plans (None).
    """
    return [
        ("ModelParallel (1, 4)", model_parallel(mesh()), "model_parallel"),
        ("DataParallel (4,)", keras.distribution.DataParallel(devices=keras.distribution.list_devices()),
         "data_parallel"),
        ("ModelParallel (4,), trap 1", model_parallel(mesh((4,), ("model",)), batch_dim_name=None), None),
    ]


def against_planner(optimizer_names: tuple[str, ...] = ("rmsprop",), devices: int = 4) -> list[dict]:
    """XLA's per-device bytes (:func:`device_bytes`) for the seed at full shape, next to the planner's step peak.

    One row per :func:`full_shape_configs` entry and optimizer, batch 64;
    ``"planner"`` is :func:`snippets.lib.planner.per_device`'s ``step_peak``
    for the row's placement (bytes, or None for the trap), ``"difference"``
    is ``(planner - XLA) / XLA`` (None for the trap), ``"gathers"`` the
    all-gathers of the whole kernel in the step (:func:`gathers_of`). Leaves
    no distribution set.
    """
    rows = []
    for label, distribution, placement in full_shape_configs():
        for name in optimizer_names:
            compiled, _ = full_shape_step(distribution, name)
            xla = device_bytes(compiled)
            plan = (planner.per_device(SEED_SHAPE, "float32", name, placement, devices, batch=FULL_BATCH)[0].step_peak
                    if placement else None)
            rows.append({"config": label, "optimizer": name, "placement": placement, **xla, "planner": plan,
                         "difference": (plan - xla["total"]) / xla["total"] if plan else None,
                         "gathers": gathers_of(compiled, (FULL_D, FULL_F))})
    keras.distribution.set_distribution(None)
    return rows


def comparison_table(rows: list[dict]) -> str:
    """:func:`against_planner`'s rows as a narrow text table (tabulate), GiB (2^30 bytes) per device.

    Columns: XLA's arguments (``args``: the state and the batch), its
    temporaries (``temps``), its total (:func:`device_bytes`), the planner's
    step peak, and ``(planner - XLA) / XLA`` in %.
    """
    from tabulate import tabulate

    gib = units.GiB
    table = [(r["config"], r["optimizer"], f"{r['arguments'] / gib:.2f}", f"{r['temporaries'] / gib:.2f}",
              f"{r['total'] / gib:.2f}", f"{r['planner'] / gib:.2f}" if r["planner"] else "-",
              f"{100 * r['difference']:+.2f}%" if r["difference"] is not None else "-") for r in rows]
    return tabulate(table, headers=("config", "optimizer", "args", "temps", "XLA", "planner", "diff"),
                    colalign=("left", "left") + ("right",) * 5, disable_numparse=True)
