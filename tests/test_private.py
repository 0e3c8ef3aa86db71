"""Canary for snippets.lib.private: each private TensorFlow/Keras access still works on the installed versions."""

from importlib.metadata import version

from harness import Kernel
from snippets.lib import private


def private_accesses() -> dict:
    """Kernel side: exercise every function of snippets.lib.private once."""
    import keras
    import tensorflow as tf

    started_before = private.runtime_started()
    onednn = private.onednn_enabled()
    tf.constant(1.0)
    optimizer = keras.optimizers.RMSprop(learning_rate=0.5)
    variable = keras.Variable([1.0, 2.0])
    optimizer.build([variable])
    hook = private.gradient_aggregation(optimizer)
    calls = []
    private.set_gradient_aggregation(optimizer, lambda gv: calls.append(len(gv)) or list(gv))
    optimizer.apply_gradients([(tf.constant([1.0, 1.0]), variable)])
    function = tf.function(lambda x: x * 2.0)
    metadata = private.run_metadata(lambda: function(tf.constant(3.0)))
    lr = private.learning_rate_variable(optimizer)
    with private.shapes_only():
        layer = keras.layers.Dense(8)
        layer.build((None, 4))
    left = len(private.uninitialised_variables())
    inputs = keras.Input((4,))
    keras.Model(inputs, keras.layers.Dense(2)(inputs))  # closes a StatelessScope: initialises the list
    sequence = keras.Input((6, 4))
    tagger = keras.Model(sequence, [keras.layers.LSTM(3)(sequence), keras.layers.GRU(3, reset_after=False)(sequence),
                                    keras.layers.RandomRotation(0.1)(keras.layers.Reshape((6, 4, 1))(sequence))])
    b, a = keras.Input((2,), name="b"), keras.Input((3,), name="a")
    joined = keras.layers.Concatenate()([b, a])
    structures = private.functional_structures(keras.Model({"b": b, "a": a}, joined))
    positions = keras.Input((6, 4))
    per_position = keras.Model(positions, keras.layers.Dense(2)(keras.layers.Flatten()(keras.layers.Dense(3)(positions))))

    class Owner(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.inner = keras.layers.Dense(3)  # a sublayer: its variables are not the outer layer's own

        def build(self, shape):
            self.kernel = self.add_weight(shape=(shape[-1], 2))
            self.extra = self.add_weight(shape=(5,), trainable=False)
            self.inner.build(shape)

    owner = Owner()
    owner.build((None, 4))
    import tests.plan_builders as builders
    from snippets.lib.model_batch import adds_its_loss, noting_added_losses

    penalised = builders.adds_loss_in_training()
    with noting_added_losses() as added:
        spec = private.training_call(penalised, penalised.inputs[0])
    training = (adds_its_loss(penalised, added), tuple(spec.shape), len(penalised.losses))
    return {
        "training_call": training,
        "structures": (sorted(structures[0]), structures[1] is joined, private.functional_structures(optimizer)),
        "layers": [type(layer).__name__ for layer in private.model_layers(tagger)],
        "own_variables": ([tuple(v.shape) for v in private.own_variables(owner)], len(owner.weights),
                          private.own_variables(object())),
        "gpu_xla_blockers": private.gpu_xla_blockers(tagger),
        "per_position": (private.per_position_dense(per_position), private.per_position_dense(tagger)),
        "shapes_only": (left, layer.kernel._value is None),
        "started": (started_before, private.runtime_started()),
        "onednn": onednn,
        "hook_callable": callable(hook),
        "hook_called": calls,
        "graphs": len(metadata.function_graphs),
        "learning_rate": float(lr.numpy()) if lr is not None else None,
    }


def test_every_private_access_still_works():
    with Kernel(deadline=120) as kernel:
        result = kernel.call(private_accesses)
    assert result["started"] == (False, True)
    assert result["onednn"] is False  # the kernels import TensorFlow after snippets.lib.devices
    assert result["hook_callable"] and result["hook_called"] == [1]
    assert result["graphs"] >= 1
    # A layer's own variables, trainable first, not its sublayer's two; an object that is no layer owns none.
    assert result["own_variables"] == ([(4, 2), (5,)], 4, [])
    assert result["learning_rate"] == 0.5
    # cuDNN's LSTM (default arguments), not a GRU without reset_after (no cuDNN kernel), and a layer Keras marks.
    assert result["gpu_xla_blockers"] == {"LSTM": private.CUDNN, "RandomRotation": private.NO_JIT}
    assert result["per_position"] == (1, 0)  # Dense(3) on [6, 4] per sample; Dense(2) after Flatten is not
    assert result["structures"] == (["a", "b"], True, (None, None))  # a dict's keys; nothing for a non-model
    assert result["layers"][0] == "InputLayer" and "LSTM" in result["layers"] and "Reshape" in result["layers"]
    assert result["shapes_only"] == (0, True)  # never on Keras's list to initialise, never given a value
    # The layer ran as in training (its add_loss called) and the loss was not kept on the model.
    assert result["training_call"] == (True, (None, 8), 0)


def jax_variable_layout() -> dict:
    """Kernel side (JAX): variable_layout on variables without values, and the slot it hands its layout to."""
    import keras

    from snippets.lib import private as jax_private

    mesh = keras.distribution.DeviceMesh((1, 4), ("batch", "model"), keras.distribution.list_devices())
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*dense.*kernel"] = (None, "model")
    keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=layout_map,
                                                                         batch_dim_name="batch"))
    with keras.StatelessScope(initialize_variables=False):
        layer = keras.layers.Dense(64, name="dense")
        layer.build((None, 32))
        kernel_layout = jax_private.variable_layout(layer.kernel)
    optimizer = keras.optimizers.RMSprop()
    with keras.StatelessScope(initialize_variables=False):
        optimizer.build([layer.kernel])
    (velocity,) = [v for v in optimizer.variables if v.path.endswith("kernel_velocity")]
    keras.distribution.set_distribution(None)
    return {"kernel": kernel_layout.axes, "velocity": jax_private.variable_layout(velocity).axes,
            "value": layer.kernel._value is None}


def test_variable_layout_on_jax():
    with Kernel(backend="jax", deadline=120) as kernel:
        got = kernel.call(jax_variable_layout)
    # the kernel's layout from the layout map, the velocity's from the kernel (its own path matches no key)
    assert got == {"kernel": (None, "model"), "velocity": (None, "model"), "value": True}


def test_the_versions_checked_are_the_installed_ones():
    # An upgrade must re-check snippets/lib/private.py and say so here.
    assert {name: version(name) for name in private.CHECKED_WITH} == private.CHECKED_WITH
