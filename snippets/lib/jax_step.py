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

import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace

from snippets.lib import compiled_curve, fork_server, hardware, planner, units
from snippets.lib.errors import error_line
from snippets.lib.model_accumulation import accumulations
from snippets.lib.model_batch import batch_of, loss_failure
from snippets.lib.model_plan import CHECKED_PAST, MARGIN, SMALL_BATCHES, ModelPlan, rule_slope, runs_here
from snippets.lib.model_source import tf_form_refusal, tf_form_step
from snippets.lib.model_step import ModelError, ModelStep, build, check_step, compiled_loss, default_cap, fed_x_alone


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
    """Keras on JAX: XLA's buffer assignment of the model's train step at each batch, without running it
    (:func:`prepare_on_jax`, then its function at ``batches``).

    Call in a process whose Keras backend is JAX (:class:`Compiler` starts one). The model is
    built and trained for one step on two samples per replica (which builds its optimizer slots and
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
    found = prepare_on_jax(step)(batches or [step.batch])
    import keras

    keras.distribution.set_distribution(None)
    return found


def prepare_on_jax(step: ModelStep) -> Callable[[Sequence[int]], list[dict]]:
    """:func:`compile_on_jax`'s model built and trained one step, its distribution set: the function that
    compiles its train step at a list of global batches (:func:`compile_on_jax`'s returns and raises)."""
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
    if tf_form_step(model):  # decide refuses it before JAX starts; a caller of this function, here
        raise ModelError(tf_form_refusal(step.model))
    # Two samples per replica (a loss over pairs within the batch needs an even batch: helper-53), else the smallest
    # divisor of the reader's own that trains (a triplet loss, groups of 3: helper-54).
    per_replica, first, refusal = step.batch // replicas, None, None
    for n in [2, *(n for n in (3, 4, 6, 8, 12, 16) if per_replica % n == 0)]:
        x, y = batch_of(model, n * replicas, compiled_loss(model))
        # A 1-tuple, which Keras unpacks as x whatever x's own structure (data_adapter_utils).
        data = (x,) if fed_x_alone(model, step) else (x, y)
        try:
            model.train_on_batch(*data)
            break
        except Exception as error:  # noqa: BLE001 (the first is said if none trains)
            if first is None:
                refusal = loss_failure(step.model, error, y, compiled_loss(model))  # the targets made for it (helper-57)
            first = first or f"{type(error).__name__}: {error_line(error)}"
    else:  # the step compiled later is this one: it fails there too, but unnamed
        if refusal:
            raise ModelError(refusal)
        raise RuntimeError(f"the setup step (train_on_batch on {2 * replicas} samples, which builds the optimizer's "
                           f"slots) failed: {first}")

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

    def compile_at(batches: Sequence[int]) -> list[dict]:
        results = []
        for batch in batches:
            shapes = jax.tree_util.tree_map(lambda a, b=batch: shaped(a, b), data)
            found = device_bytes(step_fn.lower(state, shapes).compile())
            results.append({"batch": batch, **found, "weights_bytes": weights})
        return results

    return compile_at


#: How the JAX child marks its answer on standard output, where the reader's builder may print too.
ANSWER = "compiled: "


class Compiler:
    """A JAX child, ``python -m snippets.lib.jax_step --serve STEP``, that builds ``step``'s model once
    (:func:`prepare_on_jax`) and compiles its train step at each list of global batches it is called with:
    a plan's later compiles (a faster growth's small batches, the largest batch checked, :func:`confirm_largest`)
    cost no new process, import or build. A context manager; the child ends on :meth:`close`.

    Called with ``batches`` (global, samples per step), it returns :func:`compile_on_jax`'s list.

    Raises (on a call):
        ModelError: the model was refused (one line). RuntimeError: the process failed otherwise, or gave
            no answer within ``timeout`` seconds (it is killed).
    """

    def __init__(self, step: ModelStep, timeout: float = 900) -> None:
        check_step(step)
        env = fork_server.child_env(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
        if step.strategy == "mirrored":
            env["XLA_FLAGS"] = " ".join([env.get("XLA_FLAGS", ""),
                                         f"--xla_force_host_platform_device_count={step.devices}"]).strip()
        self.step, self.timeout, self.killed = step, timeout, False
        # stderr to a file: reading stdout line by line cannot stall on a full stderr pipe (fork_server.Server).
        self.errors = tempfile.TemporaryFile("w+")
        self.child = subprocess.Popen([sys.executable, "-m", "snippets.lib.jax_step", "--serve",
                                       json.dumps(step.fields())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self.errors, text=True, env=env)

    def __enter__(self) -> Compiler:
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def _kill(self) -> None:
        self.killed = True
        self.child.kill()

    def __call__(self, batches: Sequence[int], accumulation: int | None = None) -> list[dict]:
        timer = threading.Timer(self.timeout, self._kill)
        timer.start()
        try:
            asked = list(batches) if accumulation is None else {"batches": list(batches), "accumulation": accumulation}
            self.child.stdin.write(json.dumps(asked) + "\n")
            self.child.stdin.flush()
            reply = next((json.loads(line[len(ANSWER):]) for line in self.child.stdout if line.startswith(ANSWER)), None)
        except OSError:  # the child ended while being written to: said below
            reply = None
        finally:
            timer.cancel()
        if isinstance(reply, list):
            return reply
        if isinstance(reply, dict):
            raise ModelError(reply.get("refused") or reply.get("error", "the JAX process failed"))
        self.child.wait()
        if self.killed:
            raise RuntimeError(f"{self.step.label()}: no result in {self.timeout:.0f} s")
        self.errors.seek(0)
        raise RuntimeError((self.errors.read().strip().splitlines() or ["the JAX process failed"])[-1])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.child.stdin.close()
        try:
            self.child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
        self.errors.close()


def plan_on_jax(step: ModelStep, progress: Callable[[str], None] | None = None,
                weights: Sequence[planner.Weight] | None = None, capacity: int | None = None) -> ModelPlan:
    """Plan ``step`` for Keras on JAX (a :class:`~snippets.lib.model_plan.ModelPlan`, method
    ``"compiled"``): XLA's compiled memory analysis of ``fit``'s train step at the reader's batch and
    at half of it (past :data:`~snippets.lib.model_plan.CHECKED_PAST` a quarter too, for
    :func:`faster_growth`, and where that finds faster growth the small batches as well), or at :data:`~snippets.lib.model_plan.SMALL_BATCHES` when that half is smaller (the
    line that gives the largest batch: through 1 sample alone it had no slope, and every card's largest
    batch came out as 1); no step at those batches runs (one ``train_on_batch`` of two samples per replica
    creates the optimizer's slots, :func:`compile_on_jax`).

    The line's slope is at least :func:`~snippets.lib.model_plan.rule_slope` of ``weights`` (None: no
    floor): at small batches XLA can place the activations in buffers the update's temporaries need anyway, so two
    compiled figures of a weight-bound MLP differed by its input and target alone (296 bytes per
    sample, where the same model at twice the batch grew 3.9 KB per sample).

    ``strategy="single"``: one device. ``strategy="mirrored"``: ``keras.distribution.DataParallel``
    over ``step.devices`` emulated devices, each device's partitioned program
    (:func:`compile_on_jax`). ``capacity`` (bytes per device; None: none): the largest batch that fits it is
    compiled too (:func:`confirm_largest`). One process compiles them all (:class:`Compiler`).

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
    # Multiples of the group a loss over pairs or triplets needs, as the reader's batch is (compiled_curve.group).
    g = compiled_curve.group_of(per_device)
    half = compiled_curve.down_to(g, per_device // 2)
    # Past CHECKED_PAST a quarter too: a line through two figures hides a B x B term (helper-34: a contrastive
    # loss compiled at 4096 was right there, but its largest batch, drawn from 2048, came out 2.6 times too large).
    quarter = [compiled_curve.down_to(g, per_device // 4)] if per_device > CHECKED_PAST else []
    batches = sorted({per_device, *([half] if half >= SMALL_BATCHES[0] else SMALL_BATCHES), *quarter})
    listed = ", ".join(map(str, batches[:-1])) + f" and {batches[-1]}" if len(batches) > 1 else str(batches[0])
    say = progress or (lambda line: None)
    say(f"compiling {step.model}'s train step on JAX at {listed} samples per device ...")
    with Compiler(step) as compile_at:
        results = compile_at([b * replicas for b in batches])
        compiled = replace(step, xla="on")
        faster = faster_growth(batches, [r["total"] for r in results]) if quarter else ()
        if faster:  # past CHECKED_PAST, so the quarter is above SMALL_BATCHES
            # Below the quarter no line through these figures holds (helper-39: "no batch fits" a card, at 4 GiB for
            # 16384): the small batches' own figures.
            say(f"the peak grows faster than linearly: compiling {' and '.join(map(str, SMALL_BATCHES))} per device too ...")
            results = compile_at([b * replicas for b in SMALL_BATCHES]) + results
            batches = [*SMALL_BATCHES, *batches]
        plan = ModelPlan(compiled, "compiled", tuple(batches), tuple(r["total"] for r in results),
                         weights_bytes=results[0]["weights_bytes"],
                         rule_slope=rule_slope(weights, compiled) if weights is not None else 0.0, faster=faster)
        if capacity is not None:
            plan = confirm_accumulation(confirm_largest(plan, capacity, compile_at, say), capacity, compile_at, say)
            plan = confirm_cards(plan, compile_at, say)
        return plan


def confirm_cards(plan: ModelPlan, compile_at: Callable[[Sequence[int]], list[dict]],
                  say: Callable[[str], None], rounds: int = 3) -> ModelPlan:
    """``plan`` with :attr:`~snippets.lib.model_plan.ModelPlan.checked`: the largest batch of each card of
    :data:`snippets.lib.model_report.BATCH_CARDS`, read off the compiled figures, compiled there; then again, the
    batches read off the figures with those in them, and past the largest compiled batch where that is a card's offer
    and fits its pool with room (:func:`snippets.lib.compiled_curve.past_top`), up to ``rounds`` times. A card's batch
    that is still not compiled is named in the report. A compile that fails is kept in ``confirm_failed`` (no card is
    offered past the compiled batches then).

    helper-54, -55: read off the line, a card's batch for a loss over pairs compiled to 1.18 and 2.63 times the card's
    pool, its checks at the reader's capacity almost linear. helper-66: an A100-80GB's 2624 per device, the largest
    compiled, came to 40.88 of 60 GiB and was offered where 3856 fit.
    """
    from snippets.lib.model_report import BATCH_CARDS

    for _ in range(rounds):
        pools = [hardware.usable_bytes(hardware.jax_pool_bytes(name)) for name in BATCH_CARDS]
        wanted = sorted(({plan.largest_batch(pool) // plan.replicas for pool in pools}
                         | {compiled_curve.past_top(plan, pool) for pool in pools}) - set(plan.compiled_points) - {0, None})
        if not wanted:
            break
        say(f"compiling {', '.join(map(str, wanted))} per device, the cards' largest batches, to check them ...")
        try:
            found = {b: r["total"] for b, r in zip(wanted, compile_at([b * plan.replicas for b in wanted]))}
        except (ModelError, RuntimeError) as error:
            say(f"the cards' batches did not compile ({error_line(error)}): none is offered past the compiled batches")
            return with_failure(plan, f"{', '.join(map(str, wanted))} per device: {error_line(error)}")
        plan = replace(plan, checked=tuple(sorted({**dict(plan.checked), **found}.items())))
    return plan


def with_failure(plan: ModelPlan, failed: str) -> ModelPlan:
    """``plan`` with ``failed`` (batches and their error, one line) added to
    :attr:`~snippets.lib.model_plan.ModelPlan.confirm_failed`, after any failure before it."""
    return replace(plan, confirm_failed="; ".join(filter(None, [plan.confirm_failed, failed])))


#: Compiles at most that :func:`confirm_largest` adds to a plan.
CONFIRMS = 5


def confirm_largest(plan: ModelPlan, capacity: int, compile_at: Callable[[Sequence[int]], list[dict]],
                    say: Callable[[str], None]) -> ModelPlan:
    """``plan`` (compiled) with :attr:`~snippets.lib.model_plan.ModelPlan.confirmed`: the largest batch its line puts
    in ``capacity`` bytes per device (``L``), compiled there; while no compiled batch up to ``L`` fits, or the largest
    that does lies more than a 32nd below the smallest that does not, a batch between them, up to
    :data:`CONFIRMS` compiles, a failed one included: on the chord between them, each side weighted as regula falsi's
    Illinois variant does (a figure that jumps: the plain chord would creep to the jump a batch at a time), or their
    geometric mean where they lie more than 4 times apart and the figure above is more than twice ``capacity``.
    Between the largest that fits (else 0 samples, at the weights) and the smallest above it that does not. Where the
    largest compiled fits with more than a 32nd of ``capacity`` to spare, past it, on the line through it and the
    compiled batch below it (helper-66: the line's 1088 came to 17.08 of 23.81 GiB, and 1520 fit). A batch that fails to compile is said in
    :attr:`~snippets.lib.model_plan.ModelPlan.confirm_failed`; after the first, only multiples of 24 are asked. Then
    :meth:`~snippets.lib.model_plan.ModelPlan.largest_batch` offers, for ``capacity``, the largest compiled batch up
    to the largest checked that fits: never a batch read off the line.

    helper-51: XLA:CPU's figure for a seq2seq Transformer jumped from 1754 MiB at 200 per device to 4110 at 245;
    "batch 248", read off the line through 256 and 512, was offered for 4 GiB, and compiled at 248 came to 4157 MiB.

    ``compile_at``: global batches to :func:`compile_on_jax`'s figures (a :class:`Compiler`); ``say``: progress.
    """
    replicas, found, h = plan.replicas, [], units.human_bytes
    # Past the last batch compiled though the figures grew less than the rule's floor (floor_only): compiled, it is known.
    line = want = plan.largest_batch(capacity, past_floor=True) // replicas
    # The reader's group (compiled_curve.group), and 24 once a batch failed to compile: a loss over pairs wants an even
    # batch (helper-53's, at 1023), over triplets a multiple of 3 (helper-54's).
    multiple = compiled_curve.group(plan)
    told = f"compiling {want} per device, the largest batch the line puts in {h(capacity)}, to check it ..."
    for _ in range(CONFIRMS):  # a compile that fails counts too
        if not want or want in plan.compiled_points:
            break
        say(told)
        try:
            found.append((want, compile_at([want * replicas])[0]["total"]))
        except (ModelError, RuntimeError) as error:
            # Said in how() whether or not the search goes on (helper-54: a retry that compiled left no trace).
            plan = replace(with_failure(plan, f"{want} per device: {error_line(error)}"), confirmed_for=capacity)
            if multiple < 24 and want > 24 and want % 24:
                told = (f"{want} per device did not compile ({error_line(error)}): compiling {want // 24 * 24}, a "
                        "multiple of 24, and only such batches after it ...")
                multiple, want = 24, want // 24 * 24
                continue
            say(f"{want} per device did not compile ({error_line(error)}): the largest compiled batch that fits "
                f"{h(capacity)} is offered for it")
            return plan
        plan = replace(plan, confirmed=tuple(sorted(found)), confirmed_for=capacity)
        points = {b: p for b, p in plan.compiled_points.items() if b <= line}
        low, low_peak = max(((b, p) for b, p in points.items() if p <= capacity), default=(0, plan.weights_bytes))
        high, high_peak = min(((b, p) for b, p in points.items() if b > low and p > capacity), default=(0, 0))
        below = [b for b in plan.compiled_points if b < low]
        if not high and low == max(plan.compiled_points) and below and capacity - low_peak > capacity * compiled_curve.ROOM:
            # The largest compiled fits with room: XLA's figure grew slower than the line there (helper-66: a seq2seq
            # Transformer's 1088 per device came to 17.08 of 23.81 GiB, and 1520 fit). Past it, on the line through it
            # and the compiled batch below it; a batch over comes back between them as above.
            slope = (low_peak - plan.compiled_points[max(below)]) / (low - max(below))
            line = want = (low + int((capacity - low_peak) / slope)) // multiple * multiple if slope > 0 else low
            told = (f"{low} per device came to {units.against(low_peak, capacity)}, which fits with room: compiling "
                    f"{want}, on the line through it and {max(below)} ...")
            continue
        if not high or (low and high - low <= high // 32):
            break
        # The chord (a smooth figure: one more compile), as regula falsi's Illinois variant draws it: each compile that
        # lands on the same side as the one before halves the other side's weight, so a figure that jumps, to which the
        # plain chord would creep a batch at a time, is closed in on too (helper-53: halving from the second compile,
        # its offers were 10-12% short of the largest batch that fit).
        overs = [p > capacity for _, p in found]
        streak = next((i for i, over in enumerate(reversed(overs)) if over != overs[-1]), len(overs)) - 1
        under, above = (capacity - low_peak) * 0.5 ** (streak * overs[-1]), (high_peak - capacity) * 0.5 ** (
            streak * (not overs[-1]))
        want = max(low + 1, low + int(under * (high - low) / (under + above)))
        # Far apart and far over, the geometric mean: from a line's batch far over (helper-54: 56 million per device came
        # to 11497 TiB), the chord crept up from the largest batch that fit, doubling at best, and offered 2528 of ~100k.
        # Just over, the chord: from a V100-32GB's batch 0.7% over, the means from 64 per device spent every compile and
        # offered 14688 where about 31700 fit (helper-61).
        far = low and high > 4 * low and high_peak > 2 * capacity
        want = min(high - 1, math.isqrt(low * high) if far else want) // multiple * multiple
        if want <= low:
            break
        b, p = found[-1]
        told = (f"{b} per device came to {units.against(p, capacity)}, {'over it' if p > capacity else 'which fits'}: "
                f"compiling {want} ...")
    return plan


def confirm_accumulation(plan: ModelPlan, capacity: int, compile_at: Callable[..., list[dict]],
                         say: Callable[[str], None]) -> ModelPlan:
    """``plan`` (compiled, not fitting ``capacity`` bytes per device) with
    :attr:`~snippets.lib.model_plan.ModelPlan.accumulated`: the step with ``gradient_accumulation_steps=k`` compiled at
    the reader's per-device batch over ``k``, for each ``k`` up to 64 dividing it whose step without accumulation
    fits (:func:`snippets.lib.model_accumulation.accumulations`), smallest first, until one fits, at most
    :data:`CONFIRMS`.

    Compiled, not counted: Keras on JAX's accumulating step held about 2.2 times the weights more than the step at the
    same batch without (helper-53: a wide MLP at 16384 per device, 986 MiB where one accumulator per variable put 725
    for an 800 MiB pool). One build serves every ``k``: ``k`` is a constant of the program (the ``ops.cond`` that
    applies the update on every k-th step, and the divisor of the accumulated gradients: ``BaseOptimizer.apply`` in
    keras/src/optimizers/base_optimizer.py), so its buffers are the same for any ``k`` of 2 or more. Not for a step
    that accumulates already (its accumulators are in its figures). The builder's own optimizer is given ``k`` too
    (:func:`snippets.lib.model_step.build`).

    ``compile_at``: a :class:`Compiler`; ``say``: progress.
    """
    b, step = plan.device_batch, plan.step
    if plan.step_peak <= capacity or step.accumulation > 1:
        return plan
    found, ks = [], [k for k in accumulations(b, compiled_curve.group(plan)) if plan.peak_at(b // k) <= capacity]
    for k in ks[:CONFIRMS]:
        say(f"compiling the step with gradient_accumulation_steps={k} at {b // k} per device ...")
        try:
            found.append((k, compile_at([b // k * plan.replicas], accumulation=ks[0])[0]["total"]))
        except (ModelError, RuntimeError) as error:  # the remedy stays the rule's estimate, and says so
            say(f"gradient_accumulation_steps={k} did not compile ({error_line(error)})")
            break
        if found[-1][1] <= capacity:
            break
    return replace(plan, accumulated=tuple(found))


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


def answer(error: Exception) -> dict:
    """The child's line for ``error``: ``{"refused": ...}`` for a :class:`ModelError`, else ``{"error": ...}``."""
    if isinstance(error, ModelError):
        return {"refused": str(error)}
    return {"error": f"{type(error).__name__}: {error_line(error)}{half_on_cpu(str(error))}"}


def serve(fields: dict) -> None:
    """:class:`Compiler`'s child: build the model of ``fields`` (:class:`ModelStep`'s) once, then answer each line
    of global batches on stdin with :data:`ANSWER` and their figures (or the error, which a failed build gives every
    line), until stdin ends."""
    step = check_step(ModelStep(**fields))
    try:
        compile_at, failed = prepare_on_jax(step), None
    except Exception as error:  # noqa: BLE001 (one line for the parent)
        compile_at, failed = None, answer(error)
    built = step.accumulation
    for line in sys.stdin:
        try:
            asked = json.loads(line)
            # {"batches": [...], "accumulation": k}: the step with gradient_accumulation_steps=k, built in place of the
            # one before (confirm_accumulation), so the child never holds two models' state.
            if isinstance(asked, dict) and not failed and asked["accumulation"] != built:
                compile_at = None
                compile_at, built = prepare_on_jax(replace(step, accumulation=asked["accumulation"])), asked["accumulation"]
            reply = failed or compile_at(asked["batches"] if isinstance(asked, dict) else asked)
        except Exception as error:  # noqa: BLE001
            reply = answer(error)
        print(ANSWER + json.dumps(reply), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m snippets.lib.jax_step '[step, batches]'``: :func:`compile_on_jax`'s result as JSON,
    or ``{"refused": ...}`` / ``{"error": ...}`` in one line; ``--serve STEP``: :func:`serve`."""
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) == 2 and args[0] == "--serve":
        serve(json.loads(args[1]))
        os._exit(0)  # JAX's threads need no clean exit
    if len(args) != 1:
        print("usage: python -m snippets.lib.jax_step '[ModelStep fields as JSON, [batches]]'", file=sys.stderr)
        return 2
    try:
        fields, batches = json.loads(args[0])
        reply = compile_on_jax(check_step(ModelStep(**fields)), batches)
    except Exception as error:  # noqa: BLE001 (one line for the parent)
        reply = answer(error)
    print(json.dumps(reply), flush=True)
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
