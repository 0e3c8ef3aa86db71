"""One batch for the reader's model: the inputs it takes and the targets its loss wants.

The planner runs the reader's real ``fit`` step (:mod:`snippets.lib.model_step`) on one batch it
makes from the model itself: each input with its own shape and dtype, in the structure the model
takes (one array, a tuple, a dict by name); each output a target its own loss accepts. A
functional or Sequential model says what it takes; a subclassed one says it by the first batch the
reader's function called it on (:func:`recording_calls`).

Sources: ``keras.Model.compute_output_spec`` and ``keras.tree`` (Keras 3.15 API pages); Keras's
functional structures through :func:`snippets.lib.private.functional_structures`.
"""

from __future__ import annotations

import contextlib
import re

from snippets.lib import private
from snippets.lib.errors import ModelError, error_line, missing_cpu_kernel


def loss_name(loss) -> str | None:
    """A loss as ``compile`` was given it, in words: a name as is, a ``keras.losses.Loss``'s ``name`` with the
    settings it changed (:func:`loss_settings`), a function's ``__name__``; a dict or list of them (one per output)
    joined; None for None. Words only: what runs is the compiled object itself (:func:`snippets.lib.model_step.build`)."""
    if loss is None or isinstance(loss, str):
        return loss
    if isinstance(loss, dict):
        return ", ".join(f"{key}: {loss_name(value)}" for key, value in loss.items())
    if isinstance(loss, (list, tuple)):
        return ", ".join(str(loss_name(value)) for value in loss)
    name = getattr(loss, "name", None) or getattr(loss, "__name__", None)
    return (name if isinstance(name, str) else type(loss).__name__) + loss_settings(loss)


def loss_settings(loss) -> str:
    """`` (from_logits=True)``: what a ``keras.losses.Loss`` object's ``get_config`` holds other than its class's
    defaults (not its name, reduction or dtype); "" if nothing, or if it has no config or no default to compare with.
    helper-41: keras-io's ViT compiles ``SparseCategoricalCrossentropy(from_logits=True)``, which read as the name alone."""
    try:
        config, default = loss.get_config(), type(loss)().get_config()
    except Exception:  # noqa: BLE001 (a function, or a reader's Loss subclass that needs arguments)
        return ""
    changed = [f"{key}={value!r}" for key, value in config.items()
               if key not in ("name", "reduction", "dtype") and key in default and default[key] != value]
    return f" ({', '.join(changed)})" if changed else ""


#: Where :func:`recording_calls` keeps, on the model itself, the first input it was called on (a
#: structure of ``keras.KerasTensor``): a subclassed model has no ``keras.Input`` to read its inputs
#: from, and Keras's ``_build_shapes_dict`` keeps shapes without dtypes (an Embedding wants integers).
FIRST_CALL = "_planner_first_call"


def recording_calls():
    """A context in which each ``keras.Model`` records the first input it is called on (:data:`FIRST_CALL`)."""
    from unittest import mock

    import keras

    original = keras.Model.__call__

    def call(self, *args, **kwargs):
        if args and FIRST_CALL not in vars(self):
            # object.__setattr__: Keras's own __setattr__ would track the structure as the model's state.
            object.__setattr__(self, FIRST_CALL, keras.tree.map_structure(
                lambda a: keras.KerasTensor(tuple(a.shape), keras.backend.standardize_dtype(a.dtype))
                if hasattr(a, "shape") and hasattr(a, "dtype") else a, args[0]))
        return original(self, *args, **kwargs)

    return mock.patch.object(keras.Model, "__call__", call)


@contextlib.contextmanager
def noting_added_losses():
    """A context that yields a list, to which each ``keras.layers.Layer.add_loss`` call made inside it adds the
    calling layer: a functional model's layers run ``call`` while it is built, on symbolic tensors, so a loss a
    layer adds (keras-io's "endpoint layer" pattern in "Making new layers and models via subclassing") shows
    there, before any step. Such a model trains with no compiled loss: ``fit`` adds its ``model.losses`` to the
    compiled one (``Trainer.compute_loss``, keras/src/trainers/trainer.py, Keras 3.15). :func:`adds_its_loss`
    tells whether one of them is the model's own."""
    from unittest import mock

    import keras

    original, seen = keras.layers.Layer.add_loss, []

    def add_loss(self, loss):
        seen.append(self)
        return original(self, loss)

    with mock.patch.object(keras.layers.Layer, "add_loss", add_loss):
        yield seen


