"""The planner's measured error on real architectures, as ``python -m benchmarks.model_planner`` last published it.

Read by the answer-first boxes, ``python -m snippets.decide --help`` and every measured plan's text
(the pages print these as :mod:`snippets.lib.model_plan`'s).
"""

from __future__ import annotations

import json
from pathlib import Path

#: Where ``python -m benchmarks.model_planner`` publishes the planner against the allocator (committed).
ACCURACY = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "model_planner.json"


def published_accuracy(path: Path = ACCURACY) -> dict | None:
    """The planner's measured error on real architectures, as last published; None if never published.

    Returns:
        ``{"rows", "architectures", "min_ratio", "max_ratio", "seconds", "worst", "spread"}`` (``worst``: the
        row farthest from 1); ratios are planned / measured per-device step peaks (benchmarks/model_planner.py
        says how each is obtained). ``spread``: None if the benchmark planned nothing twice, else
        ``{"plans", "architectures", "max", "min_ratio", "max_ratio"}``: how many plans of the same configuration
        it made from fresh runs (without XLA), of how many architectures, the highest plan over the lowest of
        one configuration, and the range of those plans over measured.
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
              "max": max(row["spread"] for row in repeated),
              "min_ratio": min(min(row["planned"]) / row["measured"] for row in repeated),
              "max_ratio": max(max(row["planned"]) / row["measured"] for row in repeated)} if repeated else None
    return {"rows": len(rows), "architectures": len({row["architecture"] for row in rows}),
            "min_ratio": min(ratios), "max_ratio": max(ratios), "seconds": data.get("seconds"),
            "worst": max(rows, key=lambda row: abs(row["ratio"] - 1)), "spread": spread}


def accuracy_line(path: Path = ACCURACY) -> str:
    """One sentence for an answer-first box or ``--help``: what was measured and the range of error, then
    how far identical plans moved (threads race, so each run draws its own orders of the ops)."""
    found = published_accuracy(path)
    if found is None:
        return "The planner's accuracy on real architectures has not been measured here (make benchmark)."
    line = (f"On {found['architectures']} architectures ({found['rows']} configurations: CNNs, a Transformer, "
            f"LSTM, GRU, a recommender, MLPs, the seed; Adam and RMSprop; XLA on and off; MirroredStrategy), "
            f"planned / measured step peak per device was {found['min_ratio']:.2f}-{found['max_ratio']:.2f}.")
    spread = found["spread"]
    if spread:
        line += (f" Without XLA threads race, so the same command plans another peak each time it runs: "
                 f"{spread['plans']} plans of each of {spread['architectures']} architectures' steps differed by "
                 f"up to {spread['max'] - 1:.0%}, at {spread['min_ratio']:.2f}-{spread['max_ratio']:.2f} of the "
                 "measured peak.")
    return line
