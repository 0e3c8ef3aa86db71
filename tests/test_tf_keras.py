"""tf_keras (Keras 2) under a DTensor layout map and ParameterServerStrategy (snippets.tf_keras).

Two kernels: one uncapped (the chapter's: DTensor needs TensorFlow's default
CPU allocator) serves the DTensor and fit checks, then the in-process PS
cluster; one capped (the allocator peak of a PS step, and the DTensor failure
the cap causes). Each kernel-side function sits above the test that calls it
and returns plain data.
"""

import pytest

from harness import Kernel
from snippets.lib import units

CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"


@pytest.fixture(scope="module")
def uncapped():
    with Kernel(deadline=300) as kernel:
        yield kernel


def dtensor_run() -> dict:
    """Kernel side: the unsharded reference, the layout-mapped model's pieces, its fit losses and the NumPy trap."""
    from snippets import tf_keras as tk
    from snippets.lib import devices

    setup = devices.configure(4, "200MiB", capped=False)
    x, y = tk.batch(seed=1)
    tk.tf_keras().utils.set_random_seed(1)
    start = tk.seed_model().get_weights()
    reference = tk.unsharded_losses(start, x, y)
    mesh = tk.mesh(setup)
    model = tk.dtensor_model(mesh, start)
    found = {name: [(p.device, p.shape) for p in parts] for name, parts in tk.kernel_and_slots(model).items()}
    losses = tk.fit_losses(model, tk.dtensor_dataset(mesh, x, y))
    trained = tk.weights(model)[0]
    return {"type": type(model.layers[0].kernel).__name__, "pieces": found, "losses": losses,
            "jit": model.optimizer.jit_compile, "compiled": tk.compiled_updates(model),
            "reference": reference, "moved": float(abs(trained - start[0]).max()),
            "trap": tk.numpy_fit_refusal(model, x, y), "versions": tk.versions(), "tolerance": tk.TOLERANCE}


def test_layout_map_shards_kernel_and_velocity_and_fit_matches_unsharded(uncapped):
    got = uncapped.call(dtensor_run)
    assert got["versions"]["tf_keras"].startswith("2.") and got["versions"]["tf.keras"].startswith("3.")
    assert got["type"] == "DVariable"
    shards = [(CPU.format(i), (1024, 128)) for i in range(1, 5)]
    assert got["pieces"] == {"kernel": shards, "velocity/dense/kernel": shards}
    assert len(got["losses"]) == 3 and got["losses"][2] < got["losses"][0]
    assert got["losses"] == pytest.approx(got["reference"], abs=got["tolerance"], rel=0)
    assert got["moved"] > 1e-4  # training did move the (gathered) kernel
    # as on a GPU host, the optimizer compiled each variable's update (kernel, bias) with XLA
    assert got["jit"] is True and got["compiled"] == 2
    assert got["trap"] == ("UnknownError: 'tf.IteratorGetNext' op ComputeLayoutForward error: Could not find "
                           "`tf._element_layouts` attribute of 0-th input to op: tf.DTensorLayout")


def ps_run() -> dict:
    """Kernel side (after :func:`dtensor_run`, same kernel): the PS model's shards, slots, losses and worker graph."""
    from snippets import tf_keras as tk
    from snippets.lib import devices

    devices.configure(4, "200MiB", capped=False)  # as dtensor_run did (the same request is a no-op)
    x, y = tk.batch(seed=1)
    tk.tf_keras().utils.set_random_seed(1)
    start = tk.seed_model().get_weights()
    strategy = tk.ps_strategy()
    model = tk.ps_model(strategy, start)
    losses = tk.ps_train(model, x, y)
    found = {name: [(p.device, p.shape) for p in parts] for name, parts in tk.kernel_and_slots(model).items()}
    fused = tk.ps_model(strategy, start, momentum=0.9)
    return {"type": type(model.layers[0].kernel).__name__, "pieces": found, "losses": losses,
            "reference": tk.unsharded_losses(start, x, y, optimizer="legacy"),
            "worker": tk.worker_full_tensors(strategy, model),
            "fused": tk.worker_full_tensors(strategy, fused)["updates"], "tolerance": tk.TOLERANCE}


def test_ps_fit_shards_kernel_and_slots_but_the_worker_builds_the_whole_kernel_and_gradient(uncapped):
    got = uncapped.call(ps_run)
    assert got["type"] == "ShardedVariable"
    kernel = got["pieces"].pop("kernel")
    assert sorted(device for device, _ in kernel) == [f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(4)]
    assert {shape for _, shape in kernel} == {(256, 512)}
    # one slot per shard, on the shard's ps task
    assert sorted(got["pieces"]) == [f"RMSprop/dense/kernel/part_{i}/rms" for i in range(4)]
    assert [got["pieces"][f"RMSprop/dense/kernel/part_{i}/rms"] for i in range(4)] == [[piece] for piece in kernel]
    assert got["losses"] == pytest.approx(got["reference"], abs=got["tolerance"], rel=0)
    assert got["losses"][2] < got["losses"][0]
    assert [op_type for op_type, _ in got["worker"]["full"]] == ["ConcatV2", "MatMul"]
    assert "gradient_tape" in got["worker"]["full"][1][1]
    assert got["worker"]["updates"] == {"AssignVariableOp": 16}
    assert got["fused"] == {"ResourceApplyRMSProp": 8}


