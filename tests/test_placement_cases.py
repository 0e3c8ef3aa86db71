"""Field cases F01, F02, F03, F06, F08, F12, F17 (docs/field-cases.md), each in a fresh kernel.

Each kernel-side function sits above the test that calls it, configures
devices first and returns plain data.
"""

import pytest

from harness import Kernel, RemoteError
from snippets.lib import devices, pieces, units
from snippets import placement


@pytest.fixture(scope="module")
def four_cpus():
    """One kernel with 4 logical CPUs and a 1 GiB cap, shared by the cases that need nothing else."""
    with Kernel() as kernel:
        yield kernel


def components_of(variable) -> list[tuple]:
    """Kernel side: (device, shape, bytes) of each copy or shard of ``variable``."""
    return [(pieces.short_device(c.device), c.shape, c.nbytes) for c in pieces.of_variable(variable)]


def f01_mirrored_components():
    """Kernel side: F01: a [1024, 256] MirroredVariable over 4 devices: its type and copies."""
    setup = devices.configure(4, "1GiB")
    variable = placement.mirrored_variable(setup, [1024, 256])
    return type(variable).__name__, components_of(variable)


def test_F01_mirrored_variable_has_a_full_copy_per_replica(four_cpus):
    kind, components = four_cpus.call(f01_mirrored_components)
    assert kind == "MirroredVariable"
    assert components == [(f"CPU:{i}", (1024, 256), 1024 * 256 * 4) for i in range(1, 5)]
    # At full shape the same rule costs 32 GiB on every replica, 128 GiB in all.
    assert units.tensor_bytes([131072, 65536], "float32") == 34359738368
    assert 4 * units.tensor_bytes([131072, 65536], "float32") == 137438953472


def f02_first_write():
    """Kernel side: F02: a MirroredVariable too big for the 200 MiB pool: created, then its first write's error."""
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


def test_F02_mirrored_variable_fails_at_first_write():
    with Kernel() as kernel:
        created, error_type, message = kernel.call(f02_first_write)
    assert created == "created"
    assert error_type == "ResourceExhaustedError"
    assert "shape[16384,1024]" in message and "AssignAddVariableOp" in message


def f03_plain_variable():
    """Kernel side: F03: a plain tf.Variable with 4 devices: device count, type and where it went."""
    setup = devices.configure(4, "1GiB")
    variable = placement.plain_variable([1024, 256])
    return len(setup.devices), type(variable).__name__, components_of(variable)


def test_F03_plain_variable_goes_whole_to_device_0(four_cpus):
    count, kind, components = four_cpus.call(f03_plain_variable)
    assert count == 4
    assert kind == "ResourceVariable"
    assert components == [("CPU:1", (1024, 256), 1048576)]


def f06_reconfigure():
    """Kernel side: F06: the same logical device list set again after the runtime started, then a different one."""
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


def test_F06_same_device_list_again_is_fine_a_different_one_raises():
    with Kernel() as kernel:
        same, error = kernel.call(f06_reconfigure)
    assert same == "same list: no error"
    assert error == "Virtual devices cannot be modified after being initialized"


def f08_config_class():
    """Kernel side: F08: VirtualDeviceConfiguration is LogicalDeviceConfiguration; a CPU device refuses memory_limit."""
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


def memory_info_without_bfc():
    """Kernel side: get_memory_info on a CPU without the BFC allocator: the error message."""
    import tensorflow as tf

    try:
        tf.config.experimental.get_memory_info("CPU:0")
    except ValueError as error:
        return str(error)
    return None


def test_F08_virtual_is_logical_and_cpu_takes_no_memory_limit():
    with Kernel() as kernel:
        same, error = kernel.call(f08_config_class)
        without_bfc = kernel.call(memory_info_without_bfc)
    assert same is True
    assert error == "Setting memory limit on CPU virtual devices is currently not supported"
    assert "Allocator stats not available" in without_bfc


def f12_device_inside_scope():
    """Kernel side: F12: tf.device inside a strategy scope vs tf.device("CPU:0") outside it: types and copies."""
    import tensorflow as tf

    setup = devices.configure(4, "1GiB")
    inside = placement.device_inside_scope(setup, "CPU:3")
    with tf.device("CPU:0"):
        outside = placement.plain_variable([2048, 1024])
    return (type(inside).__name__, components_of(inside)), (type(outside).__name__, components_of(outside))


def test_F12_tf_device_inside_scope_is_still_mirrored(four_cpus):
    (inside_kind, inside), (outside_kind, outside) = four_cpus.call(f12_device_inside_scope)
    assert inside_kind == "MirroredVariable"
    assert [device for device, _, _ in inside] == ["CPU:1", "CPU:2", "CPU:3", "CPU:4"]
    assert outside_kind == "ResourceVariable"
    assert outside == [("CPU:0", (2048, 1024), 8388608)]


def f17_memory_info():
    """Kernel side: F17: memory info after configure, after a 4 MiB tensor, and after reset_memory_stats."""
    import tensorflow as tf

    devices.configure(4, "1GiB")
    start = tf.config.experimental.get_memory_info("CPU:0")
    x = tf.zeros([1024, 1024])
    after = tf.config.experimental.get_memory_info("CPU:0")
    tf.config.experimental.reset_memory_stats("CPU:0")
    reset = tf.config.experimental.get_memory_info("CPU:0")
    del x
    return start, after, reset


def test_F17_memory_info_current_and_peak():
    with Kernel() as kernel:
        start, after, reset = kernel.call(f17_memory_info)
    # configure() took the pool as one region (as a GPU's allocator does), freed it and
    # reset the statistics: the reader starts from zero.
    assert start == {"current": 0, "peak": 0}
    assert after["current"] == 4194304
    assert reset["peak"] == reset["current"] == 4194304


def configure_after_first_op():
    """Kernel side: configure() after the runtime started (raises DeviceConfigError)."""
    import tensorflow as tf

    tf.constant(1.0)
    devices.configure(4, "1GiB")


def test_configure_after_an_op_names_the_fix():
    with Kernel() as kernel, pytest.raises(RemoteError) as raised:
        kernel.call(configure_after_first_op)
    assert raised.value.type_name == "DeviceConfigError"
    assert "call snippets.lib.devices.configure() first thing" in raised.value.message


def configure_twice(first, second):
    """Kernel side: configure(*first) then configure(*second): True if the second returned the first's setup."""
    one = devices.configure(*first)
    two = devices.configure(*second)
    return one is two


def test_configure_again_same_request_is_idempotent_other_request_raises():
    with Kernel() as kernel:
        assert kernel.call(configure_twice, (4, "1GiB"), (4, "1024MiB")) is True
        with pytest.raises(RemoteError) as raised:
            kernel.call(configure_twice, (4, "1GiB"), (2, "1GiB"))
    assert raised.value.type_name == "DeviceConfigError"
    assert "restart Python" in raised.value.message
