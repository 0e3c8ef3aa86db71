"""A builder with layers that compute in float32 under a 16-bit policy, on a GPU too (helper-94): a BatchNormalization,
and a LayerNormalization inside a nested model."""

import keras


def normed():
    """Dense, BatchNormalization, then a nested Sequential of LayerNormalization and Dense; compiled with Adam and mse."""
    inputs = keras.Input((32,))
    hidden = keras.layers.BatchNormalization()(keras.layers.Dense(64, activation="relu")(inputs))
    head = keras.Sequential([keras.Input((64,)), keras.layers.LayerNormalization(), keras.layers.Dense(8)])
    model = keras.Model(inputs, head(hidden))
    model.compile(optimizer="adam", loss="mse")
    return model
