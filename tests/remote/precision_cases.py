"""Remote side of tests/test_precision.py (field cases F10, F11; loss scaling; full-size reservations).

Every function configures the same devices first (``devices.configure`` is
idempotent for the same arguments), so they can run in one kernel in any order:
4 logical CPUs sharing one BFC allocator capped at 30976 MiB (one V100's worth).
"""

from snippets.lib import devices, pieces
from snippets import placement, precision

COUNT, DEVICE_MEMORY = 4, "30976MiB"


def _setup():
    return devices.configure(COUNT, DEVICE_MEMORY)


def layer_dtypes(policy):
    _setup()
    return precision.layer_dtypes(policy)


def seed_kernel(policy):
    _setup()
    spec = precision.seed_kernel(policy)
    return spec.shape, spec.dtype, spec.nbytes


def dense_dtype_float16_under_float32():
    """F11, second form: ``Dense(8, dtype="float16")`` while the global policy is float32."""
    import keras

    _setup()
    assert keras.config.dtype_policy().name == "float32"
    dense = keras.layers.Dense(8, dtype="float16")
    dense.build((None, 16))
    return dense.kernel.dtype, dense.compute_dtype


def mirrored_float16(shape):
    """A float16 variable under MirroredStrategy: (type, [(device, shape, dtype, bytes)])."""
    setup = _setup()
    variable = placement.mirrored_variable(setup, shape, "float16")
    return type(variable).__name__, [
        (pieces.short_device(c.device), c.shape, c.dtype, c.nbytes)
        for c in pieces.of_variable(variable)
    ]


def autocast_peak(shape):
    _setup()
    return precision.autocast_peak(shape)


def reserve_training(shape, dtype):
    _setup()
    return [(r.name, r.nbytes, r.reserved) for r in
            precision.reserve(precision.training_tensors(shape, dtype))]


def underflow_steps():
    _setup()
    return precision.underflow_step(False), precision.underflow_step(True)


def compiled_optimizers(policies):
    _setup()
    return [precision.compiled_optimizer(p) for p in policies]


def train_float16():
    _setup()
    return precision.train_float16(steps=4)


def global_policy():
    import keras

    return keras.config.dtype_policy().name


def budgets(shape, dtype, optimizer, strategy, count, policy=None):
    """``planner.per_device`` in the kernel: counting slots builds a Keras optimizer (imports TF)."""
    from snippets.lib import planner

    return [(b.weights, b.gradients, b.slots, b.step_peak, b.total)
            for b in planner.per_device(shape, dtype, optimizer, strategy, count, policy)]
