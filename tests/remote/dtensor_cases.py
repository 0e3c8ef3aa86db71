"""Remote side of tests/test_dtensor.py: DTensor meshes, layouts and training (F14).

Each function runs in a kernel, configures devices first (or, for F14's
first half, deliberately does not), and returns plain data.
"""

from snippets import dtensor as ds
from snippets.lib import devices, pieces


def setup4(device_memory="200MiB"):
    """4 logical devices sharing one 200 MiB allocator cap (idempotent within a kernel)."""
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


def f14_dvariable_pieces():
    """F14, second half: a [1024, 512] DVariable with layout [UNSHARDED, "model"] on 4 CPUs."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    setup = setup4()
    mesh = dtensor.create_mesh([("model", 4)], devices=list(setup.devices))
    layout = dtensor.Layout([dtensor.UNSHARDED, "model"], mesh)
    variable = dtensor.DVariable(dtensor.call_with_layout(tf.zeros, layout, shape=(1024, 512)))
    return type(variable).__name__, [(p.device, p.shape, p.nbytes) for p in pieces.of_variable(variable)]


def train(axes=None, steps=3, relayout_gradients=True, **kwargs):
    """:func:`snippets.dtensor.train` on 4 devices, with the Keras reference for the same steps."""
    setup = setup4()
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


def random_init_pieces():
    """Glorot kernel drawn in layout on batch=2 x model=2: which pieces are equal, and their limit."""
    import numpy as np

    setup = setup4()
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


def error_line(call):
    """Run one bad request; return (exception type name, message)."""
    setup = setup4()
    try:
        call(setup)
    except Exception as error:  # the test asserts on the type
        return type(error).__name__, str(error)
    return None, None


def bad_mesh():
    return error_line(lambda s: ds.make_mesh(s, {"batch": 2, "model": 3}))


def bad_units():
    return error_line(lambda s: ds.train(s, None, units=510))


def bad_batch():
    return error_line(lambda s: ds.train(s, {"batch": 2, "model": 2}, batch=15))


def reserve(shape):
    """:func:`snippets.dtensor.reserve_training_state` at ``shape`` under the 200 MiB cap."""
    import tensorflow as tf

    setup = setup4()
    try:
        return "ok", ds.reserve_training_state(setup, shape)
    except tf.errors.ResourceExhaustedError as error:
        return type(error).__name__, error.message.splitlines()[0]


def summary():
    return ds.shard_summary(setup4())