def optimizer_jit_on_faked_hosts() -> dict:
    """Kernel side: tf_keras's optimizer ``jit_compile`` with ``tf.config`` faked to list one GPU, then none."""
    from unittest import mock

    import tensorflow as tf
    from tf_keras.src.optimizers import optimizer as base  # tf_keras reads tf.config through its own module

    from snippets import tf_keras as tk

    real = tf.config.list_physical_devices
    found = {}
    for host, gpus in (("gpu", [tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")]), ("cpu", [])):
        def listed(device_type=None, gpus=gpus):
            return gpus if device_type == "GPU" else real(device_type)

        with mock.patch.object(tf.config, "list_physical_devices", listed), \
                mock.patch.object(base.tf.config, "list_physical_devices", listed):
            made = tk.tf_keras().optimizers.RMSprop(1e-3)
            found[host] = {"tf_keras": made.jit_compile, "ours": tk.host_optimizer_jit(),
                           "refused": tk.tf_keras().optimizers.RMSprop(1e-3, jit_compile=False).jit_compile,
                           "emulated": tk.as_on_gpu_host(made).jit_compile}
    return found


def test_the_emulation_compiles_tf_keras_updates_as_tf_keras_does_when_a_gpu_is_listed():
    from snippets.lib import placements

    with Kernel(deadline=120) as kernel:
        got = kernel.call(optimizer_jit_on_faked_hosts)
    # tf_keras's own constructor: on with a GPU listed, off with none; our reading of its rule agrees
    assert got["gpu"]["tf_keras"] is True and got["cpu"]["tf_keras"] is False
    assert got["gpu"]["ours"] is True and got["cpu"]["ours"] is False
    assert got["gpu"]["refused"] is False  # jit_compile=False on the optimizer is the way out
    # the emulation plays the GPU host whatever this host lists, from the planner's one rule
    assert got["gpu"]["emulated"] is got["cpu"]["emulated"] is placements.resolve_xla("auto", "tf_keras_dtensor")
    assert placements.resolve_xla("auto", "tf_keras_dtensor") == placements.tf_keras_optimizer_jit(True, True)
    assert placements.xla_mode(True, "tf_keras_dtensor") == "xla-update"


def tk_update_cap() -> str:
    from snippets import tf_keras as tk

    return tk.UPDATE_CAP


def tk_update_peak(jit: bool) -> dict:
    from snippets import tf_keras as tk

    return tk.update_peak(jit)


def test_tf_keras_compiled_update_needs_nothing_beyond_its_gradient_on_xla_cpu():
    from snippets.lib import devices, probe_cache

    runs = {}
    for mode in ("xla", "no-xla"):  # one after the other: each holds about 2 GiB
        with Kernel(deadline=300) as kernel:  # what `python -m snippets.tf_keras --update-peak` runs
            kernel.call(devices.configure, 1, tk_update_cap(), "cpu")
            runs[mode] = kernel.call(tk_update_peak, mode == "xla")
    assert runs["xla"]["traces"] == 1 and runs["no-xla"]["traces"] == 0
    # XLA updates the slot and the variable in place: what Keras 3's compiled-update probe says (gradient only)
    assert runs["xla"]["units"] < 0.05
    assert probe_cache.transient_units("rmsprop", "float32", "xla-update") == 1.0
    # without XLA, full-size temporaries, and no more than Keras 3's uncompiled RMSprop (which the planner uses)
    assert 1.5 < runs["no-xla"]["units"] <= probe_cache.transient_units("rmsprop", "float32", False) - 1 + 0.05


def capped_runs() -> dict:
    """Kernel side, capped allocator: a DTensor scalar fails; a fused PS step peaks at the worker's kernel + gradient."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from snippets import tf_keras as tk
    from snippets.lib import devices

    setup = devices.configure(4, "200MiB", mode="cpu")
    mesh = dtensor.create_mesh([("model", 4)], devices=list(setup.devices))
    try:
        dtensor.call_with_layout(tf.zeros, dtensor.Layout.replicated(mesh, 0), shape=[])
        scalar = None
    except tf.errors.OpError as error:
        scalar = f"{type(error).__name__}: {error.message}"
    return {"scalar": scalar, "peak": tk.worker_peak(momentum=0.9)}


def test_the_cap_breaks_dtensor_scalars_and_the_fused_ps_step_peaks_at_kernel_plus_gradient():
    with Kernel(deadline=300) as kernel:
        got = kernel.call(capped_runs)
    assert got["scalar"].startswith("InternalError: TF_TensorData returned nullptr")
    peak, kernel_bytes = got["peak"]["peak"], got["peak"]["kernel"]
    assert kernel_bytes == units.tensor_bytes((1024, 512))
    # the worker's whole kernel (ConcatV2) and whole gradient, and no third full-size tensor from the update
    assert 2 * kernel_bytes <= peak < 3 * kernel_bytes
    # the planner's parameter_server worker (kernel + gradient + activations) is within half a kernel of it
    assert abs(peak - got["peak"]["planned"]) < kernel_bytes // 2


def test_full_shape_arithmetic_comes_from_the_shared_layer():
    from snippets import tf_keras as tk

    full = tk.full_shape()
    assert full["dtensor_piece"] == full["ps_shard"] == full["ps_slot"] == 8 * units.GiB
    assert full["dtensor_state"] == 24 * units.GiB
    assert full["worker_kernel"] == full["worker_gradient"] == 32 * units.GiB
    assert full["dtensor_state"] <= full["capacity"] < full["worker_kernel"]


def test_the_cli_refuses_a_negative_momentum():
    import subprocess
    import sys

    from harness import kernel_environment

    result = subprocess.run([sys.executable, "-m", "snippets.tf_keras", "--momentum", "-1"],
                            capture_output=True, text=True, env=kernel_environment(), check=False)
    assert result.returncode == 2 and "--momentum must be >= 0" in result.stderr.splitlines()[-1]


def test_the_test_process_stays_free_of_tensorflow():
    import sys

    assert not {"tensorflow", "tf_keras"} & set(sys.modules)
