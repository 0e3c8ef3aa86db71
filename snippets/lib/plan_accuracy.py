"""The planner's measured error on real architectures, as ``python -m benchmarks.model_planner`` last published it.

Read by the answer-first boxes, ``python -m snippets.decide --help`` and every measured plan's text
(the pages print these as :mod:`snippets.lib.model_plan`'s).
"""

from __future__ import annotations

import json
from pathlib import Path

#: Where ``python -m benchmarks.model_planner`` publishes the planner against the allocator (committed).
ACCURACY = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "model_planner.json"

#: In its runs, the draws of a row's sets of "measured" after the first (``REDRAWN``, ``target_jobs`` in
#: benchmarks/model_planner.py) count from this many times the set's number: the readers of one set leave them out.
#: A key's fourth field is that draw, or its steps when the draw is 0: both stay under it (tests/test_model_plan.py).
REDRAW_TAG = 100


def largest_batches(row: dict) -> dict[str, list[int]]:
    """Each card's largest global batch in every plan of a ``plan_spread`` row of the benchmark's results (its
    ``largest``: one ``{card: batch}`` per plan; {} where the benchmark kept none).

    >>> largest_batches({"largest": [{"V100-PCIE-16GB": 540, "A100-80GB": 2960}, {"V100-PCIE-16GB": 552, "A100-80GB": 2996}]})
    {'V100-PCIE-16GB': [540, 552], 'A100-80GB': [2960, 2996]}
    """
    plans = row.get("largest") or []
    return {card: [plan[card] for plan in plans] for card in (plans[0] if plans else ())}


def largest_moved(row: dict) -> dict[str, float]:
    """How far a ``plan_spread`` row's identical plans moved each card's largest global batch: the highest over the
    lowest, for the cards every plan fits a batch on (a card some plan fits nothing on has no ratio).

    >>> largest_moved({"largest": [{"V100-PCIE-16GB": 500, "A100-80GB": 0}, {"V100-PCIE-16GB": 650, "A100-80GB": 8}]})
    {'V100-PCIE-16GB': 1.3}
    """
    return {card: max(batches) / min(batches) for card, batches in largest_batches(row).items() if min(batches) > 0}


def published_accuracy(path: Path = ACCURACY) -> dict | None:
    """The planner's measured error on real architectures, as last published; None if never published.

    Returns:
        ``{"rows", "architectures", "batches", "min_ratio", "max_ratio", "seconds", "worst", "spread", "holdout", "fresh",
        "raised"}``
        (``batches``: the rows' per-device batches, ascending; ``worst``: the row farthest from 1); ratios are planned / measured per-device step peaks (benchmarks/model_planner.py
        says how each is obtained). ``spread``: None if the benchmark planned nothing twice, else
        ``{"plans", "architectures", "configurations", "max", "min_ratio", "max_ratio", "own_runs", "largest_max"}``: how
        many plans of the same configuration it made from fresh runs (without XLA), of how many architectures and
        configurations (each at two batches), the highest plan over the lowest of one configuration, the range of those
        plans over measured, how many of them run that batch itself (one set of runs there: they cannot move), and the
        highest largest batch for one card over the lowest of one configuration (None before the benchmark kept them). ``holdout``: None, or ``{"architectures", "min_ratio", "max_ratio", "before_min",
        "before_max", "lines_max"}`` for :data:`snippets.lib.zoo.HOLDOUT`, ``before_*`` without the cheap run at
        256, ``lines_max`` with it but between two runs on the lines, as before the chord (``ratio_on_lines``).
        ``fresh``: None, or ``{"architectures", "min_ratio", "max_ratio", "moved"}`` for :data:`snippets.lib.zoo.FRESH`,
        ``moved`` how far the rule made after them (a batch between two runs on their chord where the
        floors grow: ``ratio_on_lines``) lowered a row's ratio. ``raised``: how far the last rule, made after every set
        was measured (past the runs every thread count's line at the steepest one's slope: ``ratio_own_slopes``), raised
        a row's ratio in any set (0 if not recorded).
    """
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = data.get("rows") or []
    if not rows:
        return None
    ratios = [row["ratio"] for row in rows]
    repeated = data.get("plan_spread") or []
    spread = {"plans": min(len(row["planned"]) for row in repeated),
              "architectures": len({row["architecture"] for row in repeated}),
              "configurations": len(repeated) // 2, "max": max(row["spread"] for row in repeated),
              "min_ratio": min(min(row["planned"]) / row["measured"] for row in repeated),
              "max_ratio": max(max(row["planned"]) / row["measured"] for row in repeated),
              "own_runs": sum(bool(row.get("own_runs")) for row in repeated),
              "largest_max": max((moved for row in repeated for moved in largest_moved(row).values()),
                                 default=None)} if repeated else None
    apart = data.get("holdout") or []
    # Before the run at 256 that a cheap step takes (model_plan.WIDE_PEAK), which one of them led to.
    before = [row.get("ratio_without_cheap", row["ratio"]) for row in apart]
    holdout = {"architectures": len({row["architecture"] for row in apart}),
               "min_ratio": min(row["ratio"] for row in apart), "max_ratio": max(row["ratio"] for row in apart),
               "before_min": min(before), "before_max": max(before),
               "lines_max": max(row.get("ratio_on_lines", row["ratio"]) for row in apart)} if apart else None
    later = [row["ratio"] for row in data.get("fresh") or []]
    fresh = {"architectures": len({row["architecture"] for row in data["fresh"]}), "min_ratio": min(later),
             "max_ratio": max(later),
             "moved": max(row.get("ratio_on_lines", row["ratio"]) - row["ratio"] for row in data["fresh"])} if later else None
    every = [*rows, *apart, *(data.get("fresh") or [])]
    raised = max(row["ratio"] - row.get("ratio_own_slopes", row["ratio"]) for row in every)
    return {"rows": len(rows), "architectures": len({row["architecture"] for row in rows}), "raised": raised,
            "batches": sorted({row["batch_per_device"] for row in rows}), "min_ratio": min(ratios), "max_ratio": max(ratios), "seconds": data.get("seconds"),
            "worst": max(rows, key=lambda row: abs(row["ratio"] - 1)), "spread": spread, "holdout": holdout,
            "fresh": fresh}


