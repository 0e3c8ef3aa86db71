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


def budget_table(budgets: Sequence[planner.DeviceBudget], capacity: int) -> str:
    """The per-device table (tabulate): state, the step's transients, both peaks, capacity, fits."""
    from tabulate import tabulate

    h = units.human_bytes
    rows = [
        [b.device, h(b.weights), h(b.gradients), h(b.slots), h(b.activations),
         h(max(b.update_temporaries, b.aggregation)), h(b.init_peak), h(b.step_peak), h(capacity),
         "yes" if b.total <= capacity else "NO"]
        for b in budgets
    ]
    headers = ["device", "weights", "grads", "slots", "activ.", "update", "init peak", "step peak",
               "capacity", "fits"]
    return tabulate(rows, headers=headers, colalign=("right",) * len(headers))


def verdict(budgets: Sequence[planner.DeviceBudget], capacity: int) -> str:
    """One line: fits (with the headroom) or does not (which device, in which phase, by how much)."""
    worst = max(budgets, key=lambda b: b.total)
    phase = worst.peak_phase
    if worst.total <= capacity:
        return (f"Fits: the fullest device (device {worst.device}) peaks at {units.human_bytes(worst.total)} "
                f"({phase}) of {units.human_bytes(capacity)}, {units.human_bytes(capacity - worst.total)} to spare.")
    return (f"Does not fit: device {worst.device} peaks at {units.human_bytes(worst.total)} in the {phase} "
            f"phase but its allocator has {units.human_bytes(capacity)}; short by "
            f"{units.format_bytes(worst.total - capacity)}.")


def as_json(budgets: Sequence[planner.DeviceBudget], capacity: int, **context) -> dict:
    """The plan as a JSON-ready dict, every figure in bytes.

    Returns:
        ``{"devices": [{"device", "weights", "gradients", "slots",
        "activations", "update_temporaries", "reserve", "init_peak",
        "step_peak", "peak_phase", "capacity", "fits"}, ...], "fits": bool,
        **context}``; ``update_temporaries`` includes the aggregation buffer
        where that is larger.
    """
    rows = [{"device": b.device, "weights": b.weights, "gradients": b.gradients, "slots": b.slots,
             "activations": b.activations, "update_temporaries": max(b.update_temporaries, b.aggregation),
             "reserve": b.reserve, "init_peak": b.init_peak, "step_peak": b.step_peak,
             "peak_phase": b.peak_phase, "capacity": capacity, "fits": b.total <= capacity}
            for b in budgets]
    return {"devices": rows, "fits": all(row["fits"] for row in rows), **context}


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
) -> str:
    """The CLI's text: table, verdict, host bytes if any and, when it does not fit, up to ``top`` remedies.

    ``accumulation`` is the optimizer's ``gradient_accumulation_steps``: its accumulators are
    counted with the slots (:func:`snippets.lib.planner.plan`).

    Raises:
        ValueError: as :func:`snippets.lib.planner.plan` does.
    """
    budgets = planner.plan(weights, optimizer, strategy, devices, policy, reserve, batch=batch, xla=xla,
                           accumulation=accumulation)
    jit = placements.resolve_xla(xla, strategy)
    table = budget_table(budgets, capacity)
    # The verdict wraps at the table's width: a reader's window that shows the table shows it whole.
    width = max(72, max(map(len, table.splitlines())))
    lines = [table, "", textwrap.fill(verdict(budgets, capacity), width)]
    if optimizer:
        accumulated = (f"; slots include the accumulators of gradient_accumulation_steps={accumulation}"
                       if accumulation > 1 else "")
        lines.append(textwrap.fill(f"Batch {batch}; optimizer update {'XLA-compiled' if jit else 'without XLA'}"
                                   f"{' (xla auto, as Keras decides on a GPU host)' if xla == 'auto' else ''}"
                                   f"{accumulated}.", width))
    host = planner.host_bytes(weights, optimizer, strategy, devices, policy, accumulation)
    if host:
        lines.append(f"Host (or coordinator) RAM also holds {units.format_bytes(host)}.")
    fits = max(b.total for b in budgets) <= capacity
    found = [] if fits else remedies(weights, optimizer, strategy, devices, capacity, policy, reserve,
                                     batch=batch, xla=xla, accumulation=accumulation)
    if found:
        lines += ["", "Remedies that fit, fewest changes first:"]
        for rank, remedy in enumerate(found[:top], 1):
            host_note = ""
            if remedy.host:
                host_note = f"; host or coordinator RAM holds {units.human_bytes(remedy.host)}"
            lines.append(f"  {rank}. {remedy.label(devices)}: peak {units.human_bytes(remedy.peak)} "
                         f"per device, {units.human_bytes(capacity - remedy.peak)} to spare{host_note}")
    elif not fits:
        lines += ["", f"No placement or precision tried fits {devices} device{'s' if devices != 1 else ''} of "
                      f"{units.human_bytes(capacity)}: add devices, or factorise the largest weight."]
    return "\n".join(lines)
