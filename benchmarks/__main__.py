"""``python -m benchmarks``: measure, then write build/benchmarks.json and the table."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from benchmarks import figures, report
from benchmarks.measure import commit, load, machine


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure the figures the Performance page quotes (median of --runs runs each).",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per figure, at least 3 (default 3)")
    parser.add_argument("--only", nargs="+", choices=list(figures.ALL), metavar="NAME",
                        help=f"measure only these ({', '.join(figures.ALL)}); the others keep "
                             "their last values from build/benchmarks.json")
    parser.add_argument("--publish", action="store_true",
                        help="also copy the JSON and the table to benchmarks/results/ (committed)")
    args = parser.parse_args(argv)
    if args.runs < 3:
        parser.error(f"--runs must be at least 3 (a median of fewer is not a figure), not {args.runs}")

    previous = report.read(report.BUILD / report.JSON_NAME) or report.read(report.PUBLISHED / report.JSON_NAME)
    kept = {f["name"]: f for f in (previous or {}).get("figures", [])}
    start_load, data_commit = load(), commit()
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    results = []
    failures = 0
    for name, measure in figures.ALL.items():
        if args.only and name not in args.only:
            if name in kept:
                results.append(kept[name])
            else:
                doc = (measure.__doc__ or name).strip().splitlines()[0]
                results.append(figures.Figure(name, doc, "", not_measured="not run yet").to_json())
            continue
        print(f"measuring {name} ({args.runs} runs)...", file=sys.stderr, flush=True)
        began, figure_load = time.perf_counter(), load()
        try:
            figure = measure(args.runs).to_json()
        except Exception as error:  # recorded, and the exit status says so
            failures += 1
            doc = (measure.__doc__ or name).strip().splitlines()[0]
            figure = figures.Figure(name, doc, "", not_measured=f"failed: {error}".splitlines()[0]).to_json()
        figure["measured_at"] = started
        figure["load_at_start"] = figure_load
        figure["commit"] = data_commit
        results.append(figure)
        status = figure["not_measured"] or f"{time.perf_counter() - began:.0f} s"
        print(f"  {name}: {status}", file=sys.stderr, flush=True)

    data = {
        "machine": machine(), "commit": data_commit, "measured_at": started,
        "load_at_start": start_load, "runs": args.runs, "figures": results,
    }
    json_path, table_path = report.write(data, report.BUILD)
    print(f"wrote {json_path.relative_to(report.ROOT)} and {table_path.relative_to(report.ROOT)}")
    if args.publish:
        json_path, table_path = report.write(data, report.PUBLISHED)
        print(f"published {json_path.relative_to(report.ROOT)} and {table_path.relative_to(report.ROOT)}")
    print(table_path.read_text())
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