def adds_its_loss(model, added: list) -> bool:
    """Whether a layer in ``added`` (:func:`noting_added_losses`) is ``model`` or one of its layers, at any
    depth: a model the function built on the way and did not return adds nothing to the one it returns."""
    ids = {id(layer) for layer in added}
    return any(id(layer) in ids for layer in [model, *private.model_layers(model)])


def adds_loss_in_training(model) -> bool:
    """Whether a layer of ``model`` adds a loss only in training (``if training: self.add_loss(...)``): the build
    calls layers with ``training`` unset, so :func:`noting_added_losses` misses it there, while ``fit``, whose calls
    say ``training=True``, trains on it with no loss compiled. Calls the model that way on placeholders
    (:func:`snippets.lib.private.training_call`: nothing computed, no loss kept); False if its inputs are unknown or
    the call fails (the step, if it runs, says why in its own words)."""
    try:
        inputs = input_structure(model)
        with noting_added_losses() as added:
            private.training_call(model, inputs)
    except Exception:  # noqa: BLE001 (the reader's call(): whatever it raises, the answer is "not seen")
        return False
    return adds_its_loss(model, added)


def _declared(model, which: str):
    """A model's declared ``"inputs"`` or ``"outputs"``: a functional model's structure, a Sequential's
    tensor (or list of them), None for a model that declares none (subclassed)."""
    found = private.functional_structures(model)[0 if which == "inputs" else 1]
    if found is None:
        try:
            found = getattr(model, which)
        except (AttributeError, ValueError):  # a subclassed model has none; an unbuilt Sequential raises
            found = None
        found = found[0] if isinstance(found, list) and len(found) == 1 else found
    return found


def input_structure(model):
    """The model's inputs as a structure of ``keras.KerasTensor`` (one, a list or a dict, as the model
    takes them): a functional model's ``keras.Input`` tensors (:func:`snippets.lib.private.functional_structures`,
    which keeps a dict's keys), a Sequential's, else what the function first called it on.

    Raises:
        ModelError: none of these is known (a subclassed model the function never called).
    """
    found = _declared(model, "inputs")
    found = found if found is not None else vars(model).get(FIRST_CALL)
    if found is None:
        raise ModelError(f"{type(model).__name__} does not say what it takes: " + (
            f"give it a keras.Input(shape), or {CALL_ONCE}, so its input shapes are known" if defines_call(model)
            else NO_CALL))
    return found


#: How to show the planner a subclassed model's input: what fit feeds it is the reader's data, which it cannot see.
CALL_ONCE = "call it once on a batch in the function (model(x))"
#: The same for a class with no call() of its own (keras-io's GAN and VAE train through their train_step alone).
NO_CALL = ("its class defines no call() (keras-io's GAN and VAE have none; fit runs train_step), so give it one that "
           "runs the networks train_step feeds the batch to (a GAN's discriminator on x, a VAE's encoder and decoder), "
           "and call it once on a batch in the function (model(x))")


def defines_call(model) -> bool:
    """Whether ``model``'s class (or a base other than Keras's own) defines ``call``: ``keras.Model.call`` raises."""
    import keras

    return type(model).call is not keras.Model.call


def output_structure(model, inputs):
    """The model's outputs for ``inputs`` (:func:`input_structure`) as a structure of
    ``keras.KerasTensor``: a functional model's own, else Keras's symbolic call (nothing computed).

    Raises:
        ModelError: the symbolic call failed (its first line).
    """
    found = _declared(model, "outputs")
    if found is not None:
        return found
    try:
        return model.compute_output_spec(inputs)
    except Exception as error:  # noqa: BLE001 (the reader's call(): one line)
        raise ModelError(f"cannot tell {type(model).__name__}'s outputs from its inputs: {type(error).__name__}: "
                         f"{error_line(error)}") from None


