"""Imported by a JAX kernel (``Kernel(backend="jax")``) once its environment is set.

A JAX kernel is a new interpreter, not a fork of the TensorFlow fork server
(whose Keras is bound to TensorFlow for good), so nothing about threads needs
checking here. ``KERAS_BACKEND`` is read when Keras is imported and
``XLA_FLAGS`` when JAX's CPU backend starts, so both come from the kernel's
environment (:data:`harness.JAX_ENV`), which :func:`harness.kernel.main` sets
before importing this module.

Never import this module in the test process: that would import JAX and Keras there.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402,F401  (the import is the point)
import keras  # noqa: E402

#: Why this kernel should not serve (read by :func:`harness.kernel.import_problem`), or None.
PROBLEM = (None if keras.backend.backend() == "jax" else
           f"Keras runs on {keras.backend.backend()!r}, not 'jax': KERAS_BACKEND was "
           f"{os.environ.get('KERAS_BACKEND')!r} when Keras was imported")
