"""Remote side of tests/test_memory_growth.py (field cases F04, F05, F07, F09).

:func:`f05_cpu_before_devices` must be the kernel's first call: it asks for
memory growth on the CPU before any device is configured. The others
configure 4 logical CPUs capped at 256 MiB (idempotent), as the chapter does.
"""

from snippets.lib import devices
from snippets import memory_growth

COUNT, DEVICE_MEMORY = 4, "256MiB"


def _error(call):
    try:
        call()
    except Exception as error:  # the test asserts on the type and message
        return type(error).__name__, str(error)
    return None


def f05_cpu_before_devices():
    """F05 (CPU form): ``set_memory_growth(cpu, True)`` in a fresh process; then configure."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    result = _error(lambda: tf.config.experimental.set_memory_growth(cpu, True))
    grown = memory_growth.enable_memory_growth()  # no GPU here: nothing to set, no error
    devices.configure(COUNT, DEVICE_MEMORY)  # still allowed: the refusal started nothing
    return result, grown


def f07_growth_on_split_cpu():
    import tensorflow as tf

    devices.configure(COUNT, DEVICE_MEMORY)
    cpu = tf.config.list_physical_devices("CPU")[0]
    return _error(lambda: tf.config.experimental.set_memory_growth(cpu, True))


def f09_one_tensor(shape):
    devices.configure(COUNT, DEVICE_MEMORY)
    return memory_growth.one_tensor(shape)


def allocator_use(shapes):
    devices.configure(COUNT, DEVICE_MEMORY)
    return memory_growth.allocator_use([(s, "float32") for s in shapes])


def f04_visible_after_start():
    """F04 (CPU form): change the visible devices after the first op."""
    import tensorflow as tf

    devices.configure(COUNT, DEVICE_MEMORY)
    tf.constant(1.0)
    same = _error(lambda: tf.config.set_visible_devices(tf.config.list_physical_devices("CPU"), "CPU"))
    different = _error(lambda: tf.config.set_visible_devices([], "CPU"))
    return same, different


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
