"""``python -m benchmarks.model_planner``: the planner's step peak against the allocator, on real architectures.

For each architecture of :data:`snippets.lib.zoo.ARCHITECTURES`, optimizer and
mode (one device with XLA on, one device without, ``MirroredStrategy``
without XLA), the planner (:func:`snippets.lib.model_plan.plan_model`'s
method: runs at its two small per-device batches, extrapolated) is compared
with what the allocator measures at larger target batches ("measured": the
per-device peak of a ``fit`` step above the pre-model baseline, one input
batch included, the worst of steps 0 and 1). Each run is a fresh kernel
(a fork of the harness's server: a new process, TensorFlow already
imported). Under ``MirroredStrategy`` the emulated devices share one
allocator, so the replica's program is what is measured, and the real
strategy's pool peak is reported beside it as a bound
(:mod:`snippets.lib.model_step`). For three architectures the targets are
also measured at one inter-op thread, and the spread is published.

Results are cached by package versions and configuration in
``benchmarks/results/model_planner.json`` (committed): a re-run measures only
what is missing (``--fresh`` re-measures all). The file states its own run time.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from benchmarks.measure import machine
from harness import Kernel
from snippets.lib import devices, model_plan, model_step, zoo
from snippets.lib.model_step import ModelStep

RESULTS = Path(__file__).resolve().parent / "results" / "model_planner.json"

#: Input sizes that keep a CPU step to seconds (the builders' defaults).
TARGETS = (32, 64)
MODES = (("single", "on"), ("single", "off"), ("mirrored", "off"))
OPTIMIZERS = ("adam", "rmsprop")
#: Architectures whose targets are also run at one inter-op thread.
SPREAD = ("small_cnn", "transformer_classifier", "wide_mlp")
CAP = "8GiB"


def versions() -> dict:
    info = machine()
    return {key: info[key] for key in info if key in ("tensorflow", "keras", "jax", "numpy", "python")}


def key(step: ModelStep, threads: int | None, real: bool) -> str:
    return json.dumps([asdict(step), threads, real], sort_keys=True)


def run(step: ModelStep, threads: int | None = None, real: bool = False, cap: str = CAP) -> dict:
    """One measured run in a fresh kernel (a fork of the harness's preloaded server) capped at ``cap``:
    :func:`snippets.lib.model_step.measure`'s result. Shared with tests/test_model_plan.py."""
    env = {"TF_NUM_INTEROP_THREADS": str(threads)} if threads else {}
    with Kernel(env=env, deadline=1200) as kernel:
        setup = kernel.call(devices.configure, step.devices if real else 1, cap, "cpu")
        return kernel.call(model_step.measure, step, 2, setup.devices if real else ())


def configurations(names: Sequence[str]):
    """(name, base step) for every architecture x optimizer x mode."""
    for name in names:
        arch = zoo.ARCHITECTURES[name]
        for optimizer in OPTIMIZERS:
            for strategy, xla in MODES:
                devices_ = 2 if strategy == "mirrored" else 1
                yield name, ModelStep(arch.target, optimizer, 1, xla, strategy, devices_, loss=arch.loss)


def jobs(names: Sequence[str]):
    """Every run the benchmark needs: (step, threads, real_strategy)."""
    # Every configuration's own runs first, then the bounds and the spread.
    for name, base in configurations(names):
        replicas = base.devices if base.strategy == "mirrored" else 1
        for b in sorted(set(model_plan.SMALL_BATCHES) | set(TARGETS)):
            yield base.at_batch(b * replicas), None, False
    for name, base in configurations(names):
        for b in TARGETS:
            if base.strategy == "mirrored" and base.optimizer == OPTIMIZERS[0]:
                yield base.at_batch(b * base.devices), None, True
            if name in SPREAD:
                yield base.at_batch(b * (base.devices if base.strategy == "mirrored" else 1)), 1, False


def rows(cache: dict, names: Sequence[str]) -> list[dict]:
    """Planner vs measured at each target, from the cached runs (missing runs are skipped)."""
    out = []
    for name, base in configurations(names):
        replicas = base.devices if base.strategy == "mirrored" else 1
        small = [cache.get(key(base.at_batch(b * replicas), None, False)) for b in model_plan.SMALL_BATCHES]
        if not all(r and r["completed"] for r in small):
            continue
        plan = model_plan.ModelPlan(base.at_batch(1), "extrapolated", model_plan.SMALL_BATCHES,
                                    tuple(r["step_peak"] for r in small))
        for b in TARGETS:
            step = base.at_batch(b * replicas)
            measured = cache.get(key(step, None, False))
            if not (measured and measured["completed"]):
                continue
            worst = measured["step_peak"]
            one = cache.get(key(step, 1, False))
            if one and one["completed"]:
                worst = max(worst, one["step_peak"])
            row = {"architecture": name, "optimizer": base.optimizer, "strategy": base.strategy,
                   "xla": base.xla, "batch_per_device": b, "planned": plan.peak_at(b), "measured": worst,
                   "ratio": plan.peak_at(b) / worst, "weights": measured["weights_bytes"],
                   "seconds_per_step_cpu": measured["seconds_per_step"]}
            if one and one["completed"]:
                row["one_thread_over_two"] = one["step_peak"] / measured["step_peak"]
            pool = cache.get(key(step, None, True))
            if pool and pool["completed"]:
                row["pool_peak"] = pool["step_peak"]
            out.append(row)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.model_planner", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(zoo.ARCHITECTURES), metavar="NAME",
                        help="architectures to measure (default: all)")
    parser.add_argument("--fresh", action="store_true", help="ignore the cache")
    parser.add_argument("--workers", type=int, default=2, help="kernels side by side (default 2)")
    parser.add_argument("--budget", type=float, default=3600, help="stop starting runs after this many seconds")
    args = parser.parse_args(argv)
    names = args.only or list(zoo.ARCHITECTURES)
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() and not args.fresh else {}
    if data.get("versions") != versions():
        data = {}
    cache = data.get("runs", {})
    todo = [job for job in jobs(names) if key(*job) not in cache]
    began = time.perf_counter()

    def one(job):
        if time.perf_counter() - began > args.budget:
            return job, None
        try:
            return job, run(*job)
        except Exception as error:  # recorded as not completed, with the reason
            return job, {"completed": False, "error": str(error).splitlines()[0] if str(error) else repr(error)}

    with ThreadPoolExecutor(args.workers) as pool:
        for job, result in pool.map(one, todo):
            if result is None:
                continue
            cache[key(*job)] = result
            print(f"{job[0].label()} threads={job[1]} real={job[2]}: "
                  f"{result.get('step_peak')} ({time.perf_counter() - began:.0f} s)", flush=True)
            RESULTS.write_text(json.dumps({"versions": versions(), "runs": cache}, indent=0))
    seconds = time.perf_counter() - began + data.get("seconds", 0)
    table = rows(cache, list(zoo.ARCHITECTURES))
    RESULTS.write_text(json.dumps({"versions": versions(), "seconds": round(seconds), "rows": table,
                                   "runs": cache}, indent=0))
    print(f"{len(table)} rows; {sum(1 for j in jobs(names) if key(*j) not in cache)} runs missing; "
          f"{seconds:.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