def text_of(model) -> str:
    """The text each string input gets: as many words as the model's ``TextVectorization`` layers
    keep (their largest ``output_sequence_length``; one word with none, as a ``StringLookup`` of
    categories takes one). A word the vocabulary lacks is an out-of-vocabulary id, of the same size.

    Raises:
        ModelError: a ``TextVectorization`` keeps every word (no ``output_sequence_length``), so its
            sequence length is the reader's texts', which the planner cannot know.
    """
    import keras

    lengths = [layer.get_config().get("output_sequence_length") for layer in private.model_layers(model)
               if isinstance(layer, keras.layers.TextVectorization)]
    if any(length is None for length in lengths):
        raise ModelError("a TextVectorization layer has no output_sequence_length, so its sequences are as long as "
                         "your texts: give it one (the length you train with), or plan the model that follows it")
    return " ".join(["word"] * max(lengths, default=1))


def closed_lookups(model) -> dict[int, object]:
    """For each input a ``StringLookup`` or ``IntegerLookup`` without out-of-vocabulary ids (``num_oov_indices=0``)
    takes, the first entry of its vocabulary, by the input tensor's ``id``: a value outside it fails the step (keras-io's
    TabTransformer: helper-48, "found OOV values"), where :func:`text_of`'s word and ``batch_of``'s id 1 are
    out-of-vocabulary ids elsewhere.

    Raises:
        ModelError: such a layer takes something other than one of the model's inputs (its values are the
            model's own), or has no vocabulary yet: one line naming the layer and the fix.
    """
    import keras

    declared = _declared(model, "inputs")
    inputs = {id(tensor) for tensor in keras.tree.flatten(declared)} if declared is not None else set()
    found: dict[int, object] = {}
    for layer in private.model_layers(model):
        if not isinstance(layer, (keras.layers.StringLookup, keras.layers.IntegerLookup)):
            continue
        if layer.get_config().get("num_oov_indices", 1):
            continue
        try:
            source, vocabulary = layer.input, layer.get_vocabulary(include_special_tokens=False)
        except (AttributeError, ValueError):
            source, vocabulary = None, []
        if id(source) not in inputs or not vocabulary:
            raise ModelError(f"{type(layer).__name__} {layer.name!r} has num_oov_indices=0, so a value outside its "
                             "vocabulary fails the step, and the planner cannot tell which values it takes: plan it "
                             "with num_oov_indices=1 (one more row in what follows it), or let it take one of the "
                             "model's keras.Input directly")
        found[id(source)] = vocabulary[0]
    return found


#: What a refusal of an unknown dimension asks for.
FULL_SHAPE = ("give keras.Input a full shape (e.g. a fixed sequence length or image size), or let your function take it "
              "as an argument and pass it with --model-kwargs, such as '{\"seq\": 20}' or '{\"size\": 96}'")


def _named(tensor) -> str:
    """``'title' (batch, None)``: a tensor's name, when the reader gave one (``keras.Input(..., name=)``;
    Keras names the others ``keras_tensor_N``), and its shape, the batch named (helper-44: "(None, None)" read as
    if both were unknown)."""
    name = getattr(tensor, "name", None)
    given = f"{name!r} " if isinstance(name, str) and not name.startswith("keras_tensor") else ""
    return f"{given}({', '.join(['batch', *map(str, tuple(tensor.shape)[1:])])})"


def known_dims(tensor, what: str = "input") -> tuple[int, ...]:
    """``tensor``'s shape without its batch dimension.

    Raises:
        ModelError: a dimension other than the batch is unknown (``None``), naming the model's ``what``
            and the tensor (:func:`_named`).
    """
    dims = tuple(tensor.shape)[1:]
    if any(d is None for d in dims):
        raise ModelError(f"the model's {what} {_named(tensor)} has an unknown dimension: {FULL_SHAPE}")
    return dims


