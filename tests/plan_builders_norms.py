"""A builder with layers that keep float32 tensors under a 16-bit policy, on a GPU too (helper-94, helper-97): a
BatchNormalization, a MultiHeadAttention without dropout (its logits and softmax in float32; one with dropout is not)
and a LayerNormalization inside a nested model."""

import keras


def normed(length: int = 8):
    """Over a sequence of ``length`` x 16: Dense, BatchNormalization, self-attention without dropout and with it, then a
    nested Sequential of LayerNormalization, Flatten and Dense; compiled with Adam and mse."""
    inputs = keras.Input((length, 16))
    hidden = keras.layers.BatchNormalization()(keras.layers.Dense(16, activation="relu")(inputs))
    hidden = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)(hidden, hidden)
    hidden = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8, dropout=0.1)(hidden, hidden)
    head = keras.Sequential([keras.Input((length, 16)), keras.layers.LayerNormalization(), keras.layers.Flatten(),
                             keras.layers.Dense(8)])
    model = keras.Model(inputs, head(hidden))
    model.compile(optimizer="adam", loss="mse")
    return model
