"""The rule plan's words (snippets/lib/rule_report.py): a lower bound never reads "fits".

A rule figure leaves out the activations of convolutions, attention, recurrence and embeddings, so for
such a model "does not fit" stands and "fits" is not known; the table, the verdict, the JSON and the
remedies say so. A split placement keeps whole the model's weights it cannot divide, and says which.
No Keras here: the weights are plain shapes with Keras's paths.
"""

import pytest

from snippets.lib import planner, rule_remedies, units
from snippets.lib.rule_report import (as_json, budget_table, fits_word, report, rule_how, uncounted, verdict,
                                      whole_json, whole_line)

MiB = units.MiB
CONV = [planner.Weight((3, 3, 64, 64), path="model/conv2d/kernel"), planner.Weight((64,), path="model/conv2d/bias"),
        planner.Weight((64, 10), path="model/dense/kernel")]


def test_uncounted_names_every_weight_whose_activations_the_rule_leaves_out():
    assert uncounted(CONV) == 1  # the convolution; the Dense kernel is counted, the bias has rank 1
    assert uncounted(CONV[1:]) == 0 and uncounted(CONV[1:], per_position=2) == 2
    recurrent = planner.Weight((8, 32), path="model/lstm/lstm_cell/kernel")
    assert uncounted([recurrent, planner.Weight((100, 8), path="model/embedding/embeddings")]) == 2


def test_a_lower_bound_under_capacity_is_not_known_to_fit():
    budgets = planner.plan(CONV, "adam", "single", 1, batch=32)
    peak = max(b.total for b in budgets)
    roomy = peak + 100 * MiB
    said = verdict(budgets, roomy, bound=True)
    assert said.startswith("Not known to fit: the fullest device (device 0) peaks at at least ")
    assert "must fit in the 100 MiB left" in said and "Fits" not in said
    assert verdict(budgets, roomy).startswith("Fits: ")  # the same figures, not a bound: a plain yes
    assert budget_table(budgets, roomy, bound=True).splitlines()[-1].split()[-1] == "unknown"
    assert [fits_word(1, 2), fits_word(1, 2, True), fits_word(3, 2, True)] == ["yes", "unknown", "NO"]
    planned = as_json(budgets, roomy, bound=True)
    assert planned["fits"] is None and planned["lower_bound"] is True and planned["devices"][0]["fits"] is None
    text = report(CONV, "adam", "single", 1, roomy, batch=32, bound=True)
    assert "Not known to fit" in text and "Remedies" not in text  # nothing to remedy that is not known to be short


def test_a_lower_bound_over_capacity_does_not_fit_and_its_remedies_say_they_are_bounds_too():
    budgets = planner.plan(CONV, "adam", "single", 1, batch=32)
    tight = max(b.total for b in budgets) - 1
    said = verdict(budgets, tight, bound=True)
    assert said.startswith("Does not fit: device 0 peaks at at least ") and "short by at least 1 B" in said
    planned = as_json(budgets, tight, bound=True)
    assert planned["fits"] is False and planned["devices"][0]["fits"] is False
    text = report(CONV, "adam", "single", 1, tight, batch=32, bound=True, chosen=["Trains with loss mse."])
    assert "Remedies whose lower bound fits, fewest changes first (measure the one you pick):" in text
    assert " to spare" in text and all("at most" in line for line in text.splitlines() if line.endswith(" to spare"))
    # What the source chose comes with the verdict, before the remedies.
    assert text.index("Trains with loss mse.") < text.index("Remedies")


def test_one_device_remedies_include_the_step_without_a_strategy():
    # Keras compiles a strategy-free step with XLA on a GPU host and a MirroredStrategy step without
    # (placements.resolve_xla): on one device they are two placements with different update temporaries.
    seed = [planner.Weight((4096, 4096), path="sequential/dense/kernel")]
    single = max(b.total for b in planner.plan(seed, "rmsprop", "single", 1, xla="auto"))
    mirrored = max(b.total for b in planner.plan(seed, "rmsprop", "mirrored", 1, xla="auto"))
    assert single < mirrored
    found = rule_remedies.remedies(seed, "rmsprop", "mirrored", 1, single, xla="auto")
    assert found and found[0].strategy == "single" and found[0].label(1) == "one device, no strategy"
    assert rule_remedies.Remedy("mirrored", "as given", (), 1).label(1) == "MirroredStrategy over one device"
    # Over several devices "single" would leave all but one idle: never a remedy.
    assert all(r.strategy != "single" for r in rule_remedies.remedies(seed, "rmsprop", "mirrored", 2, single))


