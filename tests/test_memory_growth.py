"""Memory-growth chapter: field cases F04, F05, F07, F09, and growth on every GPU.

The GPU paths of ``snippets.memory_growth`` run here in the test process
against a stand-in for ``tf.config`` that follows TensorFlow 2.21's own checks
(``Context.set_memory_growth`` in tensorflow/python/eager/context.py); the CPU
cases run in one kernel, in the order the chapter runs them (each kernel-side
function sits above the test that calls it).
"""

import sys
from types import SimpleNamespace

import pytest

from harness import Kernel
from snippets.lib import devices, units
from snippets import memory_growth
from snippets.memory_growth import MemoryGrowthError

#: The chapter's devices: 4 logical CPUs capped at 256 MiB.
COUNT, DEVICE_MEMORY = 4, "256MiB"


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
    assert "tensorflow" not in sys.modules, sorted(m for m in sys.modules if m.startswith(("snippets", "keras", "harness", "tests", "benchmarks")))


# --- CPU cases in one kernel, in the chapter's order ----------------------------------


def error_of(call) -> tuple[str, str] | None:
    """Kernel side: (exception type name, message) of what ``call()`` raised, or None."""
    try:
        call()
    except Exception as error:  # the test asserts on the type and message
        return type(error).__name__, str(error)
    return None


def f05_cpu_before_devices():
    """Kernel side, first call: F05 (CPU form): ``set_memory_growth(cpu, True)`` in a fresh process; then configure."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    result = error_of(lambda: tf.config.experimental.set_memory_growth(cpu, True))
    grown = memory_growth.enable_memory_growth()  # no GPU here: nothing to set, no error
    devices.configure(COUNT, DEVICE_MEMORY)  # still allowed: the refusal started nothing
    return result, grown


@pytest.fixture(scope="module")
def kernel():
    """4 logical CPUs capped at 256 MiB; the CPU growth request is made before configuring."""
    with Kernel() as k:
        k.f05 = k.call(f05_cpu_before_devices)
        yield k


def test_F05_cpu_growth_is_refused(kernel):
    error, grown = kernel.f05
    assert error == ("ValueError", "Cannot set memory growth on non-GPU and non-Pluggable devices")
    assert grown == []  # enable_memory_growth on a GPU-less host: nothing to do, no error


def f07_growth_on_split_cpu():
    """F07: memory growth on the CPU once it is split into 4 logical devices."""
    import tensorflow as tf

    devices.configure(COUNT, DEVICE_MEMORY)
    cpu = tf.config.list_physical_devices("CPU")[0]
    return error_of(lambda: tf.config.experimental.set_memory_growth(cpu, True))


def test_F07_growth_on_a_device_split_into_logical_devices(kernel):
    assert kernel.call(f07_growth_on_split_cpu) == (
        "ValueError", "Cannot set memory growth on device when virtual devices configured")


def allocator_use(shapes):
    """Kernel side: the allocator's bytes in use before and after allocating each of ``shapes``."""
    devices.configure(COUNT, DEVICE_MEMORY)
    return memory_growth.allocator_use([(s, "float32") for s in shapes])


def test_growing_allocator_takes_what_tensors_need(kernel):
    use = kernel.call(allocator_use, [(16384, 1024), (16384, 1024)])
    assert use == [0, 67108864, 134217728]


def f09_one_tensor(shape):
    """F09: the OOM line of one tensor of ``shape`` under the cap, or None if it fits."""
    devices.configure(COUNT, DEVICE_MEMORY)
    return memory_growth.one_tensor(shape)


def test_F09_growth_does_not_make_room_for_one_tensor(kernel):
    assert units.tensor_bytes([131072, 1024], "float32") == 536870912
    line = kernel.call(f09_one_tensor, (131072, 1024))
    assert line.startswith("ResourceExhaustedError: OOM when allocating tensor with shape[131072,1024]")
    assert "type float" in line and "bfc_cpu_allocator_for_gpu" in line
    assert line.endswith("[Op:RandomUniform]")
    # A tensor well under the cap is served: the cap, not the growth setting, decides.
    assert kernel.call(f09_one_tensor, (16384, 1024)) is None


def f04_visible_after_start():
    """F04 (CPU form): change the visible devices after the first op."""
    import tensorflow as tf

    devices.configure(COUNT, DEVICE_MEMORY)
    tf.constant(1.0)
    same = error_of(lambda: tf.config.set_visible_devices(tf.config.list_physical_devices("CPU"), "CPU"))
    different = error_of(lambda: tf.config.set_visible_devices([], "CPU"))
    return same, different


def test_F04_visible_devices_after_start(kernel):
    same, different = kernel.call(f04_visible_after_start)
    assert same is None  # repeating the current list is allowed
    assert different == ("RuntimeError", "Visible devices cannot be modified after being initialized")


# --- TensorFlow's own rules for growth across GPUs, on stand-in GPUs --------------------


def tf_gpu_options(gpus, growth, split=()):
    """TensorFlow's own GPU-options builder, fed ``gpus`` stand-in GPUs.

    A fresh ``tensorflow.python.eager.context.Context`` (not the process's
    one, which stays untouched) is given ``gpus`` physical GPUs; memory growth
    is set on the indexes in ``growth`` and GPUs in ``split`` get two logical
    devices of 1024 MiB, through the context's own setters. Then the context
    builds the ``GPUOptions`` it would start the runtime with
    (``_compute_gpu_options``, TF 2.21), which is where growth is checked
    across GPUs and combined with logical devices.

    Returns:
        ``("ok", allow_growth)`` or ``("error", type name, message)``.
    """
    import tensorflow as tf
    from tensorflow.python.eager import context

    ctx = context.Context()
    devices_ = [context.PhysicalDevice(name=f"/physical_device:GPU:{i}", device_type="GPU")
                for i in range(gpus)]
    ctx._physical_devices = devices_
    ctx._physical_device_to_index = {d: i for i, d in enumerate(devices_)}
    ctx._pluggable_devices = []
    ctx._visible_device_list = list(devices_)
    ctx._memory_growth_map = {d: None for d in devices_}
    for i in growth:
        ctx.set_memory_growth(devices_[i], True)
    for i in split:
        ctx.set_logical_device_configuration(
            devices_[i], [tf.config.LogicalDeviceConfiguration(memory_limit=1024)] * 2)
    try:
        options = ctx._compute_gpu_options()
    except ValueError as error:
        return "error", type(error).__name__, str(error)
    return "ok", options.allow_growth


def test_tf_starts_with_growth_when_every_gpu_has_it(kernel):
    assert kernel.call(tf_gpu_options, 4, [0, 1, 2, 3]) == ("ok", True)
    assert kernel.call(tf_gpu_options, 4, []) == ("ok", False)


def test_tf_refuses_growth_on_only_some_gpus(kernel):
    # Why enable_memory_growth sets every GPU: growth on GPU 0 only stops the runtime from starting.
    assert kernel.call(tf_gpu_options, 4, [0]) == (
        "error", "ValueError", "Memory growth cannot differ between GPU devices")


def test_tf_drops_growth_silently_once_a_gpu_is_split(kernel):
    # Growth set first, then GPU 0 split into logical devices: no error, and no growth.
    assert kernel.call(tf_gpu_options, 4, [0, 1, 2, 3], [0]) == ("ok", False)
