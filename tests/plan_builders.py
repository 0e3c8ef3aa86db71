"""Model functions a reader might hand to ``python -m snippets.decide --model`` (tests/test_plan.py)."""

import keras


def tiny():
    """A small uncompiled model: the planner needs --loss for it."""
    return keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(8)])


def tiny_mixed():
    """Sets a mixed policy itself, as many scripts do, and compiles with its loss."""
    keras.config.set_dtype_policy("mixed_float16")
    model = tiny()
    model.compile(loss="mse")
    return model


def unbuilt():
    """No Input and no build(): a Sequential without weights yet."""
    return keras.Sequential([keras.layers.Dense(8)])


def failing():
    raise ValueError("the reader's bug")


def not_a_model():
    """Returns the model's config by mistake, not the model."""
    return tiny().get_config()
