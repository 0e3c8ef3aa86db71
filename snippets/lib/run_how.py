"""How a run plan's figures were obtained (:meth:`snippets.lib.model_plan.ModelPlan.how` for a step run on TensorFlow).

Apart from :mod:`snippets.lib.model_plan`, as :mod:`snippets.lib.compiled_how` is for Keras on JAX, so that the sentence,
which names every run a plan made and why (:func:`snippets.lib.model_plan.plan_model`), has room to.
"""

from __future__ import annotations

from snippets.lib import units
from snippets.lib.model_step import steps_measured
from snippets.lib.plan_curve import far_chord
from snippets.lib.plan_runs import (CHECKED_PAST, EXTRAPOLATION, FAR_PAST, FLAT_GROWTH, HALF_RUN, MARGIN, SLOPE_CAP,
                                    SMALL_BATCHES, WIDE_BATCH, WIDE_PEAK, far_not_run, far_past, grew_words, plan_threads,
                                    run_past, thread_counts)


def run_how(plan, grew: str) -> str:
    """One paragraph: how ``plan`` (a :class:`~snippets.lib.model_plan.ModelPlan` of method ``"measured"``,
    ``"interpolated"`` or ``"extrapolated"``) was run and read, ``grew`` its sentence on a faster growth ("" if none)."""
    where = (f"under MirroredStrategy ({plan.device_batch} samples per replica)"
             if plan.step.strategy == "mirrored" else "on one device")
    xla = "XLA:CPU-compiled step" if plan.step.jit else "step without XLA"
    listed = " and ".join(filter(None, [", ".join(map(str, plan.batches[:-1])), str(plan.batches[-1])]))
    b1, b2 = SMALL_BATCHES
    cheap, past = plan.wide_why == "cheap", run_past(plan.step, plan.half_layers)
    far = len(plan.batches) > 2 and far_past(plan.batches[-1], plan.batches[-2])  # runs_far's condition
    why = (f"the line through the floors at {b1} and {b2} put it at {units.human_bytes(WIDE_PEAK)} or less"
           if cheap else f"{b1} and {b2} differed by under {FLAT_GROWTH:.0%}")
    hidden = ", and fixed buffers can hide part of the activations at small batches" if cheap else " (fixed buffers hid the activations)"
    wide = (f" The run at {WIDE_BATCH} was added: {why}{hidden}." if WIDE_BATCH in plan.batches and plan.wide_why else
            f" A run at {WIDE_BATCH} was tried ({why}) and ran out of this host's cap: the line is the two "
            "small runs', and may be too shallow." if plan.wide_ran_out else "") + (
        f" The run at {plan.short_of} per device ran out of this host's cap: the lines, and the largest batch, "
        "stop below it." if plan.short_of else "") + (
        (" This batch was run too (" + (f"at least {FAR_PAST} times past the run before it: a peak can grow faster than "
         "the lines, or slower" if far else f"past {past} per device{HALF_RUN if past < CHECKED_PAST else ''}: the lines put it, or "
         f"its growth past the smaller runs, under {units.human_bytes(WIDE_PEAK)}") + f").{grew}" if plan.device_batch == plan.batches[-1]
         else f" A run at {plan.batches[-1]} per device, the largest batch the lines put under {units.human_bytes(WIDE_PEAK)} "
         "less the margin (or this host's cap), or else whose growth past the runs before it they did, peaked under "
         "them: past it they run unchecked.")
        if (plan.batches[-1] > past or far) and not (plan.wide_why and plan.batches[-1] == WIDE_BATCH) else
        ((f" No run past {CHECKED_PAST} per device checked the lines (the lines put one over " if plan.batches[-1] >= CHECKED_PAST
          else f" No run past {plan.batches[-1]} per device checked the lines (the benchmarks held such lines to {CHECKED_PAST}, "
          "and the lines put a run past it over ") +  # helper-71: "past 256" read as runs to 256
         f"{units.human_bytes(WIDE_PEAK)} less the margin, or this host's cap): a peak that grows faster than linearly "
         "in the batch (a loss over pairs within the batch) would not show"
         + ("; --backend jax compiles this batch." if plan.jax else "."))
        if plan.device_batch > CHECKED_PAST and not (plan.short_of or plan.wide_ran_out) else "")
    counts = thread_counts(plan.threads or plan_threads(plan.step))
    threads = f"{' and '.join(map(str, counts))} inter-op thread{'s' if counts != [1] else ''}"
    fewest, most = plan.steps_run or (steps_measured(plan.step),) * 2
    steps = f"{fewest} steps" if fewest == most else f"{fewest} to {most} steps"
    worse = f"the worst of {threads} and of {steps}" if len(counts) > 1 else f"{threads}, the worst of {steps}"
    lines = "a line in the batch" + (" for each thread count, the highest at this batch" if len(counts) > 1 else "")
    floor = (f", at least the {units.human_bytes(round(plan.rule_slope))} per sample the rule counts"
             if plan.rule_slope else "")
    # The margin applies past the widest run only (peak_lines): a batch between runs gets none.
    beyond = (f"{', each at the slope of the steepest thread count' if len(counts) > 1 else ''}, +{EXTRAPOLATION:.0%} on the part beyond batch {plan.batches[-1]}"
              if plan.device_batch > plan.batches[-1] else "")
    between = "upper-quartile steps" if plan.uppers else "worst peaks"
    own = ", all runs' or its thread count's where steeper" if plan.thread_floors and len(counts) > 1 else ""
    far, (b0, b1) = far_chord(plan.batches, plan.peaks), plan.batches[-2:] if len(plan.batches) > 1 else (0, 0)
    slope = max(plan._slopes()) if far > max(plan._slopes()) and plan.device_batch > b1 else plan.per_sample
    fitted = (f"{lines}: {units.human_bytes(round(slope))} per sample (between the runs' {between}, at most {SLOPE_CAP:g}x "
              f"the slope between their lower-quartile steps{own}{floor})" + (f", past {b1} the steeper {units.human_bytes(round(far))} "
              f"per sample between the worst peaks at {b0} and {b1}" if far > max(plan._slopes()) else ""))
    if plan.method == "measured":
        # A card's largest batch past this one is still read off the lines.
        larger = f" Larger batches on {fitted}." if plan.device_batch > SMALL_BATCHES[-1] and not plan.faster else ""
        if larger and plan.floor_only:  # helper-50: the line was described, and the cap said elsewhere alone
            larger = (f" No larger batch is planned: up to {plan.batches[-1]} per device the runs grew {grew_words(plan)}, "
                      "and no growth past them was measured.")
        return (f"Measured: real fit steps ({xla}) {where}, run at {listed} per device, capped CPU "
                f"allocator, a fresh process per run, {worse}; "
                f"+{MARGIN:.0%} for other orders of the step's ops.{wide}{larger}")
    if plan.method == "interpolated":  # between two runs: _measured_peak_at
        b0 = max((b for b in plan.batches if b < plan.device_batch), default=0)
        b1 = min((b for b in plan.batches if b > plan.device_batch), default=plan.device_batch)
        chord = f"the chord between the worst peaks at {b0} and {b1} per device"
        fitted = (f"{chord} (the floors grew: a peak convex in the batch lies under it)"
                  if plan.wide_why == "cheap" else f"{fitted}, and no lower than {chord}")
    return (f"{plan.method.capitalize()}: real fit steps ({xla}) {where} measured at batches {listed} per device "
            f"(capped CPU allocator, a fresh process each, {threads}, the worst of {steps}), {fitted}{beyond}; "
            f"+{MARGIN:.0%} for other orders of the step's ops.{wide}{far_not_run(plan)}")
