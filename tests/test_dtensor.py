"""DTensor sharding (snippets.dtensor) and field case F14, in fresh kernels.

One kernel with 4 logical CPUs under a 200 MiB cap serves every test but
F14's first half, which needs a process where no devices were configured.
Each kernel-side function sits above the test that calls it and returns plain
data.
"""

import pytest

from harness import Kernel
from snippets.lib import devices, hardware, pieces, splits, units
from snippets import dtensor as ds

CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"


@pytest.fixture(scope="module")
def four_cpus():
    with Kernel(deadline=300) as kernel:
        yield kernel


def configure_four_cpus(device_memory="200MiB"):
    """Kernel side: 4 logical devices sharing one allocator cap (idempotent within a kernel)."""
    return devices.configure(4, device_memory)


def f14_mesh_without_devices():
    """F14, first half: a mesh over CPU:0 and CPU:1 when only one CPU exists (nothing configured).

    Returns what ``create_mesh`` did, what the first ``pack`` and the first
    ``call_with_layout`` on the mesh raised, and what
    :func:`snippets.dtensor.make_mesh` says instead.
    """
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    mesh = dtensor.create_mesh([("x", 2)], devices=["CPU:0", "CPU:1"])
    layout = dtensor.Layout.replicated(mesh, 1)
    errors = {}
    for name, first_op in (("pack", lambda: dtensor.pack([tf.ones([4]), tf.ones([4])], layout)),
                           ("call_with_layout", lambda: dtensor.call_with_layout(tf.zeros, layout, shape=(4,)))):
        try:
            first_op()
            errors[name] = (None, None)
        except tf.errors.OpError as error:
            errors[name] = (type(error).__name__, error.message)
    try:
        ds.make_mesh(["CPU:0", "CPU:1"], {"x": 2})
        ours = None
    except ds.MeshError as error:
        ours = str(error)
    return {"mesh_created": mesh.num_local_devices(), "errors": errors, "make_mesh": ours}


def test_F14_mesh_over_devices_that_do_not_exist():
    with Kernel(deadline=120) as kernel:
        result = kernel.call(f14_mesh_without_devices)
    # create_mesh accepts it; the first op on the mesh fails on the missing device.
    assert result["mesh_created"] == 2
    error_type, message = result["errors"]["pack"]
    assert error_type == "InvalidArgumentError"
    assert "device:CPU:1 unknown device" in message
    error_type, message = result["errors"]["call_with_layout"]
    assert error_type == "InternalError"  # TF 2.21 wraps the same cause differently here
    assert "device:CPU:1 unknown device" in message
    assert result["make_mesh"].startswith("device CPU:1 does not exist here (1 logical devices)")


