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


def test_the_test_process_stays_free_of_jax_and_keras():
    import sys

    assert not {"jax", "keras", "tensorflow"} & set(sys.modules)
