"""Keras on JAX: the reader's train step compiled by XLA, its buffers read without running it.

:mod:`snippets.lib.model_step` measures TensorFlow's executor by running steps;
on JAX, ``fit`` compiles the whole step with ``jax.jit``, so XLA's own buffer
assignment of that program (``jax.stages.Compiled.memory_analysis``) is the
step's memory, read at any batch given as shapes only. Each plan runs in a new
Python process on Keras's JAX backend (``KERAS_BACKEND`` is read once, at the
first ``import keras``), with as many emulated CPU devices as the step has
replicas (``XLA_FLAGS=--xla_force_host_platform_device_count``). XLA:CPU's
figures, not XLA:GPU's.

Run by :func:`plan_on_jax`; by hand::

    KERAS_BACKEND=jax python -m snippets.lib.jax_step '[{"model": "tests.plan_builders:tiny", "loss": "mse"}, [64]]'
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace

from snippets.lib import fork_server, planner, units
from snippets.lib.errors import error_line
from snippets.lib.model_batch import batch_of
from snippets.lib.model_plan import CHECKED_PAST, MARGIN, SMALL_BATCHES, ModelPlan, rule_slope, runs_here
from snippets.lib.model_step import (ModelError, ModelStep, build, check_step, compiled_loss, default_cap, fed_x_alone,
                                     own_train_step)


def device_bytes(compiled) -> dict[str, int]:
    """Bytes XLA's compiled memory analysis gives one device, and their sum.

    ``"arguments"`` (the state and the batch), ``"outputs"``, ``"aliased"``
    (outputs written into donated arguments' buffers: the new state),
    ``"temporaries"`` (the one buffer XLA's buffer assignment packs every
    temporary into: the gradient, an all-gathered kernel...), and
    ``"total"`` = arguments + outputs - aliased + temporaries: what the
    device holds while the step runs. Not ``peak_memory_in_bytes``, which
    on XLA:CPU (JAX 0.10.2) leaves the temporaries out.
    """
    analysis = compiled.memory_analysis()
    found = {"arguments": analysis.argument_size_in_bytes, "outputs": analysis.output_size_in_bytes,
             "aliased": analysis.alias_size_in_bytes, "temporaries": analysis.temp_size_in_bytes}
    found = {key: int(value) for key, value in found.items()}
    found["total"] = found["arguments"] + found["outputs"] - found["aliased"] + found["temporaries"]
    return found


def compile_on_jax(step: ModelStep, batches: Sequence[int] = ()) -> list[dict]:
    """Keras on JAX: XLA's buffer assignment of the model's train step at each batch, without running it.

    Call in a process whose Keras backend is JAX (:func:`compiled_fresh` starts one). The model is
    built and trained for one step on one sample per replica (which builds its optimizer slots and
    metrics), then Keras's own ``train_step`` is lowered and compiled as ``fit`` compiles it
    (``make_train_function`` in keras/src/backend/jax/trainer.py: ``jax.jit(train_step,
    donate_argnums=0)``, so the new state is written into the old one's buffers, and under a
    distribution ``out_shardings=(None, state shardings)``) for the whole batch given as shapes
    only (``jax.ShapeDtypeStruct``): no batch is allocated. ``strategy="single"``: one device.
    ``strategy="mirrored"``: ``keras.distribution.DataParallel`` over ``step.devices`` devices
    (JAX's counterpart of ``MirroredStrategy``: every variable whole on each device, the batch
    split), the program XLA partitions for each device, gradient all-reduce included.

    Returns:
        one dict per global batch of ``batches`` (default ``[step.batch]``): ``{"batch", "arguments",
        "outputs", "aliased", "temporaries", "total", "weights_bytes"}``, bytes per device;
        ``total`` = arguments + outputs - aliased + temporaries (``peak_memory_in_bytes`` leaves the
        temporaries out on XLA:CPU, JAX 0.10.2). XLA:CPU's figures, not XLA:GPU's.

    Raises:
        ModelError: as :func:`build`, when Keras's backend is not JAX, or when the process has fewer
            JAX devices than ``step.devices``.
    """
    import jax
    import keras

    if keras.backend.backend() != "jax":
        raise ModelError("compile_on_jax needs KERAS_BACKEND=jax")
    replicas = step.devices if step.strategy == "mirrored" else 1
    distribution = None
    if replicas > 1:
        if len(jax.devices()) < replicas:
            raise ModelError(f"{replicas} JAX devices wanted, {len(jax.devices())} found: set "
                             f"XLA_FLAGS=--xla_force_host_platform_device_count={replicas} before JAX starts")
        distribution = keras.distribution.DataParallel(devices=jax.devices()[:replicas])
        keras.distribution.set_distribution(distribution)
    model = build(replace(step, xla="on"))
    if own_train_step(model) and len(inspect.signature(model.train_step).parameters) < 2:
        # keras-io's "Customizing what happens in fit() with JAX": Keras on JAX calls train_step(state, data).
        raise ModelError(f"{step.model}'s own train_step(data) is TensorFlow's form; Keras on JAX calls "
                         "train_step(state, data), a stateless step: plan it without --backend jax")
    x, y = batch_of(model, replicas, compiled_loss(model))
    # A 1-tuple, which Keras unpacks as x whatever x's own structure (data_adapter_utils).
    data = (x,) if fed_x_alone(model, step) else (x, y)
    model.train_on_batch(*data)

    groups = (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
              model.metrics_variables)
    state = tuple([v.value for v in group] for group in groups)
    out_shardings = None if distribution is None else (None, tuple([a.sharding for a in group] for group in state))
    step_fn = jax.jit(model.train_step, donate_argnums=0, out_shardings=out_shardings)
    weights = sum(units.tensor_bytes(tuple(w.shape), str(w.dtype)) for w in model.weights)

    def shaped(array, batch):
        shape = (batch, *array.shape[1:])
        sharding = None if distribution is None else distribution.get_data_layout(shape).backend_layout
        return jax.ShapeDtypeStruct(shape, array.dtype, sharding=sharding)

    results = []
    for batch in batches or [step.batch]:
        shapes = jax.tree_util.tree_map(lambda a, b=batch: shaped(a, b), data)
        found = device_bytes(step_fn.lower(state, shapes).compile())
        results.append({"batch": batch, **found, "weights_bytes": weights})
    if distribution is not None:
        keras.distribution.set_distribution(None)
    return results


def compiled_fresh(step: ModelStep, batches: Sequence[int] = (), timeout: float = 900) -> list[dict]:
    """:func:`compile_on_jax` in a new Python process on Keras's JAX backend (CPU), with as many
    emulated devices as ``step`` has replicas.

    Raises:
        ModelError: the model was refused (one line). RuntimeError: the process failed otherwise.
    """
    check_step(step)
    env = fork_server.child_env(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    if step.strategy == "mirrored":
        env["XLA_FLAGS"] = " ".join([env.get("XLA_FLAGS", ""),
                                     f"--xla_force_host_platform_device_count={step.devices}"]).strip()
    try:
        done = subprocess.run([sys.executable, "-m", "snippets.lib.jax_step", json.dumps([step.fields(), list(batches)])],
                              capture_output=True, text=True, check=False, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{step.label()}: no result in {timeout:.0f} s") from None
    lines = done.stdout.strip().splitlines()
    if not (lines and lines[-1][:1] in "[{"):
        raise RuntimeError((done.stderr.strip().splitlines() or ["the JAX process failed"])[-1])
    reply = json.loads(lines[-1])
    if isinstance(reply, dict):
        raise ModelError(reply.get("refused") or reply.get("error", "the JAX process failed"))
    return reply


def plan_on_jax(step: ModelStep, progress: Callable[[str], None] | None = None,
                weights: Sequence[planner.Weight] | None = None) -> ModelPlan:
    """Plan ``step`` for Keras on JAX (a :class:`~snippets.lib.model_plan.ModelPlan`, method
    ``"compiled"``): XLA's compiled memory analysis of ``fit``'s train step at the reader's batch and
    at half of it (past :data:`~snippets.lib.model_plan.CHECKED_PAST` a quarter too, for
    :func:`faster_growth`, and where that finds faster growth the small batches as well), or at :data:`~snippets.lib.model_plan.SMALL_BATCHES` when that half is smaller (the
    line that gives the largest batch: through 1 sample alone it had no slope, and every card's largest
    batch came out as 1); no step at those batches runs (one ``train_on_batch`` of a sample per replica
    creates the optimizer's slots, :func:`compile_on_jax`).

    The line's slope is at least :func:`~snippets.lib.model_plan.rule_slope` of ``weights`` (None: no
    floor): at small batches XLA can place the activations in buffers the update's temporaries need anyway, so two
    compiled figures of a weight-bound MLP differed by its input and target alone (296 bytes per
    sample, where the same model at twice the batch grew 3.9 KB per sample).

    ``strategy="single"``: one device. ``strategy="mirrored"``: ``keras.distribution.DataParallel``
    over ``step.devices`` emulated devices, each device's partitioned program
    (:func:`compile_on_jax`).

    Raises:
        ModelError: the model was refused, or its weights (``weights``) are too large to build here: the
            emulated devices are this host's memory, each holding every variable, its gradient and slots.
    """
    check_step(step)
    replicas = step.devices if step.strategy == "mirrored" else 1
    if weights is not None and not runs_here(weights, step, default_cap(step) // replicas):
        copies = f"a copy on each of {replicas} emulated devices" if replicas > 1 else "one copy"
        raise ModelError(f"--backend jax builds the model and its optimizer on this host to compile the step "
                         f"({copies}), more than this host can spare: plan it by rule with --strategy "
                         "data_parallel (Keras on JAX's DataParallel), without --backend jax")
    per_device = step.batch // replicas
    half = per_device // 2
    # Past CHECKED_PAST a quarter too: a line through two figures hides a B x B term (helper-34: a contrastive
    # loss compiled at 4096 was right there, but its largest batch, drawn from 2048, came out 2.6 times too large).
    quarter = [per_device // 4] if per_device > CHECKED_PAST else []
    batches = sorted({per_device, *([half] if half >= SMALL_BATCHES[0] else SMALL_BATCHES), *quarter})
    listed = ", ".join(map(str, batches[:-1])) + f" and {batches[-1]}" if len(batches) > 1 else str(batches[0])
    say = progress or (lambda line: None)
    say(f"compiling {step.model}'s train step on JAX at {listed} samples per device ...")
    results = compiled_fresh(step, [b * replicas for b in batches])
    compiled = replace(step, xla="on")
    faster = faster_growth(batches, [r["total"] for r in results]) if quarter else ()
    if faster:  # past CHECKED_PAST, so the quarter is above SMALL_BATCHES
        # Below the quarter no line through these figures holds (helper-39: "no batch fits" a card, at 4 GiB for 16384):
        # the small batches' own figures.
        say(f"the peak grows faster than linearly: compiling {' and '.join(map(str, SMALL_BATCHES))} per device too ...")
        results = compiled_fresh(step, [b * replicas for b in SMALL_BATCHES]) + results
        batches = [*SMALL_BATCHES, *batches]
    return ModelPlan(compiled, "compiled", tuple(batches), tuple(r["total"] for r in results),
                     weights_bytes=results[0]["weights_bytes"],
                     rule_slope=rule_slope(weights, compiled) if weights is not None else 0.0, faster=faster)


def faster_growth(batches: Sequence[int], peaks: Sequence[int]) -> tuple[int, ...]:
    """``(batch, peak, line)`` (:attr:`snippets.lib.model_plan.ModelPlan.faster`) if the last of ``peaks`` (bytes, one per
    per-device batch of ``batches``, ascending) lies above the line through the two before it by more than
    :data:`snippets.lib.model_plan.MARGIN`, else ``()``.

    >>> faster_growth((1024, 2048, 4096), (40, 72, 200))  # 136 on the line
    (4096, 200, 136)
    >>> faster_growth((1024, 2048, 4096), (40, 72, 140))
    ()
    """
    (b0, b1, b2), (p0, p1, p2) = batches[-3:], peaks[-3:]
    line = p1 + (p1 - p0) / (b1 - b0) * (b2 - b1)
    return (b2, p2, round(line)) if p2 > line * (1 + MARGIN) else ()


def half_on_cpu(message: str) -> str:
    """What to do where XLA:CPU has no 16-bit kernel for an op a GPU's has (helper-51: a mixed_float16 attention model
    compiled for ``--backend jax`` stopped at "The precision 'F16_F16_F32' is not supported by dot_general on CPU"):
    a clause for the error's line, "" for any other error.

    >>> half_on_cpu("The precision 'F16_F16_F32' is not supported by dot_general on CPU")[:60]
    '; XLA:CPU has no kernel for this 16-bit op, which a GPU has:'
    """
    if "is not supported by" not in message or "on CPU" not in message:
        return ""
    return ("; XLA:CPU has no kernel for this 16-bit op, which a GPU has: plan it without --policy (float32, its "
            "activations an upper bound), with mixed_bfloat16, or on the TensorFlow backend (without --backend jax)")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m snippets.lib.jax_step '[step, batches]'``: :func:`compile_on_jax`'s result as JSON,
    or ``{"refused": ...}`` / ``{"error": ...}`` in one line."""
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 1:
        print("usage: python -m snippets.lib.jax_step '[ModelStep fields as JSON, [batches]]'", file=sys.stderr)
        return 2
    try:
        fields, batches = json.loads(args[0])
        reply = compile_on_jax(check_step(ModelStep(**fields)), batches)
    except ModelError as error:
        reply = {"refused": str(error)}
    except Exception as error:  # noqa: BLE001 (one line for the parent)
        reply = {"error": f"{type(error).__name__}: {error_line(error)}{half_on_cpu(str(error))}"}
    print(json.dumps(reply), flush=True)
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
