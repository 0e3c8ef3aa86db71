"""GPU decisions of snippets.devices, tested by faking what tf.config reports."""

import pytest

from snippets.devices import DeviceConfigError, GpuInfo, plan_devices

V100 = 32480
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
    with pytest.raises(DeviceConfigError, match="hold 2 logical devices of 32480 MiB .*not 4"):
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
