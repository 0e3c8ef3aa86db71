"""Why the largest batch a plan offers for a card stops where it does, or where it lies past what any run checked.

A measured or compiled plan (:mod:`snippets.lib.model_plan`) offers the largest batch whose planned peak fits each card
(:func:`largest_batches`), read off its lines. Where no line past its runs holds (a floor-only plan, a peak that grew
faster than linearly, a check that failed to compile), the batch stops at its largest run; where it lies past the
batches the line was checked at, it needs headroom. :func:`limit_note` says which, in the sentence
``python -m snippets.decide --model`` prints after the cards' batches, and ``--json`` gives it for the capacity
planned for (helper-70: its ``largest_batch`` stopped at the largest run and said nothing of it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from snippets.lib import compiled_curve, hardware, model_plan, units
from snippets.lib.plan_runs import WIDE_PEAK, grew_words

#: Cards whose largest batch a measured plan reports (the question readers ask before renting).
BATCH_CARDS = ("V100-PCIE-16GB", "V100-SXM2-32GB", "A100-80GB", "H100-80GB")

#: Where a run plan's remedy sentence offers the compiled alternative (left out for a step Keras on JAX cannot jit).
JAX_LINE = ", or --backend jax, which compiles a line without running it"


def listed(names: Sequence[str]) -> str:
    """``"A, B and C"``.

    >>> listed(["A"]), listed(["A", "B", "C"])
    ('A', 'A, B and C')
    """
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]


def card_pool(plan: model_plan.ModelPlan) -> Callable[[str], int]:
    """The function giving what ``plan`` may fill of a card, bytes: JAX's default pool for a compiled (Keras on
    JAX) plan, TensorFlow's allocator otherwise, each less :data:`snippets.lib.hardware.ALLOCATOR_SLACK`
    (:func:`~snippets.lib.hardware.usable_bytes`)."""
    pool = hardware.jax_pool_bytes if plan.method == "compiled" else hardware.allocator_bytes
    return lambda name: hardware.usable_bytes(pool(name))


def largest_batches(plan: model_plan.ModelPlan) -> dict[str, int]:
    """The largest global batch that fits each of :data:`BATCH_CARDS`; empty for a ``rule`` plan."""
    if plan.method == "rule":
        return {}
    pool = card_pool(plan)
    return {name: plan.largest_batch(pool(name)) for name in BATCH_CARDS}


def line_checked(plan: model_plan.ModelPlan) -> int:
    """The per-device batch up to which ``plan``'s line was checked: by the benchmarks for a run step
    (:data:`snippets.lib.model_plan.LINE_CHECKED`), the largest batch compiled for a compiled one (the
    benchmarks hold no Keras-on-JAX plan; helper-32: its text named theirs), or this plan's largest run past
    that (:data:`snippets.lib.model_plan.CHECKED_PAST`); under a 16-bit policy (:func:`~snippets.lib.model_plan.in_16_bits`: the
    step's or its layers' own), which no benchmark row is, its largest run
    (helper-59: "past 256 the line runs further than the benchmarks checked it", of a line they never checked)."""
    if plan.method == "compiled":
        return max(plan.compiled_points)
    return max(plan.batches) if model_plan.in_16_bits(plan) else max(model_plan.LINE_CHECKED, *plan.batches)


def unchecked(plan: model_plan.ModelPlan) -> bool:
    """Whether the reader's batch lies past the runs of a plan whose lines stop there (``floor_only``): not run (its
    lines put it over the bound a run keeps to), so its figure is a line no run checked, and a larger ``--batch``
    would not be run either (helper-72: a wide MLP "fitted" at 16384 per replica, its cards stopped at 1743)."""
    return plan.floor_only and plan.method != "compiled" and plan.device_batch > plan.batches[-1]


def limit_note(plan: model_plan.ModelPlan, largest: Mapping[str, int], pool: Callable[[str], int],
               jax_line: str = JAX_LINE) -> str:
    """Why the batches in ``largest`` (name: largest global batch, as :func:`largest_batches`) stop where they do, in
    sentences; "" when each lies on a line its runs checked. ``pool(name)``: that name's capacity, bytes per device.

    A name is given only where the sentence holds for some of ``largest`` and not all (``For the A100-80GB: ...``).
    ``jax_line``: what a run plan's sentence offers besides a larger ``--batch`` ("" where Keras on JAX cannot compile
    the step)."""
    beyond, checked, compiled = "", line_checked(plan), plan.method == "compiled"
    # Cards a floor-only plan stops at its last batch; not one compiled past it for its pool (confirm_largest, past_top).
    # Cards whose batch compiled well under their pool (confirm_cards' rounds ran out) are named below (roomy).
    top = line_checked(plan) if compiled else plan.batches[-1]
    faster = compiled and compiled_curve.grows_faster(plan)  # the checks grew faster than linearly
    capped = [name for name, batch in largest.items() if (plan.floor_only or faster or plan.confirm_failed or plan.squared)
              and batch >= top * plan.replicas and not (plan.confirmed and pool(name) == plan.confirmed_for)
              and not (compiled and compiled_curve.fills(plan, pool(name), batch // plan.replicas))]
    if capped and plan.confirm_failed and not plan.faster:
        which = "" if len(capped) == len(largest) else f" For the {listed(capped)}:"
        beyond = (f"{which} {'n' if which else 'N'}one past {top} per device, the largest batch compiled: a check "
                  "failed to compile (above), so no batch past the compiled ones is offered (plan a larger --batch "
                  "to compile it).")
    elif capped and faster and not plan.faster:
        which = "" if len(capped) == len(largest) else f" For the {listed(capped)}:"
        beyond = (f"{which} {'n' if which else 'N'}one past {top} per device, the largest batch compiled: the "
                  "compiled figures grew faster than linearly (as a loss over pairs within the batch does), so no line "
                  "past them holds (plan a larger --batch to compile it).")
    elif capped and plan.squared and not plan.faster:  # helper-74: runs at 16, 32 and 256 that grew as B x B
        which = "" if len(capped) == len(largest) else f" For the {listed(capped)}:"
        beyond = (f"{which} {'n' if which else 'N'}one past {top} per device, the largest batch run: the runs grew faster "
                  "than linearly (how the figure was obtained, above, says by how much), so no line past them holds"
                  + (" (plan a larger --batch with --backend jax to compile it)." if jax_line else "."))
    elif plan.faster:
        beyond = (f" None past {plan.faster[0]} per device, the batch {'compiled' if compiled else 'run'} last: the "
                  f"peak grew faster than linearly up to it" + ("" if compiled else ", or faster than the smaller runs "
                  "showed (a fixed buffer hid the growth there)") + f" (plan a larger --batch to {'compile' if compiled else 'run'} "
                  "it" + ("" if compiled else jax_line) + ").")
    elif capped:
        did = "compiled" if compiled else "run"
        which = "" if len(capped) == len(largest) else f" For the {listed(capped)}:"
        ahead = (f"plan a larger --batch to {did} it" + ("" if compiled else jax_line) if not unchecked(plan) else
                 f"your batch, past it, was not run: its lines put it over {units.human_bytes(WIDE_PEAK)} or this host's "
                 "cap, as they would a larger one" + (jax_line.replace(", or", "; use", 1) if jax_line else
                                                      "; check it on the GPU with snippets.lib.model_step"))
        beyond = (f"{which} {'n' if which else 'N'}one past {top} per device, the largest batch {did}: "
                  f"up to it the peak grew {grew_words(plan)} (fixed buffers, such as a large kernel's update, can hide "
                  f"the rest), so no growth past it was measured ({ahead}).")
    elif not compiled and any(batch > checked * plan.replicas for batch in largest.values()):
        # helper-72: read as this model's runs to 256, where they stopped at 32.
        here = f"; the largest run here: {plan.batches[-1]} per device" if plan.batches[-1] < model_plan.LINE_CHECKED else ""
        beyond = (f" Past {model_plan.LINE_CHECKED} per device the line runs further than the benchmarks "
                  f"checked it (docs/performance.md{here}): leave those batches more headroom."
                  # helper-94: a 16-bit plan whose largest run was 256 read as benchmarked, which none is.
                  if checked == model_plan.LINE_CHECKED and not model_plan.in_16_bits(plan) else
                  f" Past {checked} per device, the largest batch run, the line runs further than any run checked "
                  "it: leave those batches more headroom.")
    # helper-51: a seq2seq Transformer's compiled figure jumped 2.3x between 200 and 245 per device.
    off = [name for name, batch in largest.items() if compiled and batch and batch // plan.replicas not in plan.compiled_points]
    if off:  # helper-53, -54: read off the line, a card's batch compiled to 2.7 times its pool
        beyond += (f" Not compiled at {'its' if len(off) == 1 else 'their'} batch, the largest batch for the "
                   f"{listed(off)} is read off the line through the compiled batches, and XLA's figure can jump "
                   "between batches, or grow faster than the line (to more than twice its figure): plan the batch you "
                   "choose with --batch to compile it there.")
    roomy = [n for n, b in largest.items() if compiled and b and plan.compiled_points.get(b // plan.replicas, pool(n)) < pool(n) * 7 / 8]
    beyond += (f" For the {listed(roomy)}, the batch offered compiled well under the pool: a larger batch may fit (plan "
               "one with --batch, which compiles it)." if roomy else "")
    return beyond.strip()
