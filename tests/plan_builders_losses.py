"""Builders of tests/plan_builders.py whose loss groups the samples of a batch, or takes targets of its own shape
(re-exported there under their names)."""

import keras
from keras import ops


def triplet_loss(y_true, y_pred):
    """A triplet margin loss over consecutive (anchor, positive, negative) samples: the batch must divide by 3."""
    anchor, positive, negative = (ops.reshape(y_pred, (-1, 3, y_pred.shape[-1]))[:, i] for i in range(3))
    gap = ops.sum(ops.square(anchor - positive), -1) - ops.sum(ops.square(anchor - negative), -1)
    return ops.mean(ops.maximum(gap + 1.0, 0.0))


def triplet():
    """An embedding trained with :func:`triplet_loss` and its own Adam (helper-54: its setup step, on 2 samples per
    replica, failed to reshape them into triplets, and the plan was refused)."""
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(32)])
    model.compile(keras.optimizers.Adam(), triplet_loss)
    return model


def ctc_labels(y_true, y_pred):
    """keras-io's CTCLoss in Keras 3 ops: its y_true is label sequences (batch, label length), not y_pred's shape."""
    ones = ops.ones((ops.shape(y_true)[0],), dtype="int32")
    return ops.ctc_loss(ops.cast(y_true, "int32"), y_pred, ops.shape(y_true)[1] * ones, ops.shape(y_pred)[1] * ones,
                        mask_index=0)


def ctc_tagger():
    """A per-frame softmax compiled with :func:`ctc_labels` (keras-io's DeepSpeech2, small; helper-57: its plan ended
    on TensorFlow's "Dimensions must be equal", with nothing saying the planner made its targets)."""
    model = keras.Sequential([keras.Input((20, 8)), keras.layers.Dense(6, activation="softmax")])
    model.compile(keras.optimizers.Adam(), ctc_labels)
    return model


def two_view(y_true, y_pred):
    """A two-view contrastive loss: each sample's embedding against both views of the batch, ``[B, 2B]`` logits."""
    z = y_pred / ops.sqrt(ops.sum(y_pred * y_pred, axis=-1, keepdims=True) + 1e-6)
    logits = ops.matmul(z, ops.transpose(ops.concatenate([z, z * 0.5 + 0.1], axis=0))) / 0.1
    return keras.losses.sparse_categorical_crossentropy(ops.arange(ops.shape(z)[0]), logits, from_logits=True)


def hidden_pairs():
    """Six LayerNorm and GELU layers on 8192 features, then a 128-wide head trained by :func:`two_view` (helper-83's): at the run
    short of a batch far past 256, the LayerNorm backward peaks above the ``[B, 2B]`` logits, which overtake it further
    out."""
    x = inputs = keras.Input((8192,))
    for _ in range(6):
        x = keras.layers.Activation("gelu")(keras.layers.LayerNormalization()(x))
    model = keras.Model(inputs, keras.layers.Dense(128)(x))
    model.compile("adam", two_view)
    return model
