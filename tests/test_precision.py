"""Precision chapter: field cases F10, F11, loss scaling, and the bfloat16 decision.

The bfloat16 decision runs here in the test process against a stand-in for
``tf.config`` (no TensorFlow, no GPU needed); everything else runs in one
kernel with 4 logical CPUs capped at 30976 MiB. Each kernel-side function sits
above the test that calls it and configures those devices first
(``devices.configure`` is idempotent for the same arguments).
"""

import sys
from types import SimpleNamespace

import pytest

from harness import Kernel, RemoteError
from snippets.lib import devices, hardware, pieces, planner, units
from snippets import placement, precision

SEED = (131072, 65536)
#: One V100's worth per device: 4 logical CPUs sharing a 30976 MiB cap.
COUNT, DEVICE_MEMORY = 4, "30976MiB"


# --- bfloat16 or float16: tf.config faked ---------------------------------------


class FakeConfig:
    """What ``tf.config`` reports on a GPU host: physical GPUs and their device details."""

    def __init__(self, details):
        self._gpus = [SimpleNamespace(name=f"/physical_device:GPU:{i}", device_type="GPU")
                      for i in range(len(details))]
        self._details = dict(zip((g.name for g in self._gpus), details))
        self.experimental = SimpleNamespace(get_device_details=self._get_device_details)

    def list_physical_devices(self, device_type=None):
        return list(self._gpus) if device_type == "GPU" else []

    def _get_device_details(self, device):
        return dict(self._details[device.name])


def v100():
    # The shape of what TF 2.21 returns for a V100 (tf.config.experimental.get_device_details).
    return {"compute_capability": (7, 0), "device_name": "Tesla V100-SXM2-32GB"}


def test_four_v100_get_float16_with_loss_scaling():
    choice = precision.choose_half_dtype(FakeConfig([v100()] * 4))
    assert (choice.dtype, choice.loss_scaling) == ("float16", True)
    assert [cap for _, cap in choice.capabilities] == [(7, 0)] * 4
    assert "/physical_device:GPU:0 has compute capability 7.0, below 8.0" in choice.reason


def test_ampere_and_newer_get_bfloat16():
    a100 = {"compute_capability": (8, 0), "device_name": "NVIDIA A100-SXM4-80GB"}
    h100 = {"compute_capability": (9, 0), "device_name": "NVIDIA H100 80GB HBM3"}
    for host in ([a100] * 4, [h100] * 2, [a100, h100]):
        choice = precision.choose_half_dtype(FakeConfig(host))
        assert (choice.dtype, choice.loss_scaling) == ("bfloat16", False)


def test_one_older_gpu_decides_for_all_replicas():
    a100 = {"compute_capability": (8, 0)}
    t4 = {"compute_capability": (7, 5)}
    choice = precision.choose_half_dtype(FakeConfig([a100, a100, t4, a100]))
    assert choice.dtype == "float16"
    assert "GPU:2 has compute capability 7.5" in choice.reason


def test_gpu_without_a_reported_capability_is_not_trusted_with_bfloat16():
    choice = precision.choose_half_dtype(FakeConfig([{"device_name": "some pluggable device"}]))
    assert choice.dtype == "float16"
    assert "compute capability unknown" in choice.reason


def test_no_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="TensorFlow lists no GPU"):
        precision.choose_half_dtype(FakeConfig([]))


def test_capability_threshold():
    assert precision.BFLOAT16_MIN_CAPABILITY == (8, 0)
    assert not precision.supports_bfloat16(precision.V100_CAPABILITY)
    assert not precision.supports_bfloat16((7, 5))
    assert precision.supports_bfloat16((8, 0)) and precision.supports_bfloat16((8, 6))
    assert not precision.supports_bfloat16(None)


def test_bad_policy_names_the_choices():
    with pytest.raises(ValueError, match="unknown dtype policy 'fp16'; use one of float32, mixed_float16"):
        precision.check_policy("fp16")


def test_training_tensors_are_weight_gradient_and_slots():
    assert precision.training_tensors([4, 2], "float16", slots=2) == [
        ("weight", (4, 2), "float16"), ("gradient", (4, 2), "float16"),
        ("slot 1", (4, 2), "float16"), ("slot 2", (4, 2), "float16"),
    ]