def check_inputs(model) -> None:
    """:func:`known_dims` of each of a functional or ``Sequential`` model's ``keras.Input`` (a subclassed
    model's inputs are known only once it runs: :func:`batch_of` checks them there, and here only that it was built).

    Raises:
        ModelError: a subclassed model never built or called (:func:`input_structure`: keras-io's GAN with no call()).
        ModelError: as :func:`known_dims`, naming every input with an unknown dimension (helper-43: keras-io's
            ticket model has three inputs, two of any length).
    """
    import keras

    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        if not model.built:  # a subclassed model never called (the read records no call): one line now
            input_structure(model)
        return
    unknown = [tensor for tensor in keras.tree.flatten(inputs or []) if None in tuple(tensor.shape)[1:]]
    if len(unknown) > 1:
        raise ModelError(f"the model's inputs {', '.join(map(_named, unknown))} have an unknown dimension: "
                         f"{FULL_SHAPE.replace('keras.Input', 'each keras.Input')}")
    for tensor in unknown:
        known_dims(tensor)


def declared_batch(model) -> int | None:
    """The batch a functional or ``Sequential`` model's ``keras.Input(shape, batch_size=b)`` fixes, or
    None (no input fixes one, or a subclassed model). With several, the smallest."""
    import keras

    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        return None
    sizes = {tuple(tensor.shape)[0] for tensor in keras.tree.flatten(inputs or [])} - {None}
    return min(sizes, default=None)


def declared_batch_note(declared: int | None, batch: int, replicas: int) -> str | None:
    """A note when the model's ``keras.Input`` fixes a batch (``declared``, :func:`declared_batch`) other than the one
    each of ``replicas`` runs at the global ``batch``; None otherwise. Keras's TensorFlow backend runs a functional
    model at any batch, so the plan goes ahead, and the note names the ``--batch`` that plans the declared one (a
    stateful RNN runs at that batch only)."""
    if not declared or declared == batch // replicas:
        return None
    over = f" over {replicas} replicas" if replicas > 1 else ""
    return (f"keras.Input fixes the batch at {declared}, but this plan is for {batch // replicas} per device "
            f"(--batch {batch}{over}): pass --batch {declared * replicas} to plan the batch the model declares.")


#: A reshape to a size the tensor does not have: TensorFlow's graph and eager messages, and JAX's.
_FIXED_RESHAPE = re.compile(r"Cannot reshape a tensor with (\d+) elements to shape \[[^\]]*\] \((\d+) elements\)"
                            r"|Input to reshape is a tensor with (\d+) values, but the requested shape has (\d+)"
                            r"|cannot reshape array of shape \([^)]*\) \(size (\d+)\) into shape \([^)]*\) \(size (\d+)\)")


def fixed_batch_failure(error: str, declared: int | None, batches: tuple[int, ...]) -> str | None:
    """The line for a run that failed (``error``, the run's exception in one line) of a step that runs at one batch
    only, or None: a model whose ``keras.Input`` fixes a batch (``declared``) other than the ``batches`` per device it
    ran at, or one whose run failed to reshape a tensor to a size it does not have (a batch fixed in the model's code).
    Either draws no line in the batch; so does an op that meets a run's batch and another size (:func:`fixed_size_hint`).
    keras-io's Switch Transformer reshapes to ``batch_size * num_tokens_per_example``
    (helper-48 declared that batch in its ``keras.Input`` and got a bare "Cannot reshape"; helper-74 did not, and got
    TensorFlow's whole message).

    >>> print(fixed_batch_failure("ValueError: Cannot reshape a tensor with 25600 elements to shape [6400,32] "
    ...                           "(204800 elements) for '{{node switch/Reshape}}' with input shapes: [16,50,32]", None, (16, 32)))
    a run of the step failed (Cannot reshape a tensor with 25600 elements to shape [6400,32] (204800 elements)): the
    step reshapes to a size fixed in the model's code, such as a batch (keras-io's Switch Transformer reshapes to
    batch_size * num_tokens_per_example), and a step that runs at one batch only is no line in the batch: make its shapes
    follow the batch (keras.ops.shape(x)[0], not a constant) to plan it
    >>> print(fixed_batch_failure("ValueError: Dimensions must be equal, but are 32 and 64 for '{{node add}}'", None,
    ...                           (16, 32)))
    a run of the step failed (Dimensions must be equal, but are 32 and 64); the step meets the batch (32 per device) and
    64, a size fixed in its code such as a batch (keras-io's DDIM draws its noise at batch_size): make its shapes follow
    the batch (keras.ops.shape(x)[0], not a constant) to plan it
    """
    if declared and declared not in batches:
        return (f"a run of the step failed ({error}); the model's keras.Input fixes the batch at {declared}, and the runs "
                f"are at {' and '.join(map(str, batches))} per device: a step that runs at its declared batch only is no "
                f"line in the batch, so make its shapes follow the batch (keras.ops.shape(x)[0], not {declared}) to plan it")
    found = _FIXED_RESHAPE.search(error)
    if found is None:
        met = next((hint for batch in batches if (hint := fixed_size_hint(error, batch))), "")
        return f"a run of the step failed ({_MISMATCH.search(error).group(0)}){met}" if met else None
    return (f"a run of the step failed ({found.group(0)}): the step reshapes to a size fixed in the model's code, such as a "
            "batch (keras-io's Switch Transformer reshapes to batch_size * num_tokens_per_example), and a step that runs "
            "at one batch only is no line in the batch: make its shapes follow the batch (keras.ops.shape(x)[0], not a "
            "constant) to plan it")


