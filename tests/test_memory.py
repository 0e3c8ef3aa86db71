"""The planner's arithmetic (snippets.lib.planner); slot counts run in a kernel (Keras)."""

import pytest

from harness import Kernel
from snippets.lib import devices, hardware, optimizers, placements, planner
from snippets.lib.units import GiB, MiB
from snippets.lib.planner import per_device, plan

SEED = (131072, 65536)


def resident(budget):
    return budget.weights + budget.gradients + budget.slots


def test_seed_inference_mirrored_is_a_full_copy_per_replica():
    budgets = per_device(SEED, "float32", None, "mirrored", 4, initializer="zeros")
    assert [b.device for b in budgets] == [0, 1, 2, 3]
    assert {b.weights for b in budgets} == {34359738368}
    assert {b.gradients + b.slots + b.update_temporaries for b in budgets} == {0}
    assert {b.reserve for b in budgets} == {0}  # capacities are the allocator's: nothing to add
    # x[16, 131072] and y[16, 65536] float32: each replica sees a quarter of the batch of 64.
    assert {b.activations for b in budgets} == {16 * (131072 + 65536) * 4}
    assert budgets[0].total == 34359738368 + budgets[0].activations


def test_single_keeps_everything_on_device_0():
    budgets = per_device(SEED, "float32", None, "single", 4, initializer="zeros", reserve=0)
    assert [b.total - b.activations for b in budgets] == [32 * GiB, 0, 0, 0]
    assert [b.activations > 0 for b in budgets] == [True, False, False, False]


@pytest.mark.parametrize("strategy, piece", [("column", (131072, 16384)), ("row", (32768, 65536))])
def test_sharded_strategies_hold_a_quarter(strategy, piece):
    assert placements.local_shape(SEED, strategy, 4) == piece
    budgets = per_device(SEED, "float32", None, strategy, 4, initializer="zeros")
    assert [b.weights for b in budgets] == [8 * GiB] * 4


def test_rank_one_weights_row_replicated_column_sharded():
    assert placements.local_shape((65536,), "row", 4) == (65536,)
    assert placements.local_shape((65536,), "column", 4) == (16384,)


@pytest.mark.parametrize("strategy", ["column", "row"])
def test_uneven_split_names_dimension_size_and_count(strategy):
    with pytest.raises(ValueError) as error:
        per_device((1001, 999), "float32", None, strategy, 4)
    axis, size = (1, 999) if strategy == "column" else (0, 1001)
    assert f"cannot split dimension {axis} of shape [1001, 999] (size {size}) into 4 equal shards" in str(error.value)


def test_a_parameter_server_worker_reads_an_unevenly_partitioned_weight_whole():
    # FixedShardsPartitioner(4) splits 1001 rows 251, 250, 250, 250; the worker reads all of them.
    worker = per_device((1001, 999), "float32", "rmsprop", "parameter_server", 4)[0]
    assert worker.weights == worker.gradients == 1001 * 999 * 4 and worker.slots == 0


@pytest.mark.parametrize("dtype, nbytes", [("float32", 32 * GiB), ("float16", 16 * GiB), ("bfloat16", 16 * GiB)])
def test_dtypes(dtype, nbytes):
    assert per_device(SEED, dtype, None, "mirrored", 4)[1].weights == nbytes


def test_mixed_float16_keeps_float32_variables_plus_a_float16_copy():
    budget = per_device(SEED, "float32", None, "mirrored", 4, "mixed_float16", initializer="zeros")[0]
    assert budget.weights == 32 * GiB
    assert budget.update_temporaries == 16 * GiB
    assert budget.step_transient == budget.transient == 16 * GiB + budget.activations
    with pytest.raises(ValueError, match="stores float32 variables, not float16"):
        per_device(SEED, "float16", None, "mirrored", 4, "mixed_float16")