def test_cli_rejects_an_uneven_split(capsys):
    with pytest.raises(SystemExit) as exit_info:
        precision.main(["--devices", "3"])
    assert exit_info.value.code == 2
    assert "cannot split dimension 1 of shape [131072, 65536]" in capsys.readouterr().err


def test_these_unit_tests_did_not_import_tensorflow():
    # Runs after the unit tests above and before the kernel fixture below.
    assert "tensorflow" not in sys.modules, sorted(m for m in sys.modules if m.startswith(("snippets", "keras", "harness", "tests", "benchmarks")))


# --- in a kernel: what Keras and the allocator actually do -----------------------------


def configure_v100s():
    """Kernel side: the :data:`COUNT` devices of :data:`DEVICE_MEMORY` (a no-op after the first call)."""
    return devices.configure(COUNT, DEVICE_MEMORY)


@pytest.fixture(scope="module")
def kernel():
    with Kernel() as k:
        yield k


def layer_dtypes(policy):
    """Kernel side: :func:`snippets.precision.layer_dtypes` under ``policy``."""
    configure_v100s()
    return precision.layer_dtypes(policy)


def seed_kernel(policy):
    """Kernel side: shape, dtype and bytes of the seed kernel under ``policy``."""
    configure_v100s()
    spec = precision.seed_kernel(policy)
    return spec.shape, spec.dtype, spec.nbytes


def global_policy():
    """Kernel side: the name of Keras's global dtype policy."""
    import keras

    return keras.config.dtype_policy().name


def test_F10_mixed_float16_keeps_float32_variables(kernel):
    dtypes = kernel.call(layer_dtypes, "mixed_float16")
    assert (dtypes.kernel, dtypes.embeddings, dtypes.compute) == ("float32", "float32", "float16")
    assert kernel.call(seed_kernel, "mixed_float16") == (SEED, "float32", 34359738368)
    # layer_dtypes restored the global policy.
    assert kernel.call(global_policy) == "float32"


def autocast_peak(shape):
    """Kernel side: :func:`snippets.precision.autocast_peak` at ``shape``."""
    configure_v100s()
    return precision.autocast_peak(shape)


def test_F10_mixed_float16_adds_a_float16_copy_per_call(kernel):
    # The autocast copy of a [16384, 1024] float32 kernel (67108864 B): half of it.
    assert kernel.call(autocast_peak, (16384, 1024)) == 33554432


def test_F11_float16_policy_stores_float16(kernel):
    dtypes = kernel.call(layer_dtypes, "float16")
    assert (dtypes.kernel, dtypes.embeddings, dtypes.compute) == ("float16", "float16", "float16")
    assert kernel.call(seed_kernel, "float16") == (SEED, "float16", 17179869184)


def dense_dtype_float16_under_float32():
    """Kernel side, F11 second form: ``Dense(8, dtype="float16")`` while the global policy is float32."""
    import keras

    configure_v100s()
    assert keras.config.dtype_policy().name == "float32"
    dense = keras.layers.Dense(8, dtype="float16")
    dense.build((None, 16))
    return dense.kernel.dtype, dense.compute_dtype


def test_F11_dense_dtype_float16_under_float32_policy(kernel):
    assert kernel.call(dense_dtype_float16_under_float32) == ("float16", "float16")


def mirrored_float16(shape):
    """Kernel side: a float16 variable under MirroredStrategy: (type, [(device, shape, dtype, bytes)])."""
    setup = configure_v100s()
    variable = placement.mirrored_variable(setup, shape, "float16")
    return type(variable).__name__, [
        (pieces.short_device(c.device), c.shape, c.dtype, c.nbytes)
        for c in pieces.of_variable(variable)
    ]


def test_F11_mirrored_strategy_still_copies_float16_to_every_replica(kernel):
    kind, components = kernel.call(mirrored_float16, (1024, 256))
    assert kind == "MirroredVariable"
    assert components == [(f"CPU:{i}", (1024, 256), "float16", 524288) for i in range(1, 5)]
    budgets = planner.per_device(SEED, "float16", None, "mirrored", 4)
    assert [b.weights for b in budgets] == [17179869184] * 4


def reserve_training(shape, dtype):
    """Kernel side: (name, bytes, reserved?) of each training tensor at ``shape``, reserved in turn."""
    configure_v100s()
    return [(r.name, r.nbytes, r.reserved) for r in
            precision.reserve(precision.training_tensors(shape, dtype))]


