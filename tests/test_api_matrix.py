"""The API matrix page is what the probes observe on the installed TensorFlow / Keras.

One kernel (4 logical CPUs, 256 MiB cap) runs every probe of snippets.api_matrix, the
parameter-server ones last (they start an in-process cluster). The table rendered from those
observations must equal the table committed in docs/api-matrix.md, so an upgrade that changes a
cell fails here; the facts the site's argument rests on are also asserted one by one, so a
regenerated table cannot quietly turn them around.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from snippets.lib import pieces, units
from snippets import api_matrix
from snippets.api_matrix import Observation

PAGE = Path(__file__).resolve().parents[1] / "docs" / "api-matrix.md"


@pytest.fixture(scope="module")
def observed_both() -> tuple[dict[str, Observation], list[Observation]]:
    """The matrix's observations by row label, and the Keras table's rows (TF kernel, then a JAX kernel)."""
    from harness import Kernel

    with Kernel() as kernel:
        observations, tf_rows = kernel.call(api_matrix.observe_tf)
    with Kernel(backend="jax", deadline=120) as kernel:
        jax_rows = [kernel.call(api_matrix.keras3_jax_fit)]
    with Kernel() as kernel:  # its own devices: TensorFlow's uncapped CPU allocator
        dtensor_rows = [kernel.call(api_matrix.tf_keras_dtensor)]
    return {o.api: o for o in observations}, api_matrix.keras_rows(tf_rows, jax_rows, dtensor_rows)


@pytest.fixture(scope="module")
def observed(observed_both) -> dict[str, Observation]:
    return observed_both[0]


@pytest.fixture(scope="module")
def keras_rows(observed_both) -> dict[str, Observation]:
    return {o.api: o for o in observed_both[1]}


def piece(device, shape):
    return pieces.Piece(device, shape, "float32", units.tensor_bytes(shape))


def by_start(observed: dict[str, Observation], start: str) -> Observation:
    (match,) = [o for api, o in observed.items() if api.startswith(start)]
    return match


def test_committed_table_matches_what_the_probes_observe(observed):
    committed = api_matrix.committed_matrix(PAGE.read_text(encoding="utf-8"))
    fresh = api_matrix.matrix(list(observed.values()))
    assert committed == fresh, (
        "docs/api-matrix.md differs from what TensorFlow/Keras do now; review, then run "
        "python -m snippets.api_matrix --write docs/api-matrix.md"
    )


def test_committed_keras_table_matches_what_the_probes_observe(keras_rows):
    committed = api_matrix.committed_matrix(PAGE.read_text(encoding="utf-8"), api_matrix.KERAS_BEGIN,
                                            api_matrix.KERAS_END)
    assert committed == api_matrix.keras_matrix(list(keras_rows.values())), (
        "docs/api-matrix.md's Keras table differs from what the probes observe now; review, then run "
        "python -m snippets.api_matrix --write docs/api-matrix.md"
    )


def test_which_keras_shards(keras_rows):
    on_tf, on_jax, dtensor, ps = (keras_rows[label] for label in (
        "Keras 3 on TF: `ModelParallel` + `LayoutMap`", "Keras 3 on JAX: `ModelParallel` + `LayoutMap`",
        "tf_keras: DTensor `LayoutMap`", "tf_keras: `ParameterServerStrategy` + `fit`"))
    # Keras 3 on TensorFlow: one full copy, trained
    assert [p.shape for p in on_tf.pieces] == [(1024, 512)] and on_tf.outcome.startswith("yes")
    # Keras 3 on JAX: a NamedSharding, 4 column shards, 8 GiB of the seed each, all updated by fit
    assert on_jax.made == "NamedSharding" and on_jax.where() == [(f"CPU:{i}", (1024, 128)) for i in range(4)]
    assert api_matrix.seed_piece_bytes(on_jax) == 8 * 2**30
    assert on_jax.outcome == "yes: loss finite, 4 of 4 pieces updated"
    # tf_keras + DTensor: DVariable 4 ways
    assert dtensor.made == "DVariable" and [p.shape for p in dtensor.pieces] == [(1024, 128)] * 4
    # tf_keras + ParameterServerStrategy: a ShardedVariable over the 2 ps tasks, and fit trains it from NumPy
    assert ps.made == "ShardedVariable" and sorted(ps.where()) == [("ps:0/CPU:0", (512, 512)), ("ps:1/CPU:0", (512, 512))]
    assert ps.outcome == "yes: loss finite, 2 of 2 pieces updated"


def test_mirrored_strategy_copies_and_never_shards(observed):
    obs = by_start(observed, "`tf.distribute.MirroredStrategy`")
    assert obs.made == "MirroredVariable"
    assert obs.where() == [(f"CPU:{i}", (1024, 512)) for i in range(1, 5)]
    assert api_matrix.seed_piece_bytes(obs) == 34359738368


def test_keras_distribution_does_not_shard_on_tensorflow(observed):
    obs = by_start(observed, "`keras.distribution.ModelParallel`")
    assert obs.exists and obs.outcome == "no error"
    assert [p.shape for p in obs.pieces] == [(1024, 512)]


def test_dtensor_and_tf_device_blocks_shard_four_ways(observed):
    for start in ("`tf.experimental.dtensor`", "`tf.device`, one column block"):
        obs = by_start(observed, start)
        assert obs.where() == [(f"CPU:{i}", (1024, 128)) for i in range(1, 5)], start
        assert api_matrix.seed_piece_bytes(obs) == 8589934592


def test_tf_device_places_a_plain_variable_whole(observed):
    obs = by_start(observed, "`tf.device`, one variable")
    assert obs.where() == [("CPU:4", (1024, 512))]


def test_central_storage_keeps_one_unsplit_copy(observed):
    obs = by_start(observed, "`tf.distribute.experimental.CentralStorageStrategy`")
    assert len(obs.pieces) == 1 and obs.pieces[0].shape == (1024, 512)


def test_model_parallelism_does_not_exist(observed):
    obs = by_start(observed, "`tf.distribute.experimental.ModelParallelism`")
    assert not obs.exists and obs.outcome.startswith("AttributeError")


def test_parameter_server_shards_trains_in_a_loop_and_fit_refuses(observed):
    halves = [("ps:0/CPU:0", (512, 512)), ("ps:1/CPU:0", (512, 512))]
    assert by_start(observed, "`ParameterServerStrategy(variable_partitioner").where() == halves
    assert by_start(observed, "`ParameterServerStrategy` without").where() == [("ps:0/CPU:0", (1024, 512))]
    loop = by_start(observed, "Keras 3 `Dense` under that strategy, `ClusterCoordinator`")
    assert loop.made == "Variable(ShardedVariable)" and loop.where() == halves
    assert loop.outcome.endswith("2 of 2 shards updated") and "(finite)" in loop.outcome
    fit = by_start(observed, "Keras 3 `Dense` under that strategy, `Model.fit")
    assert fit.outcome.startswith("ValueError") and "create_per_worker_dataset" in fit.outcome


# --- the table logic, without TensorFlow -------------------------------------


def test_sharding_and_seed_scaling():
    full = Observation("a", True, "V", (piece("CPU:0", (1024, 512)),) * 2)
    rows = Observation("b", True, "V", (piece("ps:0/CPU:0", (512, 512)), piece("ps:1/CPU:0", (512, 512))))
    assert api_matrix.sharding(full) == "no: a full copy on each device"
    assert api_matrix.sharding(rows) == "yes, 2 ways"
    assert api_matrix.seed_piece_bytes(rows) == units.tensor_bytes([65536, 65536]) == 17179869184
    assert api_matrix.seed_piece_bytes(Observation("c", False)) is None


def test_replace_matrix_round_trips_and_needs_markers():
    page = f"intro\n{api_matrix.BEGIN}\nold\n{api_matrix.END}\nrest\n"
    new = api_matrix.replace_matrix(page, "| new |")
    assert api_matrix.committed_matrix(new) == "| new |" and new.endswith(f"{api_matrix.END}\nrest\n")
    with pytest.raises(ValueError, match="no generated block"):
        api_matrix.committed_matrix("no markers here")
    keras_page = f"{page}{api_matrix.KERAS_BEGIN}\nold\n{api_matrix.KERAS_END}\n"
    both = api_matrix.replace_matrix(keras_page, "| k |", api_matrix.KERAS_BEGIN, api_matrix.KERAS_END)
    assert api_matrix.committed_matrix(both, api_matrix.KERAS_BEGIN, api_matrix.KERAS_END) == "| k |"
    assert api_matrix.committed_matrix(both) == "old"
    assert api_matrix.short("x" * 60) == "x" * 45 + "..." and api_matrix.short("ok") == "ok"
