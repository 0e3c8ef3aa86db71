"""The accumulating step's own memory, measured: what ``gradient_accumulation_steps`` adds to the reader's step.

:func:`snippets.lib.model_remedies.batch_remedies` plans the same effective batch through accumulation as the step at
``B / k`` plus what accumulating adds. One accumulator per trainable variable (field case F22) is the least of it: the
update the optimizer applies on every k-th step sits in a conditional beside the accumulation, and a wide MLP's
accumulating step (16384 wide, 128 MiB of weights, Adam, TensorFlow) peaked 1.5 times its weights above the step
without (no XLA), 2.5 times with XLA. So a measured plan that does not fit runs the step with
``gradient_accumulation_steps=2`` at its first batch, as its own runs were run, and the remedy adds what that peaked above
them (:attr:`snippets.lib.model_plan.ModelPlan.accumulator_extra`). Any ``k`` of 2 or more is the same program
but for a constant (``BaseOptimizer.apply`` in keras/src/optimizers/base_optimizer.py: ``k`` is the modulus of the
``ops.cond`` that applies the update and the accumulated gradients' divisor), so one ``k`` serves all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from snippets.lib.model_plan import PARALLEL, ModelPlan, plan_threads, thread_counts
from snippets.lib.model_step import ModelError, measure_many

#: The micro-batch counts :func:`snippets.lib.model_remedies.batch_remedies` tries, smallest first: every ``k`` up to
#: 64 that divides the per-device batch (helper-54: with powers of 2 alone, a batch of 300 had none that fit, where
#: ``k=5`` did).
ACCUMULATIONS = tuple(range(2, 65))


def accumulations(device_batch: int, group: int = 1) -> list[int]:
    """The ``k`` of :data:`ACCUMULATIONS` that divide ``device_batch`` into micro-batches that are multiples of
    ``group`` (a compiled plan's :func:`snippets.lib.compiled_curve.group`: a triplet loss's micro-batch of 512, from
    3072 over 6, failed to compile), ascending.

    >>> accumulations(300)[:6], accumulations(7), accumulations(3072, 24)
    ([2, 3, 4, 5, 6, 10], [7], [2, 4, 8, 16, 32, 64])
    """
    return [k for k in ACCUMULATIONS if device_batch % k == 0 and (device_batch // k) % group == 0]


def wants_accumulation(plan: ModelPlan, capacity: int) -> bool:
    """Whether ``plan`` (a measured plan that does not fit ``capacity`` bytes per device) has an accumulation remedy to
    measure: the step without accumulation at the batch over some ``k`` of :data:`ACCUMULATIONS` fits, and the step
    does not accumulate already (the builder's own optimizer is given ``k`` too: :func:`snippets.lib.model_step.build`)."""
    b = plan.device_batch
    return (plan.method in ("measured", "interpolated", "extrapolated") and plan.total > capacity
            and plan.step.accumulation == 1
            and any(plan.peak_at(b // k) <= capacity for k in accumulations(b)))


def measure_accumulation(plan: ModelPlan, capacity: int, progress: Callable[[str], None] | None = None,
                         run: Callable | None = None) -> ModelPlan:
    """``plan`` with :attr:`~snippets.lib.model_plan.ModelPlan.accumulator_extra` where :func:`wants_accumulation`:
    the worst peak of the step with ``gradient_accumulation_steps=2`` at the plan's first batch (at each of its thread
    counts, a fresh process each) above the plan's own there, bytes; at least 1 (it was measured). Else ``plan``.

    ``run``: as :func:`snippets.lib.model_plan.plan_model`'s (the tests' fakes). A run that ran out of the host's cap,
    or failed, leaves ``plan`` as it was (the remedy stays the rule's, an estimate, and says so). Runs that applied no
    step of the compiled optimizer (``optimizer_applied`` false: a ``train_step`` of the model's own applies others)
    give ``optimizer_unused``: ``gradient_accumulation_steps`` on that optimizer would accumulate nothing.
    """
    if not wants_accumulation(plan, capacity):
        return plan
    step = replace(plan.step.at_batch(plan.batches[0] * plan.replicas), accumulation=2)
    counts = plan_threads(plan.step)
    if progress:
        progress(f"measuring the step with gradient_accumulation_steps=2 at {plan.batches[0]} samples per device, at "
                 f"{' and '.join(map(str, thread_counts(counts)))} inter-op thread{'s' if counts != (1,) else ''}, "
                 "for the accumulation remedies (what accumulating adds, applied to each k) ...")
    try:
        found = (measure_many([(step, None, t) for t in counts], parallel=PARALLEL, progress=progress) if run is None
                 else [run(step, None, inter_op_threads=t) for t in counts])
    except (ModelError, RuntimeError) as error:  # the builder's optimizer built already; a failed run
        if progress:
            progress(f"the accumulating step did not run ({error}): its remedy stays the rule's")
        return plan
    if not all(r["completed"] for r in found):
        return plan
    if not any(r.get("optimizer_applied", True) for r in found):  # helper-98: a GAN's train_step applies its own two
        return replace(plan, optimizer_unused=True)
    worst = max(r["step_peak"] for r in found)
    return replace(plan, accumulator_extra=max(1, worst - plan.peaks[0]))


def accumulation_how(plan: ModelPlan, trainable_bytes: int) -> tuple[int, str, bool]:
    """What accumulating adds to ``plan``'s step at the batch over ``k``: ``(bytes, how, estimate)``; measured
    (:func:`measure_accumulation`, at least ``trainable_bytes``, one accumulator per variable) or by rule."""
    if plan.accumulator_extra:
        extra = max(plan.accumulator_extra, trainable_bytes)
        # Not its figure in the sentence: a difference of two racing runs' peaks, it moves with every draw (the notebook's
        # CNN: 313 KiB, its weights' twice, in one; tens of MiB in a draw whose step without held a buffer less).
        # helper-73: an accumulating step that peaked lower read as 1 B of accumulators: the rule's are the least counted.
        return (extra, f" + what the accumulating step peaked above the step without, run at {plan.batches[0]} per "
                "device (its accumulators and the update it applies every k-th step; plan.accumulator_extra in --json), "
                "and at least one accumulator per trainable variable", False)
    return (trainable_bytes, " + one accumulator per trainable variable (by rule; the accumulating step can hold more, "
            "which was not measured: its update sits beside the accumulation)", True)
