"""Remote side of tests/test_memory_growth.py (field cases F04, F05, F07, F09).

:func:`f05_cpu_before_devices` must be the kernel's first call: it asks for
memory growth on the CPU before any device is configured. The others
configure 4 logical CPUs capped at 256 MiB (idempotent), as the chapter does.
"""

from snippets import devices, memory_growth

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
