"""Memory-growth chapter: field cases F04, F05, F07, F09, and growth on every GPU.

The GPU paths of ``snippets.memory_growth`` run here in the test process
against a stand-in for ``tf.config`` that follows TensorFlow 2.21's own checks
(``Context.set_memory_growth`` in tensorflow/python/eager/context.py); the CPU
cases run in one kernel, in the order the chapter runs them.
"""

import sys
from types import SimpleNamespace

import pytest

from snippets import memory, memory_growth
from snippets.memory_growth import MemoryGrowthError
from harness import Kernel

REMOTE = "tests.remote.growth_cases"


class FakeConfig:
    """``tf.config`` on a host with ``gpus`` GPUs, enforcing TF's rules for memory growth.

    Mirrors ``Context.set_memory_growth`` (TF 2.21): unknown device -> ValueError;
    split into virtual devices -> ValueError; non-GPU -> ValueError; unchanged
    value -> no-op; runtime started -> RuntimeError.
    """

    def __init__(self, gpus=4, started=False, split=()):
        self.gpus = [SimpleNamespace(name=f"/physical_device:GPU:{i}", device_type="GPU")
                     for i in range(gpus)]
        self.cpu = SimpleNamespace(name="/physical_device:CPU:0", device_type="CPU")
        self.started = started
        self.split = {self.gpus[i].name for i in split}
        self.growth = {}
        self.calls = []
        self.experimental = SimpleNamespace(
            set_memory_growth=self._set_memory_growth, get_memory_growth=self._get_memory_growth)

    def list_physical_devices(self, device_type=None):
        return list(self.gpus) if device_type == "GPU" else [self.cpu]

    def _set_memory_growth(self, device, enable):
        self.calls.append(device.name)
        if device is not self.cpu and device not in self.gpus:
            raise ValueError(f"Unrecognized device: {device!r}")
        if device.name in self.split:
            raise ValueError("Cannot set memory growth on device when virtual devices configured")
        if device.device_type != "GPU":
            raise ValueError("Cannot set memory growth on non-GPU and non-Pluggable devices")
        if self.growth.get(device.name, False) == enable:
            return
        if self.started:
            raise RuntimeError("Physical devices cannot be modified after being initialized")
        self.growth[device.name] = enable

    def _get_memory_growth(self, device):
        return self.growth.get(device.name, False)


# --- GPU paths, tf.config faked ---------------------------------------------------


def test_growth_is_set_on_every_gpu():
    config = FakeConfig(gpus=4)
    names = memory_growth.enable_memory_growth(config)
    assert names == [f"/physical_device:GPU:{i}" for i in range(4)]
    assert config.growth == {name: True for name in names}


def test_no_gpu_means_nothing_to_set():
    config = FakeConfig(gpus=0)
    assert memory_growth.enable_memory_growth(config) == []
    assert config.calls == []  # never asked for the CPU, which would raise


def test_F05_gpu_growth_after_runtime_started_names_the_fix():
    config = FakeConfig(gpus=4, started=True)
    with pytest.raises(MemoryGrowthError) as info:
        memory_growth.enable_memory_growth(config)
    message = str(info.value)
    assert "Physical devices cannot be modified after being initialized" in message
    assert "/physical_device:GPU:0" in message
    assert "before any TensorFlow op" in message and "TF_FORCE_GPU_ALLOW_GROWTH=true" in message
    assert "restart the kernel" in message
    assert isinstance(info.value.__cause__, RuntimeError)


def test_calling_again_after_start_is_harmless_when_growth_is_on():
    config = FakeConfig(gpus=2)
    memory_growth.enable_memory_growth(config)
    config.started = True  # an op ran
    assert memory_growth.enable_memory_growth(config) == ["/physical_device:GPU:0", "/physical_device:GPU:1"]


def test_growth_on_a_split_gpu_names_the_choice():
    config = FakeConfig(gpus=2, split=(1,))
    with pytest.raises(MemoryGrowthError) as info:
        memory_growth.enable_memory_growth(config)
    message = str(info.value)
    assert "GPU:1" in message and "split into logical devices" in message
    assert "virtual devices configured" in message and "memory_limit" in message


