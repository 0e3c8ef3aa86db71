"""Every private TensorFlow and Keras access of this site, in one place.

Each function says which private name it uses and the version it was checked
against; ``tests/test_private.py`` is the canary that fails first when an
upgrade moves one. Nothing else in ``snippets/`` reaches into ``tensorflow.python``,
``keras.src`` or an underscored attribute of TensorFlow or Keras.
:func:`variable_layout` is for Keras on JAX: its canary runs in a JAX kernel.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

#: The versions these accesses were checked against.
CHECKED_WITH = {"tensorflow": "2.21.0", "keras": "3.15.1", "jax": "0.10.2"}


def runtime_started() -> bool:
    """Whether TensorFlow's eager runtime has started in this process (an op ran, devices were listed).

    TensorFlow has no public call for it; its own ``set_logical_device_configuration``
    checks the same handle before raising "cannot be modified after being
    initialized". Private: ``tensorflow.python.eager.context.context()._context_handle``.
    """
    from tensorflow.python.eager import context

    return context.context()._context_handle is not None


def onednn_enabled() -> bool:
    """Whether TensorFlow's oneDNN rewrites are on in this process (fixed when TensorFlow was imported).

    Private: ``tensorflow.python.util._pywrap_util_port.IsMklEnabled``, the
    call TensorFlow's own tests use (``test_util.IsMklEnabled``).
    """
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def run_metadata(call: Callable[[], object]):
    """Run ``call()`` with run-metadata collection on; return the ``RunMetadata`` it recorded.

    The partitioned graphs of a ``tf.function`` instantiated during ``call``
    (one per device: the placer's decision) are in ``.function_graphs``; the
    mechanism behind TensorBoard's graph view. Private:
    ``tensorflow.python.eager.context.{enable,export,disable}_run_metadata``.
    """
    from tensorflow.python.eager import context

    context.enable_run_metadata()
    try:
        call()
        return context.export_run_metadata()
    finally:
        context.disable_run_metadata()


def gradient_aggregation(optimizer) -> Callable:
    """The Keras 3 TensorFlow optimizer's gradient all-reduce hook (``list of (grad, var)`` in and out).

    Private: ``keras.src.backend.tensorflow.optimizer.TFOptimizer._all_reduce_sum_gradients``.
    """
    return optimizer._all_reduce_sum_gradients


def set_gradient_aggregation(optimizer, hook: Callable) -> None:
    """Replace :func:`gradient_aggregation`'s hook on this optimizer instance."""
    optimizer._all_reduce_sum_gradients = hook


def learning_rate_variable(optimizer):
    """The variable a Keras 3 optimizer keeps its learning rate in, or None.

    Private: ``keras.src.optimizers.base_optimizer.BaseOptimizer._learning_rate``.
    """
    return getattr(optimizer, "_learning_rate", None)


def variable_layout(variable):
    """The ``keras.distribution.TensorLayout`` a Keras 3 variable on JAX gets, without its value.

    A variable made under ``keras.StatelessScope(initialize_variables=False)``
    has no value and no layout yet: Keras looks its layout up when it
    initialises it. This asks for that lookup now (the distribution's
    ``get_variable_layout`` for the variable's path, kept on the variable),
    and returns the layout, or None with no distribution set. Call it on a
    model's variables *before* building the optimizer: a slot takes its
    variable's layout when it is created
    (``add_variable_from_reference``, keras/src/optimizers/base_optimizer.py),
    not from its own path, which no layout-map key for the kernel matches
    (``"rm_sprop/sequential_dense_kernel_velocity"``).

    Private: ``keras.src.backend.jax.core.JaxVariable._initialize_layout`` and
    ``keras.src.backend.common.variables.Variable._layout`` (Keras 3.15.1 on JAX 0.10.2).
    """
    if variable._layout is None:
        variable._initialize_layout()
    return variable._layout


def training_call(model, inputs):
    """Call ``model`` as ``fit`` does, with ``training=True``, on placeholders for ``inputs`` (a structure of
    ``keras.KerasTensor``), computing nothing; returns the outputs' ``keras.KerasTensor`` structure. What a layer
    does only in training (``if training: self.add_loss(...)``) runs, which ``model(inputs, training=True)`` on
    KerasTensors does not do: a functional model's symbolic call runs each layer's ``compute_output_spec``, without
    ``training`` (checked: no ``add_loss`` call).

    Private: ``keras.src.backend.compute_output_spec`` (keras/src/backend/tensorflow/core.py, Keras 3.15.1): a
    scratch graph that never runs, inside a ``StatelessScope``, so no added loss is kept on the layer.
    """
    from keras.src.backend import compute_output_spec

    return compute_output_spec(lambda x: model(x, training=True), inputs)


@contextlib.contextmanager
def shapes_only():
    """``keras.StatelessScope(initialize_variables=False)`` whose variables are never initialised.

    Inside that scope Keras records each new variable's shape and dtype and puts the variable on a
    list of variables to initialise later; the next ``StatelessScope`` to close at the top level
    (every symbolic call: building a functional model, ``compute_output_spec``) initialises that
    whole list. So a model read by shape (the seed's 32 GiB kernel) would be allocated by whatever
    Keras code ran next in the process. This scope puts the list back as it found it: its variables
    keep shapes and no values, for good (they cannot train or predict).

    Private: the ``"uninitialized_variables"`` attribute of ``keras.src.backend.common.global_state``,
    which ``register_uninitialized_variable`` appends to and ``initialize_all_variables`` empties
    (keras/src/backend/common/variables.py; called from ``StatelessScope.__exit__``, Keras 3.15.1).
    """
    import keras
    from keras.src.backend.common import global_state

    pending = list(uninitialised_variables())
    try:
        with keras.StatelessScope(initialize_variables=False) as scope:
            yield scope
    finally:
        global_state.set_global_attribute("uninitialized_variables", pending)


def uninitialised_variables() -> list:
    """The variables Keras will initialise when the next top-level ``StatelessScope`` closes
    (:func:`shapes_only` says why). Private: as :func:`shapes_only`."""
    from keras.src.backend.common import global_state

    return list(global_state.get_global_attribute("uninitialized_variables") or [])


def model_layers(model) -> list:
    """Every layer inside ``model``, nested models' included (not the model itself).

    Private: ``Layer._flatten_layers(include_self=False)``, what Keras's own ``model_supports_jit`` walks
    (keras/src/trainers/trainer.py, Keras 3.15.1); ``model.layers`` lists the top level only.
    """
    return list(model._flatten_layers(include_self=False))


def own_variables(layer) -> list:
    """``layer``'s own variables, trainable then not, without its sublayers' (``layer.weights`` holds those too): a
    custom layer with an ``add_weight`` and a ``Dense`` inside owns the one variable.

    Private: ``Layer._trainable_variables`` and ``Layer._non_trainable_variables``, where ``add_weight`` tracks a
    layer's own (keras/src/layers/layer.py, Keras 3.15.1). Another object (no such lists) owns none.
    """
    return [*getattr(layer, "_trainable_variables", ()), *getattr(layer, "_non_trainable_variables", ())]


def per_position_dense(model) -> int:
    """How many ``keras.layers.Dense`` layers inside ``model`` were built on an input of rank 3 or more
    (a sequence's positions, an image's pixels): each holds activations per position, and the rule
    (:attr:`snippets.lib.planner.Weight.dense_kernel`) counts them once per sample.

    Private: ``Layer._build_shapes_dict``, the shapes ``build`` was called with (keras/src/layers/layer.py,
    Keras 3.15.1); a kernel's shape does not tell the input's rank. A layer never built counts as rank 2.
    """
    import keras

    def rank(layer) -> int:
        shape = (getattr(layer, "_build_shapes_dict", None) or {}).get("input_shape")
        return len(shape) if isinstance(shape, (tuple, list)) else 2

    return sum(1 for layer in model_layers(model) if isinstance(layer, keras.layers.Dense) and rank(layer) > 2)


def functional_structures(model) -> tuple:
    """A functional model's inputs and outputs as it takes and returns them (one tensor, a list or a
    dict: a dict's keys kept), or ``(None, None)`` for another model.

    Private: ``Functional._inputs_struct`` / ``_outputs_struct`` (keras/src/models/functional.py,
    Keras 3.15.1); the public ``inputs`` / ``outputs`` are flat lists.
    """
    return getattr(model, "_inputs_struct", None), getattr(model, "_outputs_struct", None)


#: :func:`gpu_xla_blockers`'s reasons: the layer runs cuDNN's kernel on a GPU host (TensorFlow's
#: reason alone: Keras on JAX jits it), or Keras marks it ``supports_jit = False`` on every backend.
CUDNN, NO_JIT = "cudnn", "supports_jit=False"


def gpu_xla_blockers(model) -> dict[str, str]:
    """The layers for which Keras 3 would not XLA-compile ``model``'s train step on a GPU host:
    ``{class name: reason}``, the reason :data:`CUDNN` or :data:`NO_JIT`, sorted by name.

    ``jit_compile`` (``"auto"`` or True) becomes False when ``model_supports_jit`` finds a layer with
    ``supports_jit = False`` (keras/src/trainers/trainer.py): preprocessing layers (TextVectorization,
    RandomRotation, ...), and an LSTM or GRU whose arguments let it run cuDNN's kernel
    (``use_cudnn`` "auto" or True), which sets it only when a GPU is listed (keras/src/layers/rnn/lstm.py
    and gru.py, ``backend.cudnn_ok``): on this CPU it would stay True, so the same argument check runs here
    without the GPU (a subclass of LSTM or GRU too, under its own name). Private:
    ``Layer._flatten_layers`` and ``keras.src.backend.tensorflow.rnn._do_{lstm,gru}_arguments_support_cudnn`` (Keras 3.15.1).
    """
    import importlib

    import keras

    # The module, not the package's rnn function of the same name.
    rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")
    found = []
    for layer in model_layers(model):
        cell = getattr(layer, "cell", None)
        if isinstance(layer, (keras.layers.LSTM, keras.layers.GRU)) and layer.use_cudnn in ("auto", True):
            args = (cell.activation, cell.recurrent_activation, layer.unroll, cell.use_bias)
            if (rnn._do_gru_arguments_support_cudnn(*args, cell.reset_after) if isinstance(layer, keras.layers.GRU)
                    else rnn._do_lstm_arguments_support_cudnn(*args)):
                found.append((layer, CUDNN))
                continue
        if not layer.supports_jit:
            found.append((layer, NO_JIT))
    # The reader's layers, not their parts (TextVectorization's own StringLookup).
    inner = {id(part) for layer, _ in found for part in model_layers(layer)}
    return dict(sorted((type(layer).__name__, why) for layer, why in found if id(layer) not in inner))


def tf_keras_can_jit_compile() -> bool:
    """tf_keras's own check that XLA is available here (False on Apple ARM and with pluggable devices).

    Private: ``tf_keras.src.utils.tf_utils.can_jit_compile`` (tf-keras 2.21.0),
    which tf_keras's optimizer constructor consults before keeping ``jit_compile``.
    """
    from tf_keras.src.utils import tf_utils

    return bool(tf_utils.can_jit_compile())


def tf_keras_xla_update_traces(optimizer) -> int:
    """How many traces a tf_keras 2.21 optimizer has of its XLA update (one per variable it updated with XLA).

    Private: ``tf_keras.src.optimizers.optimizer._BaseOptimizer._update_step_xla``,
    a ``tf.function(jit_compile=True)`` traced once per variable (its ``key`` argument).
    """
    return int(optimizer._update_step_xla.experimental_get_tracing_count())
