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

Sources: ``keras/src/distribution/distribution_lib.py`` (``DeviceMesh``,
``LayoutMap``, ``ModelParallel``) and ``keras/src/backend/jax/trainer.py``
(``train_step``), Keras 3.15.1; JAX 0.10.2.
"""

import os
import re

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

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