def test_other_value_errors_are_not_disguised():
    config = FakeConfig(gpus=1)
    config.gpus[0] = SimpleNamespace(name="/physical_device:GPU:9", device_type="GPU")
    config.list_physical_devices = lambda device_type=None: [
        SimpleNamespace(name="/physical_device:GPU:7", device_type="GPU")]
    with pytest.raises(ValueError, match="Unrecognized device"):
        memory_growth.enable_memory_growth(config)


def test_growth_before_split_lists_gpus_whose_growth_a_split_would_drop():
    config = FakeConfig(gpus=3)
    assert memory_growth.growth_before_split(config) == []
    memory_growth.enable_memory_growth(config)
    assert memory_growth.growth_before_split(config, config.gpus[1:]) == [
        "/physical_device:GPU:1", "/physical_device:GPU:2"]


def test_allow_growth_env_sets_the_variable_and_returns_the_old_value():
    env = {"TF_FORCE_GPU_ALLOW_GROWTH": "false"}
    assert memory_growth.allow_growth_env(env) == "false"
    assert env == {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    assert memory_growth.allow_growth_env({}) is None


def test_cli_rejects_a_bad_shape(capsys):
    with pytest.raises(SystemExit) as info:
        memory_growth.main(["--shape", "131072", "0"])
    assert info.value.code == 2
    assert "dimension 1 of shape [131072, 0] is 0" in capsys.readouterr().err


def test_these_unit_tests_did_not_import_tensorflow():
    assert "tensorflow" not in sys.modules


# --- CPU cases in one kernel, in the chapter's order ----------------------------------


@pytest.fixture(scope="module")
def kernel():
    """4 logical CPUs capped at 256 MiB; the CPU growth request is made before configuring."""
    with Kernel() as k:
        k.f05 = k.call(f"{REMOTE}:f05_cpu_before_devices")
        yield k


def test_F05_cpu_growth_is_refused(kernel):
    error, grown = kernel.f05
    assert error == ("ValueError", "Cannot set memory growth on non-GPU and non-Pluggable devices")
    assert grown == []  # enable_memory_growth on a GPU-less host: nothing to do, no error


def test_F07_growth_on_a_device_split_into_logical_devices(kernel):
    assert kernel.call(f"{REMOTE}:f07_growth_on_split_cpu") == (
        "ValueError", "Cannot set memory growth on device when virtual devices configured")


def test_growing_allocator_takes_what_tensors_need(kernel):
    use = kernel.call(f"{REMOTE}:allocator_use", [(16384, 1024), (16384, 1024)])
    assert use == [0, 67108864, 134217728]


def test_F09_growth_does_not_make_room_for_one_tensor(kernel):
    assert memory.tensor_bytes([131072, 1024], "float32") == 536870912
    line = kernel.call(f"{REMOTE}:f09_one_tensor", (131072, 1024))
    assert line.startswith("ResourceExhaustedError: OOM when allocating tensor with shape[131072,1024]")
    assert "type float" in line and "bfc_cpu_allocator_for_gpu" in line
    assert line.endswith("[Op:RandomUniform]")
    # A tensor well under the cap is served: the cap, not the growth setting, decides.
    assert kernel.call(f"{REMOTE}:f09_one_tensor", (16384, 1024)) is None


def test_F04_visible_devices_after_start(kernel):
    same, different = kernel.call(f"{REMOTE}:f04_visible_after_start")
    assert same is None  # repeating the current list is allowed
    assert different == ("RuntimeError", "Visible devices cannot be modified after being initialized")


# --- TensorFlow's own rules for growth across GPUs, on stand-in GPUs --------------------


def test_tf_starts_with_growth_when_every_gpu_has_it(kernel):
    assert kernel.call(f"{REMOTE}:tf_gpu_options", 4, [0, 1, 2, 3]) == ("ok", True)
    assert kernel.call(f"{REMOTE}:tf_gpu_options", 4, []) == ("ok", False)


def test_tf_refuses_growth_on_only_some_gpus(kernel):
    # Why enable_memory_growth sets every GPU: growth on GPU 0 only stops the runtime from starting.
    assert kernel.call(f"{REMOTE}:tf_gpu_options", 4, [0]) == (
        "error", "ValueError", "Memory growth cannot differ between GPU devices")


def test_tf_drops_growth_silently_once_a_gpu_is_split(kernel):
    # Growth set first, then GPU 0 split into logical devices: no error, and no growth.
    assert kernel.call(f"{REMOTE}:tf_gpu_options", 4, [0, 1, 2, 3], [0]) == ("ok", False)