#: Two sizes an op could not match: TensorFlow's graph message (a broadcast, an add).
_MISMATCH = re.compile(r"Dimensions must be equal, but are (\d+) and (\d+)")


def fixed_size_hint(error: str, batch: int) -> str:
    """Words to add to a refusal whose ``error`` (one line) says an op met ``batch``, the run's samples per device, and
    another size: a size fixed in the model's code (keras-io's DDIM, copied with its ``batch_size = 64``, draws its noise
    at 64; helper-87 got TensorFlow's message alone). Empty where it does not say so.

    >>> print(fixed_size_hint("ValueError: Dimensions must be equal, but are 64 and 16 for '{{node add}}'", 16))
    ; the step meets the batch (16 per device) and 64, a size fixed in its code such as a batch (keras-io's DDIM draws
    its noise at batch_size): make its shapes follow the batch (keras.ops.shape(x)[0], not a constant) to plan it
    >>> fixed_size_hint("ValueError: Dimensions must be equal, but are 64 and 128 for '{{node add}}'", 16)
    ''
    """
    found = _MISMATCH.search(error)
    other = {int(size) for size in found.groups()} - {batch} if found else set()
    if not found or len(other) != 1 or batch not in map(int, found.groups()):
        return ""
    return (f"; the step meets the batch ({batch} per device) and {other.pop()}, a size fixed in its code such as a batch "
            "(keras-io's DDIM draws its noise at batch_size): make its shapes follow the batch (keras.ops.shape(x)[0], "
            "not a constant) to plan it")