def test_glorot_init_peaks_at_3x_on_the_device_that_initialises():
    glorot = per_device(SEED, "float32", None, "mirrored", 4, initializer="glorot_uniform", reserve=0)
    zeros = per_device(SEED, "float32", None, "mirrored", 4, initializer="zeros", reserve=0)
    # MirroredStrategy computes the initial value on the first replica only.
    assert [b.init_peak for b in glorot] == [96 * GiB, 32 * GiB, 32 * GiB, 32 * GiB]
    assert [b.init_peak for b in zeros] == [32 * GiB] * 4
    assert glorot[0].peak_phase == "init" and glorot[1].peak_phase == "forward"
    column = per_device(SEED, "float32", None, "column", 4, initializer="GlorotUniform", reserve=0)
    assert [b.init_peak for b in column] == [24 * GiB] * 4


def test_offload_moves_variables_to_the_host_but_the_device_reads_a_copy():
    budgets = per_device(SEED, "float32", None, "offload", 4, initializer="zeros", reserve=0)
    # Nothing on the device while the host initialises; a full read copy while the layer runs.
    assert {b.init_peak for b in budgets} == {0}
    assert {b.weights for b in budgets} == {32 * GiB}
    assert planner.host_bytes([SEED], None, "offload", 4) == 32 * GiB
    trained = per_device(SEED, "float32", "rmsprop", "offload", 4)[0]
    # On a GPU host the update's arithmetic runs on the default device, GPU:0: slot copies and temporaries there.
    assert trained.slots == 32 * GiB and trained.peak_phase == "update"


def test_step_peak_follows_the_measured_update_temporaries():
    mirrored = per_device(SEED, "float32", "rmsprop", "mirrored", 4)[0]
    # RMSprop without XLA (MirroredStrategy): gradient + three temporaries on top of weight and velocity.
    # Three measured temporaries, and one buffer of margin for the executor's order (SCHEDULE_MARGIN).
    assert mirrored.update_temporaries == (3 + planner.SCHEDULE_MARGIN) * 32 * GiB
    assert mirrored.step_peak == (6 + planner.SCHEDULE_MARGIN) * 32 * GiB + mirrored.activations
    assert mirrored.phases["aggregation"] == 4 * 32 * GiB + mirrored.activations
    column = per_device(SEED, "float32", "rmsprop", "column", 4)[0]
    assert column.update_temporaries == 0 and column.total < hardware.V100_CAPACITY
    assert per_device(SEED, "float32", "rmsprop", "column", 4, xla="off")[0].total > hardware.V100_CAPACITY
    worker = per_device(SEED, "float32", "rmsprop", "parameter_server", 4)[0]
    assert (worker.weights, worker.gradients, worker.slots) == (32 * GiB, 32 * GiB, 0)


def test_xla_resolves_as_on_a_gpu_host():
    assert {s: placements.resolve_xla("auto", s) for s in placements.STRATEGIES} == {
        "single": True, "mirrored": False, "column": True, "row": True, "parameter_server": False,
        "offload": False, "model_parallel": True, "data_parallel": True,  # Keras on JAX compiles the step
        "tf_keras_dtensor": True,  # tf_keras's optimizer compiles its own update when a GPU is listed
    }
    with pytest.raises(ValueError, match="xla must be one of auto, on, off, not 'yes'"):
        placements.resolve_xla("yes", "single")