def test_rule_how_names_what_would_measure_the_step():
    how = rule_how(CONV, measure=["--method auto"])
    assert "a LOWER BOUND, since the activations of the model's 1 weight(s) of rank 2 or more that are not Dense" in how
    assert how.endswith("measure its training step with --method auto.")
    assert rule_how(CONV, too_large=True).endswith("measure its training step on a host with the memory for it "
                                                   "(this command, run there).")
    dense = CONV[1:]
    assert "LOWER BOUND" not in rule_how(dense) and "held to each device's measured step peak" in rule_how(dense)
    sequence = rule_how(dense, per_position=2, measure=["--strategy single or mirrored"])
    assert ("since the activations of its 2 Dense layer(s) that run on every position of a sequence or image are "
            "counted once per sample, not per position; measure its training step with --strategy single or "
            "mirrored.") in sequence
    both = rule_how(CONV, per_position=1)
    assert "are not counted and those of its 1 Dense layer(s) that run on every position" in both


# A reader's MLP whose one-unit head no 2-way split divides: Dense(4096) -> Dense(1).
HEAD = [planner.Weight((1024, 4096), path="mlp/dense/kernel"), planner.Weight((4096,), path="mlp/dense/bias"),
        planner.Weight((4096, 1), path="mlp/head/kernel"), planner.Weight((1,), path="mlp/head/bias")]


@pytest.mark.parametrize("strategy, kept", [
    ("column", ["mlp/head/kernel", "mlp/head/bias"]),  # split on the last axis: 1 unit does not halve
    ("row", ["mlp/dense/bias", "mlp/head/bias"]),  # rows halve; RowParallelDense keeps its bias on device 0
    ("model_parallel", ["mlp/head/kernel", "mlp/head/bias"]),
    ("tf_keras_dtensor", ["mlp/head/kernel", "mlp/head/bias"]),
    ("parameter_server", []),  # FixedShardsPartitioner splits unevenly; the worker reads it whole anyway
    ("mirrored", []),
])
def test_a_split_keeps_whole_only_the_model_weights_it_cannot_divide(strategy, kept):
    assert [w.path for w in planner.held_whole(HEAD, strategy, 2)] == kept


