"""Placements: where each weight, gradient, slot and update of a training step lives.

A placement is a way to put a model on N devices. Each is one
:class:`Placement` in :data:`PLACEMENTS`: how it splits a weight, where the
gradient, the optimizer's slots and the update live, and what Keras does
with XLA under it. The planner (:mod:`snippets.lib.planner`) reads these
objects and nothing else about a placement, so a new remedy is one new
entry here (CONTRIBUTING.md says what else it needs: a page, a module, a
test file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from snippets.lib.splits import check_count, check_split
from snippets.lib.units import check_shape


@dataclass(frozen=True)
class Placement:
    """One way to put a model's weights on N devices, as the planner needs to know it.

    Attributes:
        name: the name the planner, the command lines and the pages use.
        split: which axis of a weight is split over the devices: ``"last"``
            (any rank >= 1), ``"first"`` (rank >= 2; vectors are replicated),
            ``"first-any"`` (rank >= 1), or None (every device holds it whole).
        chapter: the page that builds it for real.
        only_device_0: everything lives on device 0 (one GPU, nothing split).
        reads_whole: the device that runs a layer reads its whole variable
            from elsewhere (a parameter server's shards, host RAM).
        updates_on_device: the optimizer's slots and update run on the device.
        holds_variables_on_host: the variables themselves live in host RAM.
        all_reduce: gradients are all-reduced between replicas into a new buffer.
        batch_split: each device sees ``batch / N`` of the batch.
        reads_input_slice: each device reads ``D / N`` of the input (row split).
        initialises: ``"each"`` (every device draws its own piece), ``"first"``
            (device 0 draws, the others copy: MirroredStrategy's replica 0),
            or None (initialised elsewhere).
        xla_auto: what Keras's ``jit_compile="auto"`` resolves to on a GPU host.
        xla_compiles: what XLA compiles when on: ``"xla"`` (the whole step) or
            ``"xla-update"`` (each variable's update alone, on its device).
        init_compiled: initializers are compiled by XLA (Keras 3 on JAX draws a
            large variable with ``jax.jit``), so the planner takes XLA's init
            peaks (:data:`snippets.lib.planner.XLA_INIT_PEAK`).
        uneven: what the placement does with a *model's* weight it cannot split, one whose split
            axis N does not divide (:func:`split_divides`; a bare shape is refused instead, since the
            reader asked to split that one weight) (:func:`snippets.lib.planner.held_whole`):
            ``"first"``, held whole on device 0, where the site's ``tf.device`` layers, which
            replace Dense layers only, leave every layer they do not replace; ``"each"``, held whole on every device, as
            Keras's ``ModelParallel`` replicates a variable its ``LayoutMap`` does not match
            (``get_variable_layout`` in keras/src/distribution/distribution_lib.py, Keras 3.15)
            and tf_keras's DTensor ``LayoutMap`` gives it a replicated layout; ``"shards"``, split
            unevenly, as ``FixedShardsPartitioner(N)`` makes ``min(N, rows)`` shards whose sizes
            differ by one row (tensorflow/python/distribute/sharded_variable.py, TF 2.21); None for a
            placement that splits nothing.
        backend: the Keras backend it runs on, ``"tensorflow"`` or ``"jax"``: a JAX placement's device
            memory is JAX's pool (:func:`snippets.lib.hardware.jax_pool_bytes`), not TensorFlow's allocator.
    """

    name: str
    split: str | None
    chapter: str
    only_device_0: bool = False
    reads_whole: bool = False
    updates_on_device: bool = True
    holds_variables_on_host: bool = False
    all_reduce: bool = False
    batch_split: bool = False
    reads_input_slice: bool = False
    initialises: str | None = "each"
    xla_auto: bool = False
    xla_compiles: str = "xla"
    init_compiled: bool = False
    uneven: str | None = None
    backend: str = "tensorflow"

    @property
    def hosted(self) -> bool:
        """The weights live off the device (parameter servers or host RAM)."""
        return self.reads_whole


def tf_keras_optimizer_jit(requested: bool = True, gpu_listed: bool = True, can_jit_compile: bool = True) -> bool:
    """Whether a tf_keras 2.21 optimizer compiles its own update with XLA: tf_keras's rule, without TensorFlow.

    tf_keras's optimizer constructor takes ``jit_compile=True`` by default
    and keeps it only if ``tf_utils.can_jit_compile()`` (False on Apple
    ARM and with pluggable devices) and ``tf.config.list_physical_devices("GPU")``
    lists a GPU (``_BaseOptimizer.__init__`` in
    tf_keras/src/optimizers/optimizer.py). With it on, the update goes
    through ``_update_step_xla``, a ``tf.function(jit_compile=True)``: from
    ``_internal_apply_gradients`` with a DTensor mesh and from
    ``_distributed_apply_gradients_fn`` under a ``tf.distribute`` strategy,
    whatever ``Model.compile(jit_compile=...)`` says. The legacy optimizers
    (``tf_keras.optimizers.legacy``) have no such switch.

    >>> tf_keras_optimizer_jit(True, gpu_listed=True), tf_keras_optimizer_jit(True, gpu_listed=False)
    (True, False)
    >>> tf_keras_optimizer_jit(False, gpu_listed=True)
    False

    Args:
        requested: the constructor's ``jit_compile`` argument.
        gpu_listed: ``tf.config.list_physical_devices("GPU")`` is not empty.
        can_jit_compile: ``tf_utils.can_jit_compile()``.
    """
    return bool(requested and can_jit_compile and gpu_listed)


#: Every placement the planner knows, by name. The first six are TensorFlow's
#: (``tf.distribute`` or the site's ``tf.device`` layers); the last two are
#: Keras 3 on JAX (docs/keep-fit.md), where ``fit`` jit-compiles the whole
#: train step (``make_train_function`` in keras/src/backend/jax/trainer.py)
#: and ``jit_compile="auto"`` is True on any host: ``model_parallel`` is
#: ``ModelParallel`` over a ``(1, N)`` ``("batch", "model")`` mesh with each
#: kernel's columns over ``"model"`` (the batch axis has one device, so no
#: batch split and no all-reduce); ``data_parallel`` is ``DataParallel`` over
#: N devices, the MirroredStrategy analogue (every device holds each variable
#: whole; XLA all-reduces the gradient into a new buffer inside the step).
#: ``tf_keras_dtensor`` is tf_keras 2.21 (Keras 2) with a DTensor ``LayoutMap``
#: splitting each kernel's columns: the column split, with ``fit``'s step not
#: compiled by XLA (tf_keras's ``compile`` defaults ``jit_compile`` to off,
#: tf_keras/src/engine/training.py) but each variable's update compiled by XLA
#: on a GPU host, whatever ``compile`` says: tf_keras's optimizer compiles its
#: own update (:func:`tf_keras_optimizer_jit`), so it plans as ``"xla-update"``;
#: the update's temporaries are Keras 3's optimizer probes, which
#: ``snippets.tf_keras.update_peak`` confirms for tf_keras's compiled RMSprop
#: on XLA:CPU (docs/tf-keras.md).
#: tf_keras under ParameterServerStrategy needs no entry of its own: its worker
#: concatenates the shards like Keras 3's, so ``parameter_server`` plans its device.
#: ``parameter_server`` is
#: ParameterServerStrategy with ``FixedShardsPartitioner(N)``: the plan is the
#: worker's device, which concatenates the shards to run the layer and computes
#: the whole gradient (the shards and, with Keras 3.15, the full-size slots
#: live elsewhere, see :func:`snippets.lib.planner.host_bytes`). ``offload``:
#: variables and slots in host RAM, each device reading a copy of the variables
#: and, since on a GPU host the update's arithmetic runs on the default device,
#: of the slots. Keras's ``jit_compile="auto"`` (``_resolve_auto_jit_compile``
#: in keras/src/trainers/trainer.py, Keras 3.15) is False for a model
#: *created* under a ``tf.distribute`` strategy's scope (the TensorFlow
#: trainer records the strategy at construction, ``_distribute_strategy`` in
#: keras/src/backend/tensorflow/trainer.py), True on a GPU machine otherwise; an offloaded
#: model cannot be compiled whole; the ``tf.device`` layers compile each
#: shard's update on its device (:func:`snippets.lib.optimizers.colocate_updates`).
PLACEMENTS = {p.name: p for p in (
    Placement("single", None, "placement.md", only_device_0=True, initialises="first", xla_auto=True),
    Placement("mirrored", None, "placement.md", all_reduce=True, batch_split=True, initialises="first"),
    Placement("column", "last", "tensor-parallel.md", xla_auto=True, xla_compiles="xla-update", uneven="first"),
    Placement("row", "first", "tensor-parallel.md", reads_input_slice=True, xla_auto=True,
              xla_compiles="xla-update", uneven="first"),
    Placement("parameter_server", "first-any", "parameter-server.md", reads_whole=True,
              updates_on_device=False, initialises=None, uneven="shards"),
    Placement("offload", None, "offload.md", reads_whole=True, holds_variables_on_host=True, initialises=None),
    Placement("model_parallel", "last", "keep-fit.md", xla_auto=True, xla_compiles="xla", init_compiled=True,
              uneven="each", backend="jax"),
    Placement("data_parallel", None, "keep-fit.md", all_reduce=True, batch_split=True, xla_auto=True,
              xla_compiles="xla", init_compiled=True, backend="jax"),
    Placement("tf_keras_dtensor", "last", "tf-keras.md", xla_auto=tf_keras_optimizer_jit(True, gpu_listed=True),
              xla_compiles="xla-update", uneven="each"),
)}

#: Placement names, in the order tables list them.
STRATEGIES = tuple(PLACEMENTS)


def get(strategy: str) -> Placement:
    """The :class:`Placement` called ``strategy``.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    return PLACEMENTS[check_strategy(strategy)]


def shard_axis(shape: Sequence[int], strategy: str) -> int | None:
    """Axis of ``shape`` that ``strategy`` splits across devices, or None if replicated."""
    split = get(strategy).split
    if split == "last" and len(shape) >= 1:
        return len(shape) - 1
    if (split == "first" and len(shape) >= 2) or (split == "first-any" and len(shape) >= 1):
        return 0
    return None


def local_shape(shape: Sequence[int], strategy: str = "mirrored", devices: int = 4) -> tuple[int, ...]:
    """Shape of the piece of a weight that one device holds under ``strategy``.

    >>> local_shape([131072, 65536], "column", 4)
    (131072, 16384)
    >>> local_shape([131072, 65536], "row", 3)
    Traceback (most recent call last):
    ...
    ValueError: cannot split dimension 0 of shape [131072, 65536] (size 131072) into 3 equal shards: 3 does not divide 131072; use a shard count that divides 131072, or pad it to 131073

    Raises:
        ValueError: for a bad shape, strategy or count, or a split that does
            not divide the dimension evenly (the message names the dimension,
            its size and the count).
    """
    dims = check_shape(shape)
    check_strategy(strategy)
    check_count(devices)
    axis = shard_axis(dims, strategy)
    if axis is None or devices == 1:
        return dims
    check_split(f"dimension {axis} of shape {list(dims)}", dims[axis], devices)
    return dims[:axis] + (dims[axis] // devices,) + dims[axis + 1 :]


def split_divides(shape: Sequence[int], strategy: str, devices: int) -> bool:
    """Whether ``strategy`` can split ``shape`` into ``devices`` equal shards (True when it splits nothing of it).

    >>> split_divides([64, 1], "column", 2), split_divides([64, 1], "row", 2), split_divides([1], "row", 2)
    (False, True, True)
    """
    dims = check_shape(shape)
    axis = shard_axis(dims, strategy)
    return axis is None or dims[axis] % check_count(devices) == 0


def check_strategy(strategy: str) -> str:
    """Return ``strategy`` if it is one of :data:`STRATEGIES`, else raise ValueError."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    return strategy


#: Values of ``xla``: ``"auto"`` resolves as Keras would on a GPU host (:func:`resolve_xla`).
XLA_CHOICES = ("auto", "on", "off")


def resolve_xla(xla: str | bool, strategy: str) -> bool:
    """Whether the step's update is XLA-compiled, as Keras decides on a machine with a GPU.

    ``jit_compile="auto"`` (``Model.compile``'s default) resolves in
    ``_resolve_auto_jit_compile`` (keras/src/trainers/trainer.py, Keras 3.15):
    False on CPU-only machines and for a model *created* under a
    ``tf.distribute`` strategy's scope (the TensorFlow trainer records the
    strategy in ``_distribute_strategy`` when the model is constructed, not
    when it is compiled), True on a GPU machine otherwise. So on a GPU host:
    ``single`` -> True; ``mirrored``, ``parameter_server`` -> False (the
    model is built in the strategy's scope);
    ``offload`` -> False (a model whose variables sit on another device
    cannot be compiled whole; its ``compile`` must say ``jit_compile=False``);
    ``column`` / ``row`` -> True: the site's ``tf.device`` layers
    (:mod:`snippets.tensor_parallel`) compile the model without XLA and each
    shard's update with XLA on its own device; ``model_parallel`` /
    ``data_parallel`` (Keras 3 on JAX) -> True on any host: on JAX the same
    function returns True whenever every layer supports jit, and ``fit``
    compiles the whole step with ``jax.jit``; ``tf_keras_dtensor`` -> True,
    each variable's update alone (tf_keras's ``compile`` leaves the step
    uncompiled, but its optimizer compiles its own update whenever a GPU is
    listed: :func:`tf_keras_optimizer_jit`). The CPU emulation uses this
    function, not Keras's or tf_keras's CPU answer.

    >>> resolve_xla("auto", "mirrored"), resolve_xla("auto", "column"), resolve_xla("off", "single")
    (False, True, False)
    >>> resolve_xla("auto", "model_parallel"), xla_mode(True, "model_parallel"), xla_mode(True, "column")
    (True, 'xla', 'xla-update')
    >>> resolve_xla("auto", "tf_keras_dtensor"), xla_mode(True, "tf_keras_dtensor")
    (True, 'xla-update')

    Raises:
        ValueError: for an ``xla`` not in :data:`XLA_CHOICES` (or a bool) or an unknown strategy.
    """
    check_strategy(strategy)
    if isinstance(xla, bool):
        return xla
    if xla not in XLA_CHOICES:
        raise ValueError(f"xla must be one of {', '.join(XLA_CHOICES)}, not {xla!r}")
    if xla != "auto":
        return xla == "on"
    return get(strategy).xla_auto


def xla_mode(jit: bool, strategy: str) -> str:
    """How XLA applies to a step of ``strategy``: ``"no-xla"``, ``"xla"`` (the whole step) or
    ``"xla-update"`` (each variable's update alone, on its device: the ``tf.device`` layers,
    whose model cannot be compiled whole)."""
    if not jit:
        return "no-xla"
    return get(strategy).xla_compiles
