"""A rule plan as the reader reads it: the per-device table, the verdict, the JSON, the text.

:func:`snippets.lib.planner.plan` gives the bytes; this module words them for
``python -m snippets.decide`` (docs/decide.md) and the pages that print a plan
(docs/memory-budget.md, the notebook), with the remedies of
:mod:`snippets.lib.rule_remedies` when the plan does not fit.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from snippets.lib import hardware, placements, planner, units
from snippets.lib.rule_remedies import remedies


def uncounted(weights: Sequence[planner.Weight], per_position: int = 0) -> int:
    """How many weights and layers hold activations the rule does not count: ``weights`` of rank 2 or more
    that are not Dense kernels (:attr:`snippets.lib.planner.Weight.dense_kernel`: convolution, attention,
    recurrent, embedding), plus ``per_position`` Dense layers that run on every position of a sequence or
    image (:func:`snippets.lib.private.per_position_dense`), counted once per sample. Not 0: every rule
    figure for the model is a lower bound.

    >>> uncounted([planner.Weight((3, 3, 8, 8), path="conv/kernel"), planner.Weight((8, 2), path="dense/kernel")])
    1
    """
    return sum(1 for w in weights if len(w.shape) >= 2 and not w.dense_kernel) + per_position


def rule_how(weights: Sequence[planner.Weight], too_large: bool = False, inference: bool = False,
             per_position: int = 0, measure: Sequence[str] = ()) -> str:
    """How a rule figure was obtained, and whether it is a lower bound (:func:`uncounted`), for ``weights``.

    ``inference``: no optimizer was given or compiled, so no training state is counted, and the text
    says so first. ``too_large``: the weights do not fit this host, so no step could run. ``measure``:
    the options that would measure the step instead (``"an --optimizer"``, ``"--method auto"``, ...),
    named where the figure is a lower bound; empty: those of ``python -m snippets.decide`` in general.
    """
    why = "the model's weights are too large to run its step on this host; " if too_large else ""
    other = uncounted(weights)
    left = " and ".join(
        ([f"the activations of the model's {other} weight(s) of rank 2 or more that are not Dense kernels "
          "(convolution, attention, recurrent, embedding) are not counted"] if other else [])
        + ([f"{'those' if other else 'the activations'} of its {per_position} Dense layer(s) that run on every "
            "position of a sequence or image are counted once per sample, not per position"] if per_position else []))
    counted = ("weights, gradients, optimizer slots and the update's temporaries (probed on the installed "
               "Keras), and the activations of each Dense layer")
    if inference:
        return ("Planned for INFERENCE: no --optimizer was given and the model's source compiles none, so no "
                "gradients, optimizer slots or update are counted; pass --optimizer (and --loss, for a model "
                "compiled with none) to plan a training step. "
                f"By rule: the weights and the activations of each Dense layer"
                + (f", a LOWER BOUND ({left})." if left else "."))
    if not left:
        return (f"Planned by rule ({why}{counted}); held to each device's measured step peak on Dense layers "
                "(benchmarks, planner_vs_step_peak).")
    if too_large:
        how = "measure its training step on a host with the memory for it (this command, run there)"
    else:
        how = ("measure its training step with " + " and ".join(measure) if measure else
               "measure its training step where it runs (an --optimizer, --method auto, --strategy single or mirrored)")
    return f"Planned by rule ({why}{counted}): a LOWER BOUND, since {left}; {how}."


def fits_word(total: int, capacity: int, bound: bool = False) -> str:
    """The table's "fits" column: ``"yes"``, ``"NO"``, or ``"unknown"`` for a lower bound under ``capacity``."""
    return "NO" if total > capacity else "unknown" if bound else "yes"


def budget_table(budgets: Sequence[planner.DeviceBudget], capacity: int, bound: bool = False) -> str:
    """The per-device table (tabulate): state, the step's transients, both peaks, capacity, fits
    (:func:`fits_word`; ``bound``: each peak is a lower bound, :func:`uncounted`)."""
    from tabulate import tabulate

    h = units.human_bytes
    rows = [
        [b.device, h(b.weights), h(b.gradients), h(b.slots), h(b.activations),
         h(max(b.update_temporaries, b.aggregation)), h(b.init_peak), h(b.step_peak), h(capacity),
         fits_word(b.total, capacity, bound)]
        for b in budgets
    ]
    headers = ["device", "weights", "grads", "slots", "activ.", "update", "init peak", "step peak",
               "capacity", "fits"]
    return tabulate(rows, headers=headers, colalign=("right",) * len(headers))


