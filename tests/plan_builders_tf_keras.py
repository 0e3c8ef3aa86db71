"""A tf_keras (Keras 2) model function: ``decide --model`` refuses it in one line (tests/test_plan.py)."""

import tf_keras


def model():
    return tf_keras.Sequential([tf_keras.layers.Dense(8, input_shape=(16,))])
