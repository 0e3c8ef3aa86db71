"""A builder of keras-io's transfer-learning pattern (its "Transfer learning & fine-tuning" guide): a base with
``trainable = False`` and a new head, for the plan's note on what is frozen (helper-68)."""

import keras


def frozen_base():
    """Two Dense layers of 256 frozen as a base (322 KiB of the model's 324.01 KiB of weights), a trainable head of 2."""
    base = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256), keras.layers.Dense(256)])
    base.trainable = False
    model = keras.Sequential([base, keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    return model


def kept_by_design():
    """Nothing frozen, but variables that are never trainable: a ``Normalization`` layer's statistics (as
    EfficientNetB0's input has), a ``RandomFlip``'s and a ``Dropout``'s seed, a BatchNorm's moving statistics."""
    inputs = keras.Input((8, 8, 3))
    norm = keras.layers.Normalization()
    norm.adapt(keras.ops.ones((4, 8, 8, 3)))
    x = keras.layers.RandomFlip()(norm(inputs))
    x = keras.layers.BatchNormalization()(keras.layers.Conv2D(4, 3)(x))
    outputs = keras.layers.Dense(2)(keras.layers.Dropout(0.1)(keras.layers.Flatten()(x)))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="mse")
    return model
