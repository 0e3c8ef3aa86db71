"""Remote side of the field-case tests for devices and placement (F01-F03, F06, F08, F12, F17).

Each function runs in a fresh kernel, configures devices first, and returns
plain data for the test process to assert on.
"""

from snippets.lib import devices, pieces
from snippets import placement


def _components(variable):
    return [(pieces.short_device(c.device), c.shape, c.nbytes) for c in pieces.of_variable(variable)]


def f01_mirrored_components():
    setup = devices.configure(4, "1GiB")
    variable = placement.mirrored_variable(setup, [1024, 256])
    return type(variable).__name__, _components(variable)


def f02_first_write():
    import tensorflow as tf

    setup = devices.configure(4, "200MiB")
    plain = placement.plain_variable([16384, 1024])  # one copy fits alone
    del plain
    variable = placement.mirrored_variable(setup, [16384, 1024])  # creation passes
    try:
        placement.first_write(variable)
    except tf.errors.ResourceExhaustedError as error:
        return "created", type(error).__name__, error.message
    return "created", None, None


def f03_plain_variable():
    setup = devices.configure(4, "1GiB")
    variable = placement.plain_variable([1024, 256])
    return len(setup.devices), type(variable).__name__, _components(variable)


def f06_reconfigure():
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    ldc = tf.config.LogicalDeviceConfiguration
    tf.config.set_logical_device_configuration(cpu, [ldc() for _ in range(4)])
    tf.constant(1.0)
    tf.config.set_logical_device_configuration(cpu, [ldc() for _ in range(4)])
    try:
        tf.config.set_logical_device_configuration(cpu, [ldc(), ldc()])
    except RuntimeError as error:
        return "same list: no error", str(error)
    return "same list: no error", None


def f08_config_class():
    import tensorflow as tf

    same = tf.config.experimental.VirtualDeviceConfiguration is tf.config.LogicalDeviceConfiguration
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration(memory_limit=100)]
        )
    except ValueError as error:
        return same, str(error)
    return same, None


def f12_device_inside_scope():
    import tensorflow as tf

    setup = devices.configure(4, "1GiB")
    inside = placement.device_inside_scope(setup, "CPU:3")
    with tf.device("CPU:0"):
        outside = placement.plain_variable([2048, 1024])
    return (type(inside).__name__, _components(inside)), (type(outside).__name__, _components(outside))


def f17_memory_info():
    import tensorflow as tf

    devices.configure(4, "1GiB")
    start = tf.config.experimental.get_memory_info("CPU:0")
    x = tf.zeros([1024, 1024])
    after = tf.config.experimental.get_memory_info("CPU:0")
    tf.config.experimental.reset_memory_stats("CPU:0")
    reset = tf.config.experimental.get_memory_info("CPU:0")
    del x
    return start, after, reset


def memory_info_without_bfc():
    import tensorflow as tf

    try:
        tf.config.experimental.get_memory_info("CPU:0")
    except ValueError as error:
        return str(error)
    return None


def configure_after_first_op():
    import tensorflow as tf

    tf.constant(1.0)
    devices.configure(4, "1GiB")


def configure_twice(first, second):
    one = devices.configure(*first)
    two = devices.configure(*second)
    return one is two
