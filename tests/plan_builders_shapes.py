"""A builder whose step reshapes to a size fixed in its code, as keras-io's Switch Transformer does
(``batch_size * num_tokens_per_example``) without declaring that batch in its ``keras.Input`` (helper-74)."""

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
