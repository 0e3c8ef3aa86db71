"""One small function per measurement; each returns a :class:`Figure`.

A measurement whose module has not landed (is not in the checked-out
commit) is reported as "not measured: <module> not present", never as a
made-up number. Wall times are measured here and only reported: no test
asserts them.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks import remote
from benchmarks.measure import ROOT, python, run_child, summary
from benchmarks.remote import SEED_SHAPE
from harness import Kernel
from snippets.lib import devices, placements, units

#: The line ``python -m snippets.reproduce`` must print for a run to count.
OOM_LINE = "ResourceExhaustedError: OOM when allocating tensor with shape[131072,65536]"


@dataclass
class Quantity:
    """One reported number: its label, unit and the runs behind its median."""

    label: str
    unit: str  # "s", "bytes", "ratio"
    runs: list[float | int]

    def to_json(self) -> dict:
        return {"label": self.label, "unit": self.unit, **summary(self.runs)}


@dataclass
class Figure:
    """A measurement: what and how, its quantities, or why it was not measured."""

    name: str
    title: str
    method: str
    quantities: list[Quantity] = field(default_factory=list)
    not_measured: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "name": self.name, "title": self.title, "method": self.method,
            "status": "not measured" if self.not_measured else "measured",
            "not_measured": self.not_measured, "notes": self.notes,
            "quantities": [q.to_json() for q in self.quantities],
        }


def landed(*paths: str) -> str | None:
    """The first of ``paths`` (repository-relative) missing from HEAD, or None if all are there."""
    for path in paths:
        found = subprocess.run(["git", "cat-file", "-e", f"HEAD:{path}"], cwd=ROOT,
                               capture_output=True).returncode == 0
        if not found:
            return path
    return None


def _module(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def requires(*paths: str):
    """Decorator: report "not measured: <module> not present" unless ``paths`` are in HEAD."""

    def wrap(function: Callable[[int], Figure]) -> Callable[[int], Figure]:
        def measure(runs: int) -> Figure:
            missing = landed(*paths)
            if missing:
                doc = (function.__doc__ or function.__name__).strip().splitlines()[0]
                return Figure(function.__name__, doc, "", not_measured=f"{_module(missing)} not present")
            return function(runs)

        measure.__name__, measure.__doc__ = function.__name__, function.__doc__
        return measure

    return wrap


# --- child-process measurements ----------------------------------------------


@requires("snippets/reproduce.py")
def oom_reproduction(runs: int) -> Figure:
    """Full-shape OOM reproduction on CPU (`python -m snippets.reproduce`)"""
    walls, cpus, peaks = [], [], []
    for _ in range(runs):
        child = run_child(python("-m", "snippets.reproduce"))
        if child.returncode != 0 or OOM_LINE not in child.output:
            raise RuntimeError(f"reproduce_oom did not print the OOM line (exit {child.returncode}):\n"
                               f"{child.output[-2000:]}")
        walls.append(child.wall_s)
        cpus.append(child.cpu_s)
        peaks.append(child.peak_rss_bytes)
    return Figure(
        "oom_reproduction", oom_reproduction.__doc__.strip(),
        "Whole command in a fresh process (TensorFlow import included), CPU mode: 4 logical CPUs, "
        "BFC allocator capped at 30976 MiB. Peak RSS is the child's ru_maxrss (os.wait4).",
        [Quantity("wall time", "s", walls), Quantity("CPU time", "s", cpus),
         Quantity("peak RSS", "bytes", peaks)],
        notes=["the issue's limits: at most 30 s and 2 GiB on a CPU-only machine"],
    )


def _summary_line(output: str) -> str:
    """pytest's closing line, e.g. ``212 passed, 3 skipped in 301.2s``, without the time."""
    lines = [l.strip("= ").strip() for l in output.splitlines() if re.search(r"\d+ (passed|failed)", l)]
    return re.sub(r"\s+in [\d.]+s.*$", "", lines[-1]) if lines else "no summary line"


def test_suite(runs: int) -> Figure:
    """Whole test suite (`python -m pytest`)"""
    walls, cpus, outcomes = [], [], []
    for _ in range(runs):
        child = run_child(python("-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=5"))
        walls.append(child.wall_s)
        cpus.append(child.cpu_s)
        # The failed tests by name (pytest.ini's -ra lists them): one run of three had a failure no one could name.
        failed = re.findall(r"^FAILED (\S+)", child.output, re.MULTILINE)
        outcomes.append(f"exit {child.returncode}: {_summary_line(child.output)}"
                        + (f" ({', '.join(failed)})" if failed else ""))
    slowest = re.findall(r"^([\d.]+)s (?:call|setup|teardown)\s+(\S+)$", child.output, re.MULTILINE)
    return Figure(
        "test_suite", test_suite.__doc__.strip(),
        "pytest as the README runs it: every chapter and docstring in its own kernel, the browser test "
        "included when Chromium is installed.",
        [Quantity("wall time", "s", walls), Quantity("CPU time", "s", cpus)],
        notes=[f"outcomes: {'; '.join(dict.fromkeys(outcomes))}",
               "slowest in the last run: " + ", ".join(f"{name} {sec} s" for sec, name in slowest)],
    )


