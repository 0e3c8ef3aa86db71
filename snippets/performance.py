"""The Performance chapter's reader: the committed benchmark figures, by name.

The figures are measured by ``python -m benchmarks --publish`` into
``benchmarks/results/benchmarks.json``; the chapter quotes them from there.
"""

from __future__ import annotations

import json
from pathlib import Path

#: The published measurements (committed).
PUBLISHED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "benchmarks.json"


def figures(path: Path = PUBLISHED) -> dict[str, dict]:
    """Every published figure by name: ``{"name", "title", "method", "quantities", "notes", ...}``.

    Raises:
        FileNotFoundError: if nothing was published (``make benchmark``).
    """
    return {figure["name"]: figure for figure in json.loads(path.read_text(encoding="utf-8"))["figures"]}


def medians(name: str, path: Path = PUBLISHED) -> dict[str, float]:
    """The median of each quantity of figure ``name``, by label.

    Raises:
        KeyError: for a figure that was not published.
    """
    return {q["label"]: q["median"] for q in figures(path)[name]["quantities"]}


#: The planner against the allocator on real architectures (``python -m benchmarks.model_planner``).
MODEL_PLANNER = PUBLISHED.parent / "model_planner.json"


def planner_rows(path: Path = MODEL_PLANNER) -> list[dict]:
    """Every planner-vs-measured row the benchmark published: architecture, optimizer, strategy, xla,
    batch per device, planned and measured per-device step peaks (bytes) and their ratio.

    Raises:
        FileNotFoundError: if nothing was published (``python -m benchmarks.model_planner``).
    """
    return json.loads(path.read_text(encoding="utf-8"))["rows"]


def planner_accuracy(path: Path = MODEL_PLANNER) -> dict:
    """What the rows say in a few numbers.

    Returns:
        ``{"rows", "architectures", "min_ratio", "max_ratio", "seconds", "worst"}``: ratios are
        planned / measured; ``worst`` is the row with the ratio farthest from 1.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = data["rows"]
    ratios = [row["ratio"] for row in rows]
    return {"rows": len(rows), "architectures": len({row["architecture"] for row in rows}),
            "min_ratio": min(ratios), "max_ratio": max(ratios), "seconds": data.get("seconds"),
            "worst": max(rows, key=lambda row: abs(row["ratio"] - 1))}


def planner_table(path: Path = MODEL_PLANNER) -> str:
    """One line per architecture: its family, weights, configurations and the range of planned / measured."""
    from tabulate import tabulate

    from snippets.lib import units, zoo

    by_arch: dict[str, list[dict]] = {}
    for row in planner_rows(path):
        by_arch.setdefault(row["architecture"], []).append(row)
    lines = []
    for name, rows in by_arch.items():
        ratios = [row["ratio"] for row in rows]
        peaks = [row["measured"] for row in rows]
        lines.append([name, zoo.ARCHITECTURES[name].family, units.human_bytes(rows[0]["weights"]), len(rows),
                      f"{units.human_bytes(min(peaks))} - {units.human_bytes(max(peaks))}",
                      f"{min(ratios):.2f} - {max(ratios):.2f}"])
    return tabulate(lines, headers=["architecture", "kind", "weights", "configurations", "measured peaks",
                                    "planned / measured"])