@pytest.mark.parametrize("kwargs, message", [
    ({"shape": (0, 5)}, "dimension 0 of shape [0, 5] is 0"),
    ({"shape": (2.5, 5)}, "dimension 0 of shape [2.5, 5] is 2.5"),
    ({"shape": SEED, "dtype": "float8"}, "unknown dtype 'float8'"),
    ({"shape": SEED, "optimizer": "adamx"}, "unknown optimizer 'adamx'"),
    ({"shape": SEED, "strategy": "pooled"}, "unknown strategy 'pooled'"),
    ({"shape": SEED, "devices": 0}, "device count must be a positive integer, not 0"),
    ({"shape": SEED, "policy": "mixed_float8"}, "policy 'mixed_float8'"),
])
def test_bad_input_raises_value_error_naming_it(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        per_device(**kwargs)


def test_plan_sums_weights_and_takes_the_init_peak_in_creation_order():
    budget = plan([planner.Weight((1024, 256), "float32", "glorot_uniform"),
                   planner.Weight((256,), "float32", "zeros")], None, "single", 1, reserve=0)[0]
    assert budget.weights == 1024 * 256 * 4 + 256 * 4
    # the kernel is drawn first (3x), the bias after it: the peak is the draw, before the bias exists
    assert budget.init_peak == 3 * 1024 * 256 * 4 and budget.init_transient == 2 * 1024 * 256 * 4 - 256 * 4
    late = plan([planner.Weight((256,), "float32", "zeros"), planner.Weight((1024, 256), "float32", "glorot_uniform")],
                None, "single", 1)[0]
    assert late.init_peak == 3 * 1024 * 256 * 4 + 256 * 4  # a variable made earlier is resident during the draw
    assert budget.total == budget.init_peak


@pytest.fixture(scope="module")
def kernel():
    with Kernel() as k:
        yield k


def test_F19_optimizer_slots_counted_by_keras(kernel):
    counts = {name: kernel.call(optimizers.full_size_slots, name) for name in [
        "sgd", "sgd_momentum", "rmsprop", "rmsprop_momentum", "rmsprop_centered", "adam", "adam_amsgrad"]}
    assert counts == {"sgd": 0, "sgd_momentum": 1, "rmsprop": 1, "rmsprop_momentum": 2,
                      "rmsprop_centered": 2, "adam": 2, "adam_amsgrad": 3}
    # Adafactor: a full-size velocity plus factored rows [1000] and columns [10].
    assert kernel.call(optimizers.full_size_slots, "adafactor") == 1
    assert kernel.call(optimizers.slot_elements, "adafactor", (1000, 10)) == 10000 + 1000 + 10
    seed = kernel.call(planner.per_device, SEED, "float32", "rmsprop", "mirrored", 4)
    assert len(seed) == 4
    for budget in seed:
        assert (budget.weights, budget.gradients, budget.slots) == (32 * GiB, 32 * GiB, 32 * GiB)
        assert resident(budget) == 96 * GiB
    column = kernel.call(planner.per_device, SEED, "float32", "rmsprop", "column", 4)
    assert [resident(b) for b in column] == [24 * GiB] * 4


def names_of_made_optimizers() -> dict:
    """Kernel side: :func:`snippets.lib.optimizers.name_of` of each optimizer the planner makes, and of each
    wrapped in a ``LossScaleOptimizer`` (a builder's mixed_float16 compile: helper-34's was refused)."""
    import keras

    made = {name: optimizers.name_of(optimizers.make_optimizer(name)) for name in optimizers.OPTIMIZERS}
    wrapped = {name: optimizers.name_of(keras.optimizers.LossScaleOptimizer(optimizers.make_optimizer(name)))
               for name in optimizers.OPTIMIZERS}
    return {"made": made, "wrapped": wrapped}


def test_an_optimizer_object_is_named_by_the_slots_its_settings_make():
    # A builder's compile(optimizer=SGD(momentum=0.9)) is sgd_momentum: one slot more than --optimizer sgd.
    # A kernel of its own: making optimizers starts TensorFlow's runtime, which the module's kernel must not.
    with Kernel() as kernel:
        found = kernel.call(names_of_made_optimizers)
    assert found["made"] == found["wrapped"] == {name: name for name in optimizers.OPTIMIZERS}


def test_slot_dtype_follows_the_variable_and_counting_starts_no_runtime(kernel):
    assert kernel.call(optimizers.slot_bytes, "adam", (1000, 10), "float16") == 2 * 10000 * 2
    assert kernel.call(optimizers.slots_per_weight, "adam_amsgrad") == 3
    # Probing happened in a graph: devices can still be configured afterwards.
    setup = kernel.call(devices.configure, 2, "256MiB")
    assert setup.mode == "cpu" and len(setup.devices) == 2
