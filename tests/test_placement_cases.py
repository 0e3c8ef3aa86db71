"""Field cases F01, F02, F03, F06, F08, F12, F17 (docs/field-cases.md), each in a fresh kernel."""

import pytest

from snippets import memory
from tests.harness import Kernel, RemoteError

REMOTE = "tests.remote.foundation"


@pytest.fixture(scope="module")
def four_cpus():
    """One kernel with 4 logical CPUs and a 1 GiB cap, shared by the cases that need nothing else."""
    with Kernel() as kernel:
        yield kernel


def test_F01_mirrored_variable_has_a_full_copy_per_replica(four_cpus):
    kind, components = four_cpus.call(f"{REMOTE}:f01_mirrored_components")
    assert kind == "MirroredVariable"
    assert components == [(f"CPU:{i}", (1024, 256), 1024 * 256 * 4) for i in range(1, 5)]
    # At full shape the same rule costs 32 GiB on every replica, 128 GiB in all.
    assert memory.tensor_bytes([131072, 65536], "float32") == 34359738368
    assert 4 * memory.tensor_bytes([131072, 65536], "float32") == 137438953472


def test_F02_mirrored_variable_fails_at_first_write():
    with Kernel() as kernel:
        created, error_type, message = kernel.call(f"{REMOTE}:f02_first_write")
    assert created == "created"
    assert error_type == "ResourceExhaustedError"
    assert "shape[16384,1024]" in message and "AssignAddVariableOp" in message


def test_F03_plain_variable_goes_whole_to_device_0(four_cpus):
    count, kind, components = four_cpus.call(f"{REMOTE}:f03_plain_variable")
    assert count == 4
    assert kind == "ResourceVariable"
    assert components == [("CPU:1", (1024, 256), 1048576)]


def test_F06_same_device_list_again_is_fine_a_different_one_raises():
    with Kernel() as kernel:
        same, error = kernel.call(f"{REMOTE}:f06_reconfigure")
    assert same == "same list: no error"
    assert error == "Virtual devices cannot be modified after being initialized"


def test_F08_virtual_is_logical_and_cpu_takes_no_memory_limit():
    with Kernel() as kernel:
        same, error = kernel.call(f"{REMOTE}:f08_config_class")
        without_bfc = kernel.call(f"{REMOTE}:memory_info_without_bfc")
    assert same is True
    assert error == "Setting memory limit on CPU virtual devices is currently not supported"
    assert "Allocator stats not available" in without_bfc


def test_F12_tf_device_inside_scope_is_still_mirrored(four_cpus):
    (inside_kind, inside), (outside_kind, outside) = four_cpus.call(f"{REMOTE}:f12_device_inside_scope")
    assert inside_kind == "MirroredVariable"
    assert [device for device, _, _ in inside] == ["CPU:1", "CPU:2", "CPU:3", "CPU:4"]
    assert outside_kind == "ResourceVariable"
    assert outside == [("CPU:0", (2048, 1024), 8388608)]


def test_F17_memory_info_current_and_peak():
    with Kernel() as kernel:
        start, after, reset = kernel.call(f"{REMOTE}:f17_memory_info")
    # configure() took the pool as one region (as a GPU's allocator does), freed it and
    # reset the statistics: the reader starts from zero.
    assert start == {"current": 0, "peak": 0}
    assert after["current"] == 4194304
    assert reset["peak"] == reset["current"] == 4194304


def test_configure_after_an_op_names_the_fix():
    with Kernel() as kernel, pytest.raises(RemoteError) as raised:
        kernel.call(f"{REMOTE}:configure_after_first_op")
    assert raised.value.type_name == "DeviceConfigError"
    assert "call snippets.devices.configure() first thing" in raised.value.message


def test_configure_again_same_request_is_idempotent_other_request_raises():
    with Kernel() as kernel:
        assert kernel.call(f"{REMOTE}:configure_twice", (4, "1GiB"), (4, "1024MiB")) is True
        with pytest.raises(RemoteError) as raised:
            kernel.call(f"{REMOTE}:configure_twice", (4, "1GiB"), (2, "1GiB"))
    assert raised.value.type_name == "DeviceConfigError"
    assert "restart Python" in raised.value.message
