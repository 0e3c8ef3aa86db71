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


def two_heads():
    """Returns a dict of two outputs, compiled with a loss for each: class ids for one, values for the other."""
    inputs = keras.Input((16,))
    hidden = keras.layers.Dense(32, activation="relu")(inputs)
    model = keras.Model(inputs, {"cls": keras.layers.Dense(3)(hidden), "reg": keras.layers.Dense(1)(hidden)})
    model.compile(loss={"cls": keras.losses.SparseCategoricalCrossentropy(from_logits=True), "reg": "mse"})
    return model


def tiny_sgd():
    """Compiles with its own optimizer object and a loss object."""
    model = tiny()
    model.compile(optimizer=keras.optimizers.SGD(), loss=keras.losses.Huber())
    return model
