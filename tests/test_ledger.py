"""Planner == ledger byte for byte, and planner within 2% of the capped allocator's peak.

One kernel with 4 logical CPUs under a 1024 MiB cap builds the seed layer at
CI scale ([1024, 256] kernel) under each placement and reads what each device
holds; the same kernel first measures allocator peaks at [16384, 1024] (64 MiB,
the shape of field case F18).
ParameterServerStrategy changes the process's device names, so it gets its
own kernel.
"""

import pytest

from harness import Kernel
from snippets.lib import devices, ledger, planner
from snippets import memory_budget

SHAPE = (1024, 256)
MiB = 2**20


@pytest.fixture(scope="module")
def four():
    with Kernel() as k:
        setup = k.call(devices.configure, 4, "1024MiB")
        assert setup.mode == "cpu"
        # The allocator check goes first, while the allocator has no holes
        # (see snippets.memory_budget.allocator_check_fresh for why that matters).
        rows = k.call(memory_budget.allocator_check, (16384, 1024))
        yield k, setup, rows


PLACEMENTS = [
    (strategy, optimizer, "float32", None)
    for strategy in ("single", "mirrored", "column", "row")
    for optimizer in (None, "sgd_momentum", "rmsprop", "adam_amsgrad")
] + [
    ("dtensor_column", None, "float32", None),
    ("dtensor_row", None, "float16", None),
    ("mirrored", "adam", "float16", None),
    ("mirrored", "rmsprop", "bfloat16", None),
    ("mirrored", "adam", None, "mixed_float16"),
    ("column", "rmsprop", None, "mixed_float16"),
    ("single", "adafactor", "float32", None),
    ("mirrored", "adafactor", "float32", None),
]


@pytest.mark.parametrize("strategy, optimizer, dtype, policy", PLACEMENTS)
def test_planner_equals_ledger(four, strategy, optimizer, dtype, policy):
    kernel, setup, _ = four
    planned, counted = kernel.call(ledger.compare, setup, SHAPE, dtype or "float32",
                                  optimizer, strategy, policy)
    assert len(counted) == 4
    assert planned == counted
    # The ledger really found something on every device that should hold a piece.
    holders = [b for b in counted if b.weights]
    assert len(holders) == (1 if strategy == "single" else 4)
    if optimizer in ("rmsprop", "adam_amsgrad"):
        assert all(b.slots and b.gradients for b in holders)


@pytest.mark.parametrize("optimizer", [None, "rmsprop", "adam"])
def test_offload_planner_equals_ledger_and_host(four, optimizer):
    # CPU:0 plays the host; the four emulated GPUs compute.
    kernel, setup, _ = four
    planned, counted = kernel.call(ledger.compare, setup, SHAPE, "float32", optimizer, "offload")
    assert len(counted) == 4 and planned == counted
    assert {b.weights + b.slots for b in counted} == {0}
    assert {b.gradients for b in counted} == {(1024 * 256 + 256) * 4 if optimizer else 0}
    planned_host, held_host = kernel.call(ledger.host_holdings, setup, SHAPE, "float32", optimizer)
    slot_count = {None: 0, "rmsprop": 1, "adam": 2}[optimizer]
    assert planned_host == held_host == (1 + slot_count) * (1024 * 256 + 256) * 4


def mirrored_model_vs_plan(setup, input_dim: int = 1024, units: int = 256, optimizer: str = "rmsprop"):
    """Kernel side: the seed model built for real under MirroredStrategy; (planned, held) per device.

    Planned rows come from the model's own weights read without allocating
    (snippets.decide.model_weights), with gradients left out: the ledger reads
    what stays resident between steps (weights and slots).
    """
    import tensorflow as tf

    from snippets.lib import optimizers
    from snippets import decide
    from snippets.lib.seed import seed_model

    weights = decide.model_weights(seed_model, input_dim, units)
    strategy = tf.distribute.MirroredStrategy(setup.devices)
    with strategy.scope():
        model = seed_model(input_dim, units)
        model.compile(optimizer=optimizers.make_optimizer(optimizer), loss="mean_squared_error")
        model.optimizer.build(model.trainable_variables)
    held = ledger.model_ledger(model, setup.devices)
    planned = [planner.DeviceBudget(b.device, b.weights, 0, b.slots, 0, 0)
               for b in planner.plan(weights, optimizer, "mirrored", len(setup.devices), reserve=0)]
    return planned, held