def _and(numbers: list[int]) -> str:
    """``[64, 128]`` as ``"64 and 128"``."""
    words = [str(n) for n in numbers]
    return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def accuracy_line(path: Path = ACCURACY) -> str:
    """A few sentences for ``--help`` and every measured plan's text: what was measured and the range of
    error, on the held-out architectures too, then how far identical plans moved (threads race, so each run
    draws its own orders of the ops)."""
    found = published_accuracy(path)
    if found is None:
        return "The planner's accuracy on real architectures has not been measured here (make benchmark)."
    line = (f"On {found['architectures']} architectures ({found['rows'] // 2} configurations at two batches each: "
            "CNNs, a Transformer, LSTM, GRU, a recommender, MLPs, the seed layer; Adam and RMSprop; one device "
            "with XLA on and off, MirroredStrategy over 2 without; float32 on TensorFlow), planned / measured step "
            f"peak per device, both on this CPU's capped allocator at {_and(found['batches'])} samples, was "
            f"{found['min_ratio']:.2f}-{found['max_ratio']:.2f} (over 1: planned high).")
    held = found["holdout"]
    if held:
        line += (f" On {held['architectures']} more measured apart it was {held['min_ratio']:.2f}-"
                 f"{held['max_ratio']:.2f} ({held['before_min']:.2f}-{held['before_max']:.2f} before one of them "
                 f"led to the cheap run at 256, up to {held['lines_max']:.2f} before the chord between runs).")
    fresh = found["fresh"]
    if fresh:
        line += (f" On {fresh['architectures']} measured after every rule but the last seven (the chord between two "
                 f"runs, which moved them by {fresh['moved']:.3f} at most; past the runs, every line at the steepest "
                 "thread count's slope; running a reader's batch at twice the largest run too; past a far run, the "
                 "chord to it; an Embedding's row per sample in the floor; flat runs, or runs that grew faster than "
                 "linearly, stopping the cards' batches): "
                 f"{fresh['min_ratio']:.2f}-{fresh['max_ratio']:.2f}.")
    if found["raised"] > 0:
        line += (" Every thread count's line past the runs climbs at the steepest one's slope, a rule made after every "
                 f"row was measured, which raised a row by {found['raised']:.2f} at most.")
    spread = found["spread"]
    if spread:
        # helper-83: an XLA step's runs moved too (one batch's peak 100.93 and 108.93 MiB in two processes), less.
        line += (f" A run's peak differs from one process to the next (with XLA too; without it, threads race), so the same "
                 f"command plans a different peak each run: planned {spread['plans']} times from fresh runs without XLA, "
                 f"{spread['configurations']} configurations' plans moved "
                 f"by up to {spread['max'] - 1:.0%}, at {spread['min_ratio']:.2f}-{spread['max_ratio']:.2f} of the "
                 "measured peak" + (f" ({spread['own_runs']} of the {2 * spread['configurations']} at a batch the plan runs "
                 "itself, from the one set of its runs the benchmark has there: those cannot move)" if spread["own_runs"]
                 else "") + ".")
        if spread["largest_max"]:
            line += (" Read off those lines far past the runs, each plan's largest batch for a card moved by up to "
                     f"{spread['largest_max'] - 1:.0%}.")
    return line


def accuracy_summary(path: Path = ACCURACY) -> str:
    """:func:`accuracy_line` in two sentences, for a measured plan's text (helper-69: the whole paragraph, eleven lines
    under every plan, buried the plan); ``python -m snippets.decide --help`` prints the whole."""
    found = published_accuracy(path)
    if found is None:
        return accuracy_line(path)
    held, fresh, spread = found["holdout"], found["fresh"], found["spread"]
    more = (f", {held['min_ratio']:.2f}-{held['max_ratio']:.2f} and {fresh['min_ratio']:.2f}-{fresh['max_ratio']:.2f} "
            f"on {held['architectures']} + {fresh['architectures']} held out" if held and fresh else "")
    # helper-75: a speech Transformer's two identical commands moved by 8%, read against a bound for every model.
    # helper-76: a 1-D text CNN's peak at 64 moved 4% between two plans, its largest batch for 1 GiB 19% (940, 764).
    far = (f" by up to {spread['largest_max'] - 1:.0%}" if spread and spread["largest_max"] else " more still")
    moved = (f" From fresh runs the same command's plan moved by up to {spread['max'] - 1:.0%} on the "
             f"{spread['architectures']} architectures re-planned so (threads race; another model's can move more, "
             f"and a largest batch read off the line far past the runs{far})." if spread else "")
    return (f"Benchmarked (docs/performance.md): planned / measured step peak per device "
            f"{found['min_ratio']:.2f}-{found['max_ratio']:.2f} on {found['architectures']} architectures{more} (this "
            f"CPU's capped allocator at {_and(found['batches'])} samples, float32 on TensorFlow).{moved} --help has "
            "the details.")
