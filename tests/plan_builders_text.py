"""Builders of tests/plan_builders.py whose inputs are strings (re-exported there under their names): keras-io's
end-to-end text model and the lookups of its structured-data examples."""

import keras


def _text_model(sequence_length):
    vectorize = keras.layers.TextVectorization(max_tokens=50, output_sequence_length=sequence_length)
    vectorize.adapt(["a short text", "another short text to read"])
    inputs = keras.Input((1,), dtype="string")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 8)(vectorize(inputs)))
    model = keras.Model(inputs, keras.layers.Dense(2)(pooled))
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def text_classifier():
    """keras-io's end-to-end text model: raw strings in, a TextVectorization of 12 tokens inside."""
    return _text_model(12)


def text_any_length():
    """The same without output_sequence_length: its sequences are as long as the reader's texts."""
    return _text_model(None)


def closed_lookups():
    """keras-io's TabTransformer's lookups: a StringLookup and an IntegerLookup with num_oov_indices=0, each on a named
    input of its own (a value outside the vocabulary fails the step)."""
    color, size = keras.Input((1,), dtype="string", name="color"), keras.Input((1,), dtype="int64", name="size")
    numbers = keras.Input((3,), name="numbers")
    colors = keras.layers.StringLookup(vocabulary=["red", "green", "blue"], mask_token=None, num_oov_indices=0)(color)
    sizes = keras.layers.IntegerLookup(vocabulary=[7, 9], mask_token=None, num_oov_indices=0)(size)
    joined = keras.layers.Concatenate()([keras.layers.Flatten()(keras.layers.Embedding(3, 4)(colors)),
                                         keras.layers.Flatten()(keras.layers.Embedding(2, 4)(sizes)), numbers])
    model = keras.Model({"color": color, "size": size, "numbers": numbers}, keras.layers.Dense(1)(joined))
    model.compile(optimizer="adam", loss="mse")
    return model


def closed_lookup_inside():
    """A StringLookup with num_oov_indices=0 on a value the model computes: which values it takes, the planner cannot tell."""
    text = keras.Input((1,), dtype="string")
    ids = keras.layers.StringLookup(vocabulary=["x", "y"], mask_token=None, num_oov_indices=0)(
        keras.layers.Identity()(text))
    model = keras.Model(text, keras.layers.Dense(1)(keras.layers.Flatten()(keras.layers.Embedding(2, 4)(ids))))
    model.compile(optimizer="adam", loss="mse")
    return model