def mkdocs_build(runs: int) -> Figure:
    """Strict build of both editions (`make build`)"""
    walls, cpus = [], []
    for _ in range(runs):
        wall = cpu = 0.0
        with tempfile.TemporaryDirectory(prefix="site-") as out:
            # As the Makefile's build: English first (its build cleans the directory), then Chinese under zh/.
            for config, site_dir in (("mkdocs.yml", out), ("mkdocs.zh.yml", f"{out}/zh")):
                child = run_child(python("-m", "mkdocs", "build", "--strict", "--quiet", "-f", config,
                                         "--site-dir", site_dir))
                if child.returncode != 0:
                    raise RuntimeError(f"mkdocs build --strict -f {config} failed:\n{child.output[-2000:]}")
                wall, cpu = wall + child.wall_s, cpu + child.cpu_s
        walls.append(wall)
        cpus.append(cpu)
    return Figure(
        "mkdocs_build", mkdocs_build.__doc__.strip(),
        "Both editions, English then Chinese, into a fresh temporary directory each run (no cache).",
        [Quantity("wall time", "s", walls), Quantity("CPU time", "s", cpus)],
    )


# --- kernel measurements (TensorFlow runs in a fresh process per configuration) ---


@requires("snippets/decide.py", "snippets/lib/ledger.py")
def planner_seed(runs: int) -> Figure:
    """Planner on the full seed model (`snippets.decide`)"""
    firsts, bests, peaks = [], [], []
    for _ in range(runs):
        with Kernel() as kernel:  # a fresh process each run: the first call is a cold one
            result = kernel.call(remote.planner_seed, 3)
        firsts.append(result["first_s"])
        bests.append(result["best_s"])
        peaks.append(result["allocated_peak_bytes"])
    return Figure(
        "planner_seed", planner_seed.__doc__.strip(),
        "`snippets.decide.benchmark`: build the [131072, 65536] model under `keras.StatelessScope`, read its "
        "weights, plan float32 + RMSprop mirrored over 4 devices, rank remedies; Keras and TensorFlow "
        "imported first (not timed). The first call also builds one small optimizer to count RMSprop's "
        "slots. Tensor bytes: the capped allocator's peak during the calls.",
        [Quantity("first call (after imports)", "s", firsts),
         Quantity("later calls (best of 3)", "s", bests),
         Quantity("tensor bytes allocated (allocator peak)", "bytes", peaks)],
    )


@requires("snippets/lib/ledger.py", "snippets/memory_budget.py")
def planner_vs_allocator(runs: int) -> Figure:
    """Planner vs capped-allocator peak (`snippets.memory_budget.allocator_check`)"""
    worst, names = [], set()
    with Kernel() as kernel:
        for _ in range(runs):
            rows = kernel.call(remote.planner_vs_allocator)
            row = max(rows, key=lambda r: abs(r["error"]))
            worst.append(100 * abs(row["error"]))
            names.add(row["name"])
    return Figure(
        "planner_vs_allocator", planner_vs_allocator.__doc__.strip(),
        f"{len(rows)} configurations of a Dense layer at [16384, 1024] (initialisation with zeros, "
        "Glorot, He; float32, float16, bfloat16, mixed_float16; optimizer slots plus gradients for SGD, "
        "momentum, RMSprop, Adam, AMSGrad) on 4 logical CPUs under a 1024 MiB cap: "
        "|planned - measured| / measured, largest over the configurations.",
        [Quantity("max relative error", "%", worst)],
        notes=[f"worst configuration: {', '.join(sorted(names))}"],
    )


