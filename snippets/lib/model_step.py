"""A real ``fit`` step of any Keras model, measured by the allocator in a fresh capped process.

The planner's rule (:mod:`snippets.lib.planner`) knows weights, gradients, slots and the update's temporaries, and the
activations of one ``Dense`` layer. A real model's step peak is mostly its activations (convolutions, attention,
recurrence, embeddings, BatchNorm), which no per-layer rule gets right across architectures. So for the reader's own
model this module does not guess: it builds the model from the reader's function, compiles it with the reader's
optimizer, loss, dtype policy and XLA mode, and runs ``fit`` steps under a capped CPU BFC allocator in a **new Python
process per figure** (a used allocator has holes, and TensorFlow fixes its devices once per process).
:mod:`snippets.lib.model_plan` fits those peaks in the batch.

What one run measures: the allocator's peak during each of the first ``steps`` training steps (and up to
:data:`MAX_STEPS` in all while they are quick, :data:`QUICK_SECONDS`), above the level before the model was built,
with one input batch resident (as a GPU holds the batch it trains on), and the worst of those steps (the first step
builds the optimizer's slots and can peak above the second; with several inter-op threads the order of the ops, and so
the peak, changes from one step to the next).

Under ``strategy="mirrored"`` what is measured is **one replica's program alone** (the project's way,
:mod:`snippets.lib.step_ledger`): the emulated devices share one allocator, so a real ``MirroredStrategy`` run shows
only the pool's peak: every replica's buffers (not necessarily live at once) and what the strategy keeps on one device
(on CPU devices it all-reduces with ``ReductionToOneDevice``, both gradients gathered on the first device; a GPU host
uses NCCL). The replica's program is the model at ``batch / devices`` samples, without XLA (Keras resolves
``jit_compile="auto"`` to False for a model created under a strategy), with each gradient copied before the update as
the all-reduce writes the summed gradient into a new buffer (:func:`snippets.lib.step_ledger.copy_on_aggregation`),
and with the optimizer's slots built before the first step, as Keras builds them under a strategy
(``_maybe_symbolic_build`` in keras/src/backend/tensorflow/trainer.py, Keras 3.15; on one device it defers them to the
first traced step, which is then traced twice). ``--real-strategy`` (and :func:`measure`'s ``replica_devices``) runs
the real ``MirroredStrategy`` over ``devices`` emulated devices instead and reports the pool's peak (the benchmarks
publish the replica's figure against it, docs/performance.md). Keras on JAX is compiled instead of run:
:mod:`snippets.lib.jax_step`.

Run one by hand::

    python -m snippets.lib.model_step --step '{"model": "snippets.lib.zoo:small_cnn", "batch": 8}'

Sources: ``tf.config.experimental.get_memory_info`` / ``reset_memory_stats`` (TF 2.21 API pages);
``gradient_accumulation_steps`` (keras.optimizers.Optimizer, Keras 3.15); ``keras.RematScope`` (Keras 3.15 API page).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from snippets.lib import allocator, batch_square, fork_server, optimizers, placements, private, saved_model, units
from snippets.lib.errors import ModelError, error_line, missing_cpu_kernel, xla_refusal
from snippets.lib.model_compile import compile_again
from snippets.lib.model_batch import (CALL_ONCE, NO_CALL, adds_its_loss, adds_loss_in_training, batch_of, defines_call,
                                      fixed_size_hint, loss_failure, loss_name, noting_added_losses, recording_calls)

#: Strategies a measured step can run under.
STRATEGIES = ("single", "mirrored")


@dataclass(frozen=True)
class ModelStep:
    """One configuration of the reader's training step.

    Attributes:
        model: ``"package.module:function"``; the function returns a Keras 3 model (compiled or not) with known
            input shapes. Or ``"json:PATH"``, a file holding ``model.to_json()`` (``keras.models.model_from_json``).
        optimizer: a name in :data:`snippets.lib.optimizers.OPTIMIZERS`.
        batch: global batch size (samples per step).
        xla: ``"auto"`` (as Keras decides on a GPU host), ``"on"``, ``"off"``.
        strategy: ``"single"`` (one device) or ``"mirrored"``.
        devices: replicas under ``"mirrored"``; 1 for ``"single"``.
        policy: a Keras dtype policy name (``"mixed_float16"``...) set before the model is built, or None (the builder's).
        loss: the loss when the builder did not compile one, else None.
        accumulation: ``gradient_accumulation_steps`` of the optimizer (1: none).
        remat: a ``keras.RematScope`` mode wrapped around the builder call, or None.
        kwargs: the builder's keyword arguments, as ``(name, value)`` pairs (JSON values).
        own_optimizer: train with the optimizer object the builder compiled, settings and all
            (``global_clipnorm``, ``use_ema``, a ``LossScaleOptimizer``...), not a new ``optimizer``
            by name: a new ``Adam()`` for a builder's ``Adam(global_clipnorm=1.0)`` planned a 4-layer
            MLP at 0.85 of its step, and for ``Adam(use_ema=True)`` at 0.72 (helper-34's trial).
            ``optimizer`` still names its slots. False where the builder compiled none or
            ``--optimizer`` replaces it.
    """

    model: str
    optimizer: str = "adam"
    batch: int = 16
    xla: str = "auto"
    strategy: str = "single"
    devices: int = 1
    policy: str | None = None
    loss: str | None = None
    accumulation: int = 1
    remat: str | None = None
    kwargs: tuple = field(default_factory=tuple)
    own_optimizer: bool = False

    def __post_init__(self):
        object.__setattr__(self, "kwargs", tuple(tuple(pair) for pair in self.kwargs))

    @property
    def jit(self) -> bool:
        """Whether ``fit``'s step is XLA-compiled on a GPU host (:func:`snippets.lib.placements.resolve_xla`)."""
        return placements.resolve_xla(self.xla, self.strategy)

    def fields(self) -> dict:
        """The fields as JSON values, ``own_optimizer`` only when set: a step written before that field
        (the benchmarks' cached runs and published figures are keyed by these) reads as it did."""
        found = asdict(self)
        if not self.own_optimizer:
            del found["own_optimizer"]
        return found

    def at_batch(self, batch: int) -> ModelStep:
        return replace(self, batch=batch)

    @property
    def source(self) -> str:
        """The model as the reader named it: ``package.module:function``, or the ``--model-json`` file's
        path (without the ``json:`` this module's processes read it by)."""
        return self.model.removeprefix("json:")

    def label(self) -> str:
        extra = "".join([f" {self.policy}" if self.policy else "",
                         f" accum{self.accumulation}" if self.accumulation > 1 else "",
                         f" remat-{self.remat}" if self.remat else ""])
        where = f"mirrored x{self.devices}" if self.strategy == "mirrored" else "single"
        return f"{self.model} {self.optimizer} {where} xla-{'on' if self.jit else 'off'} B={self.batch}{extra}"


def check_step(step: ModelStep) -> ModelStep:
    """``step`` if its fields are valid.

    Raises:
        ValueError: naming the bad field and what it accepts.
    """
    optimizers.check_optimizer(step.optimizer)
    if step.strategy not in STRATEGIES:
        raise ValueError(f"a measured step runs under {' or '.join(STRATEGIES)}, not {step.strategy!r}")
    if step.batch < 1 or step.devices < 1 or step.accumulation < 1:
        raise ValueError("batch, devices and accumulation must be positive integers")
    if step.strategy == "single" and step.devices != 1:
        raise ValueError("strategy 'single' runs on one device; use strategy 'mirrored' for several")
    if step.strategy == "mirrored" and step.batch % step.devices:
        raise ValueError(f"batch {step.batch} does not split over {step.devices} replicas; "
                         f"use a multiple of {step.devices}")
    placements.resolve_xla(step.xla, step.strategy)
    if ":" not in step.model:
        raise ValueError(f"model wants package.module:function, not {step.model!r}")
    return step


# --- inside the child process ---------------------------------------------------------


def build(step: ModelStep, replica_program: bool = False):
    """The reader's model, compiled as ``step`` says; call it inside the process that measures.

    Raises:
        ModelError: the builder failed, returned no Keras model, a tf_keras
            model, an unbuilt model, or compiled no loss, ``step.loss`` is None and its layers add none
            (``add_loss`` while it is built, :func:`snippets.lib.model_batch.noting_added_losses`).
    """
    import importlib

    import keras

    module_name, _, name = step.model.partition(":")
    if module_name == "json":
        # A model.to_json() file: what a notebook's own function can hand to a fresh process.
        path = Path(name)

        def builder():
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as error:
                raise ModelError(f"cannot read {path}: {error.strerror}") from None
            return saved_model.rebuild(text)  # helper-91: one line naming a class of the reader's own
    else:
        try:
            builder = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError) as error:
            raise ModelError(f"cannot load {step.model}: {error}") from None
    if step.policy:
        keras.config.set_dtype_policy(step.policy)
    try:
        with recording_calls(), noting_added_losses() as added, (
                keras.RematScope(mode=step.remat) if step.remat else contextlib.nullcontext()):
            model = builder(**dict(step.kwargs))
    except ModelError:
        raise
    except Exception as error:  # noqa: BLE001 (the reader's code can raise anything: one line)
        from snippets.lib.errors import is_oom

        if is_oom(error):
            raise  # the allocator refused a weight's initial value: measure() reports the init phase
        raise ModelError(f"building the model with {step.model} failed: {type(error).__name__}: "
                         f"{error_line(error)}") from None
    check_model(model, step.model)
    loss = compiled_loss(model) or step.loss
    if (loss is None and not own_train_step(model) and not adds_its_loss(model, added)
            and not adds_loss_in_training(model)):
        raise ModelError(f"{step.model} returns a model with no compiled loss: compile it with one, "
                         "or pass --loss (e.g. --loss mse)")
    compiled = getattr(model, "optimizer", None)
    if step.own_optimizer and compiled is None:
        raise ModelError(f"{step.model} compiled no optimizer this time, though it did when read: pass --optimizer")
    optimizer = compiled if step.own_optimizer else optimizers.make_optimizer(step.optimizer)
    # The builder's object keeps its own (read on the optimizer a LossScaleOptimizer wraps); given none, it takes the
    # accumulation remedy's (model_accumulation), before it is built: its accumulators are made when it is.
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if step.accumulation > 1 and not (step.own_optimizer and inner.gradient_accumulation_steps):
        if inner.built:
            raise ModelError(f"{step.model}'s optimizer is built already: gradient_accumulation_steps cannot be given to it")
        inner.gradient_accumulation_steps = step.accumulation
    if replica_program and step.devices > 1:
        from snippets.lib.step_ledger import copy_on_aggregation

        # A LossScaleOptimizer hands its inner optimizer the gradients to aggregate.
        copy_on_aggregation(getattr(optimizer, "inner_optimizer", optimizer))
    compile_again(model, step.model, optimizer, loss, step.jit)
    return model


#: How to give a model its weights before it is returned. A subclassed model's build(input_shape) creates none unless
#: the class defines build() (Keras 3.15: Model.build does not call call()); calling it on a batch does.
BUILD_HINT = ("give it a keras.Input(shape), or in the function call model.build(input_shape) (a Sequential) "
              "or call the model once on a batch (a subclassed one: model(x))")


def check_model(model, name: str) -> None:
    """Refuse what cannot be planned here, in one line naming the fix.

    Raises:
        ModelError: not a Keras 3 model; a tf_keras (Keras 2) model (docs/tf-keras.md
            says how to plan those); a model with no weights (unbuilt); a model whose layers have weights but
            which was never built or called (keras-io's GAN: its networks built apart), whose input is unknown.
    """
    import keras

    if type(model).__module__.startswith("tf_keras") or "tf_keras" in type(model).__mro__[-2].__module__:
        raise ModelError(f"{name} returns a tf_keras (Keras 2) model; the planner measures Keras 3 models: "
                         "see docs/tf-keras.md for tf_keras")
    if not isinstance(model, keras.Model):
        raise ModelError(f"{name} returns {type(model).__name__}, not a keras.Model")
    if not model.weights:
        raise ModelError(f"{name} returns a model with no weights yet: {BUILD_HINT}")
    if not model.built:  # its networks were built apart (keras-io's GAN): the weights are there, the input is not
        raise ModelError(f"{name} returns a model that was never built or called, though its layers have weights, so "
                         f"what it takes is unknown: {CALL_ONCE if defines_call(model) else NO_CALL}")


def fed_x_alone(model, step: ModelStep) -> bool:
    """Whether ``model``'s step trains on the loss its layers add alone (``add_loss``): no loss compiled or in
    ``step``, and no ``train_step`` of its own (:func:`build` refuses such a model unless its layers add one). Its
    ``fit`` is fed ``x`` alone, as the reader's is."""
    return compiled_loss(model) is None and step.loss is None and not own_train_step(model)


def own_train_step(model) -> bool:
    """Whether the model's class overrides ``train_step`` (keras-io's "Customizing what happens in
    fit()") or ``compute_loss`` (keras-io's Keras 3 knowledge distillation): such a step may compute its loss
    itself, with no loss compiled, and may take its batch as ``(x, y)`` or ``x`` alone (helper-48: a ``Distiller``
    overriding ``compute_loss`` was refused for having no compiled loss)."""
    return any(name in vars(cls) for cls in type(model).__mro__ for name in ("train_step", "compute_loss")
               if not cls.__module__.startswith(("keras.", "keras_core.")))


def compiled_loss(model):
    """The loss the builder compiled the model with, or None."""
    if not getattr(model, "compiled", False):
        return None
    return getattr(model, "loss", None)


#: Steps a run may take in all while they are quick (:data:`QUICK_SECONDS`). With several inter-op
#: threads each step draws an order of its ops anew: a small CNN replica (3x3 convolutions of 15 and
#: 33 filters, 16 samples, 8 threads) peaked at 27.41 or 46.1 MiB, about half the steps each, so two
#: steps at each batch missed the higher one often enough that a plan read "Fits" 40 MiB (a
#: fresh-user trial; tests/test_model_plan.py). Eight miss it in about one run in 250.
MAX_STEPS = 8

#: Seconds of further steps a run may spend past the ones asked for (a 224 px ResNet50 keeps its two).
QUICK_SECONDS = 2.0


def steps_measured(step: ModelStep, steps: int = 2) -> int:
    """How many fit steps :func:`measure` runs for ``step`` when asked for ``steps``: with
    ``gradient_accumulation_steps=k`` the optimizer updates on every k-th step only, so at least k,
    to measure through one update."""
    return max(steps, step.accumulation)


def measure(step: ModelStep, steps: int = 2, replica_devices: Sequence[str] = ()) -> dict:
    """Build, then run ``steps`` training steps of ``step`` (more while quick: :data:`MAX_STEPS`), each
    peak read from the allocator.

    Call in a fresh process whose devices are in CPU mode (:func:`main` does).
    Under ``mirrored``: with ``replica_devices`` (the real strategy), the model is
    created and trained under ``MirroredStrategy(replica_devices)`` and the peaks
    are the whole pool's; without, one replica's program runs alone (module docstring).

    Returns:
        ``{"step", "completed", "failed_phase", "init_peak", "step_peaks", "step_peak",
        "weights_bytes", "seconds_per_step", "jit", "real_strategy", "baseline", "largest_variable",
        "max_steps", "optimizer_bytes", "optimizer_applied", "half"}`` (``optimizer_bytes``, the optimizer's variables after
        the steps, once completed, and whether they applied it: :func:`snippets.lib.optimizers.applied`; ``half``, whether any layer computes in 16 bits, by the step's policy or one of its own; ``jit``,
        whether Keras compiled the step with XLA, False where it turned the step's XLA off for a layer it cannot compile), and
        ``"x_alone"`` (the error, one line) where the model's own ``train_step`` failed on ``(x, y)`` and ran on x alone,
        ``"square"`` (``{"batch", "tensors"}``: :func:`snippets.lib.batch_square.candidates` at the batch per device, up
        to its ``READ_UP_TO``, without ``replica_devices``); peaks in
        bytes above ``baseline``, the pool's level before the model was built; ``step_peak`` is the worst of
        ``step_peaks``; ``failed_phase`` is None, ``"init"`` or ``"step"`` (the
        allocator refused; then :func:`snippets.lib.allocator.refused_at` says how far it got).
    """
    import keras
    import tensorflow as tf

    from snippets.lib.errors import is_oom

    device = "CPU:0"
    steps = steps_measured(step, steps)
    result = {"step": step.fields(), "completed": False, "failed_phase": None, "init_peak": None,
              "step_peaks": [], "step_peak": None, "weights_bytes": None, "seconds_per_step": None,
              "jit": step.jit, "real_strategy": bool(replica_devices), "max_steps": MAX_STEPS}
    batch = step.batch if replica_devices or step.strategy == "single" else step.batch // step.devices
    # What the pool held before the model (the runtime's own tensors): a cap must leave room for it.
    start = result["baseline"] = tf.config.experimental.get_memory_info(device)["current"]
    tf.config.experimental.reset_memory_stats(device)
    try:
        if replica_devices:
            with tf.distribute.MirroredStrategy(list(replica_devices)).scope():
                model = build(step)
        else:
            model = build(step, replica_program=step.strategy == "mirrored")
        x, y = batch_of(model, batch, compiled_loss(model))
    except (tf.errors.OpError, MemoryError) as error:
        if isinstance(error, tf.errors.OpError) and not is_oom(error):
            raise
        result["failed_phase"] = "init"
        return {**result, **allocator.refused_at(error, device, start)}
    result["init_peak"] = tf.config.experimental.get_memory_info(device)["peak"] - start
    # What Keras compiled, not what was asked: it turns XLA off, with a warning, for a model with a layer it cannot
    # compile (RandomRotation; helper-67 read "jit": true for such a step run without XLA).
    result["jit"] = bool(getattr(model, "jit_compile", step.jit))
    result["weights_bytes"] = sum(units.tensor_bytes(tuple(w.shape), str(w.dtype)) for w in model.weights)
    result["largest_variable"] = max((units.tensor_bytes(tuple(w.shape), str(w.dtype))
                                      for w in model.trainable_weights), default=0)
    result["half"] = any(units.computes_in_16_bits(getattr(getattr(layer, "dtype_policy", None), "name", None))
                         for layer in private.model_layers(model))
    # One batch held as tensors, as a GPU holds the batch it trains on; a dataset of that one
    # element hands the same tensors to every step (no prefetch copies in the pool).
    options = tf.data.Options()
    options.autotune.enabled = False
    # A y the step does not read would be one more buffer in the pool.
    dataset = tf.data.Dataset.from_tensors((x,) if fed_x_alone(model, step) else (x, y)).repeat().with_options(options)
    # A train_step of the model's own may take x alone (keras-io's VAE and GAN do; its DDIM does, with a loss compiled,
    # helper-49): tried once (x, y) fails before running (a tracing error allocates no step's buffers).
    alone = tf.data.Dataset.from_tensors(x).repeat().with_options(options) if own_train_step(model) else None
    quick = 0.0  # seconds spent on steps past the ones asked for
    for index in range(max(steps, MAX_STEPS)):
        if index >= steps and quick + (result["seconds_per_step"] or 0) > QUICK_SECONDS:
            break
        tf.config.experimental.reset_memory_stats(device)
        began = time.perf_counter()
        if (not index and step.strategy == "mirrored" and not replica_devices and model.optimizer is not None
                and not model.optimizer.built):
            # Under a strategy Keras's fit builds the slots before its first step (module docstring): inside
            # step 0's window, and one trace instead of two. The real strategy's fit does so in its scope.
            # Not on one device, where fit does not: it would save a trace (a 224 px ResNet50's run at 16, one
            # thread: 8-9 s of 24-28) but move the step (step 1 at 1659-1679 MiB over five runs, not 1742).
            model.optimizer.build(model.trainable_variables)
        try:
            try:
                model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0, shuffle=False)  # a dataset: no shuffle
            except Exception as error:  # noqa: BLE001 (the reader's train_step can raise anything)
                if is_oom(error) or index:
                    raise
                if step.jit and xla_refusal(step.model, error):
                    raise ModelError(xla_refusal(step.model, error)) from None
                if alone is None:
                    refusal = loss_failure(step.model, error, y, compiled_loss(model))
                    if refusal:
                        raise ModelError(refusal) from None
                    raise
                # A new tf.function: the failed one was traced, and would refuse to create the slots.
                dataset, alone, model.train_function = alone, None, None
                # An unseeded keras.random call made Keras's global SeedGenerator in the failed trace, unreadable in the
                # next (helper-87's DDIM: "seed must have shape [2], not [0]"): a new one, as in a fresh process.
                keras.utils.set_random_seed(0)
                try:
                    model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0, shuffle=False)
                    # The plan says so, with why (x, y) failed: a y made here that its step did not read as made.
                    result["x_alone"] = f"{type(error).__name__}: {error_line(error).split('. ')[0]}"
                except Exception as again:  # noqa: BLE001
                    if is_oom(again):
                        raise
                    # Both errors (helper-49: the x-alone one, the step's own, was left out); y follows a compiled loss.
                    own = compiled_loss(model)
                    raise ModelError(
                        f"{step.model}'s own train_step or compute_loss failed on a batch (x, y), {type(error).__name__}: "
                        f"{error_line(error)}, and on x alone, {type(again).__name__}: {error_line(again).split('. ')[0]} (x has the "
                        "inputs' shapes and dtypes; y has the output's shape, or class ids for a sparse loss: " +
                        (f"the loss it compiles, {loss_name(own)}, decides which)" if own is not None else
                         "pass --loss for the loss it computes)") + fixed_size_hint(error_line(again), step.batch // step.devices)) from None
        except (tf.errors.OpError, ValueError) as error:
            if not is_oom(error):
                raise
            result["failed_phase"] = "step"
            return {**result, **allocator.refused_at(error, device, start)}
        result["seconds_per_step"] = time.perf_counter() - began
        quick += result["seconds_per_step"] if index >= steps else 0
        result["step_peaks"].append(tf.config.experimental.get_memory_info(device)["peak"] - start)
    result["step_peak"] = max(result["step_peaks"])
    # Read after the steps (it allocates nothing); not under the real strategy, whose graph holds a replica's shapes.
    if not replica_devices and batch <= batch_square.READ_UP_TO and (square := batch_square.candidates(model, batch)):
        result["square"] = {"batch": batch, "tensors": square}
    # What the optimizer keeps (slots, an EMA copy, accumulators, scalars), and whether the step applied it (helper-98).
    result["optimizer_bytes"], result["optimizer_applied"] = sum(units.tensor_bytes(tuple(v.shape), str(v.dtype)) for v in (
        model.optimizer.variables if model.optimizer else ())), optimizers.applied(model.optimizer)
    result["completed"] = True
    return result


# --- from the parent --------------------------------------------------------------------


def default_cap(step: ModelStep) -> int:
    """A cap for measuring (bytes): 60% of the RAM this host has available, at most 16 GiB."""
    return min(int(0.6 * allocator.host_available_bytes()), 16 * units.GiB)


def measure_many(jobs: Sequence[tuple], steps: int = 2, timeout: float = 1800, parallel: int = 1,
                 progress: Callable[[str], None] | None = None) -> list[dict]:
    """:func:`measure` of each job, each in its own fresh process, for one TensorFlow import in all.

    One child Python imports TensorFlow, then forks one process per job before TensorFlow's
    runtime starts (as the test harness's fork server does): each figure still comes from a
    process and an allocator nothing else has used, without paying the import per figure; the child
    stays for the next call (:mod:`snippets.lib.fork_server`), so a plan's later runs skip it too.

    With ``parallel`` > 1, that many jobs run at once (a model's build and tracing are one Python
    thread each, so two overlap on two cores), and the host's share is split: a job given no cap
    gets :func:`default_cap` / ``parallel`` (jobs given a cap run one at a time, each under it). A job whose step came within :data:`CAP_BOUND` of that
    share, or ran out of it, is run again alone under the whole :func:`default_cap`: a cap that binds moves the
    figure (down, the executor waiting for frees; or up: a CNN read 575 MiB under a 576 MiB cap, 476 under
    2000), so it is not kept. The benchmark that publishes the planner's accuracy runs two such processes too.

    Args:
        jobs: ``(step, cap)`` or ``(step, cap, inter_op_threads)`` tuples; ``cap`` as
            bytes or a size such as ``"2GiB"`` (None: :func:`default_cap`).
        parallel: processes at once, 1 or more.
        progress: called with one line as each run ends (its configuration, step peak and the time
            since the first run began): a 224 px ResNet50 takes minutes on two cores.

    Raises:
        ModelError: a job's model was refused (its one line).
        allocator.HostMemoryError: a cap exceeds what the host can spare.
        RuntimeError: a child failed for another reason than an OOM.
    """
    # A cap the caller gave is the caller's to spend: not split, and not held twice at once.
    parallel = 1 if any((*job, None)[1] for job in jobs) else max(1, int(parallel))
    plans = []
    for job in jobs:
        step, cap, threads = (*job, None)[:3]
        check_step(step)
        whole = units.parse_size(cap) if isinstance(cap, str) else (cap or default_cap(step))
        allocator.check_host_can_hold(whole, f"measuring {step.label()}")
        share = whole if cap or parallel == 1 else whole // parallel
        plans.append((step, whole, share, threads))
    results = _run_forks([(step, share, threads) for step, _, share, threads in plans], steps, timeout, parallel,
                         progress)
    again = [i for i, (result, (_, whole, share, _)) in enumerate(zip(results, plans))
             if share < whole and (not result["completed"] or result["step_peak"] > CAP_BOUND * share)]
    if again:
        if progress:
            progress(f"{len(again)} run(s) came near their share of the host: running them again alone ...")
        redone = _run_forks([(plans[i][0], plans[i][1], plans[i][3]) for i in again], steps, timeout, 1, progress)
        for i, result in zip(again, redone):
            results[i] = result
    return results


#: A step peak above this fraction of its cap may have been moved by it, down or up to it (:func:`measure_many`).
CAP_BOUND = 0.8


#: The module whose ``--serve`` runs :func:`snippets.lib.fork_server.serve` with this module's runs: this one.
SERVER = "snippets.lib.model_step"


def _run_forks(jobs: Sequence[tuple], steps: int, timeout: float, parallel: int,
               progress: Callable[[str], None] | None = None) -> list[dict]:
    """``(step, cap_bytes, threads)`` jobs through :func:`snippets.lib.fork_server.server`'s child, ``parallel``
    at once; its progress lines to ``progress`` as they come."""
    payload = [[step.fields(), f"{cap // units.MiB}MiB", threads, steps] for step, cap, threads in jobs]
    results = fork_server.server(SERVER).run(payload, parallel, timeout, progress or (lambda line: None))
    for reply in results:
        if "refused" in reply:
            raise ModelError(reply["refused"])
        if "error" in reply:
            raise RuntimeError(reply["error"])
    return results


def _run_job(fields: dict, cap: str, threads: int | None, steps: int) -> dict:
    """In a process :func:`snippets.lib.fork_server.fork_jobs` forked: one run, its reply (refusals and errors in one line)."""
    from snippets.lib import devices

    try:
        if threads:
            os.environ["TF_NUM_INTEROP_THREADS"] = str(threads)  # read when the runtime starts
        devices.configure(1, cap, "cpu")
        return measure(check_step(ModelStep(**fields)), steps)
    except ModelError as error:
        return {"refused": str(error)}
    except BaseException as error:  # noqa: BLE001 (reported to the parent in one line)
        refusal = missing_cpu_kernel(str(error), policy_option=fields.get("policy") not in (None, "float32"))
        return {"refused": refusal} if refusal else {"error": f"{type(error).__name__}: {error_line(error)} (the run at a global batch of {fields['batch']})"}


def _describe(fields: dict, threads: int | None) -> tuple[str, str]:
    """A run's label, and how a progress line names it."""
    from snippets.lib import devices

    step = ModelStep(**fields)
    per_device = step.batch // step.devices if step.strategy == "mirrored" else step.batch
    count = threads or devices.CPU_INTER_OP_THREADS
    return step.label(), f"{per_device} per device, {count} inter-op thread{'s' if count != 1 else ''}"


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m snippets.lib.model_step",
                                     description="Measure fit steps of a Keras model under a capped allocator, "
                                     "in this process, and print the result as JSON.")
    parser.add_argument("--step", help="a ModelStep as JSON (decide --json's plan.step: its xla is decide's choice, "
                        "and an 'auto' there resolves here as it did there)")
    parser.add_argument("--serve", nargs="?", const=-1, type=int, metavar="FD",
                        help="(internal) serve measure_many; with FD, a shared server's socket: snippets.lib.fork_server")
    parser.add_argument("--cap", default="4096MiB", metavar="SIZE", help="the process's allocator cap (one near the "
                        "step's need moves its figure: a peak under a generous cap, a verdict under a tight one)")
    parser.add_argument("--steps", type=int, default=2, help="training steps measured")
    parser.add_argument("--real-strategy", action="store_true",
                        help="mirrored: the real MirroredStrategy over the emulated devices (the pool's peak)")
    args = parser.parse_args(argv)
    if args.serve is not None:
        fork_server.serve(_run_job, _describe, None if args.serve < 0 else args.serve)
        os._exit(0)
    if not args.step:
        parser.error("give --step (a ModelStep as JSON)")
    try:
        units.parse_size_with_unit(args.cap, "--cap")  # a size with its unit, or its one-line error
    except ValueError as error:
        parser.error(str(error))
    try:
        step = check_step(ModelStep(**json.loads(args.step)))
    except json.JSONDecodeError as error:  # helper-78: the parser's words alone did not say which argument
        parser.error(f"--step is not JSON ({error}): give it plan.step of decide --json")
    except (ValueError, TypeError) as error:
        parser.error(str(error).splitlines()[0])
    from snippets.lib import cli

    # TensorFlow 2.21 can crash, not raise, where the cap refuses a buffer of fit's input (helper-70: SIGSEGV in its
    # iterator, caps under the peak): run in a child, whose death is reported as a step that ran out.
    read, write = os.pipe()
    if child := os.fork():
        os.close(write)
        with os.fdopen(read) as pipe:
            reply, (_, status) = pipe.read(), os.waitpid(child, 0)
        if not reply and not os.WIFSIGNALED(status):
            return os.WEXITSTATUS(status)  # the child's own error, already on stderr: not a cap's
        if not reply:
            crash = signal.Signals(os.WTERMSIG(status)).name
            print(f"TensorFlow died ({crash}) under --cap {args.cap}: it does so where the cap refuses a buffer of fit's "
                  "input; taken as a step that ran out (a larger --cap runs it)", file=sys.stderr)
            reply = json.dumps({"step": step.fields(), "completed": False, "failed_phase": "step", "crashed": crash})
        if "refused" in (answer := json.loads(reply)):  # helper-78: a model it cannot build is bad input, not a run
            parser.exit(2, f"{parser.prog}: error: {answer['refused']}\n")
        print(reply.strip(), flush=True)
        return 0
    os.close(read)
    with cli.quiet_tensorflow_start():  # a reader running this by hand sees its own lines, not TensorFlow's start
        from snippets.lib import devices

        setup = devices.configure(step.devices if args.real_strategy else 1, args.cap, "cpu")
    try:
        reply = measure(step, args.steps, setup.devices if args.real_strategy else ())
    except ModelError as error:
        reply = {"refused": str(error)}
    with os.fdopen(write, "w") as pipe:
        pipe.write(json.dumps(reply))
    # TensorFlow 2.21 can abort while tearing down an allocator that refused inside XLA; the result is already out.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