def test_the_sites_layers_split_dense_layers_only():
    # A conv's kernel divides 2 ways, but the site's tf.device layers replace Dense layers alone:
    # under column or row it stays whole on device 0; a LayoutMap splits it.
    cnn = [planner.Weight((3, 3, 8, 16), path="cnn/conv2d/kernel"), planner.Weight((16,), path="cnn/conv2d/bias"),
           planner.Weight((1024, 10), path="cnn/dense/kernel"), planner.Weight((10,), path="cnn/dense/bias")]
    assert [w.path for w in planner.held_whole(cnn, "column", 2)] == ["cnn/conv2d/kernel", "cnn/conv2d/bias"]
    assert planner.held_whole(cnn, "model_parallel", 2) == [] and planner.held_whole(cnn, "column", 1) == []
    conv = (3 * 3 * 8 * 16 + 16) * 4
    assert [b.weights for b in planner.plan(cnn, None, "column", 2)] == [conv + 1024 * 10 * 4 // 2 + 20, 1024 * 10 * 4 // 2 + 20]


def test_a_column_plan_holds_an_undivided_head_whole_on_device_0_only():
    budgets = planner.plan(HEAD, "adam", "column", 2, batch=8)
    split = (1024 * 4096 + 4096) * 4 // 2
    head = (4096 + 1) * 4
    assert [b.weights for b in budgets] == [split + head, split]
    assert [b.gradients for b in budgets] == [split + head, split]
    assert [b.slots for b in budgets] == [2 * (split + head), 2 * split]  # Adam's two slots
    # The head runs whole on device 0: its input [8, 4096] and three [8, 1] tensors join device 0's activations.
    assert budgets[0].activations - budgets[1].activations == (8 * 4096 + 3 * 8) * 4


def test_a_layout_map_plan_replicates_an_undivided_head_on_every_device():
    budgets = planner.plan(HEAD, "adam", "model_parallel", 2, batch=8)
    split, head = (1024 * 4096 + 4096) * 4 // 2, (4096 + 1) * 4
    assert [b.weights for b in budgets] == [split + head] * 2


def test_a_parameter_server_worker_reads_uneven_shards_whole():
    worker = planner.plan(HEAD, "adam", "parameter_server", 3, batch=8)[0]
    assert worker.weights == sum(units.tensor_bytes(w.shape, w.dtype) for w in HEAD)


def test_a_bare_shape_a_split_cannot_divide_is_still_refused():
    # No path: the one weight the reader asked to split (the seed's --shape); holding it whole would answer another question.
    with pytest.raises(ValueError, match=r"^cannot split dimension 1 of shape \[4096, 1\] \(size 1\) into 2 equal shards"):
        planner.plan([(4096, 1)], "adam", "column", 2)


def test_the_report_names_what_a_split_keeps_whole_and_the_json_lists_it():
    text = report(HEAD, "adam", "column", 2, capacity=1024 * MiB, batch=8)
    assert ("Held whole on device 0 (the site's tensor-parallel layers split Dense layers only, each where 2 "
            "divides its split axis, and leave the rest on the default device): mlp/head/kernel [4096, 1], "
            "mlp/head/bias [1]; 16 KiB in all.") in " ".join(text.split())
    assert whole_json(HEAD, "column", 2)["weights"][1] == {"path": "mlp/head/bias", "shape": [1], "bytes": 4}
    assert whole_json(HEAD, "parameter_server", 2) is None and whole_line(HEAD, "mirrored", 2) is None
    everything = whole_line(HEAD[2:], "model_parallel", 2)
    assert everything.startswith("Every weight is held whole on every device") and "splits nothing" in everything


def test_a_layout_map_replicates_a_scalar_and_says_so():
    scaled = [*HEAD, planner.Weight((), path="mlp/scale/alpha")]
    assert [w.path for w in planner.held_whole(scaled, "model_parallel", 2)][-1] == "mlp/scale/alpha"
    assert "or they have none" in whole_line(scaled, "model_parallel", 2)


def test_a_tf_keras_reader_is_offered_its_own_placement_in_another_precision():
    wide = [planner.Weight((8192, 8192), path="m/dense/kernel"), planner.Weight((8192,), path="m/dense/bias")]
    peak = max(b.total for b in planner.plan(wide, "adam", "tf_keras_dtensor", 2))
    found = rule_remedies.remedies(wide, "adam", "tf_keras_dtensor", 2, peak - 1)
    first = found[0]
    assert (first.strategy, first.changes) == ("tf_keras_dtensor", 1) and first.label(2).startswith(
        "2-way tf_keras DTensor column shard + ")


def test_remedies_name_the_weights_a_split_keeps_whole_and_skip_a_split_of_nothing():
    budgets = planner.plan(HEAD, "adam", "mirrored", 2, batch=8)
    tight = max(b.total for b in budgets) - 1
    found = rule_remedies.remedies(HEAD, "adam", "mirrored", 2, tight, batch=8)
    labels = [r.label(2) for r in found]
    assert "2-way column shard (2 weights held whole)" in labels and "2-way row shard (2 weights held whole)" in labels
    # Nothing of the head alone splits 2 ways on its last axis: no column remedy at all, though row's fits.
    roomy = rule_remedies.remedies(HEAD[2:], "adam", "mirrored", 2, 1024 * MiB, batch=8)
    strategies = {r.strategy for r in roomy}
    assert "row" in strategies and "column" not in strategies


def test_an_uneven_batch_is_planned_for_its_fullest_replica():
    # 100 samples over 3 replicas: 34, 33 and 33; the device that peaks holds 34.
    kernel = (256, 128)
    uneven = planner.dense_activations(kernel, "mirrored", 3, 100)
    assert uneven == planner.dense_activations(kernel, "mirrored", 3, 102) > planner.dense_activations(kernel, "mirrored", 3, 99)