def verdict(budgets: Sequence[planner.DeviceBudget], capacity: int, bound: bool = False) -> str:
    """One line: fits (with the headroom) or does not (which device, in which phase, by how much).

    ``bound``: each peak is a lower bound (:func:`uncounted`), so "does not fit" stands and "fits" is not
    known: the line says what the uncounted activations would have to fit in instead.
    """
    h = units.human_bytes
    worst = max(budgets, key=lambda b: b.total)
    phase, least = worst.peak_phase, "at least " if bound else ""
    if worst.total <= capacity and bound:
        return (f"Not known to fit: the fullest device (device {worst.device}) peaks at at least {h(worst.total)} "
                f"({phase}) of {h(capacity)}; the activations the rule does not count (below) must fit in the "
                f"{h(capacity - worst.total)} left.")
    if worst.total <= capacity:
        return (f"Fits: the fullest device (device {worst.device}) peaks at {h(worst.total)} "
                f"({phase}) of {h(capacity)}, {h(capacity - worst.total)} to spare.")
    return (f"Does not fit: device {worst.device} peaks at {least}{h(worst.total)} in the {phase} "
            f"phase but its allocator has {h(capacity)}; short by {least}"
            f"{units.format_bytes(worst.total - capacity)}.")


def as_json(budgets: Sequence[planner.DeviceBudget], capacity: int, bound: bool = False, **context) -> dict:
    """The plan as a JSON-ready dict, every figure in bytes.

    Returns:
        ``{"devices": [{"device", "weights", "gradients", "slots",
        "activations", "update_temporaries", "reserve", "init_peak",
        "step_peak", "peak_phase", "capacity", "fits"}, ...], "fits", "lower_bound",
        "capacity", **context}``; ``update_temporaries`` includes the aggregation buffer
        where that is larger. ``bound`` (:func:`uncounted`): every peak is a lower bound, so a device under
        ``capacity`` has ``"fits": null`` (not known), and the plan's ``"fits"`` is false if any device's is,
        else null; ``"lower_bound"`` says which.
    """
    rows = [{"device": b.device, "weights": b.weights, "gradients": b.gradients, "slots": b.slots,
             "activations": b.activations, "update_temporaries": max(b.update_temporaries, b.aggregation),
             "reserve": b.reserve, "init_peak": b.init_peak, "step_peak": b.step_peak,
             "peak_phase": b.peak_phase, "capacity": capacity,
             "fits": False if b.total > capacity else None if bound else True}
            for b in budgets]
    fits = [row["fits"] for row in rows]
    return {"devices": rows, "fits": False if False in fits else None if bound else True, "lower_bound": bound,
            "capacity": capacity, **context}


#: Where each placement keeps a weight it does not split, and why (:func:`snippets.lib.planner.held_whole`);
#: ``{n}`` is the device count.
WHOLE_ON = {"first": ("device 0", "the site's tensor-parallel layers split Dense layers only, each where {n} "
                      "divides its split axis, and leave the rest on the default device"),
            "each": ("every device", "{n} does not divide their last axis, or they have none, and a LayoutMap "
                     "replicates a variable it does not split")}


def whole_json(weights: Sequence[planner.Weight], strategy: str, devices: int) -> dict | None:
    """The weights ``strategy`` keeps whole (:func:`snippets.lib.planner.held_whole`), as ``--json`` gives them.

    Returns:
        None if every weight splits, else ``{"on": "device 0" | "every device", "why": str,
        "weights": [{"path", "shape", "bytes"}, ...]}`` (bytes in each weight's own dtype).
    """
    kept = planner.held_whole(weights, strategy, devices)
    if not kept:
        return None
    on, why = WHOLE_ON[placements.get(strategy).uneven]
    return {"on": on, "why": why.format(n=devices),
            "weights": [{"path": w.path, "shape": list(w.shape), "bytes": units.tensor_bytes(w.shape, w.dtype)}
                        for w in kept]}


