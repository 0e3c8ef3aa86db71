"""Keras on JAX keeps model.fit (snippets.keep_fit), in one JAX kernel.

The kernel is ``Kernel(backend="jax")``: 4 emulated CPU devices, Keras on JAX.
This process never imports JAX or Keras: ``snippets.keep_fit`` is imported
only inside the kernel-side functions, each above the test that calls it,
each setting the distribution it needs before it builds a model.
"""

import pytest

from harness import Kernel

SHARDED = ("P(None, 'model')", [(1024, 128)] * 4)
REPLICATED = ("P(None, None)", [(1024, 512)] * 4)


@pytest.fixture(scope="module")
def jax_kernel():
    with Kernel(backend="jax", deadline=300) as kernel:
        yield kernel


def sharded_against_unsharded() -> dict:
    """Kernel side: the seed model unsharded, then on a (1, 4) batch x model mesh from the same weights."""
    import keras
    import numpy as np

    from snippets import keep_fit as kf

    keras.distribution.set_distribution(None)
    x, y = kf.batch(seed=1)
    reference = kf.seed_model()
    start = reference.get_weights()
    reference_losses = kf.train(reference, x, y)
    keras.distribution.set_distribution(kf.model_parallel(kf.mesh((1, 4), ("batch", "model"))))
    model = kf.seed_model(weights=start)
    before = kf.kernel_and_slot(model)
    losses = kf.train(model, x, y)
    step = kf.compiled_step(model, x, y)
    return {
        "reference": kf.kernel_and_slot(reference), "before": before, "after": kf.kernel_and_slot(model),
        "losses": losses, "reference_losses": reference_losses,
        "weights": max(float(np.abs(a - b).max()) for a, b in zip(model.get_weights(), reference.get_weights())),
        "moved": float(np.abs(model.get_weights()[0] - start[0]).max()),
        "gathers": kf.gathers_of(step, (kf.D, kf.F)), "replicated": kf.replicated_matrices(model),
        "tolerance": kf.TOLERANCE,
    }


def test_kernel_and_velocity_are_4_column_shards_and_fit_matches_unsharded(jax_kernel):
    got = jax_kernel.call(sharded_against_unsharded)
    assert got["reference"] == {"kernel": ("one device", [(1024, 512)]), "velocity": ("one device", [(1024, 512)])}
    assert got["before"] == got["after"] == {"kernel": SHARDED, "velocity": SHARDED}
    assert len(got["losses"]) == 3 and got["losses"][2] < got["losses"][0]
    assert got["losses"] == pytest.approx(got["reference_losses"], abs=got["tolerance"], rel=0)
    assert got["weights"] <= got["tolerance"] < got["moved"]  # equal, and training did move them
    assert got["gathers"] == 0 and got["replicated"] == []


def one_dimensional_mesh() -> dict:
    """Kernel side: trap 1, a ("model",) mesh with no batch axis, against the (1, 4) mesh."""
    import keras

    from snippets import keep_fit as kf

    x, y = kf.batch()
    found = {}
    for label, mesh, batch_dim in (("flat", kf.mesh((4,), ("model",)), None), ("good", kf.mesh(), "batch")):
        keras.distribution.set_distribution(kf.model_parallel(mesh, batch_dim_name=batch_dim))
        model = kf.seed_model()
        kf.train(model, x, y, steps=1)
        step = kf.compiled_step(model, x, y)
        found[label] = {"shards": kf.kernel_and_slot(model)["kernel"], "gathers": kf.gathers_of(step, (kf.D, kf.F)),
                        "temporaries": kf.temporaries(step)}
    return found


def test_a_mesh_without_a_batch_axis_gathers_the_whole_kernel(jax_kernel):
    got = jax_kernel.call(one_dimensional_mesh)
    assert got["flat"]["shards"] == got["good"]["shards"] == SHARDED  # the shards cannot tell them apart
    assert got["flat"]["gathers"] >= 1 and got["good"]["gathers"] == 0
    kernel_bytes = 1024 * 512 * 4
    assert got["flat"]["temporaries"] >= kernel_bytes > 100 * got["good"]["temporaries"]


def renamed_layer() -> dict:
    """Kernel side: trap 2, Dense(name="projection") under the ".*dense.*kernel" key, then a key that matches."""
    import keras

    from snippets import keep_fit as kf

    found = {}
    for label, key in (("stale", kf.KERNEL_KEY), ("fixed", ".*projection.*kernel")):
        keras.distribution.set_distribution(kf.model_parallel(kf.mesh(), key=key))
        model = kf.seed_model(name="projection")
        found[label] = {"shards": kf.kernel_and_slot(model),
                        "replicated": [p.split("/", 1)[1] for p in kf.replicated_matrices(model)]}
    return found


def test_a_renamed_layer_stays_replicated_until_its_key_matches(jax_kernel):
    got = jax_kernel.call(renamed_layer)
    assert got["stale"] == {"shards": {"kernel": REPLICATED, "velocity": REPLICATED},
                            "replicated": ["projection/kernel"]}
    assert got["fixed"] == {"shards": {"kernel": SHARDED, "velocity": SHARDED}, "replicated": []}