def test_float16_alone_does_not_fit_a_v100_but_a_quarter_shard_does(kernel):
    # Full size, reserved without being written, under a 30976 MiB cap.
    assert kernel.call(reserve_training, SEED, "float16") == [
        ("weight", 17179869184, True), ("gradient", 17179869184, False)]
    assert kernel.call(reserve_training, (131072, 16384), "float16") == [
        ("weight", 4294967296, True), ("gradient", 4294967296, True), ("slot 1", 4294967296, True)]


def per_device_budgets(shape, dtype, optimizer, strategy, count, policy=None):
    """Kernel side: ``planner.per_device`` rows; counting slots builds a Keras optimizer (imports TF)."""
    return [(b.weights, b.gradients, b.slots, b.step_peak, b.total)
            for b in planner.per_device(shape, dtype, optimizer, strategy, count, policy)]


def test_float16_budget_per_replica_and_sharded(kernel):
    # float16 alone: 48 GiB of state per replica with RMSprop, and a step of twice that;
    # float16 + 4-way column sharding: 12 GiB of state, and a step that fits a V100.
    v100 = hardware.V100_CAPACITY
    state = lambda b: sum(b[:3])  # noqa: E731
    mirrored = kernel.call(per_device_budgets, SEED, "float16", "rmsprop", "mirrored", 4)
    assert [b[:3] for b in mirrored] == [(16 * units.GiB,) * 3] * 4
    assert all(state(b) == 48 * units.GiB and b[3] >= 96 * units.GiB and b[4] > v100 for b in mirrored)
    column = kernel.call(per_device_budgets, SEED, "float16", "rmsprop", "column", 4)
    assert all(state(b) == 12 * units.GiB and b[4] <= v100 for b in column)
    # mixed_float16 is no smaller than float32: the same float32 state, and a step at least as large.
    f32 = kernel.call(per_device_budgets, SEED, "float32", "rmsprop", "mirrored", 4)[0]
    mixed = kernel.call(per_device_budgets, SEED, "float32", "rmsprop", "mirrored", 4, "mixed_float16")[0]
    assert state(f32) == 96 * units.GiB
    assert mixed[:3] == f32[:3] and mixed[3] >= f32[3]


def underflow_steps():
    """Kernel side: one float16 step without, then with, loss scaling."""
    configure_v100s()
    return precision.underflow_step(False), precision.underflow_step(True)


def test_loss_scaling_rescues_an_underflowing_float16_gradient(kernel):
    plain, scaled = kernel.call(underflow_steps)
    assert plain.before == 2.0**-14
    assert (plain.gradient, plain.after) == (0.0, 2.0**-14)  # underflowed: no update
    assert scaled.gradient == 2.0**-18 * 2**15  # the scaled gradient, in range
    assert scaled.after == 2.0**-14 - 2.0**-18  # unscaled by apply, then applied exactly


def compiled_optimizers(policies):
    """Kernel side: the optimizer class Keras compiles under each policy."""
    configure_v100s()
    return [precision.compiled_optimizer(p) for p in policies]


def test_keras_wraps_loss_scaling_only_for_mixed_float16(kernel):
    assert kernel.call(compiled_optimizers, ["mixed_float16", "float16", "float32"]) == [
        "LossScaleOptimizer", "RMSprop", "RMSprop"]


def train_float16():
    """Kernel side: :func:`snippets.precision.train_float16` for 4 steps."""
    configure_v100s()
    return precision.train_float16(steps=4)


def test_float16_training_with_loss_scale_optimizer(kernel):
    run = kernel.call(train_float16)
    assert run.optimizer == "LossScaleOptimizer"
    assert [dtype for _, dtype in run.weights] == ["float16", "float16"]
    assert [dtype for _, dtype in run.slots] == ["float16", "float16"]
    assert all("velocity" in path for path, _ in run.slots)
    assert run.loss_scale == 32768.0
    assert 0.0 <= run.loss < float("inf")


def test_unknown_policy_fails_remotely_too(kernel):
    with pytest.raises(RemoteError) as info:
        kernel.call(layer_dtypes, "half")
    assert info.value.type_name == "ValueError"
    assert "unknown dtype policy 'half'" in info.value.message
