"""Builders whose shapes the planner's runs cannot follow: a step that reshapes to a size fixed in its code, as keras-io's
Switch Transformer does (``batch_size * num_tokens_per_example``) without declaring that batch in its ``keras.Input``
(helper-74), or adds a table of a fixed batch (helper-87); and a layer that makes a variable from an array, as keras-io's
Swin Transformer does, or, as the planner's refusal says, with an initializer (helper-87)."""

import keras


class FixedTokens(keras.layers.Layer):
    """Reshapes ``[batch, 4, 4]`` to the tokens of a batch of 8 and back, as the Switch layer routes its tokens."""

    def call(self, x):
        tokens = keras.ops.reshape(x, (8 * 4, 4))
        return keras.ops.reshape(tokens * 2.0, (8, 4, 4))


def fixed_reshape():
    """A step that runs at a batch of 8 only; compiled with Adam and mse."""
    inputs = keras.Input((4, 4))
    model = keras.Model(inputs, keras.layers.Dense(4)(FixedTokens()(inputs)))
    model.compile(optimizer="adam", loss="mse")
    return model


class _PositionBias(keras.layers.Layer):
    """Adds a table fixed at build time, made as keras-io's Swin Transformer makes its ``relative_position_index``
    (``keras.Variable`` of an array) or, with ``constant``, as the planner's refusal says (an initializer)."""

    def __init__(self, constant=False):
        super().__init__()
        self.constant = constant

    def build(self, input_shape):
        import numpy as np

        table = np.arange(input_shape[-1], dtype="float32")
        self.table = (self.add_weight(shape=table.shape, dtype="float32", trainable=False,
                                      initializer=keras.initializers.Constant(table)) if self.constant else
                      keras.Variable(table, trainable=False))

    def call(self, x):
        return x + self.table


def array_variable(constant=False):
    """A Dense after :class:`_PositionBias`, compiled with Adam and mse."""
    inputs = keras.Input((8,))
    model = keras.Model(inputs, keras.layers.Dense(4)(_PositionBias(constant)(inputs)))
    model.compile(optimizer="adam", loss="mse")
    return model


class _FixedNoise(keras.layers.Layer):
    """Adds noise of 64 rows whatever the batch, as keras-io's DDIM draws its noise at its ``batch_size``."""

    def call(self, x):
        return x + keras.ops.ones((64, 8))


def fixed_add():
    """A Dense after :class:`_FixedNoise`: a step that runs at a batch of 64 only; compiled with Adam and mse."""
    inputs = keras.Input((8,))
    model = keras.Model(inputs, keras.layers.Dense(4)(_FixedNoise()(inputs)))
    model.compile(optimizer="adam", loss="mse")
    return model


class _SmallBatchesOnly(keras.layers.Layer):
    """Fails past 100 samples at run time, as keras.RematScope("larger_than") does past its threshold (helper-96)."""

    def call(self, x):
        import tensorflow as tf

        tf.debugging.assert_less(tf.shape(x)[0], 100, message="this layer takes under 100 samples")
        return x


def small_batches_only():
    """A Dense after :class:`_SmallBatchesOnly`: a step that runs at 16, 32 and 64 and fails at 256; Adam and mse."""
    inputs = keras.Input((8,))
    model = keras.Model(inputs, keras.layers.Dense(4)(_SmallBatchesOnly()(inputs)))
    model.compile(optimizer="adam", loss="mse")
    return model
