"""Plan a model's memory per device before waiting for an OOM.

Given a model (or plain shapes), an optimizer, a placement and N devices of
M bytes, print what each device will hold (weights, gradients, optimizer
slots, initialisation or compute temporaries, the framework's reserve), a
verdict, and the remedies that would fit, ranked by how little they change.
All arithmetic is :mod:`snippets.lib.planner`'s; slots are counted by building the
real Keras optimizer (:mod:`snippets.lib.optimizers`); a model is built at full size
under ``keras.StatelessScope(initialize_variables=False)``, which records
shapes and dtypes and allocates nothing.

Run it::

    python -m snippets.decide --shape 131072 65536 --optimizer rmsprop --devices 4 \\
        --device-memory 30976MiB --strategy mirrored
    python -m snippets.decide --model snippets.lib.seed:seed_model --optimizer adam
    python -m snippets.decide --model-json model.json --strategy column
    python -m snippets.decide --help

Bad input (a non-positive dimension, an unknown dtype or optimizer, zero
devices, a split that does not divide a dimension) exits with status 2 and
one line naming the problem.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace

from snippets.lib import (cli, fork_server, hardware, model_accumulation, model_plan, model_remedies, model_report,
                          optimizers, pictures, placements, planner, private, splits, units)
from snippets.lib.errors import error_line
from snippets.lib.model_batch import declared_batch_note, fixed_batch_failure
from snippets.lib.model_source import (SourceFacts, frozen_note, model_weights, read_builder, read_json, tf_form_refusal,
                                       trains_batchnorm)
from snippets.lib.model_step import SERVER, ModelError, ModelStep, check_step
# The rule's remedies have a module of their own; the page (docs/decide.md) names them as decide's.
from snippets.lib.rule_remedies import remedies, remedy_json, with_precision
# The rule plan's text likewise; the pages print it as decide's (decide.report, decide.budget_table).
from snippets.lib.rule_report import (as_json, budget_table, fits_word, no_remedy_line, report, rule_how, uncounted,
                                       verdict, whole_json)


def import_callable(target: str) -> Callable:
    """Resolve ``"package.module:function"`` to the function.

    Raises:
        ValueError: if the text has no ``:``, the module does not import or
            the function is missing; the message names which.
    """
    module_name, colon, name = target.partition(":")
    if not colon or not module_name or not name:
        raise ValueError(f"--model wants package.module:function, not {target!r}")
    try:
        # The reader's module imports Keras, and TensorFlow with it: its start-up lines held back.
        with cli.quiet_tensorflow_start(f"importing {module_name} ..."):
            module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import {module_name!r} for --model: {error} (run from the directory that holds "
                         "it, or add that directory to PYTHONPATH)") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"{module_name} has no function {name!r} for --model")
    if "tf_keras" in sys.modules:
        # A tf_keras builder ignores Keras 3's StatelessScope and would allocate every weight.
        raise ValueError(f"{module_name} imports tf_keras (Keras 2): the planner reads Keras 3 models; "
                         "plan tf_keras with docs/tf-keras.md")
    return function


def setup_of(args) -> model_report.ModelSetup:
    """The loss, dtype policy and XLA mode ``args``' model trains with
    (:func:`snippets.lib.model_report.model_setup`), from ``args.source``
    (:class:`snippets.lib.model_source.SourceFacts`, set by :func:`_weights`; absent: nothing chosen)."""
    facts = getattr(args, "source", None)
    jit_choice = facts.jit_compile if facts else None
    # Keras on JAX: --backend jax, or a placement of keras.distribution (model_parallel, data_parallel).
    on_jax = args.backend == "jax" or placements.get(args.strategy).backend == "jax"
    if on_jax and jit_choice:
        jit_choice = None  # Keras on JAX jits every step it can: jit_compile=True chooses nothing there
    # Layers that keep a GPU host's Keras from compiling the step matter only where it would compile it.
    jit = args.backend != "jax" and placements.resolve_xla(model_report.source_xla(args.xla, jit_choice),
                                                           args.strategy)
    blockers = facts.no_xla if facts and jit else {}
    if on_jax:
        # cuDNN is TensorFlow's reason alone: on JAX an LSTM is jitted (keras/src/layers/rnn/lstm.py).
        blockers = {name: why for name, why in blockers.items() if why == private.NO_JIT}
    return model_report.model_setup(facts.loss if facts else None, facts.policy if facts else None,
                                    args.loss, args.policy, args.dtype, facts.optimizer if facts else None,
                                    args.optimizer, facts.own_step if facts else False,
                                    blockers,
                                    "file" if getattr(args, "model_json", None) else "function", args.xla, jit_choice,
                                    facts.unmeasured if facts else (), dropped_by_optimizer(args),
                                    facts.own_policies if facts else None, facts.adds_loss if facts else False,
                                    facts.step_optimizers if facts else (), facts.own_compile if facts else None,
                                    getattr(args, "own_optimizer", False), facts.tf_step if facts else False)


def dropped_by_optimizer(args) -> list[str]:
    """What of the model source's optimizer changes memory and a given ``--optimizer`` leaves out: its
    ``gradient_accumulation_steps`` (an accumulator per trainable variable), ``use_ema=True`` (a copy of
    each) and its clipping (the norms' temporaries); empty when the source's own optimizer is planned (``args.accumulation`` set, :func:`main`)."""
    facts = getattr(args, "source", None)
    if facts is None or facts.optimizer is None or hasattr(args, "accumulation"):
        return []
    return ([f"gradient_accumulation_steps={facts.accumulation}"] if facts.accumulation > 1 else []) + (
        ["use_ema=True"] if facts.ema else []) + list(facts.clipping)


def refuse_unjitted_on_jax(no_xla: Mapping[str, str], compiled_off: str | None = None) -> None:
    """Refuse ``--backend jax`` for a model whose step Keras on JAX runs without jit.

    Args:
        no_xla: :func:`snippets.lib.private.gpu_xla_blockers` of the model, ``{class name: reason}``.
            Only :data:`snippets.lib.private.NO_JIT` layers count: cuDNN is TensorFlow's reason alone
            (keras/src/layers/rnn/lstm.py sets ``supports_jit`` False on the TensorFlow backend only).
        compiled_off: what compiled the model with ``jit_compile=False`` (e.g. ``"the function's
            compile"``), or None.

    Raises:
        ValueError: one line naming the layers; XLA's analysis of a jitted step would describe
            another program than the one that runs.
    """
    if compiled_off:
        raise ValueError(f"{compiled_off} sets jit_compile=False, so Keras on JAX runs the step without "
                         "jit and XLA's compiled analysis does not describe it: pass --xla on if you compile it "
                         "again with XLA, or plan it on TensorFlow (without --backend jax)")
    held = [name for name, why in no_xla.items() if why == private.NO_JIT]
    if held:
        raise ValueError(f"Keras on JAX runs this model's step without jit ({', '.join(held)}: layers it does not "
                         "compile), so XLA's compiled analysis does not describe it: plan it on TensorFlow "
                         "(without --backend jax)")


def source_optimizer(facts: SourceFacts, source: str = "function",
                     done: str = "measured", model: str = "") -> tuple[str | None, str | None]:
    """The optimizer ``fit`` trains the reader's model with when ``--optimizer`` is not given, and a
    note saying so: the one its source compiled with; compile's own default, ``"rmsprop"``, if it
    compiled with a loss and no optimizer; ``(None, None)`` (inference) if it did not compile.

    Args:
        facts: :class:`snippets.lib.model_source.SourceFacts`; ``source``, a key of :data:`snippets.lib.model_report.SOURCES`.
        done: what the planner does with the step: ``"measured"`` (TensorFlow), ``"compiled by XLA, not run"`` (``--backend jax``).
        model: ``--model`` or ``--model-json`` as given, which leads a refusal (the other refusals name it too).

    Raises:
        ValueError: the source compiled with an optimizer the planner does not know, or none for fit where its
            train_step applies optimizers of its own (an inference plan of a model that only trains; one line).
    """
    compiles = model_report.SOURCES[source][1]
    if facts.optimizer is not None:
        name = facts.optimizer.lower()
        if name not in optimizers.OPTIMIZERS:
            raise ValueError(f"{model + ': ' if model else ''}{compiles} with {facts.optimizer}, which the planner does not know: pass --optimizer "
                             f"(one of {', '.join(optimizers.OPTIMIZERS)})")
        # The accumulators are planned in every method: said with the optimizer, not after "not run" (helper-32).
        accumulated = (f" and gradient_accumulation_steps={facts.accumulation} (an accumulator per trainable "
                       "variable, counted)" if facts.accumulation > 1 else "")
        # Its object, settings and all (global_clipnorm, use_ema...), where a step is measured or compiled.
        # A model.to_json() file is compiled again from its compile_config, its optimizer's settings in it.
        own = "" if done == "planned by rule" else " (that optimizer, its settings kept)"
        wrapped = " in a LossScaleOptimizer" if facts.loss_scaled else ""  # named by its inner optimizer's slots (helper-39)
        note = f"No --optimizer: {compiles} with {name}{wrapped}{accumulated}, which is {done}{own}"
        if facts.ema:
            # The runs and the compile train with the function's own optimizer object (ModelStep.own_optimizer).
            held = "which the figures below leave out: add it" if done == "planned by rule" else "which the figures below hold"
            note += (f"; its use_ema=True keeps a copy of each trainable variable "
                     f"({units.human_bytes(planner.trainable_bytes(facts.weights))}), {held}")
        return name, note + "."
    if facts.loss is not None:
        return "rmsprop", (f"No --optimizer: {compiles} without naming one, so fit trains with compile's default, "
                           f"rmsprop, which is {done}.")
    if facts.step_optimizers:
        # helper-51: a CycleGAN whose own compile set four optimizers got an inference plan, of a model that only trains.
        # helper-71: "compiles none for fit" read as no compile at all, and named no optimizer to pass.
        raise ValueError(f"{model + ': ' if model else ''}its train_step trains with optimizers of its own ({', '.join(facts.step_optimizers)}), and {compiles} "
                         "no optimizer for fit itself: pass --optimizer, the one your compile hands keras.Model.compile, whose slots "
                         "fit builds beside theirs (rmsprop, Keras's default, where it hands none, as keras-io's GAN calls "
                         "super().compile()); the runs measure the step with the optimizers it applies" + (f"; it cannot run yet: {facts.unknown_input}" if facts.unknown_input else ""))
    return None, None


def measured_plan(args, weights: Sequence[planner.Weight], setup: model_report.ModelSetup | None = None) -> model_plan.ModelPlan:
    """Plan ``--model`` by running its step (:func:`snippets.lib.model_plan.plan_model`), or on ``--backend jax`` by
    compiling it, its largest batch for the card's pool (or --device-memory) too (:func:`snippets.lib.jax_step.plan_on_jax`)."""
    if args.loss is not None:
        import keras

        try:  # here, not once the runs have started (keras.losses.get raises on a name it lacks)
            keras.losses.get(args.loss)
        except ValueError:
            raise ValueError(f"--loss {args.loss!r} is not a Keras loss: give a name keras.losses.get knows, "
                             "such as mse or sparse_categorical_crossentropy") from None
    setup = setup or setup_of(args)
    devices = args.devices if args.strategy == "mirrored" else 1
    target = args.model or f"json:{os.path.abspath(args.model_json)}"
    # A loss the function compiled is the one fit uses: the step records --loss only when it is used.
    loss = args.loss if setup.loss_from == "--loss" else None
    if (setup.source_chose_xla and setup.xla == "on" and not setup.no_xla and args.strategy == "mirrored"
            and args.backend != "jax"):
        # Compiled with jit_compile=True, Keras keeps XLA under a strategy too: that step cannot run here.
        raise ValueError(f"{setup.xla_from} sets jit_compile=True, and an XLA step under --strategy "
                         "mirrored cannot be measured on this CPU's emulated devices: pass --xla off if you compile "
                         "it again without XLA" + (", or plan it with --backend jax" if model_report.jax_line(setup) else ""))
    step = ModelStep(target, args.optimizer, args.batch, "off" if setup.no_xla else setup.xla, args.strategy, devices,
                     setup.planned_policy, loss, accumulation=getattr(args, "accumulation", 1),
                     kwargs=tuple(_model_kwargs(args).items()), own_optimizer=getattr(args, "own_optimizer", False))
    if setup.loss is None and not setup.loss_from and (args.backend == "jax" or model_plan.runs_here(weights, step)):
        # Known before any run (read_builder saw whether the function compiled): said now, not once a
        # measuring process has started. A model too large to run here is planned by rule, which
        # needs no loss. A model.to_json() file carries no compile.
        raise ValueError(f"{args.model} returns a model with no compiled loss: compile it with one, or pass --loss "
                         "(e.g. --loss mse)" if args.model else f"{args.model_json} holds no loss (a model saved "
                         "before it was compiled): pass --loss (e.g. --loss mse)")
    facts = getattr(args, "source", None)
    if facts and facts.unknown_input and (args.backend == "jax" or model_plan.runs_here(weights, step)):
        # Before any run (each would refuse it), naming the model as the other refusals do (helper-43).
        raise ValueError(f"{args.model or args.model_json}: {facts.unknown_input}")
    if args.backend == "jax":
        from snippets.lib.jax_step import plan_on_jax

        if setup.tf_step:  # before JAX starts (jax_step.prepare_on_jax refuses it once the model is built)
            raise ValueError(tf_form_refusal(args.model or args.model_json))
        refuse_unjitted_on_jax(facts.no_xla if facts else {},
                               setup.xla_from if setup.xla == "off" and setup.source_chose_xla else None)
        pool = units.parse_size(args.device_memory) if args.device_memory else hardware.jax_pool_bytes(args.card)
        return plan_on_jax(step, progress=model_plan.stderr_progress, weights=weights, capacity=hardware.usable_bytes(pool))
    try:
        return model_plan.plan_model(step, weights, progress=model_plan.stderr_progress,
                                     jax=bool(model_report.jax_line(setup)))
    except RuntimeError as error:  # a run's own exception, in one line (model_step._run_job)
        failure = fixed_batch_failure(str(error), facts.declared_batch if facts else None, model_plan.SMALL_BATCHES)
        raise ValueError(failure or f"a run of the step failed ({error}): the plan runs it at 16 and 32 samples per device, "
                         "and at 256 or your batch where cheap (docs/decide.md, 'Your own model', lists the runs)") from None


def _model_kwargs(args) -> dict:
    if not args.model_kwargs:
        return {}
    try:
        kwargs = json.loads(args.model_kwargs)
    except json.JSONDecodeError as error:
        raise ValueError(f"--model-kwargs is not JSON ({error.msg}): give an object such as '{{\"size\": 224}}'") from None
    if not isinstance(kwargs, dict):
        raise ValueError("--model-kwargs must be a JSON object of keyword arguments, e.g. '{\"size\": 224}'")
    return kwargs


#: The configurations the "Memory budget" chapter's stacked bar plot compares:
#: (label, strategy, variable dtype, policy, xla), all with the seed layer on 4 devices.
#: Defined in the shared layer (snippets.lib.pictures), which the build hook draws from.
FIGURE_CONFIGS = pictures.REMEDY_CONFIGS


def figure_data(optimizer: str | None = "rmsprop", devices: int = 4) -> list[tuple[str, planner.DeviceBudget]]:
    """(label, fullest device's budget) for each of :data:`FIGURE_CONFIGS`: what the plot draws.

    The site's build hook (``hooks/plots.py``) draws exactly this list
    (:func:`snippets.lib.pictures.remedy_rows`), and the chapter prints it,
    so the picture and the text come from one call.
    """
    return pictures.remedy_rows(optimizer, devices)


def benchmark(repeats: int = 5) -> dict:
    """Seconds the planner takes on the full seed model, after imports.

    Imports Keras and TensorFlow first, then times, ``repeats`` times, the
    whole path a reader runs: build the seed model ([131072, 65536] kernel) under ``StatelessScope``, read its weights,
    plan float32 + RMSprop mirrored over 4 devices, rank remedies. The first run includes counting RMSprop's slots (one
    probe build). Nothing is asserted here: the benchmark quotes the figures.

    Returns:
        ``{"first_s": float, "best_s": float, "repeats": int}``.
    """
    import keras  # noqa: F401  (imports are not what is timed)

    from snippets.lib.seed import seed_model

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        weights = model_weights(seed_model)
        report(weights, "rmsprop", "mirrored", 4)
        times.append(time.perf_counter() - start)
    return {"first_s": times[0], "best_s": min(times), "repeats": repeats}


def build_parser() -> argparse.ArgumentParser:
    parser = cli.Parser(
        prog="python -m snippets.decide",
        description="Per-device peak of one training step (weights, gradients, optimizer slots, activations, update temporaries; init and"
        " step peaks) for a model or plain shapes under a placement, with a verdict and, when it does not fit, ranked "
        "remedies. Plain shapes and a model too large to run here are planned by rule (weights, gradients, slots, the "
        "update's temporaries, Dense layers' activations), allocating nothing; a --model (or --model-json) that runs here, "
        "trained under single or mirrored, is measured: its real fit step at 16 and 32 samples per device, and at more "
        "batches where those two cannot settle the line (docs/decide.md, 'Your own model', lists them), in fresh capped "
        "processes, extrapolated in the batch, or on the chord between two runs (with --backend jax: XLA's compiled analysis "
        "of the step, not run; other placements, and a model without an optimizer: by rule). "
        + model_plan.accuracy_line() + " No --backend jax or mixed-precision plan is among those benchmarked. "
        "Not measurable on a CPU: cuDNN/cuBLAS workspaces, NCCL buffers, the GPU layout optimizer's transposes, "
        "XLA:GPU's buffer assignment (docs/performance.md): leave headroom for them.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--shape", type=int, nargs="+", action="append", metavar="DIM",
                        help="a weight's shape; repeat for several weights (default: 131072 65536)")
    source.add_argument("--model", metavar="MODULE:FUNCTION",
                        help="a function that builds the Keras model, e.g. snippets.lib.seed:seed_model")
    source.add_argument("--model-json", metavar="PATH", help="a file holding model.to_json()")
    parser.add_argument("--dtype", default=None, metavar="DTYPE",
                        help=f"variable dtype ({', '.join(units.DTYPE_BYTES)}); default float32 for "
                        "--shape, the model's own dtypes otherwise")
    parser.add_argument("--policy", default=None, choices=sorted(units.POLICIES),
                        help="mixed-precision policy: float32 variables + 16-bit compute copies (float16 or bfloat16)")
    parser.add_argument("--optimizer", default=None, metavar="NAME", type=str.lower,  # helper-74: "Adam" as Keras takes it
                        help=f"training optimizer ({', '.join(optimizers.OPTIMIZERS)}); omitted: inference for "
                        "--shape, and for --model the optimizer its compile set (inference if it never compiled)")
    parser.add_argument("--strategy", default="mirrored", metavar="NAME",
                        help=f"placement: {', '.join(placements.STRATEGIES)} (default mirrored); "
                             "model_parallel and data_parallel are Keras on JAX, planned against JAX's pool")
    parser.add_argument("--initializer", default="glorot_uniform", choices=sorted(planner.INIT_PEAK),
                        metavar="NAME",
                        help=f"one of {', '.join(sorted(planner.INIT_PEAK))}: initializer of --shape weights "
                        "(default glorot_uniform, Keras Dense's; zeros peaks lower)")
    parser.add_argument("--devices", type=int, default=4, metavar="N", help="number of devices (default 4)")
    parser.add_argument("--batch", type=int, default=64, metavar="N", help="global batch size (default 64)")
    parser.add_argument("--xla", default="auto", choices=placements.XLA_CHOICES,
                        help="XLA for the optimizer update (for --model, for its whole fit step): auto (what Keras "
                        "chooses on a GPU host for the placement; for --model, the jit_compile its compile set, if "
                        "it set one), on, off")
    parser.add_argument("--card", default=hardware.DEFAULT_CARD, metavar="NAME",
                        help=f"GPU model, for capacity and reserve: {', '.join(hardware.CARDS)} "
                        f"(default {hardware.DEFAULT_CARD})")
    parser.add_argument("--device-memory", default=None, metavar="SIZE",
                        help="what each device's allocator gets, overriding --card, with its unit: e.g. 30976MiB (a "
                        "logical device with memory_limit, which has no reserve), 30GiB, 32GB, 909680640B")
    parser.add_argument("--model-kwargs", default=None, metavar="JSON",
                        help="--model: keyword arguments for the function, as a JSON object, e.g. '{\"size\": 224}'")
    parser.add_argument("--loss", default=None, metavar="NAME",
                        help="--model: the loss, when the function returns an uncompiled model (e.g. mse, "
                        "sparse_categorical_crossentropy)")
    parser.add_argument("--method", default="auto", choices=("auto", "rule"),
                        help="--model: auto runs the model's real fit step at 16 and 32 samples per device (256 when they "
                        "hardly differ or it is cheap; your batch, or the largest the lines put within room, far past them) "
                        "in fresh capped processes and extrapolates, or interpolates between two runs (single or "
                        "mirrored; the rule where it cannot run here); rule counts weights, gradients, slots, the "
                        "update's temporaries and Dense activations only")
    parser.add_argument("--backend", default="tensorflow", choices=("tensorflow", "jax"),
                        help="--model: the Keras backend you train on. tensorflow (default): measured; jax: XLA's compiled "
                        "memory analysis of the train step (XLA:CPU's figures; the largest batch offered for the capacity and each "
                        "card's, and the accumulating step where the step does not fit, compiled too) on one device, or with --strategy mirrored on each of keras.distribution.DataParallel's --devices")
    parser.add_argument("--top", type=int, default=5, help="how many remedies to list (default 5)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON, every figure in bytes "
                        '(a refusal as {"error": its line}, with exit status 2)')
    return parser


def _callee_names(source, name: str) -> set[str]:
    """The names Python gives a failed call of the reader's ``source`` in a TypeError: the ``--model`` name
    ``name`` ends with, and the object's own ``__qualname__`` (an alias's target, a partial's function, a
    class's ``__init__``). helper-33: an alias and a class lost the --model-kwargs hint."""
    import inspect

    names = {name.rpartition(":")[2]}
    target = source
    while isinstance(target, functools.partial):  # --model-kwargs's, and a module's own partial
        target = target.func
    target = inspect.unwrap(target) if callable(target) else None
    qualname = getattr(target, "__qualname__", None)
    if qualname:
        names |= {qualname, f"{qualname}.__init__"} if isinstance(target, type) else {qualname}
    return names


def _user_model(read: Callable, source, name: str) -> SourceFacts:
    # The reader's model code can raise anything; the CLI reports one line.
    try:
        return read(source)
    except ModelError as error:
        raise ValueError(f"{name}: {error}") from None
    except Exception as error:  # noqa: BLE001
        arguments = ("unexpected keyword argument", "required positional argument", "required keyword-only argument")
        # Python names the function whose call failed ("build() got an unexpected keyword argument"): the
        # hint is for a call of the reader's function, not for one inside it (helper-32).
        called = any(str(error).startswith(f"{callee}(") for callee in _callee_names(source, name))
        takes = isinstance(error, TypeError) and called and any(words in str(error) for words in arguments)
        hint = ("" if not takes else " (y_true and y_pred are a loss's: --model names a function that returns a model)"
                if "'y_true'" in str(error) else " (pass the function's arguments with --model-kwargs '{\"name\": value}')")
        raise ValueError(f"building the model from {name} failed: {type(error).__name__}: {error_line(error)}{hint}") from None


def _read_quietly(read: Callable, source, name: str) -> SourceFacts:
    """:func:`_user_model`, with TensorFlow's start-up lines held back (:func:`snippets.lib.cli.quiet_tensorflow_start`)
    while Keras is imported and the model built: called once the reader's input is found, so that bad input
    is refused without TensorFlow's import. The build is inside too: TensorFlow tries the GPU driver at its
    first device listing (an LSTM or GRU asking whether cuDNN can run it, an op a layer runs), not at import."""
    with cli.quiet_tensorflow_start(f"reading {name}: building it without allocating its weights ..."):
        return _user_model(read, source, name)


def _weights(args) -> list[planner.Weight]:
    if args.model:
        build = import_callable(args.model)
        build = functools.partial(build, **_model_kwargs(args))
        # Read under --policy, as the step is built (model_source.read_builder).
        args.source = _read_quietly(functools.partial(read_builder, policy=args.policy), build, args.model)
        return with_precision(args.source.weights, args.dtype)
    if args.model_json:
        try:
            with open(args.model_json, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as error:
            raise ValueError(f"cannot read --model-json {args.model_json}: {error.strerror}") from None
        args.source = _read_quietly(functools.partial(read_json, policy=args.policy), text, args.model_json)
        return with_precision(args.source.weights, args.dtype)
    shapes = args.shape or [[131072, 65536]]
    return [planner.Weight(units.check_shape(s), args.dtype or "float32", args.initializer) for s in shapes]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.top < 0:
            raise ValueError(f"--top must be 0 or more, not {args.top}")
        card = hardware.card(args.card)
        if args.device_memory is None:
            capacity, reserve = card.allocator_mib * units.MiB, card.reserve_mib * units.MiB
        else:
            capacity, reserve = units.parse_size_with_unit(args.device_memory, "--device-memory"), 0
        splits.check_count(args.devices)
        splits.check_count(args.batch, "--batch")
        optimizers.check_optimizer(args.optimizer)
        placements.check_strategy(args.strategy)
        pool_line = None
        if placements.get(args.strategy).backend == "jax" and args.device_memory is None:
            # Keras on JAX holds JAX's pool, not TensorFlow's allocator (docs/keep-fit.md).
            capacity, reserve = hardware.jax_pool_bytes(card.name), 0  # the CUDA context is outside the pool
            pool_line = (f"Capacity: JAX's pool, {hardware.JAX_DEFAULT_MEM_FRACTION:.0%} of the {card.name}'s "
                         f"{card.total_mib} MiB, since {args.strategy} is Keras on JAX (XLA_CLIENT_MEM_FRACTION "
                         "sets the fraction; --device-memory gives your pool).")
        if args.dtype is not None:
            units.dtype_bytes(args.dtype)
        if args.policy is not None and args.dtype not in (None, units.POLICIES[args.policy][0]):
            # Same refusal as planner.per_device: a policy fixes the variable dtype.
            raise ValueError(f"--policy {args.policy} stores {units.POLICIES[args.policy][0]} variables, "
                             f"not --dtype {args.dtype}; drop --dtype or --policy")
        if args.backend == "jax" and (args.method == "rule" or args.strategy not in ("single", "mirrored")):
            # The rule plans TensorFlow's placements against TensorFlow's allocator: not Keras on JAX.
            raise ValueError("--backend jax is planned by XLA's compiled analysis of a training step, with --method "
                             "auto and --strategy single or mirrored; the rule plans Keras on JAX as --strategy "
                             "model_parallel or data_parallel, without --backend jax (the other placements are "
                             "TensorFlow's)")
        if args.backend == "jax" and args.xla == "off":  # helper-49: the jitted step was planned, unsaid
            raise ValueError("--xla off compiles jit_compile=False, so Keras on JAX runs the step without jit, which "
                             "XLA's compiled analysis (--backend jax) does not describe: drop --xla off, or plan it on "
                             "TensorFlow (without --backend jax)")
        if (args.model or args.model_json) and args.optimizer and args.method == "auto" and args.strategy == "mirrored":
            # A step to measure splits the batch evenly: said before TensorFlow's import, not after it.
            check_step(ModelStep("model:function", args.optimizer, args.batch, args.xla, "mirrored", args.devices))
    except (ValueError, MemoryError, RuntimeError) as error:
        cli.fail(parser, str(error).splitlines()[0], args.json, usage=True)
    try:
        # Refused before the model's module, TensorFlow, or the measuring child's import of it (an audit).
        _model_kwargs(args)
        if args.model_json and args.model_kwargs:
            raise ValueError("--model-kwargs passes keyword arguments to --model's function; a --model-json file "
                             "takes none: drop --model-kwargs, or plan the function with --model")
    except ValueError as error:
        cli.fail(parser, str(error), args.json)
    if ((args.model or args.model_json) and args.method == "auto" and args.strategy in ("single", "mirrored")
            and args.backend != "jax"):
        # Its TensorFlow import overlaps this process's reading the model; unused (a rule plan), it ends at exit.
        fork_server.prestart(SERVER)
    try:
        weights = _weights(args)
        from_source = bool(args.model or args.model_json) and args.optimizer is None
        source = "file" if args.model_json else "function"
        if from_source:
            args.optimizer = source_optimizer(args.source, source, model=args.model or args.model_json)[0]
            # The function's own optimizer runs, with its accumulation (--optimizer replaces both).
            args.accumulation = args.source.accumulation
            args.own_optimizer = args.source.optimizer is not None
        per_position = getattr(getattr(args, "source", None), "per_position", 0)
        bound = uncounted(weights, per_position) > 0
        # What would measure the step instead, among the options this command did not give.
        measure = [option for option, absent in (("an --optimizer", args.optimizer is None),
                                                 ("--method auto", args.method != "auto"),
                                                 ("--strategy single or mirrored", args.strategy not in ("single", "mirrored")))
                   if absent]
        how = rule_how(weights, inference=bool(args.model or args.model_json) and args.optimizer is None,
                       per_position=per_position, measure=measure)
        # A mixed policy the model's function set wins over the command line's, as it does when it runs.
        setup = setup_of(args)
        facts = getattr(args, "source", None)
        batch_note = declared_batch_note(getattr(facts, "declared_batch", None), args.batch,
                                         args.devices if args.strategy == "mirrored" else 1)
        setup = replace(setup, notes=(*setup.notes, *filter(None, (batch_note, frozen_note(weights)))))

        def noted(done: str) -> model_report.ModelSetup:
            """``setup`` with the note on the source's optimizer first, saying what was ``done`` with it."""
            note = source_optimizer(args.source, source, done)[1] if from_source else None
            return replace(setup, notes=(note, *setup.notes)) if note else setup

        rule_policy, plan = setup.planned_policy if setup.planned_policy in units.POLICIES else None, None
        if ((args.model or args.model_json) and args.optimizer and args.method == "auto"
                and args.strategy in ("single", "mirrored")):
            plan = measured_plan(args, weights, setup)
            how = plan.how() if plan.method != "rule" else rule_how(weights, too_large=True, per_position=per_position)
        if plan is not None and plan.method != "rule":
            card_name = None if args.device_memory else card.name
            # Keras on JAX gets JAX's pool (75% of the card by default), not TensorFlow's allocator; either less a chunk.
            capacity = hardware.usable_bytes(hardware.jax_pool_bytes(card.name) if plan.method == "compiled" and not args.device_memory else capacity)
            half = any(map(units.computes_in_16_bits, getattr(facts, "own_policies", None) or {}))
            # A run step that does not fit: its accumulating step is run too, for the accumulation remedy.
            plan = model_accumulation.measure_accumulation(plan, capacity, model_plan.stderr_progress)
            found = ([] if plan.total <= capacity else
                     # One device planned: the fewest replicas that fit, from 2 (helper-69: "over 4" where 2 fit).
                     model_remedies.batch_remedies(plan, capacity, args.devices if args.strategy == "mirrored" else 1,
                                                   planner.trainable_bytes(weights), half, trains_batchnorm(weights)))[:args.top]
            precision = model_remedies.precision_note(plan, capacity, planner.trainable_bytes(weights), half)
            setup = noted("compiled by XLA, not run" if plan.method == "compiled" else "measured")
            setup = replace(setup, notes=(*setup.notes, *filter(None, [model_remedies.float32_note(  # helper-94, helper-98
                plan, capacity, found, getattr(facts, "float32_layers", None) or {}), model_remedies.unused_optimizer_note(plan)])))
            if half and not model_plan.in_16_bits(plan):
                # plan.caveats says it where a run found 16-bit layers; a compiled plan has no such runs.
                setup = replace(setup, notes=(*setup.notes, model_plan.COMPILED_HALF_CAVEAT if plan.method == "compiled"
                                              else model_plan.HALF_CAVEAT))
            if args.json:
                text = json.dumps(model_report.model_json(plan, capacity, card_name, args.model or args.model_json,
                                                          found, setup, precision), indent=1)
            else:
                text = model_report.model_report(plan, capacity, card_name, found, setup, precision)
            print(text)
            return 0
        model = bool(args.model or args.model_json)
        if args.backend == "jax":
            raise ValueError("--backend jax plans a training step compiled by XLA, and this model has no optimizer "
                             "to train with: pass --optimizer (and --loss if it compiles none)" if model else
                             "--backend jax plans a --model's training step: give --model, or drop --backend jax")
        setup = noted("planned by rule")
        accumulation = getattr(args, "accumulation", 1)
        # The XLA mode the measured step would run (the model's own jit_compile, its layers), planned by rule.
        rule_xla = "off" if setup.no_xla else setup.xla
        if args.json:
            budgets = planner.plan(weights, args.optimizer, args.strategy, args.devices, rule_policy, reserve,
                                  batch=args.batch, xla=rule_xla, accumulation=accumulation)
            # The text's remedies, in bytes: a script reading --json gets what a reader reads.
            every = [] if max(b.total for b in budgets) <= capacity else remedies(
                weights, args.optimizer, args.strategy, args.devices, capacity, rule_policy, reserve,
                batch=args.batch, xla=rule_xla, accumulation=accumulation)
            found = every[:args.top]
            text = json.dumps(as_json(budgets, capacity, bound, strategy=args.strategy, optimizer=args.optimizer,
                                      batch=args.batch, xla=placements.resolve_xla(rule_xla, args.strategy),
                                      card=None if args.device_memory else card.name, method="rule", how=how,
                                      pool=None if args.device_memory else
                                      model_report.JAX_POOL if pool_line else model_report.TF_POOL,
                                      remedies=[remedy_json(r, args.devices, capacity) for r in found],
                                      # Where the text says that nothing tried fits, the JSON says it too.
                                      **({"remedies_note": no_remedy_line(args.devices, capacity)}
                                         if not every and max(b.total for b in budgets) > capacity else {}),
                                      **({"model": args.model or args.model_json, "setup": asdict(setup),
                                          "notes": list(setup.notes),
                                          "held_whole": whole_json(weights, args.strategy, args.devices)}
                                         if model else {})),
                              indent=1)
        else:
            inference = model and args.optimizer is None
            # What the model's source chose, as a measured plan says it (an inference plan trains with nothing).
            chosen = model_report.setup_lines(setup, training=not inference) if model else []
            if pool_line:
                chosen = [textwrap.fill(pool_line, 104), *chosen]
            text = report(weights, args.optimizer, args.strategy, args.devices, capacity, rule_policy,
                          reserve, args.top, batch=args.batch, xla=rule_xla, accumulation=accumulation,
                          bound=bound, chosen=chosen)
            said = textwrap.fill(how, max(72, len(text.splitlines()[0])))
            if inference and args.loss:
                said += f"\n--loss {args.loss} is not used: an inference plan has no loss (pass --optimizer to plan training)."
            # An inference plan answers another question than the reader may have asked: said first.
            text = "\n".join([said, "", text] if inference else [text, said])
    except (ValueError, MemoryError, RuntimeError) as error:
        # A model's failure is not about the options: its line alone, without argparse's usage block.
        line = str(error).splitlines()[0]
        cli.fail(parser, line, args.json, usage=not (args.model or args.model_json))
    print(text)
    return 0


if __name__ == "__main__":
    cli.exit_on_signals()
    raise SystemExit(main())
