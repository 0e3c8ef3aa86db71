"""The reader's model read without allocating it: its weights' shapes, and what its function sets.

``python -m snippets.decide --model`` (and ``--model-json``) first reads the model here, under
``keras.StatelessScope(initialize_variables=False)`` (:func:`shapes_only`): its
variables' shapes and dtypes, the dtype policy the function set, the loss and optimizer it compiled
with and whether it chose XLA (``jit_compile``), whether it has a train_step of its own, and the
layers that keep Keras from compiling its step with XLA on a GPU host. Nothing of the model's size
is allocated, so a model too large for this host is still read, and planned by rule
(:mod:`snippets.lib.model_plan`).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import inspect
import json
import sys
from collections.abc import Callable, Iterator
from typing import NamedTuple

from snippets.lib import optimizers, planner, private
from snippets.lib.errors import ModelError
from snippets.lib.saved_model import named
from snippets.lib.model_step import BUILD_HINT


#: Keras's refusal of a variable made from a value, not an initializer, under a StatelessScope
#: (keras/src/backend/common/variables.py, ``Variable.__init__``, Keras 3.15): a ``stateful=True``
#: RNN makes its states so (keras/src/layers/rnn/rnn.py, ``RNN.build``, ``ops.zeros``).
STATELESS_VALUE = "create a variable while in a stateless scope"

#: The line for such a model: the planner records shapes without values, and a value cannot wait.
VALUE_REFUSAL = ("a layer creates a variable from a value while the model is built (a stateful=True RNN's "
                 "states, or keras.Variable(array), as keras-io's Swin Transformer makes its relative_position_index "
                 "and attn_mask), which the planner's build without values cannot do: plan the model with "
                 "stateful=False (the same weights and step; the states are [batch, units] each), or give the "
                 "variable an initializer: self.add_weight(shape=array.shape, dtype=..., trainable=False, "
                 "initializer=keras.initializers.Constant(array))")


def model_weights(build_model: Callable, *args, **kwargs) -> list[planner.Weight]:
    """The weights ``build_model(*args, **kwargs)`` creates, read without allocating them
    (:func:`shapes_only`).

    Raises:
        ModelError: as :func:`shapes_only`.
    """
    from snippets.lib.seed import specs_of

    return [planner.Weight(spec.shape, spec.dtype, spec.initializer, spec.trainable, spec.path)
            for spec in specs_of(shapes_only(build_model, *args, **kwargs))]


def model_json(build_model: Callable, *args, **kwargs) -> str:
    """``model.to_json()`` of the model ``build_model(*args, **kwargs)`` returns, built without allocating
    (:func:`shapes_only`), for a fresh process to rebuild (``json:`` steps,
    :class:`snippets.lib.model_step.ModelStep`). A ``compile`` in the function is skipped, so the text
    holds no ``compile_config``: the step's optimizer and loss are the ones it is given. A notebook's
    function cannot be imported by another process; its model's JSON can (helper-32: a bare
    ``StatelessScope`` refused a function that compiles).

    Raises:
        ModelError: as :func:`shapes_only`.
    """
    import keras

    before = keras.config.dtype_policy()
    try:  # a policy the function sets is its model's, not the caller's next one's (as read_builder keeps it)
        return shapes_only(build_model, *args, **kwargs).to_json()
    finally:
        keras.config.set_dtype_policy(before)


def shapes_only(build_model: Callable, *args, **kwargs):
    """The model ``build_model(*args, **kwargs)`` returns, built with no variable allocated
    (:func:`snippets.lib.seed.shapes_only_model`, under ``keras.StatelessScope(initialize_variables=False)``).

    Raises:
        ModelError: the function returns something that is not a model (its type named), a
            model with no weights yet (unbuilt), or one that creates a variable from a value
            (:data:`VALUE_REFUSAL`).
    """
    from snippets.lib.seed import shapes_only_model

    def checked(*args, **kwargs):
        model = build_model(*args, **kwargs)
        if not hasattr(model, "weights"):
            raise ModelError(f"the function returns {type(model).__name__}, not a keras.Model: return the "
                             "model it builds")
        return model

    try:
        model = shapes_only_model(checked, *args, **kwargs)
    except ValueError as error:
        if STATELESS_VALUE not in str(error):
            raise
        raise ModelError(VALUE_REFUSAL + reader_line(error)) from None
    if not model.weights:
        raise ModelError(f"the model has no weights yet: {BUILD_HINT}")
    return model


def reader_line(error: BaseException) -> str:
    """Where in the reader's own code ``error`` was raised, as a sentence to end a refusal with:
    ``". Here: path line N, in Class.method: code"``, from the innermost frame outside the installed
    packages and this project's ``snippets/`` (its path relative to the working directory when under it;
    the method's class named where the frame is a method); ``""`` if no frame is the reader's.

    A refusal of the model then says which of its lines to change (helper-88 found keras-io's Swin
    refused with no hint of which layer). Keras filters its own frames out of its errors'
    tracebacks (``keras.config.disable_traceback_filtering``), so a layer Keras ships (a
    ``stateful=True`` RNN) is found at the reader's line that calls it.
    """
    import os
    import sysconfig
    import traceback
    from pathlib import Path

    outside = tuple({str(Path(sysconfig.get_paths()[key]).resolve()) for key in ("purelib", "platlib", "stdlib")})
    ours = str(Path(__file__).resolve().parents[1])
    found, tb = None, error.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if not path.startswith("<") and not str(Path(path).resolve()).startswith((*outside, ours)):
            found = tb
        tb = tb.tb_next
    if found is None:
        return ""
    frame = found.tb_frame
    summary = traceback.FrameSummary(frame.f_code.co_filename, found.tb_lineno, frame.f_code.co_name)
    owner = frame.f_locals.get("self")
    where = f"{type(owner).__name__}.{summary.name}" if owner is not None else summary.name
    shown = os.path.relpath(summary.filename)
    shown = summary.filename if shown.startswith("..") else shown
    return f". Here: {shown} line {summary.lineno}, in {where}" + (f": {summary.line}" if summary.line else "")


#: The one line for a tf_keras (Keras 2) model (docs/tf-keras.md plans those).
TF_KERAS_REFUSAL = ("the function builds a tf_keras (Keras 2) model; the planner reads Keras 3 models "
                    "(import keras, not tf_keras or tf.keras with TF_USE_LEGACY_KERAS): see docs/tf-keras.md for tf_keras")


class _RefuseTfKeras(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tf_keras" or name.startswith("tf_keras."):
            raise ModelError(TF_KERAS_REFUSAL)
        return None


@contextlib.contextmanager
def refusing_tf_keras() -> Iterator[None]:
    """Refuse, with :data:`TF_KERAS_REFUSAL`, a function that imports tf_keras while it runs.

    Keras 3's ``StatelessScope`` does not reach tf_keras, whose layers create real ``tf.Variable``
    values: a tf_keras builder would allocate every weight here, uncapped (a 1 GiB kernel took 3.9 GB
    resident before this). A module that imported tf_keras before the call is refused by
    :func:`snippets.decide.import_callable`; one that imports it inside the function stops here, at the
    import, before a weight exists.

    Raises:
        ModelError: from the ``import`` statement inside the block.
    """
    if "tf_keras" in sys.modules:
        raise ModelError(TF_KERAS_REFUSAL)
    finder = _RefuseTfKeras()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


class SourceFacts(NamedTuple):
    """What :func:`read_builder` reads from the reader's model and the function that builds it.

    Attributes:
        weights: :func:`model_weights` (shapes and dtypes, nothing allocated).
        policy: the dtype policy the function set (None: it set none, or the one it was read under).
        loss, optimizer: what the function compiled with, in words (None: it did not compile, or named
            no optimizer: compile's own default is nobody's choice).
        own_step: the model's class has a ``train_step`` or ``compute_loss`` of its own.
        no_xla: :func:`snippets.lib.private.gpu_xla_blockers`, ``{class name: reason}``.
        jit_compile: the ``jit_compile`` it compiled with, True or False; None for ``"auto"`` (Keras
            decides) or no compile. A ``model.to_json()`` file holds what the saving host resolved
            ``"auto"`` to (keras/src/trainers/trainer.py stores the resolved value in its compile config).
        accumulation: the compiled optimizer's ``gradient_accumulation_steps`` (1: none, or not compiled).
        ema: whether the compiled optimizer keeps ``use_ema`` averages (a copy of each trainable variable).
        clipping: the compiled optimizer's gradient clipping, as ``"global_clipnorm=1.0"`` (its norms' temporaries:
            a step with ``global_clipnorm`` peaked above the same step without, helper-34).
        loss_scaled: the compiled optimizer is a ``LossScaleOptimizer``, the fields above those of the one it wraps.
        unknown_input: why a step cannot be run on the model's inputs (a ``keras.Input`` of unknown length,
            :func:`snippets.lib.model_batch.check_inputs`), or None.
        declared_batch: the batch its ``keras.Input(..., batch_size=b)`` fixes
            (:func:`snippets.lib.model_batch.declared_batch`), or None.
        per_position: how many Dense layers run on every position of a sequence or image
            (:func:`snippets.lib.private.per_position_dense`): the rule counts their activations once per sample.
        unmeasured: the options of its compile, other than the loss, optimizer and ``jit_compile``, that
            it set (``"metrics"``, ``"loss_weights"``, ``"run_eagerly"``, ...): the plan leaves them out.
        own_policies: ``{policy name: layers}`` for the layers with weights built under a dtype policy of their
            own (``Dense(8, dtype="mixed_bfloat16")``), other than the global one (:func:`own_policies`).
        adds_loss: a layer of the model calls ``add_loss`` while it is built or in training
            (:func:`snippets.lib.model_batch.noting_added_losses`): with no loss compiled, ``fit`` trains on that.
        tf_step: :func:`tf_form_step`: the model's own ``train_step`` takes its batch alone, which Keras on JAX
            does not call (no sentence offers ``--backend jax`` then, and ``--backend jax`` is refused before it starts).
        step_optimizers: where the model's class overrides ``train_step``, its attributes that hold an optimizer other
            than the compiled one (keras-io's GAN variants make theirs in ``__init__``): :func:`step_optimizers`.
        own_compile: the signature of the class's own ``compile`` where it cannot take one optimizer and a loss
            (:func:`snippets.lib.model_compile.own_compile`), or None: the runs keep what the function's call of it set.
        float32_layers: ``{class name: layers}`` of its layers that keep float32 tensors under a 16-bit policy
            (:func:`float32_layers`).
    """

    weights: list
    policy: str | None
    loss: str | None
    optimizer: str | None
    own_step: bool
    no_xla: dict
    jit_compile: bool | None
    accumulation: int = 1
    ema: bool = False
    clipping: tuple = ()
    loss_scaled: bool = False
    unknown_input: str | None = None
    declared_batch: int | None = None
    per_position: int = 0
    unmeasured: tuple = ()
    own_policies: dict = {}
    adds_loss: bool = False
    step_optimizers: tuple = ()
    own_compile: str | None = None
    tf_step: bool = False
    float32_layers: dict = {}


#: ``Model.compile``'s parameters before ``jit_compile`` that follow ``loss`` (Keras 3.15), so a
#: positional ``jit_compile`` is read too.
_BEFORE_JIT = ("loss_weights", "metrics", "weighted_metrics", "run_eagerly", "steps_per_execution")
#: Their defaults other than None (keras/src/trainers/trainer.py, ``Trainer.compile``, Keras 3.15).
_COMPILE_DEFAULTS = {"run_eagerly": False, "steps_per_execution": 1}


def _chosen(name: str, value) -> bool:
    """Whether a compile option ``name`` of :data:`_BEFORE_JIT` was set to something other than its default
    (None, an empty list or dict, :data:`_COMPILE_DEFAULTS`). Compared by type first: ``loss_weights`` may be
    an array, whose ``==`` is elementwise."""
    if value is None or (isinstance(value, (list, tuple, dict)) and not value):
        return False
    default = _COMPILE_DEFAULTS.get(name)
    return not (type(value) is type(default) and value == default)


def read_builder(build_model: Callable, policy: str | None = None) -> SourceFacts:
    """:class:`SourceFacts` of the model ``build_model()`` returns, leaving the global policy as it was.

    Many scripts call ``keras.config.set_dtype_policy("mixed_float16")`` inside the function that
    builds the model, and compile it; the planner honours both (None: float32, no loss) without
    keeping the policy set. ``policy`` (``--policy``) is set before the function runs, as the measuring
    process sets it (:func:`snippets.lib.model_step.build`), so the layers it does not reach (a
    ``dtype`` of their own, every layer of a ``--model-json`` file) are the ones :attr:`SourceFacts.own_policies`
    names; a policy is the function's only where it differs from that. The loss and optimizer are in words (:func:`snippets.lib.model_batch.loss_name`;
    None: the function did not compile).
    """
    from unittest import mock

    import keras

    from snippets.lib import private
    from snippets.lib.model_batch import (adds_its_loss, adds_loss_in_training, check_inputs, closed_lookups,
                                          declared_batch, loss_name, noting_added_losses, recording_calls, text_of)
    from snippets.lib.model_compile import compile_of, own_compile
    from snippets.lib.model_step import own_train_step

    seen, compiles = {}, []

    def record(self, optimizer=None, loss=None, *args, **kwargs):  # Model.compile's own order
        # Kept by the model compiled: only the returned model's compile is its step's (helper-43: a function that
        # compiled a helper model and returned another, uncompiled, had --loss dropped for the helper's loss).
        entry = {}
        compiles.append((self, entry))
        entry["loss"] = loss
        jit = args[len(_BEFORE_JIT)] if len(args) > len(_BEFORE_JIT) else kwargs.get("jit_compile", "auto")
        entry["jit_compile"] = None if jit == "auto" else bool(jit)
        # None: not chosen by the function (compile's own default, rmsprop, is nobody's choice). An
        # object by the slots its settings make (SGD(momentum=0.9) is sgd_momentum, not sgd).
        entry["optimizer"] = None if optimizer is None else optimizers.name_of(optimizer)
        # Settings of keras.optimizers.Optimizer (Keras 3.15) that add state beyond the slots, read on the optimizer a
        # LossScaleOptimizer wraps (its own are the defaults).
        inner = getattr(optimizer, "inner_optimizer", None) or optimizer
        entry["accumulation"] = int(getattr(inner, "gradient_accumulation_steps", None) or 1)
        entry["ema"] = bool(getattr(inner, "use_ema", False))
        entry["clipping"] = tuple(f"{name}={getattr(inner, name)}"
                                  for name in ("clipnorm", "clipvalue", "global_clipnorm")
                                  if getattr(inner, name, None) is not None)
        entry["loss_scaled"] = inner is not optimizer
        given = {**dict(zip(_BEFORE_JIT, args)), **{k: v for k, v in kwargs.items() if k in _BEFORE_JIT}}
        entry["unmeasured"] = tuple(name for name, value in given.items() if _chosen(name, value))

    def recording(*args, **kwargs):
        # model_weights skips compile (it would make metric variables); its loss is read here instead.
        # What the function prints (model.summary()) goes to stderr: stdout is the plan (--json).
        # recording_calls: a subclassed model's input is the batch the function calls it on, as when it is measured
        # (helper-47: without it, a loss its layer adds in training only was not seen, and the model was refused).
        with mock.patch.object(keras.Model, "compile", record), refusing_tf_keras(), recording_calls(), \
                contextlib.redirect_stdout(sys.stderr), noting_added_losses() as added:
            model = build_model(*args, **kwargs)
        for compiled, entry in compiles:  # in call order: the last compile is the one in force
            if compiled is model:
                seen.update(entry)
        if isinstance(model, keras.Model):  # anything else is refused by model_weights, in its words
            seen["own_step"], seen["no_xla"] = own_train_step(model), private.gpu_xla_blockers(model)
            # A loss added in training only shows in a call like fit's, made only where it decides (no loss compiled).
            seen["adds_loss"] = adds_its_loss(model, added) or (
                seen.get("loss") is None and not seen["own_step"] and adds_loss_in_training(model))
            # What the measuring process would refuse, said now, before any run starts.
            compile_of(model, "the function", any(compiled is model for compiled, _ in compiles))
            seen["own_compile"] = own_compile(model)
            text_of(model)
            closed_lookups(model)
            try:  # refused only where a step will run (a rule plan needs no input shape): decide
                check_inputs(model)
            except ModelError as error:
                seen["unknown_input"] = str(error)
            seen["declared_batch"] = declared_batch(model)
            seen["per_position"] = private.per_position_dense(model)
            seen["step_optimizers"] = step_optimizers(model) if seen["own_step"] else ()
            seen["tf_step"] = tf_form_step(model)
            seen["own_policies"] = own_policies(model, keras.config.dtype_policy().name)
            seen["float32_layers"] = float32_layers(model)
        return model

    before = keras.config.dtype_policy()
    try:
        if policy is not None:
            keras.config.set_dtype_policy(policy)
        given = keras.config.dtype_policy().name
        weights = model_weights(recording)
        name = keras.config.dtype_policy().name
    finally:
        keras.config.set_dtype_policy(before)
    # What the function itself set, float32 too: under --policy mixed_bfloat16 a function that sets float32 trains in
    # float32 (helper-44: read as --policy's, its figure float32's under a 16-bit caveat and no note).
    chosen = name if name != given else None
    return SourceFacts(weights, chosen, loss_name(seen.get("loss")),
                       seen.get("optimizer"), seen.get("own_step", False), seen.get("no_xla", {}),
                       seen.get("jit_compile"), seen.get("accumulation", 1), seen.get("ema", False), seen.get("clipping", ()),
                       seen.get("loss_scaled", False),
                       seen.get("unknown_input"), seen.get("declared_batch"), seen.get("per_position", 0),
                       seen.get("unmeasured", ()), seen.get("own_policies", {}), seen.get("adds_loss", False),
                       seen.get("step_optimizers", ()), seen.get("own_compile"), seen.get("tf_step", False),
                       seen.get("float32_layers", {}))


def tf_form_step(model) -> bool:
    """Whether ``model``'s class defines a ``train_step`` of its own (outside Keras) that takes its batch alone,
    ``train_step(data)``: keras-io's "Customizing what happens in fit()" for TensorFlow and PyTorch. Keras on JAX calls
    ``train_step(state, data)``, a stateless step (keras/src/backend/jax/trainer.py; keras-io's guide for JAX), so it
    cannot compile this one. A model that overrides ``compute_loss`` alone keeps the backend's own step."""
    owner = next((cls for cls in type(model).__mro__ if "train_step" in vars(cls)), None)
    if owner is None or owner.__module__.startswith(("keras.", "keras_core.")):
        return False
    return len(inspect.signature(model.train_step).parameters) < 2


def tf_form_refusal(model: str) -> str:
    """The one line that refuses ``--backend jax`` for ``model`` (``package.module:function``) where
    :func:`tf_form_step` holds."""
    return (f"{model}'s own train_step(data) is TensorFlow's form; Keras on JAX calls train_step(state, data), a "
            "stateless step: plan it without --backend jax")


def step_optimizers(model) -> tuple[str, ...]:
    """The names of ``model``'s attributes that hold a ``keras.optimizers.Optimizer`` other than ``model.optimizer``,
    sorted: a ``train_step`` of its own may apply those (keras-io's GAN: ``d_optimizer``, ``g_optimizer``)."""
    import keras

    compiled = getattr(model, "optimizer", None)
    return tuple(sorted(name for name, value in vars(model).items()
                        if isinstance(value, keras.optimizers.Optimizer) and value is not compiled))


def own_policies(model, global_name: str) -> dict[str, int]:
    """``{policy name: how many layers}`` of ``model``'s layers that hold weights and were built under a dtype
    policy other than ``global_name`` (a ``dtype=`` given to the layer, or the global policy of the time, where the
    function set another after building it, helper-94): a global policy, ``--policy`` or
    ``--dtype``, does not reach them, and they are measured as they are (helper-32: layers built with
    ``dtype="mixed_bfloat16"`` were reported as Keras's default float32)."""
    found: dict[str, int] = {}
    for layer in private.model_layers(model):  # every nested layer
        name = getattr(getattr(layer, "dtype_policy", None), "name", None)
        # Its own variables, not its sublayers': a custom layer with an add_weight and a Dense counts once, and so
        # does the Dense.
        if name and name != global_name and private.own_variables(layer):
            found[name] = found.get(name, 0) + 1
    return found


#: Keras 3.15's layers that compute in float32 under a 16-bit policy, on every device: each casts its inputs up
#: (batch_normalization.py: "BN is prone to overflow with float16/bfloat16 inputs, so we upcast to float32";
#: group_normalization.py, the same for GN; keras/src/ops/nn.py's ``_layer_normalization`` and ``_rms_normalization``:
#: "Computes in at least float32 precision for stability in half precision training").
FLOAT32_NORMS = ("BatchNormalization", "LayerNormalization", "GroupNormalization", "RMSNormalization")


def float32_layers(model) -> dict[str, int]:
    """``{class name: layers}`` of ``model``'s layers (nested ones too) that keep float32 tensors for the backward pass
    under a 16-bit policy, on a GPU as here, so that what they keep does not halve (helper-94; helper-97 found the
    last three kinds): the normalization layers of :data:`FLOAT32_NORMS`, and each ``MultiHeadAttention`` without
    dropout, which Keras 3.15 runs through ``ops.dot_product_attention`` (multi_head_attention.py,
    ``use_dot_product_attention``; without ``return_attention_scores`` and for a sequence's 3-D input), whose
    TensorFlow kernel casts the logits to float32 and runs the softmax there ("Softmax is always carried out in high
    precision": keras/src/backend/tensorflow/nn.py, ``_dot_product_attention_xla``; JAX's does too without flash
    attention): a ``[batch, heads, query, key]`` tensor in float32."""
    import keras

    kinds, found = [getattr(keras.layers, name) for name in FLOAT32_NORMS], {}
    for layer in private.model_layers(model):
        kind = next((kind.__name__ for kind in kinds if isinstance(layer, kind)), None)
        if kind is None and isinstance(layer, keras.layers.MultiHeadAttention) and not layer.dropout:
            kind = "MultiHeadAttention"
        if kind:
            found[kind] = found.get(kind, 0) + 1
    return found


def read_json(text: str, policy: str | None = None) -> SourceFacts:
    """:func:`read_builder` of the model whose config is ``text`` (``model.to_json()``): its weights, not
    allocated, and what its ``compile_config`` holds (the loss and optimizer it was compiled with,
    which ``model_from_json`` compiles it with again)."""
    import warnings

    import keras

    compile_config = json.loads(text).get("compile_config")

    def build():
        with warnings.catch_warnings():
            # read_builder's stand-in for compile makes Keras skip compile_config, and say so: it is done here.
            warnings.filterwarnings("ignore", message=".*compile.*custom")
            try:
                model = keras.models.model_from_json(text)
            except TypeError as error:
                # Keras's message ends with the whole object's config, a kilobyte or more: the name is enough.
                if not (found := named(error, text)):
                    raise
                raise ModelError(f"the file names {', '.join(found)}, which Keras cannot rebuild from a "
                                 "file unless it is registered (keras.saving.register_keras_serializable) and "
                                 "imported: plan the function that builds the model with --model "
                                 "module:function") from None
        if compile_config:
            # As Trainer.compile_from_config does (keras/src/trainers/trainer.py), into the stand-in.
            model.compile(**keras.saving.deserialize_keras_object(compile_config))
        return model

    return read_builder(build, policy)


#: Non-trainable by design, not frozen by the reader: BatchNorm's moving statistics.
STATE = ("moving_mean", "moving_variance")

#: All variables non-trainable by design (Keras 3.15's layers): :data:`STATE`, a ``Normalization`` layer's statistics
#: (keras/src/layers/preprocessing/normalization.py) and a random layer's seed (``SeedGenerator``'s state: RandomFlip,
#: Dropout). helper-71: EfficientNetB0's input ``Normalization`` read as 32 B "not trainable", a freeze to plan again.
BY_DESIGN = (*STATE, "mean", "variance", "count", "seed_generator_state")


def _split(weight: planner.Weight) -> tuple[str, str]:
    """``(layer, name)`` of a weight's path (``"bn/moving_mean"``: ``("bn", "moving_mean")``); ``("", "")`` without one."""
    layer, _, name = (weight.path or "").rpartition("/")
    return layer, name


def frozen_note(weights: list[planner.Weight]) -> str | None:
    """A note for a model with frozen weights (``trainable=False``: a frozen base; not what is non-trainable by design,
    :data:`BY_DESIGN`, such as BatchNorm's moving statistics), or None: how many bytes of ``weights`` are frozen, that the plan holds for
    that freeze only, and, where most are frozen, keras-io's way to take a frozen base out of the step.

    helper-68: a frozen EfficientNetB0's plan said "16.05 MiB of weights" with 0.6 MiB trainable, and nothing of it;
    its step grew 10.5 MiB per sample frozen and 87 MiB fully trainable. Source for the remedy: keras-io's "Transfer
    learning & fine-tuning" guide (its feature-extraction workflow).

    >>> frozen_note([planner.Weight((1024, 1024)), planner.Weight((1024,), trainable=False)])[:58]
    '4 KiB of the 4 MiB of weights are not trainable (trainable'
    >>> kept = [planner.Weight((8,), trainable=False, path=p) for p in ("bn/moving_mean", "normalization/count")]
    >>> frozen_note([planner.Weight((1024, 1024)), *kept]) is None
    True
    """
    from snippets.lib.units import human_bytes, tensor_bytes

    total = sum(tensor_bytes(w.shape, w.dtype) for w in weights)
    frozen = sum(tensor_bytes(w.shape, w.dtype) for w in weights if not w.trainable and _split(w)[1] not in BY_DESIGN)
    if not frozen:
        return None
    note = (f"{human_bytes(frozen)} of the {human_bytes(total)} of weights are not trainable (trainable=False): no "
            "gradients or optimizer slots for them, and no activations kept for a backward pass below the lowest "
            "trainable layer (so keras.remat saves nothing there). The figures hold for this freeze: plan again when you unfreeze layers to fine-tune.")
    if frozen > total / 2:
        note += (" A frozen base's features can also be computed once and the head trained on them (keras-io's "
                 "transfer-learning guide), which takes the base out of the training step.")
    return note


def trains_batchnorm(weights: list[planner.Weight]) -> bool:
    """Whether a BatchNorm layer of ``weights`` (one with :data:`STATE`) may run in training mode: its ``gamma`` or
    ``beta`` trainable, or it has neither. A BatchNorm set ``trainable = False`` runs in inference mode in Keras 3
    (``keras/src/layers/normalization/batch_normalization.py``), its statistics the moving ones, whatever the batch. One
    called with ``training=False`` while trainable cannot be told from its weights: counted as training.

    >>> bn = [planner.Weight((8,), path=f"bn/{n}", trainable=False) for n in ("gamma", "beta", *STATE)]
    >>> trains_batchnorm(bn), trains_batchnorm([planner.Weight((8,), path="bn/gamma"), *bn[1:]]), trains_batchnorm([])
    (False, True, False)
    """
    for layer in {_split(w)[0] for w in weights if _split(w)[1] in STATE}:
        own = [w for w in weights if _split(w)[0] == layer and _split(w)[1] not in STATE]
        if not own or any(w.trainable for w in own):
            return True
    return False
