"""How a compiled plan's figures were obtained (:meth:`snippets.lib.model_plan.ModelPlan.how` for Keras on JAX).

Apart from :mod:`snippets.lib.model_plan` so that its sentence, which names every compile a plan made
(:func:`snippets.lib.jax_step.plan_on_jax`, :func:`snippets.lib.jax_step.confirm_largest`), has room to.
"""

from __future__ import annotations

from snippets.lib import units
from snippets.lib.plan_runs import CHECKED_PAST, SMALL_BATCHES


def compiled_how(plan, grew: str) -> str:
    """One paragraph: how ``plan`` (a :class:`~snippets.lib.model_plan.ModelPlan` of method ``"compiled"``) was
    compiled and read, ``grew`` its sentence on a faster growth ("" if none)."""
    h, batches = units.human_bytes, plan.batches
    listed = " and ".join(filter(None, [", ".join(map(str, batches[:-1])), str(batches[-1])]))
    devices = (f"each device of keras.distribution.DataParallel over {plan.replicas}, every variable whole "
               "on each, its partitioned program with the gradients' all-reduce" if plan.replicas > 1 else "one device")
    through = ("between two on the chord" + ("" if plan.faster else f", beyond on the line through {batches[-2]} and "
               f"{batches[-1]}") if batches[-1] > CHECKED_PAST else f"on the line through those of {SMALL_BATCHES[0]} or more")
    low = (f"below {batches[0]} at its figure there" if plan.faster else
           f"below {batches[0]} on the line through {batches[0]} and {batches[1]}" if len(batches) > 1 else "")
    rule = f", at least the {h(round(plan.rule_slope))} per sample the rule counts" if plan.rule_slope else ""
    slope = f"other batches {through}{rule}, {low}; " if len(batches) > 1 else ""
    checked = "; ".join(f"{b} per device came to {units.against(p, plan.confirmed_for)}"
                        + (", over it" if p > plan.confirmed_for else ", which fits")
                        for b, p in reversed(plan.confirmed))
    checked = (f" Compiled too, to check the largest batch the line puts in {h(plan.confirmed_for)}: "
               f"{checked}; only a compiled batch that fits is offered for it." if checked else "")
    top = max(plan.confirmed, default=None)  # the line's batch: confirm_largest compiles nothing past it
    if top and top[1] <= plan.confirmed_for * 7 / 8:
        # helper-66: a seq2seq Transformer's 1088 per device came to 17.08 of 23.81 GiB (the figures jumped between 128 and
        # 256, then grew slower than the line through them), and 1520 fit: the offer is a lower bound, and says so.
        checked += (f" XLA's figure at {top[0]} per device grew slower than the line, so a larger batch may fit too: "
                    "plan one with --batch, which compiles it.")
    if plan.checked:  # jax_step.confirm_cards
        checked += (" And at the cards' largest batches read off them: " + "; ".join(
            f"{b} per device came to {h(p)}" for b, p in plan.checked) + ".")
    if plan.confirm_failed:
        offered = plan.largest_batch(plan.confirmed_for) // plan.replicas
        failed = "compiles failed" if "; " in plan.confirm_failed else "a compile failed"
        checked += (f" Checking the largest batch in {h(plan.confirmed_for)}, {failed} ({plan.confirm_failed}): "
                    "the batch offered for it is " + ("the largest compiled that fits." if offered in plan.compiled_points
                                                      else "read off the line."))
    return (f"Compiled, not run: XLA's buffer assignment of Keras on JAX's train step ({devices}; the "
            f"whole step jit-compiled as fit does, its state donated) at batch {listed} per device, its inputs given "
            f"as shapes (no data); {slope}XLA:CPU's figures (XLA:GPU assigns its own buffers).{grew}{checked}")
