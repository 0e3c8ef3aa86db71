"""Builders whose saved model (``model.to_json()``) a fresh process cannot rebuild: an object of the reader's own in
the model's config, as keras-io's PointNet's ``OrthogonalRegularizer`` (helper-91)."""

import keras


class OrthogonalRegularizer(keras.regularizers.Regularizer):
    """keras-io's PointNet regularizer, cut to its form: not registered, so no other process can find it."""

    def __init__(self, l2reg=0.001):
        self.l2reg = l2reg

    def __call__(self, x):
        return self.l2reg * keras.ops.sum(keras.ops.square(x))

    def get_config(self):
        return {"l2reg": self.l2reg}


def regularized():
    """A Dense layer under :class:`OrthogonalRegularizer`, compiled with Adam and mse."""
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activity_regularizer=OrthogonalRegularizer())])
    model.compile(optimizer="adam", loss="mse")
    return model


def regularized_json() -> str:
    """``model.to_json()`` of :func:`regularized`."""
    return regularized().to_json()


@keras.saving.register_keras_serializable(package="plan_builders_saved")
class Doubled(keras.layers.Layer):
    """Twice its input. Registered: found by a process that imported this module, and by no other."""

    def call(self, x):
        return 2.0 * x


def registered_json() -> str:
    """``model.to_json()`` of a compiled model with a :class:`Doubled` layer."""
    model = keras.Sequential([keras.Input((8,)), Doubled(), keras.layers.Dense(4)])
    model.compile(optimizer="adam", loss="mse")
    return model.to_json()
