"""``python -m benchmarks.activations``: the figures docs/activations.md quotes, measured and published.

Each configuration of :func:`snippets.activations.chapter_jobs` is one model's
``fit`` steps in its own fresh capped process (:func:`snippets.activations.chapter_figures`,
the planner's own measurement). About two and a half minutes on two CPU cores, which is why the
chapter reads them from ``benchmarks/results/activations.json`` (committed) instead of
measuring them on every test run; tests/test_activations.py holds the file to the chapter's
configurations, and runs its own capped steps for the remedies' proofs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from benchmarks.measure import commit, load, machine
from snippets import activations


def measure() -> dict:
    """The results file's content: ``{"machine", "commit", "load_at_start", "seconds", "jobs", "figures"}``.

    ``jobs`` is :func:`snippets.activations.chapter_jobs` as JSON (how each figure was taken);
    ``figures`` maps each configuration's name to :func:`snippets.lib.model_step.measure`'s result.
    """
    began, start_load = time.perf_counter(), load()
    figures = activations.chapter_figures()
    return {"machine": machine(), "commit": commit(), "load_at_start": start_load,
            "seconds": round(time.perf_counter() - began, 1),
            "jobs": activations.jobs_as_json(), "figures": figures}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.activations",
                                     description="Measure the activations chapter's fit steps (one fresh capped "
                                     "process each) and write them to benchmarks/results/activations.json.")
    parser.parse_args(argv)
    try:
        data = measure()
    except (RuntimeError, ValueError) as error:
        print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)
        return 1
    activations.RESULTS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(activations.figures_table(data["figures"]))
    print(f"{data['seconds']:.0f} s; wrote {activations.RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