def full_shape_against_planner() -> dict:
    """Kernel side: the seed at full shape, compiled only; XLA's per-device bytes and the planner's, Adam too."""
    import keras

    from snippets import keep_fit as kf

    rows = kf.against_planner(("rmsprop", "adam"))
    keras.distribution.set_distribution(kf.model_parallel(kf.mesh()))
    state = kf.abstract_state(kf.abstract_model())  # layouts alone, nothing compiled
    keras.distribution.set_distribution(None)
    specs = [(v.shape, str(v.sharding.spec)) for group in state for v in group if len(v.shape) == 2]
    glorot = kf.initializer_bytes("glorot_uniform", (None, "model"), kf.mesh())
    zeros = kf.initializer_bytes("zeros", (None, "model"), kf.mesh())
    return {"rows": rows, "specs": specs, "glorot": glorot, "zeros": zeros}


def test_xla_full_shape_bytes_agree_with_the_planner(jax_kernel):
    from snippets.lib import planner

    got = jax_kernel.call(full_shape_against_planner)
    gib = 2**30
    seed = 131072 * 65536 * 4
    # kernel and RMSprop velocity: 4 column shards at full shape, from the layouts alone
    assert got["specs"] == [((131072, 65536), "P(None, 'model')")] * 2
    rows = {(r["config"], r["optimizer"]): r for r in got["rows"]}
    for (config, optimizer), row in rows.items():
        assert row["outputs"] - row["aliased"] < 1024, (config, optimizer)  # the new state reuses donated buffers
        if row["placement"] is not None:
            # an independent check of the planner where the whole step is XLA-compiled
            assert abs(row["difference"]) < 0.02, (config, optimizer, row)
            assert row["planner"] == planner.per_device(
                (131072, 65536), "float32", optimizer, row["placement"], 4)[0].step_peak
    slots = {"rmsprop": 1, "adam": 2}
    for optimizer, count in slots.items():
        mp, dp, trap = (rows[(c, optimizer)] for c in ("ModelParallel (1, 4)", "DataParallel (4,)",
                                                       "ModelParallel (4,), trap 1"))
        # (1, 4) mesh: shard + slots' shards + the batch as arguments, the gradient's shard as temporaries
        assert (1 + count) * seed // 4 < mp["arguments"] < (1 + count) * seed // 4 + 64 * 2**20
        assert seed // 4 <= mp["temporaries"] < seed // 4 + 16 * 2**20
        # DataParallel: everything whole; the gradient and its all-reduced copy
        assert (1 + count) * seed <= dp["arguments"] < (1 + count) * seed + 16 * 2**20
        assert 2 * seed <= dp["temporaries"] < 2 * seed + 16 * 2**20
        # trap 1: the whole kernel gathered, a whole gradient
        assert trap["gathers"] == 1 and mp["gathers"] == dp["gathers"] == 0
        assert trap["temporaries"] >= 2 * seed
    assert round(rows[("ModelParallel (1, 4)", "rmsprop")]["total"] / gib, 2) == 24.05
    assert round(rows[("DataParallel (4,)", "rmsprop")]["total"] / gib, 2) == 128.01
    assert round(rows[("ModelParallel (4,), trap 1", "rmsprop")]["total"] / gib, 2) == 80.01
    # sharded initialisation on XLA:CPU: glorot_uniform holds 3 shard-sized temporaries, zeros none
    assert got["glorot"]["outputs"] == got["zeros"]["outputs"] == seed // 4
    assert 3 * seed // 4 <= got["glorot"]["temporaries"] < 3 * seed // 4 + 2**20
    assert got["zeros"]["temporaries"] == 0


def cpu_memory_stats():
    """Kernel side: what JAX's CPU device reports of its memory (docs/decide.md: none)."""
    import jax

    return jax.local_devices()[0].platform, jax.local_devices()[0].memory_stats()


def test_a_cpu_has_no_jax_allocator_peak_to_check_a_compiled_plan_against(jax_kernel):
    # decide.md: a --backend jax plan is checked on the GPU, where memory_stats() has peak_bytes_in_use.
    assert jax_kernel.call(cpu_memory_stats) == ("cpu", None)


def upcast_by_xla_cpu() -> dict:
    """Kernel side: for a float16 and a bfloat16 dot and convolution compiled by XLA:CPU, whether the optimized
    HLO runs the op itself in float32 (converts around it), and the dot's temporaries in bytes."""
    import jax
    import jax.numpy as jnp

    found = {}
    for name in ("float16", "bfloat16"):
        dtype = getattr(jnp, name)
        dot = jax.jit(lambda a, b: a @ b).lower(jax.ShapeDtypeStruct((256, 1024), dtype),
                                                 jax.ShapeDtypeStruct((1024, 1024), dtype)).compile()
        conv = jax.jit(lambda a, b: jax.lax.conv_general_dilated(
            a, b, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))).lower(
            jax.ShapeDtypeStruct((8, 16, 16, 32), dtype), jax.ShapeDtypeStruct((3, 3, 32, 32), dtype)).compile()
        found[name] = (any("f32" in line and " dot(" in line for line in dot.as_text().splitlines()),
                       any("f32" in line and " convolution(" in line for line in conv.as_text().splitlines()),
                       dot.memory_analysis().temp_size_in_bytes)
    return found


def test_xla_cpu_computes_16_bit_matmuls_and_convolutions_in_float32(jax_kernel):
    # plan_caveats.COMPILED_HALF_CAVEAT: a --backend jax plan under a 16-bit policy may be high. The dot's
    # temporaries are float32 copies of both operands and of its result: (256 + 1024 + 256) x 1024 x 4 bytes.
    expected = (True, True, (256 + 1024 + 256) * 1024 * 4)
    assert jax_kernel.call(upcast_by_xla_cpu) == {"float16": expected, "bfloat16": expected}


def test_the_test_process_stays_free_of_jax_and_keras():
    import sys

    assert not {"jax", "keras", "tensorflow"} & set(sys.modules)