@requires("snippets/lib/step_ledger.py", "snippets/lib/data/step_probes.json")
def planner_vs_step_peak(runs: int) -> Figure:
    """Planner vs each device's measured training-step peak (`snippets.lib.step_ledger`)"""
    from snippets.lib import step_ledger

    cases = step_ledger.AGREEMENT_CASES
    errors: dict[str, list[float]] = {case.label(): [] for case in cases}
    last: dict[str, dict] = {}
    compiled, under, over, drops, outside = [], [], [], [], []  # one figure per run
    for _ in range(runs):
        worst = {"compiled": 0.0, "under": 0.0, "over": 0.0, "drop": 0.0, "outside": 0.0}
        for case in cases:
            (d, f), _batch = case.program
            cap = f"{max(64, 64 * d * f // 2**20)}MiB"  # 16 x the float32 kernel
            with Kernel() as kernel:  # one fresh process per figure: a used allocator has holes
                kernel.call(devices.configure, 1, cap, "cpu")
                row = step_ledger.compare(case, kernel.call(step_ledger.measure, case))
            errors[case.label()].append(100 * row["error"])
            last[case.label()] = row
            one = step_ledger.compare(case, step_ledger.measure_fresh(case, cap, inter_op_threads=1))
            if not row["slack"]:
                worst["compiled"] = max(worst["compiled"], 100 * abs(row["error"]))
            else:
                variable = row["slack"] / 2  # the slack is the margin's buffer and one more
                worst["under"] = max(worst["under"], 100 * (row["measured"] - row["planned"]) / row["measured"])
                worst["over"] = max(worst["over"], (row["planned"] - row["measured"]) / variable)
                worst["drop"] = max(worst["drop"], (row["measured"] - one["measured"]) / variable)
            if not step_ledger.within_bounds(one):
                worst["outside"] = max(worst["outside"], 100 * abs(one["error"]))
        for values, key in ((compiled, "compiled"), (under, "under"), (over, "over"), (drops, "drop"),
                            (outside, "outside")):
            values.append(worst[key])
    return Figure(
        "planner_vs_step_peak", planner_vs_step_peak.__doc__.strip(),
        f"{len(cases)} configurations (placements x optimizers x XLA x precisions, none at the probe's "
        "shape): one device's program (its kernel piece, its part of the batch, its update compiled as "
        "on a GPU host) alone in a fresh process under its own capped CPU BFC allocator; a warm-up fit "
        "step, then the allocator's peak during one more step, against the planner's step peak. "
        "Error = (planned - measured) / measured. TensorFlow's executor runs with two inter-op "
        "threads (snippets.lib.devices.CPU_INTER_OP_THREADS); each configuration runs once more with one, "
        "which changes the order of a no-XLA update's ops and so which buffers it reuses. Updates "
        "without XLA are planned with one buffer of margin (snippets.lib.planner.SCHEDULE_MARGIN).",
        [Quantity("compiled updates: max |relative error|", "%", compiled),
         Quantity("no-XLA updates: largest undershoot", "%", under),
         Quantity("no-XLA updates: largest overshoot", "variables", over),
         Quantity("largest drop with one inter-op thread (no-XLA updates)", "variables", drops),
         Quantity("one inter-op thread: worst error outside the planner's bounds", "%", outside)],
        notes=[f"{label}: planned {last[label]['planned']} B, measured {last[label]['measured']} B, "
               f"error {sorted(values)[len(values) // 2]:+.2f} %" for label, values in errors.items()],
    )


@requires("snippets/lib/step_ledger.py", "snippets/lib/data/step_probes.json")
def schedule_margin(runs: int) -> Figure:
    """No-XLA updates above the probe's order, at variables too large for BFC's split rule"""
    from snippets.lib import step_ledger

    excess, drops, slots = [], [], []  # one figure per run, in variables
    notes = []
    for _ in range(runs):
        worst = {"excess": -1.0, "drop": 0.0, "slots": 0.0}
        for case in step_ledger.MARGIN_CASES:
            (d, f), _batch = case.program
            variable = d * f * 4
            cap = f"{4 * variable // 2**20 * 2}MiB"  # 8 variables: above every order, under 4.5 GiB
            order = step_ledger.probe_order_units(case)
            got = {}
            for label, threads, build in (("2", 2, True), ("8", 8, True), ("1", 1, True), ("2, slots in fit", 2, False)):
                row = step_ledger.measure_fresh(case, cap, inter_op_threads=threads, build_slots=build)
                if not row["completed"]:
                    raise RuntimeError(f"{case.label()} ran out under {cap} ({label} threads)")
                got[label] = row["step_peak"] / variable
            worst["excess"] = max(worst["excess"], *(units - order for key, units in got.items() if key != "1"))
            worst["drop"] = max(worst["drop"], got["2"] - got["1"])
            worst["slots"] = max(worst["slots"], abs(got["2, slots in fit"] - got["2"]))
            notes.append(f"{case.label()}: probe's order {order:.3f}, measured " +
                         ", ".join(f"{units:.3f} ({key} threads)" for key, units in got.items()) + " variables")
        excess.append(worst["excess"])
        drops.append(worst["drop"])
        slots.append(worst["slots"])
    return Figure(
        "schedule_margin", schedule_margin.__doc__.strip(),
        f"{len(step_ledger.MARGIN_CASES)} configurations, updates without XLA (RMSprop, Adam at 384 MiB, SGD with momentum at "
        "512 MiB float32 variables: sizes at which BFC's split rule wastes at most 128 MiB a buffer), each "
        "device program alone in a fresh process under a capped CPU BFC allocator (8 variables), at 2, 8 "
        "and 1 inter-op threads with the slots built before fit, and at 2 with Keras building them inside "
        "the first step; the step's peak in variables against the planner's step peak without "
        "snippets.lib.planner.SCHEDULE_MARGIN (the probe's order of the update's ops).",
        [Quantity("largest measured peak above the probe's order", "variables", excess),
         Quantity("largest drop with one inter-op thread", "variables", drops),
         Quantity("largest change from building the slots inside fit", "variables", slots)],
        notes=notes[-len(step_ledger.MARGIN_CASES):],
    )


