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