def batch_of(model, batch: int, loss):
    """One batch ``(x, y)`` for ``model`` as NumPy arrays: its inputs' shapes and dtypes, targets its outputs'.

    ``x`` and ``y`` have the structure the model takes and returns (:func:`input_structure`,
    :func:`output_structure`): one array, a tuple (lists become tuples, as ``tf.data`` wants them) or
    a dict. Integer inputs are ones: a valid id for any embedding of two rows or more, and not the
    padding id 0, which an ``Embedding(mask_zero=True)`` masks at every position (helper-41: a BiGRU fed
    nothing but padding peaked 6% under the same step on random ids; ids other than 0 gave the same peaks,
    to the byte under XLA, on the benchmark's recommender and Transformer); zeros where a layer of the
    model has a table of one row (``input_dim=1``), whose only id is 0 (helper-78: a builder's
    ``vocab=1`` failed the run on TensorFlow's index error, naming no layer). Boolean inputs are True: a mask
    that keeps every position (helper-81: keras-io's CNN-RNN video classifier's frame mask had been fed
    floats). Float inputs standard
    normal. Targets of a ``sparse_categorical_crossentropy`` loss are class ids,
    others have each output's shape; with a dict or list of losses, each output's own
    loss decides.

    Raises:
        ModelError: an input or output dimension other than the batch is unknown; the inputs or
            outputs cannot be told (:func:`input_structure`, :func:`output_structure`).
    """
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    closed = closed_lookups(model)
    one_row = any(getattr(layer, "input_dim", None) == 1 for layer in private.model_layers(model))

    def make(tensor, dtype, what):
        dims = known_dims(tensor, what)
        if id(tensor) in closed:  # a lookup with no out-of-vocabulary id: an entry of its vocabulary
            value = closed[id(tensor)]
            return np.full((batch, *dims), value, dtype=object if str(dtype) == "string" else str(dtype))
        if "int" in str(dtype):
            return (np.zeros if one_row else np.ones)((batch, *dims), dtype=str(dtype))
        if str(dtype) == "bool":
            return np.ones((batch, *dims), dtype=bool)
        if str(dtype) == "string":
            return np.full((batch, *dims), text_of(model), dtype=object)
        return rng.standard_normal((batch, *dims)).astype("float32")

    def target(tensor, its_loss):
        if "sparse" in str(loss_name(its_loss)).lower():
            return np.zeros((batch, *tuple(tensor.shape)[1:-1]), dtype="int32")
        return make(tensor, "float32", "output")

    inputs = input_structure(model)
    x = keras.tree.map_structure(lambda t: make(t, t.dtype, "input"), inputs)
    outputs = output_structure(model, keras.tree.map_structure(
        lambda t: keras.KerasTensor((batch, *tuple(t.shape)[1:]), t.dtype), inputs))
    if isinstance(outputs, dict):
        # fit wants a dict model's targets as a dict with the same keys, each with its own output's loss.
        each = loss if isinstance(loss, dict) else dict.fromkeys(outputs, loss)
        y = {k: target(t, each.get(k)) for k, t in outputs.items()}
    elif isinstance(outputs, (list, tuple)):
        each = list(loss) if isinstance(loss, (list, tuple)) else [loss] * len(outputs)
        y = tuple(target(t, each[i] if i < len(each) else None) for i, t in enumerate(outputs))
    else:
        y = target(outputs, loss)
    return keras.tree.lists_to_tuples(x), y


def shapes_of(arrays) -> str:
    """``arrays`` (one array, or a tuple or dict of them, as :func:`batch_of` makes) in words, shape and dtype each.

    >>> import numpy as np
    >>> shapes_of(np.zeros((32, 100, 33), "float32"))
    '(32, 100, 33) float32'
    >>> shapes_of({"a": np.zeros((2,), "int32"), "b": np.zeros((2, 3), "float32")})
    'a: (2,) int32, b: (2, 3) float32'
    """
    if isinstance(arrays, dict):
        return ", ".join(f"{key}: {shapes_of(value)}" for key, value in arrays.items())
    if isinstance(arrays, (list, tuple)):
        return ", ".join(shapes_of(value) for value in arrays)
    return f"{tuple(arrays.shape)} {arrays.dtype}"


def loss_failure(model_name: str, error: BaseException, y, loss) -> str | None:
    """The refusal for a step whose compiled loss failed on the targets :func:`batch_of` made (``y``, for ``loss``),
    or None if the error did not come from the compiled loss. helper-57: keras-io's DeepSpeech2 compiles a CTC loss,
    which takes label sequences, not targets of the output's shape; its plan ended on TensorFlow's "Dimensions must be
    equal ... compile_loss/ctc_loss", with nothing saying the planner had made the targets."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    if missing_cpu_kernel(str(error)) or ("compile_loss" not in str(error)
                                          and not any(f.filename.endswith("compile_utils.py") for f in frames)):
        return None  # a loss's op in a dtype this CPU has no kernel for is refused as such (errors.missing_cpu_kernel)
    said = error_line(error).split(" for '{{node")[0]  # TensorFlow's node and its inputs' shapes follow
    return (f"{model_name}'s loss{f' ({loss_name(loss)})' if loss_name(loss) else ''} failed on the targets made for "
            f"it, {type(error).__name__}: {said} (y: {shapes_of(y)}; a target has its output's shape, or "
            "class ids for a sparse loss, and a loss that takes another, as CTC takes label sequences, cannot be fed "
            "one here: plan with --loss naming a loss of the output's shape, which leaves your loss's own buffers out, "
            "or give the model its labels as an input and add the loss with add_loss, as keras-io's captcha OCR does)")