def whole_line(weights: Sequence[planner.Weight], strategy: str, devices: int, shown: int = 3) -> str | None:
    """One sentence naming the weights ``strategy`` keeps whole over ``devices`` (the first ``shown``), or None.

    >>> head = [planner.Weight((64, 32), path="m/dense/kernel"), planner.Weight((32, 1), path="m/head/kernel"),
    ...         planner.Weight((1,), path="m/head/bias")]
    >>> print(whole_line(head, "model_parallel", 2))
    Held whole on every device (2 does not divide their last axis, or they have none, and a LayoutMap replicates a variable it does not split): m/head/kernel [32, 1], m/head/bias [1]; 132 B in all.
    >>> print(whole_line(head[1:], "column", 2))
    Every weight is held whole on device 0 (the site's tensor-parallel layers split Dense layers only, each where 2 divides its split axis, and leave the rest on the default device): this column plan splits nothing.
    """
    kept = whole_json(weights, strategy, devices)
    if kept is None:
        return None
    names = [f"{w['path']} {w['shape']}" for w in kept["weights"]]
    if len(names) == len(weights):
        return f"Every weight is held whole on {kept['on']} ({kept['why']}): this {strategy} plan splits nothing."
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    total = sum(w["bytes"] for w in kept["weights"])
    return (f"Held whole on {kept['on']} ({kept['why']}): {', '.join(names[:shown])}{more}; "
            f"{units.human_bytes(total)} in all.")


def report(
    weights: Sequence[planner.Weight],
    optimizer: str | None = None,
    strategy: str = "mirrored",
    devices: int = 4,
    capacity: int = hardware.V100_CAPACITY,
    policy: str | None = None,
    reserve: int = 0,
    top: int = 5,
    *,
    batch: int = 64,
    xla: str = "auto",
    accumulation: int = 1,
    bound: bool = False,
    chosen: Sequence[str] = (),
) -> str:
    """The CLI's text: table, verdict, host bytes if any and, when it does not fit, up to ``top`` remedies.

    ``accumulation`` is the optimizer's ``gradient_accumulation_steps``: its accumulators are
    counted with the slots (:func:`snippets.lib.planner.plan`). ``bound``: the figures are lower bounds
    (:func:`uncounted`; :func:`verdict` says what that leaves unknown, and a remedy is listed only where
    the plan does not fit, as a lower bound too). ``chosen``: lines on what the model's source chose
    (:func:`snippets.lib.model_report.setup_lines`), after the batch line, before the remedies.

    Raises:
        ValueError: as :func:`snippets.lib.planner.plan` does.
    """
    budgets = planner.plan(weights, optimizer, strategy, devices, policy, reserve, batch=batch, xla=xla,
                           accumulation=accumulation)
    jit = placements.resolve_xla(xla, strategy)
    table = budget_table(budgets, capacity, bound)
    # The verdict wraps at the table's width: a reader's window that shows the table shows it whole.
    width = max(72, max(map(len, table.splitlines())))
    lines = [table, "", textwrap.fill(verdict(budgets, capacity, bound), width)]
    if optimizer:
        accumulated = (f"; slots include the accumulators of gradient_accumulation_steps={accumulation}"
                       if accumulation > 1 else "")
        lines.append(textwrap.fill(f"Batch {batch}; optimizer update {'XLA-compiled' if jit else 'without XLA'}"
                                   f"{' (xla auto, as Keras decides on a GPU host)' if xla == 'auto' else ''}"
                                   f"{accumulated}.", width))
    host = planner.host_bytes(weights, optimizer, strategy, devices, policy, accumulation)
    if host:
        lines.append(f"Host (or coordinator) RAM also holds {units.format_bytes(host)}.")
    whole = whole_line(weights, strategy, devices)
    if whole:
        lines.append(textwrap.fill(whole, width, break_on_hyphens=False))
    lines += chosen
    fits = max(b.total for b in budgets) <= capacity
    found = [] if fits else remedies(weights, optimizer, strategy, devices, capacity, policy, reserve,
                                     batch=batch, xla=xla, accumulation=accumulation)
    if found:
        lines += ["", "Remedies that fit, fewest changes first:" if not bound else
                  "Remedies whose lower bound fits, fewest changes first (measure the one you pick):"]
        for rank, remedy in enumerate(found[:top], 1):
            host_note = ""
            if remedy.host:
                host_note = f"; host or coordinator RAM holds {units.human_bytes(remedy.host)}"
            lines.append(f"  {rank}. {remedy.label(devices)}: peak {units.human_bytes(remedy.peak)} "
                         f"per device, {'at most ' if bound else ''}{units.human_bytes(capacity - remedy.peak)} "
                         f"to spare{host_note}")
    elif not fits:
        lines += ["", no_remedy_line(devices, capacity)]
    return "\n".join(lines)


def no_remedy_line(devices: int, capacity: int) -> str:
    """Why a plan that does not fit ``devices`` devices of ``capacity`` bytes lists no remedy."""
    return (f"No placement or precision tried fits {devices} device{'s' if devices != 1 else ''} of "
            f"{units.human_bytes(capacity)}: add devices, or factorise the largest weight.")