SHARDING_FILES = ("snippets/tensor_parallel.py", "snippets/dtensor.py", "snippets/placement.py")
SHARDING_LABELS = {
    "column": "column slices, `tf.device` (W[D, F_model])",
    "row": "row slices, `tf.device` (W[D_model, F])",
    "dtensor": "DTensor layout [UNSHARDED, \"model\"]",
    "mirrored": "MirroredStrategy, at [1024, 256]",
}
_sharding_cache: dict[int, dict] = {}


def _sharding_runs(runs: int) -> dict[str, list[dict]]:
    """One kernel reserves the seed kernel under every method ``runs`` times (shared by two figures)."""
    if runs not in _sharding_cache:
        with Kernel() as kernel:
            _sharding_cache[runs] = kernel.call(remote.sharding, list(SHARDING_LABELS), runs)
    return _sharding_cache[runs]


@requires(*SHARDING_FILES)
def sharding_balance(runs: int) -> Figure:
    """Per-device bytes / (total / N), seed kernel over 4 devices"""
    results = _sharding_runs(runs)
    quantities = []
    for method, label in SHARDING_LABELS.items():
        ratios = []
        for row in results[method]:
            total = units.tensor_bytes(row.get("shape", SEED_SHAPE), "float32")
            ratios.append(max(row["per_device"].values()) / (total / len(row["per_device"])))
        quantities.append(Quantity(label, "ratio", ratios))
    pool = units.format_bytes(results["column"][0]["pool_bytes"])
    kernel = units.format_bytes(units.tensor_bytes(SEED_SHAPE, "float32"))
    return Figure(
        "sharding_balance", sharding_balance.__doc__.strip(),
        "Allocation only: shards reserved with `tf.raw_ops.Empty(init=False)` through one capped BFC "
        f"pool of {pool} shared by 4 logical CPUs (no page touched); bytes per device read from where "
        f"each piece is placed; total = the whole {list(SEED_SHAPE)} float32 kernel, {kernel}. "
        "1.0 = an even split; N = a full copy on every device. MirroredStrategy cannot create the "
        "full shape (that is the OOM), so it is measured at [1024, 256]; the ratio does not depend "
        "on the shape.",
        quantities,
    )


@requires(*SHARDING_FILES)
def shard_creation_peak(runs: int) -> Figure:
    """Allocator peak while creating the shards / shard bytes"""
    results = _sharding_runs(runs)
    quantities = []
    for method, label in SHARDING_LABELS.items():
        rows = results[method]
        if rows[0]["peak"] is None:
            continue
        quantities.append(Quantity(label, "ratio", [r["peak"] / sum(r["per_device"].values()) for r in rows]))
    rss = [r["rss"] for method in ("column", "row", "dtensor") for r in results[method]]
    quantities.append(Quantity("process RSS after each reservation", "bytes", rss))
    count = len(results["column"][0]["per_device"])
    column, row = (list(placements.local_shape(SEED_SHAPE, kind, count)) for kind in ("column", "row"))
    return Figure(
        "shard_creation_peak", shard_creation_peak.__doc__.strip(),
        "Same runs as above: the capped allocator's peak (`get_memory_info` after `reset_memory_stats`) "
        f"while the {count} shards ({column} for column and DTensor, {row} for row) are created, divided "
        "by their bytes. 1.0 means no full-size temporary was ever allocated; the resident memory "
        "shows that no page of the reserved shards was touched.",
        quantities,
    )


#: Every measurement, in the order of the table.
ALL: dict[str, Callable[[int], Figure]] = {
    f.__name__: f for f in (oom_reproduction, planner_seed, planner_vs_allocator, planner_vs_step_peak,
                            schedule_margin, sharding_balance,
                            shard_creation_peak, test_suite, mkdocs_build)
}
