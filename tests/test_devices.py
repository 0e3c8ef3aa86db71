"""GPU decisions of snippets.lib.devices, tested by faking what tf.config reports."""

import pytest

from snippets.lib import devices
from snippets.lib.devices import DeviceConfigError, GpuInfo, plan_devices

V100 = 30976  # what a V100-SXM2-32GB's allocator gets (snippets.lib.hardware)
A100_80 = GpuInfo("NVIDIA A100-SXM4-80GB", 81920)
H200 = GpuInfo("NVIDIA H200", 143771)
V100_16 = GpuInfo("Tesla V100-SXM2-16GB", 16160)


def test_four_real_gpus_are_each_capped():
    plan = plan_devices(4, V100, [A100_80] * 8)
    assert plan.mode == "gpu"
    assert plan.gpu_limits_mib == ((V100,),) * 4


def test_one_h200_is_split_into_four_v100s():
    plan = plan_devices(4, V100, [H200])
    assert plan.mode == "split-gpu"
    assert plan.gpu_limits_mib == ((V100,) * 4,)


def test_two_80gb_cards_hold_two_emulated_v100s_each():
    plan = plan_devices(4, V100, [A100_80, A100_80])
    assert plan.gpu_limits_mib == ((V100, V100), (V100, V100))


def test_one_80gb_card_cannot_hold_four():
    with pytest.raises(DeviceConfigError, match="hold 2 logical devices of 30976 MiB .*not 4"):
        plan_devices(4, V100, [A100_80])


def test_gpu_smaller_than_the_device_names_the_largest_size_that_works():
    with pytest.raises(DeviceConfigError, match="ask for at most 16160MiB"):
        plan_devices(4, V100, [V100_16] * 4)


def test_no_gpu_means_cpu_mode_and_cpu_can_be_forced():
    assert plan_devices(4, V100, []).mode == "cpu"
    assert plan_devices(4, V100, [H200], mode="cpu").mode == "cpu"


def test_unknown_gpu_memory_cannot_be_split():
    with pytest.raises(DeviceConfigError, match="cannot tell how much memory"):
        plan_devices(4, V100, [GpuInfo("GPU", None)])


@pytest.mark.parametrize("count", [0, -1, 2.5, True])
def test_bad_device_counts(count):
    with pytest.raises(DeviceConfigError, match="positive integer"):
        plan_devices(count, V100, [])


def test_gpu_mode_without_enough_gpus():
    with pytest.raises(DeviceConfigError, match="needs 4 GPUs and TensorFlow sees 1"):
        plan_devices(4, V100, [H200], mode="gpu")
    with pytest.raises(DeviceConfigError, match="needs a GPU"):
        plan_devices(4, V100, [], mode="split-gpu")


class FakeConfig:
    """Stands in for ``tf.config`` on a machine with GPUs; records what devices.py asks of it."""

    def __init__(self, gpus, growth=()):
        self.gpus = [type("PhysicalDevice", (), {"name": f"/physical_device:GPU:{i}"})() for i in range(gpus)]
        self.growth = set(growth)
        self.visible = None
        self.logical = {}
        self.experimental = self
        self.LogicalDeviceConfiguration = lambda memory_limit=None: memory_limit

    def list_physical_devices(self, kind):
        return self.gpus if kind == "GPU" else []

    def get_memory_growth(self, gpu):
        return gpu.name in self.growth

    def set_visible_devices(self, gpus, kind):
        self.visible = [gpu.name for gpu in gpus]

    def set_logical_device_configuration(self, gpu, configs):
        self.logical[gpu.name] = list(configs)

    def list_logical_devices(self, kind):
        count = sum(len(c) for c in self.logical.values())
        return [type("LogicalDevice", (), {"name": f"/device:GPU:{i}"})() for i in range(count)]


def fake_tf(config):
    return type("tf", (), {"config": config})


def test_gpu_plan_is_applied_as_memory_limits_on_the_first_gpus():
    from snippets.lib.devices import _apply_gpu

    config = FakeConfig(gpus=8)
    setup = _apply_gpu(fake_tf(config), plan_devices(4, V100, [A100_80] * 8))
    assert config.visible == [f"/physical_device:GPU:{i}" for i in range(4)]
    assert list(config.logical.values()) == [[V100]] * 4
    assert setup.devices == tuple(f"/device:GPU:{i}" for i in range(4))


