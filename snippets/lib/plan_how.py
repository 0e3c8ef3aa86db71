"""How a plan of the reader's model was obtained, in one sentence: :meth:`snippets.lib.model_plan.ModelPlan.how`.

Each method (:attr:`snippets.lib.model_plan.ModelPlan.method`) says what ran or was compiled, at which
per-device batches and inter-op threads, how the line was drawn and which margins it carries, and why a
run at :data:`snippets.lib.model_plan.WIDE_BATCH` was added or left out: the text output, the JSON's
``how`` and the pages print it.
"""

from __future__ import annotations

from snippets.lib import model_plan, units
from snippets.lib.model_step import steps_measured


def plan_how(plan: model_plan.ModelPlan) -> str:
    """One sentence: how ``plan``'s figure was obtained (a ``rule`` plan: its own note)."""
    where = (f"under MirroredStrategy ({plan.device_batch} samples per replica)"
             if plan.step.strategy == "mirrored" else "on one device")
    xla = "XLA:CPU-compiled step" if plan.step.jit else "step without XLA"
    if plan.method == "rule":
        return plan.rule_note
    listed = " and ".join(filter(None, [", ".join(map(str, plan.batches[:-1])), str(plan.batches[-1])]))
    b1, b2 = model_plan.SMALL_BATCHES
    if plan.method == "compiled":
        devices = (f"each device of keras.distribution.DataParallel over {plan.replicas}, every variable whole "
                   "on each, its partitioned program with the gradients' all-reduce"
                   if plan.replicas > 1 else "one device")
        slope = (f"other batches on the line through those of {b1} or more, at least the "
                 f"{units.human_bytes(round(plan.rule_slope))} per sample the rule counts; "
                 if plan.rule_slope and len(plan.batches) > 1 else "")
        return (f"Compiled, not run: XLA's buffer assignment of Keras on JAX's train step ({devices}; the "
                f"whole step jit-compiled as fit does, its state donated) at batch "
                f"{listed} per device, its inputs given as shapes (no data); "
                f"{slope}XLA:CPU's figures (XLA:GPU assigns its own buffers).")
    cheap = plan.wide_why == "cheap"
    why = (f"the line through the floors at {b1} and {b2} put it at {units.human_bytes(model_plan.WIDE_PEAK)} or less"
           if cheap else f"{b1} and {b2} differed by under {model_plan.FLAT_GROWTH:.0%}")
    hidden = ", and fixed buffers can hide part of the activations at small batches" if cheap else \
        " (fixed buffers hid the activations)"
    wide = (f" The run at {plan.batches[-1]} was added: {why}{hidden}." if plan.batches[-1] > b2 else
            f" A run at {model_plan.WIDE_BATCH} was tried ({why}) and ran out of this host's cap: the line is the two "
            "small runs', and may be too shallow." if plan.wide_ran_out else "") + (
        f" The run at {plan.short_of} per device ran out of this host's cap: the lines, and the largest batch, "
        "stop below it." if plan.short_of else "")
    order = f"+{model_plan.MARGIN:.0%}"
    counts = model_plan.thread_counts(plan.threads or model_plan.plan_threads(plan.step))
    threads = f"{' and '.join(map(str, counts))} inter-op thread{'s' if counts != [1] else ''}"
    fewest, most = plan.steps_run or (steps_measured(plan.step),) * 2
    steps = f"{fewest} steps" if fewest == most else f"{fewest} to {most} steps"
    worse = f"the worst of {threads} and of {steps}" if len(counts) > 1 else f"{threads}, the worst of {steps}"
    lines = "a line in the batch" + (" for each thread count, the highest at this batch" if len(counts) > 1 else "")
    floor = (f", at least the {units.human_bytes(round(plan.rule_slope))} per sample the rule counts"
             if plan.rule_slope else "")
    # The margin applies past the widest run only (peak_lines): a batch between runs gets none.
    beyond = (f", +{model_plan.EXTRAPOLATION:.0%} on the part beyond batch {plan.batches[-1]}"
              if not plan.step.jit and plan.device_batch > plan.batches[-1] else "")
    if plan.method == "measured":
        return (f"Measured: real fit steps ({xla}) {where}, run at {listed} per device, capped CPU "
                f"allocator, a fresh process per run, {worse}; "
                f"{order} for other orders of the step's ops.{wide}")
    between = "upper-quartile steps" if plan.uppers else "worst peaks"
    return (f"Extrapolated: real fit steps ({xla}) {where} measured at batches {listed} per device "
            f"(capped CPU allocator, a fresh process each, {threads}, the worst of {steps}), "
            f"{lines}: "
            f"{units.human_bytes(round(plan.per_sample))} per sample (between the runs' {between}, at most "
            f"{model_plan.SLOPE_CAP:g}x the slope between their lower-quartile steps{floor})"
            f"{beyond}; "
            f"{order} for other orders of the step's ops.{wide}")
