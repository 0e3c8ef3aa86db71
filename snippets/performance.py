"""The Performance chapter's reader: the committed benchmark figures, by name.

The figures are measured by ``python -m benchmarks --publish`` into
``benchmarks/results/benchmarks.json``; the chapter quotes them from there.
"""

from __future__ import annotations

import json
from pathlib import Path

from snippets.lib import model_plan, units, zoo

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
MODEL_PLANNER = model_plan.ACCURACY


def planner_rows(path: Path = MODEL_PLANNER) -> list[dict]:
    """Every planner-vs-measured row the benchmark published: architecture, optimizer, strategy, xla,
    batch per device, planned and measured per-device step peaks (bytes) and their ratio.

    Raises:
        FileNotFoundError: if nothing was published (``python -m benchmarks.model_planner``).
    """
    return json.loads(path.read_text(encoding="utf-8"))["rows"]


def planner_table(path: Path = MODEL_PLANNER) -> str:
    """One line per architecture: its family, weights, configurations and the range of planned / measured."""
    from tabulate import tabulate

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
