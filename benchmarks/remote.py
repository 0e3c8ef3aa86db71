"""The parts of the benchmarks that run inside a TensorFlow kernel.

:mod:`benchmarks.figures` calls these through :class:`harness.Kernel`,
one fresh process per device configuration, because TensorFlow fixes its
devices (and the CPU allocator's cap) once per process. Every function here
configures its process first and returns plain, picklable data.

Allocator figures come from ``tf.config.experimental.get_memory_info`` after
``reset_memory_stats`` (through :func:`snippets.lib.allocator.measure`
and :func:`snippets.lib.allocator.allocator_peak`); in CPU mode all logical CPUs
share one capped BFC allocator, so ``CPU:0``'s figures count every device.
Per-device bytes come from where each piece of a variable is placed.
"""

from __future__ import annotations

import gc
import time

from snippets.lib import allocator, devices, full_size, pieces, splits, units
from snippets.lib.seed import SEED_SHAPE

#: The seed kernel W[D, F], its device count and each device's memory (a V100-SXM2-32GB).
DEVICES = 4
DEVICE_MEMORY = "30976MiB"


def planner_seed(repeats: int = 3) -> dict:
    """Time the planner on the full seed model after imports; count the bytes it allocates.

    Configures CPU mode (4 logical CPUs, 30976 MiB cap) so the allocator
    keeps statistics, imports Keras, TensorFlow and :mod:`snippets.decide`,
    then runs :func:`snippets.decide.benchmark` (build the [131072, 65536]
    model under ``StatelessScope``, read its weights, plan float32 + RMSprop
    mirrored over 4 devices, rank remedies) inside
    :func:`snippets.lib.allocator.allocator_peak`.

    Returns:
        ``{"first_s", "best_s", "allocated_peak_bytes", "allocated_after_bytes"}``.
    """
    devices.configure(DEVICES, DEVICE_MEMORY)
    import keras  # noqa: F401  (imports are not timed)
    import tensorflow as tf

    from snippets import decide
    from snippets.lib import allocator

    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    peak, timing = allocator.allocator_peak(lambda: decide.benchmark(repeats))
    after = tf.config.experimental.get_memory_info("CPU:0")["current"] - before
    return {"first_s": timing["first_s"], "best_s": timing["best_s"],
            "allocated_peak_bytes": peak, "allocated_after_bytes": after}


def planner_vs_allocator() -> list[dict]:
    """:func:`snippets.memory_budget.allocator_check` under its documented set-up (4 CPUs, 1024 MiB cap).

    Returns:
        One ``{"name", "planned", "measured", "error"}`` per configuration.
    """
    devices.configure(DEVICES, "1024MiB")
    from snippets import memory_budget

    return memory_budget.allocator_check()


def _tf_slices(setup, kind: str) -> dict:
    """Column- or row-parallel Dense (``tf.device`` slices) with :class:`Uninitialized` shards."""
    from snippets.lib import layers

    d, f = SEED_SHAPE
    from snippets.lib import initializers  # imports Keras: only inside a kernel

    layer = layers.make_layer(kind, f, setup.devices, use_bias=False, kernel_initializer=initializers.Uninitialized())
    measured = allocator.measure(lambda: layer.build((None, d)), setup.devices[0])
    per_device = pieces.bytes_per_device(pieces.of_variables(layer.weights))
    del layer, measured["result"]
    return {"per_device": per_device, "peak": measured["peak"], "current": measured["current"]}


def _dtensor(setup) -> dict:
    """A DTensor of layout ``[UNSHARDED, "model"]`` packed from per-device ``Empty`` pieces."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from snippets.lib import layers
    from snippets import dtensor as ds

    mesh = ds.make_mesh(setup)
    layout = ds.kernel_layout(mesh)
    local = splits.layout_local_shape(SEED_SHAPE, [None, ds.MODEL], ds.mesh_axes(mesh))

    def build():
        parts = []
        for device in setup.devices:
            parts.append(allocator.reserve(local, "float32", device))
        return dtensor.pack(parts, layout)

    measured = allocator.measure(build, setup.devices[0])
    per_device: dict[str, int] = {}
    for piece in pieces.of_variable(measured["result"]):
        per_device[piece.device] = per_device.get(piece.device, 0) + piece.nbytes
    del measured["result"]
    return {"per_device": per_device, "peak": measured["peak"], "current": measured["current"]}


def _mirrored_small(setup) -> dict:
    """MirroredStrategy at [1024, 256]: its full shape cannot be created (that is the OOM)."""
    from snippets import placement

    variable = placement.mirrored_variable(setup, (1024, 256))
    per_device: dict[str, int] = {}
    for component in pieces.of_variable(variable):
        per_device[component.device] = per_device.get(component.device, 0) + component.nbytes
    del variable
    return {"per_device": per_device, "peak": None, "current": None, "shape": (1024, 256)}


METHODS = {
    "column": lambda setup: _tf_slices(setup, "column"),
    "row": lambda setup: _tf_slices(setup, "row"),
    "dtensor": _dtensor,
    "mirrored": _mirrored_small,
}


def sharding(methods: list[str], runs: int) -> dict[str, list[dict]]:
    """Reserve the seed kernel under each sharding method ``runs`` times; per-device bytes and peaks.

    CPU mode with a pool that holds the four 8 GiB shards
    (:func:`snippets.lib.full_size.full_shape_pool`); shards are reserved
    with ``tf.raw_ops.Empty(init=False)``, so no page is touched.

    Returns:
        For each method, one dict per run: ``per_device`` (device -> bytes),
        ``peak`` and ``current`` (allocator bytes during / after creation,
        None where not measured), ``rss`` (process RSS afterwards) and
        ``pool_bytes`` (the allocator's cap).
    """
    import psutil

    from snippets.lib import layers

    setup = devices.configure(DEVICES, DEVICE_MEMORY, cpu_pool=full_size.full_shape_pool())
    results: dict[str, list[dict]] = {}
    for method in methods:
        results[method] = []
        for _ in range(runs):
            started = time.perf_counter()
            row = METHODS[method](setup)
            gc.collect()
            row["seconds"] = time.perf_counter() - started
            row["rss"] = psutil.Process().memory_info().rss
            row["pool_bytes"] = setup.pool_mib * units.MiB
            results[method].append(row)
    return results