def test_compiled_seed_model_under_mirrored_strategy(four):
    kernel, setup, _ = four
    planned, held = kernel.call(mirrored_model_vs_plan, setup)
    assert planned == held
    assert [b.weights for b in held] == [(1024 * 256 + 256) * 4] * 4
    assert [b.slots for b in held] == [(1024 * 256 + 256) * 4] * 4


def test_mirrored_ledger_is_a_full_copy_per_replica(four):
    kernel, setup, _ = four
    held = kernel.call(ledger.build, setup, SHAPE, "float32", "rmsprop", "mirrored")
    kernels = [h for h in held if h.kind == "weights" and h.shape == SHAPE]
    assert sorted(h.device[-5:] for h in kernels) == ["CPU:1", "CPU:2", "CPU:3", "CPU:4"]
    assert {h.nbytes for h in held if h.shape == SHAPE} == {1024 * 256 * 4}
    assert {h.kind for h in held if h.shape == SHAPE} == {"weights", "slots", "gradients"}


def test_adafactor_factored_slots_are_not_colocated_with_slices(four):
    # Measured deviation, documented in docs/memory-budget.md: Keras 3.15's
    # Adafactor makes its factored rows/columns with add_variable (no
    # colocation), so under tf.device slices they land on the default device.
    kernel, setup, _ = four
    planned, counted = kernel.call(ledger.compare, setup, SHAPE, "float32", "adafactor", "column")
    assert [b.weights for b in planned] == [b.weights for b in counted]
    assert sum(b.slots for b in planned) == sum(b.slots for b in counted)
    assert counted[0].slots > planned[0].slots and counted[1].slots < planned[1].slots


@pytest.fixture(scope="module")
def allocator_rows(four):
    return four[2]


def test_planner_within_2_percent_of_allocator_peak(allocator_rows):
    assert len(allocator_rows) >= 10
    worst = max(allocator_rows, key=lambda row: abs(row["error"]))
    print(f"max planner-vs-allocator error: {worst['error']:+.4%} ({worst['name']})")
    for row in allocator_rows:
        assert abs(row["error"]) <= 0.02, row
    phases = {row["name"].split()[0] for row in allocator_rows}
    assert {"state", "Dense"} <= phases


F18_CASES = ("tf.zeros variable", "GlorotUniform variable", "Dense glorot float32")


def test_F18_initialisation_peaks(allocator_rows):
    variable = 16384 * 1024 * 4
    assert variable == 67108864
    rows = {row["name"]: row for row in allocator_rows}
    ratio = {name: rows[name]["measured"] / variable for name in F18_CASES}
    assert ratio["tf.zeros variable"] == pytest.approx(1.0, abs=0.01)
    assert ratio["GlorotUniform variable"] == pytest.approx(3.0, abs=0.01)
    assert ratio["Dense glorot float32"] == pytest.approx(3.0, abs=0.01)


def test_F18_full_size_kernel_can_peak_near_96_GiB_while_initialising():
    from snippets.lib.units import GiB
    from snippets.lib.planner import per_device

    first = per_device((131072, 65536), "float32", None, "mirrored", 4, reserve=0)[0]
    assert first.init_peak == 96 * GiB


def test_parameter_server_shards_and_slots_on_the_coordinator():
    with Kernel() as kernel:
        setup = kernel.call(devices.configure, 4, "1024MiB")
        planned, counted = kernel.call(ledger.compare, setup, SHAPE, "float32", "rmsprop",
                                      "parameter_server")
        assert planned == counted
        assert [b.weights for b in counted] == [(256 * 256 + 64) * 4] * 4
        held = kernel.call(ledger.build, setup, SHAPE, "float32", "rmsprop", "parameter_server")
        host = kernel.call(planner.host_bytes, [SHAPE, (256,)], "rmsprop", "parameter_server", 4)
    off_ps = [h for h in held if not h.device.startswith("/job:ps/")]
    assert {(h.kind, h.shape) for h in off_ps} == {("slots", SHAPE), ("slots", (256,))}
    assert host == sum(h.nbytes for h in off_ps)