def test_split_gpu_plan_makes_four_limited_devices_on_one_gpu():
    from snippets.lib.devices import _apply_gpu

    config = FakeConfig(gpus=1)
    setup = _apply_gpu(fake_tf(config), plan_devices(4, V100, [H200]))
    assert config.logical == {"/physical_device:GPU:0": [V100] * 4}
    assert len(setup.devices) == 4


def test_memory_growth_set_before_a_split_is_refused_not_dropped():
    from snippets.lib.devices import _apply_gpu

    config = FakeConfig(gpus=1, growth=["/physical_device:GPU:0"])
    with pytest.raises(DeviceConfigError, match="memory growth is on for /physical_device:GPU:0"):
        _apply_gpu(fake_tf(config), plan_devices(4, V100, [H200]))
    assert config.logical == {}


def test_requests_are_checked_before_tensorflow_starts():
    from snippets.lib.devices import check_request

    with pytest.raises(DeviceConfigError, match="more than 64"):
        check_request(100000, V100)
    with pytest.raises(DeviceConfigError, match="at least 1 MiB"):
        check_request(4, 0)
    with pytest.raises(DeviceConfigError, match="unknown mode 'tpu'"):
        check_request(4, V100, "tpu")


def test_jit_compile_is_what_keras_would_choose_on_a_gpu_host():
    # Keras's auto: True on a GPU machine without a strategy, False under any tf.distribute strategy.
    assert devices.jit_compile("single") is True
    assert devices.jit_compile("mirrored") is False
    assert devices.jit_compile("parameter_server") is False
    # The site's tf.device layers compile each shard's update, never the whole model.
    assert devices.jit_compile("column") is True


def test_default_capacity_is_a_real_v100s_allocator():
    assert devices.DEFAULT_DEVICE_MEMORY == "30976MiB"


def test_cpu_mode_has_a_host_and_runs_unplaced_ops_on_the_first_gpu():
    from harness import Kernel

    with Kernel() as kernel:
        setup = kernel.call(devices.configure, 2, "256MiB")
        placed = kernel.call(_where_things_run)
    assert setup.host.endswith("device:CPU:0")
    assert [name[-5:] for name in setup.devices] == ["CPU:1", "CPU:2"]
    assert setup.describe() == "cpu mode: host CPU:0, CPU:1-2 play the GPUs; one BFC pool of 256 MiB for all"
    assert placed["op"].endswith("CPU:1") and placed["variable"].endswith("CPU:1")
    # The pool was taken as one region up front and the statistics reset (field case F17).
    assert placed["peak_after_configure"] == 0


def _where_things_run() -> dict:
    """Kernel side: where an unplaced op and a Keras variable land, and the pool's peak after configure."""
    import keras
    import tensorflow as tf

    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    return {"op": tf.ones(3).device, "variable": keras.Variable(tf.zeros(3)).value.device,
            "peak_after_configure": peak}



def test_cpu_mode_refuses_a_tensorflow_imported_with_onednn_on(monkeypatch):
    # oneDNN swaps MatMul for _MklMatMul and gives the host another allocator: no GPU host runs it.
    # (That the kernels' TensorFlow has it off is tests/test_private.py's canary.)
    from snippets.lib import private
    from snippets.lib.devices import _apply_cpu

    monkeypatch.setattr(private, "onednn_enabled", lambda: True)
    config = FakeConfig(gpus=0)
    with pytest.raises(DeviceConfigError, match="imported with oneDNN on.*import snippets.lib.devices before"):
        _apply_cpu(fake_tf(config), plan_devices(2, 64, []), None)
    assert config.visible is None  # refused before TensorFlow was asked anything


def test_importing_devices_turns_onednn_off_unless_told_otherwise():
    import os

    assert devices.ENVIRONMENT == {"TF_ENABLE_ONEDNN_OPTS": "0"}
    assert "TF_ENABLE_ONEDNN_OPTS" in os.environ  # set by the import above, or by the caller
