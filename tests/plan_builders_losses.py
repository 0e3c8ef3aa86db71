"""Builders of tests/plan_builders.py whose loss groups the samples of a batch (re-exported there under their names)."""

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
