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
