"""``python -m benchmarks.pool_edge``: a plan's largest batch run under a cap of its pool (snippets.lib.pool_edge).

Plans :data:`snippets.lib.pool_edge.STEP` as ``decide --model`` does, then runs its step in fresh processes
(``python -m snippets.lib.model_step``, as decide.md shows a reader) capped at the pool, at the largest batch the plan
puts in the whole pool and at the one it puts in the pool less 128 MiB, and once under a roomy cap for the peak.
Writes ``benchmarks/results/pool_edge.json``, which decide.md quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence

from benchmarks.measure import commit, load, machine
from snippets.lib import hardware, model_plan, pool_edge, units


def run_capped(step_fields: dict, cap: int, threads: int) -> dict:
    """One ``model_step`` run of ``step_fields`` in a fresh process capped at ``cap`` bytes, ``threads`` inter-op
    threads: its JSON reply, with ``chunk_loss`` (:func:`snippets.lib.pool_edge.chunk_loss`) where it ran out."""
    env = {**os.environ, "TF_NUM_INTEROP_THREADS": str(threads), "TF_CPP_MIN_LOG_LEVEL": "0"}
    done = subprocess.run([sys.executable, "-m", "snippets.lib.model_step", "--cap", f"{cap // units.MiB}MiB",
                           "--step", json.dumps(step_fields)], env=env, capture_output=True, text=True, timeout=900)
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    if not reply.get("completed"):
        reply["chunk_loss"] = pool_edge.chunk_loss(done.stderr)
    return reply


def measure() -> dict:
    """The results file's content (:func:`snippets.lib.pool_edge.results`)."""
    began, start_load = time.perf_counter(), load()
    step = pool_edge.STEP
    plan = model_plan.plan_model(step, progress=lambda line: print(line, file=sys.stderr, flush=True))
    rooms = {"pool": pool_edge.POOL, "usable": hardware.usable_bytes(pool_edge.POOL)}
    batches = {which: plan.largest_batch(room) for which, room in rooms.items()}
    runs = []
    for which, batch in batches.items():
        for threads in pool_edge.THREADS:
            reply = run_capped(step.at_batch(batch).fields(), pool_edge.POOL, threads)
            runs.append({"batch": batch, "threads": threads, "completed": bool(reply.get("completed")),
                         "step_peak": reply.get("step_peak"), "chunk_loss": reply.get("chunk_loss")})
            print(f"{which}: batch {batch}, {threads} threads: {runs[-1]}", file=sys.stderr, flush=True)
    roomy = [run_capped(step.at_batch(batches["pool"]).fields(), 4 * pool_edge.POOL, t)["step_peak"]
             for t in pool_edge.THREADS]
    return {"machine": machine(), "commit": commit(), "load_at_start": start_load,
            "seconds": round(time.perf_counter() - began, 1), "step": step.fields(), "label": step.label(),
            "pool": pool_edge.POOL, "usable": rooms["usable"], "batches": batches,
            "planned": {which: plan.peak_at(batch) for which, batch in batches.items()},
            "runs": runs, "roomy": max(roomy), "roomy_cap": 4 * pool_edge.POOL}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pool_edge",
                                     description="Run a plan's largest batch under a cap of its pool (the whole pool, "
                                     "then the pool less 128 MiB) and write benchmarks/results/pool_edge.json.")
    parser.parse_args(argv)
    data = measure()
    pool_edge.RESULTS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(pool_edge.summary(data))
    print(f"{data['seconds']:.0f} s; wrote {pool_edge.RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