def f14_dvariable_pieces():
    """F14, second half: a [1024, 512] DVariable with layout [UNSHARDED, "model"] on 4 CPUs."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    setup = configure_four_cpus()
    mesh = dtensor.create_mesh([("model", 4)], devices=list(setup.devices))
    layout = dtensor.Layout([dtensor.UNSHARDED, "model"], mesh)
    variable = dtensor.DVariable(dtensor.call_with_layout(tf.zeros, layout, shape=(1024, 512)))
    return type(variable).__name__, [(p.device, p.shape, p.nbytes) for p in pieces.of_variable(variable)]


def test_F14_dvariable_unpacks_to_four_column_pieces(four_cpus):
    kind, pieces = four_cpus.call(f14_dvariable_pieces)
    assert kind == "DVariable"
    assert pieces == [(CPU.format(i), (1024, 128), 1024 * 128 * 4) for i in range(1, 5)]


def train_with_reference(axes=None, steps=3, relayout_gradients=True, **kwargs):
    """:func:`snippets.dtensor.train` on 4 devices, with the Keras reference for the same steps."""
    setup = configure_four_cpus()
    result = ds.train(setup, axes, steps=steps, relayout_gradients=relayout_gradients, **kwargs)
    reference = ds.keras_reference(steps=steps, **kwargs)
    return {
        "mesh": result["mesh"],
        "losses": result["losses"],
        "reference_losses": reference["losses"],
        "max_weight_error": float(abs(result["weights"] - reference["weights"]).max()),
        "kernel": [(p.device, p.shape, p.nbytes) for p in result["kernel"]],
        "velocity": [(p.device, p.shape) for p in result["velocity"]],
        "x": [(p.device, p.shape) for p in result["x"]],
    }


def test_model_mesh_training_matches_keras_rmsprop(four_cpus):
    result = four_cpus.call(train_with_reference, None, 3)
    assert result["mesh"] == {"model": 4}
    assert result["losses"] == pytest.approx(result["reference_losses"], rel=1e-5)
    assert result["losses"][2] < result["losses"][0]
    assert result["max_weight_error"] < 1e-6
    assert result["kernel"] == [(CPU.format(i), (1024, 128), 524288) for i in range(1, 5)]
    # The RMSprop velocity is a sharded slot, laid out like the kernel.
    assert result["velocity"] == [(CPU.format(i), (1024, 128)) for i in range(1, 5)]
    # No batch axis: every device sees the whole batch.
    assert {shape for _, shape in result["x"]} == {(16, 1024)}


def test_batch_by_model_mesh_combines_data_and_model_parallelism(four_cpus):
    result = four_cpus.call(train_with_reference, {"batch": 2, "model": 2}, 3)
    assert result["mesh"] == {"batch": 2, "model": 2}
    assert result["losses"] == pytest.approx(result["reference_losses"], rel=1e-5)
    assert result["max_weight_error"] < 1e-6
    # Kernel split in two along F, each half stored twice (once per batch row);
    # the batch split in two along B.
    assert [shape for _, shape, _ in result["kernel"]] == [(1024, 256)] * 4
    assert [shape for _, shape in result["x"]] == [(8, 1024)] * 4
    assert splits.layout_copies([None, "model"], result["mesh"]) == 2


def test_batch_by_model_mesh_without_gradient_relayout_drifts(four_cpus):
    # Measured TF 2.21 behaviour the module works around (make_train_step's docstring).
    result = four_cpus.call(train_with_reference, {"batch": 2, "model": 2}, 2, False)
    assert result["losses"][0] == pytest.approx(result["reference_losses"][0], rel=1e-6)
    assert result["max_weight_error"] > 1e-3


def random_init_pieces():
    """Glorot kernel drawn in layout on batch=2 x model=2: which pieces are equal, and their limit."""
    import numpy as np

    setup = configure_four_cpus()
    mesh = ds.make_mesh(setup, {"batch": 2, "model": 2})
    layer = ds.dense_on_mesh(mesh, 1024, 512, seed=3)
    from tensorflow.experimental import dtensor

    parts = [p.numpy() for p in dtensor.unpack(layer.kernel.read_value())]
    return {
        "shapes": [p.shape for p in parts],
        "replica_equal": bool(np.array_equal(parts[0], parts[2]) and np.array_equal(parts[1], parts[3])),
        "model_pieces_differ": not np.array_equal(parts[0], parts[1]),
        "max_abs": float(max(np.abs(p).max() for p in parts)),
    }


def test_random_init_in_layout(four_cpus):
    result = four_cpus.call(random_init_pieces)
    assert result["shapes"] == [(1024, 256)] * 4
    assert result["replica_equal"] and result["model_pieces_differ"]
    assert result["max_abs"] <= (6 / (1024 + 512)) ** 0.5


def bad_input_error(case: str) -> tuple[str | None, str | None]:
    """Kernel side: (exception type name, message) of one bad request: "bad_mesh", "bad_units" or "bad_batch"."""
    setup = configure_four_cpus()
    calls = {
        "bad_mesh": lambda: ds.make_mesh(setup, {"batch": 2, "model": 3}),
        "bad_units": lambda: ds.train(setup, None, units=510),
        "bad_batch": lambda: ds.train(setup, {"batch": 2, "model": 2}, batch=15),
    }
    try:
        calls[case]()
    except Exception as error:  # the test asserts on the type
        return type(error).__name__, str(error)
    return None, None


@pytest.mark.parametrize("case, expected", [
    ("bad_mesh", "mesh batch=2 x model=3 has 6 positions but 4 devices are configured; "
                 "choose axis sizes whose product is 4, or configure 6 devices"),
    ("bad_units", "cannot split dimension 1 of shape [1024, 510] over mesh axis 'model' (size 510) into 4 "
                  "equal shards: 4 does not divide 510; use a shard count that divides 510, or pad it to 512"),
    ("bad_batch", "cannot split dimension 0 of shape [15, 1024] over mesh axis 'batch' (size 15) into 2 "
                  "equal shards: 2 does not divide 15; use a shard count that divides 15, or pad it to 16"),
])
def test_bad_input_is_one_clear_line(four_cpus, case, expected):
    error_type, message = four_cpus.call(bad_input_error, case)
    assert (error_type, message) == ("MeshError", expected)


def reserve_training_state(shape):
    """:func:`snippets.dtensor.reserve_training_state` at ``shape`` under the 200 MiB cap."""
    import tensorflow as tf

    setup = configure_four_cpus()
    try:
        return "ok", ds.reserve_training_state(setup, shape)
    except tf.errors.ResourceExhaustedError as error:
        return type(error).__name__, error.message.splitlines()[0]


def test_reserve_training_state_goes_through_the_capped_allocator(four_cpus):
    # 3 x [8192, 1024] float32 = 96 MiB in 12 pieces of 8 MiB: fits the 200 MiB cap.
    status, rows = four_cpus.call(reserve_training_state, (8192, 1024))
    piece = units.tensor_bytes((8192, 256))
    assert status == "ok"
    assert [(r["shape"], r["kernel"], r["gradient"], r["velocity"], r["total"]) for r in rows] == [
        ((8192, 256), piece, piece, piece, 3 * piece)] * 4
    # 3 x [16384, 2048] = 384 MiB does not: the allocator refuses before touching pages.
    status, message = four_cpus.call(reserve_training_state, (16384, 2048))
    assert status == "ResourceExhaustedError"


def test_seed_figures_per_device():
    # The full-shape run (python -m snippets.dtensor --full-shape)
    # reserves exactly these pieces; the arithmetic is checked here.
    local = splits.layout_local_shape((131072, 65536), [None, "model"], {"model": 4})
    assert local == (131072, 16384)
    assert units.tensor_bytes(local) == 8589934592
    assert 3 * units.tensor_bytes(local) == 24 * units.GiB < hardware.V100_CAPACITY


def shard_summary():
    """Kernel side: :func:`snippets.dtensor.shard_summary` on the 4 devices."""
    return ds.shard_summary(configure_four_cpus())


def test_shard_summary_for_the_overview(four_cpus):
    summary = four_cpus.call(shard_summary)
    assert summary["method"] == "DTensor"
    assert summary["where"] == [CPU.format(i) for i in range(1, 5)]
    assert summary["local_shape"] == (1024, 128)
    assert summary["kernel_bytes"] == [524288] * 4
    assert summary["measured"] == summary["planned"] == [3 * 524288] * 4


def test_cli_rejects_a_mesh_that_does_not_match(capsys):
    from snippets.lib import pieces
    from snippets import dtensor as ds

    with pytest.raises(SystemExit) as exit_info:
        ds.main(["--mesh", "batch=two"])
    assert exit_info.value.code == 2
    assert "mesh 'batch=two' is not a list of axis=size" in capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", [
    (["--full-shape", "--devices", "3"], "cannot split dimension 1 of shape [131072, 65536] over mesh axis "
                                         "'model' (size 65536) into 3 equal shards"),
    (["--full-shape", "--devices", "2"], "51539607552 B (48 GiB) per device does not fit 30976MiB; use more devices"),
    (["--devices", "4", "--shape", "1024", "510"], "cannot split dimension 1 of shape [1024, 510] over mesh axis 'model' (size 510)"),
    (["--batch", "0"], "error: --batch must be a positive integer, not 0"),
    (["--steps", "-1"], "error: --steps must be a positive integer, not -1"),
    (["--steps", "0"], "error: --steps must be a positive integer, not 0"),
    (["--mesh", "batch=2,model=2", "--batch", "15"],
     "error: --batch 15: cannot split dimension 0 of shape [15, 1024] over mesh axis 'batch' (size 15) into 2 "
     "equal shards"),
])
def test_cli_bad_shapes_are_one_clear_line(capsys, argv, expected):
    from snippets.lib import pieces
    from snippets import dtensor as ds

    with pytest.raises(SystemExit) as exit_info:
        ds.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert expected in err.strip().splitlines()[-1]
