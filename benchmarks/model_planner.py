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
(:mod:`snippets.lib.model_step`). Every target is measured at one and at two
inter-op threads (two is TensorFlow's default on this 2-core machine), and
without XLA once more at two (:data:`REPEATS`) and twice at
eight (:data:`HOST_THREADS`, :data:`HOST_REPEATS`; each of those two, as the
planner's runs, takes more steps while they are quick,
:data:`snippets.lib.model_step.MAX_STEPS`), then once there for
:data:`HOST_STEPS` steps: racing threads add or drop a whole buffer from one step to the next, and more threads
keep more buffers live, so the worst of those 18 to 30 steps counts (a training run takes thousands); the spread
between one and two threads is published.

The architectures of :data:`snippets.lib.zoo.HOLDOUT` (a U-Net, a ViT, a 1-D CNN) are measured the same way
with Adam (:data:`HOLDOUT_OPTIMIZERS`) and published apart (``holdout``): the planner's margins were chosen without
them, and their first measurement led to the cheap run at 256 (``ratio_without_cheap`` keeps what it planned before);
the chord between runs was chosen with them, and the other two sets, in view (``ratio_on_lines``: the lines).
:data:`SPREAD`'s plans are made :data:`PLAN_REPEATS` more times from fresh runs (``plan_spread``: how far the same
command's plan and its cards' largest batches move); :data:`REDRAWN`'s "measured", :data:`REDRAWS` more times
(``measured_sets``): how far the reference moves. Those of :data:`snippets.lib.zoo.FRESH`, measured after every rule but
the last seven (a batch between two runs on their chord; past the runs, every line at the steepest thread count's slope:
``ratio_own_slopes``, on every set; running a reader's batch at twice the largest run; the chord past a far run; an
Embedding's row in the floor; flat runs, or runs faster than linear (``squared``), stopping the cards), stand apart.
The reader's command for a 224 px ResNet50 (:data:`benchmarks.decide_timing.DECIDE_RESNET`), timed with ``--time-decide``,
has its plan held against that replica's step at its own batch (:func:`decide_check`).

Results are cached by package versions and configuration in ``benchmarks/results/model_planner.json`` (committed): a
re-run measures only what is missing (``--fresh`` re-measures all). The file states its own run time. A run measured
since ``max_steps`` was recorded takes more steps while quick at any thread count; the published targets' runs at one
and two threads predate it (:func:`stale` keeps them) and took two, so after ``--fresh`` the counts above grow.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from benchmarks.decide_timing import time_decide
from benchmarks.measure import machine
from harness import Kernel
from snippets.lib import batch_limits, devices, model_plan, model_step, plan_accuracy, plan_runs, zoo
from snippets.lib.model_step import ModelStep

RESULTS = Path(__file__).resolve().parent / "results" / "model_planner.json"

#: Input sizes that keep a CPU step to seconds (the builders' defaults).
TARGETS = (64, 128)
MODES = (("single", "on"), ("single", "off"), ("mirrored", "off"))
OPTIMIZERS = ("adam", "rmsprop")
CAP = "8GiB"
#: Extra runs of each target without XLA at TensorFlow's default thread count: without XLA one
#: run's order of the ops is one draw (a wide MLP's step read 530 MiB at batch 128 in two runs and
#: 641-713 MiB at 16, 32 and 64), so "measured" is the worst of these and the thread counts.
REPEATS = 1
#: And runs of each target without XLA at eight inter-op threads, in "measured" too (also published
#: alone, ``host_threads_peak``): more threads draw more of the orders the step's dataflow allows and
#: keep more independent ops' buffers live at once. A GPU's own order (its kernels run inline, one at
#: a time: :data:`snippets.lib.plan_caveats.THREADS_CAVEAT`) no CPU run makes.
HOST_THREADS = 8
#: Runs of each target without XLA at :data:`HOST_THREADS`: the planner's lines at 8 threads came
#: out steeper than one draw at the target showed (five rows over 1.25), so "measured" takes two,
#: each of up to :data:`snippets.lib.model_step.MAX_STEPS` steps while quick (:func:`stale`).
HOST_REPEATS = 2
#: And one more run there of this many steps, each a draw: a reader's training run draws thousands
#: (DenseNet121, Adam, 128 per device: at most 450.95 MiB in the ten steps of five runs, 463.51 in eight).
HOST_STEPS = 8
#: Per-device batches far beyond the targets (steps of a few GiB), for whether the peak stays linear.
LINEARITY = {"small_cnn": (model_plan.LINE_CHECKED,), "transformer_classifier": (model_plan.LINE_CHECKED,)}
#: Architectures whose plans (Adam, without XLA, on one device and mirrored) are made :data:`PLAN_REPEATS`
#: more times, each from runs of its own: threads race, so each run draws its own orders of the ops, and
#: the same command plans another peak (a trial's ViT: 461.85-506.25 MiB over six). How far they move.
SPREAD = ("small_cnn", "transformer_classifier", "gru_stack")
PLAN_REPEATS = 4
#: Rows (architecture, optimizer, strategy, XLA, per-device batch) whose "measured" is taken :data:`REDRAWS`
#: more times, each a whole set of its runs (:func:`target_jobs`): the rows the published plan put outside
#: 0.95-1.25 or within 0.02 of its floor. Whether "measured" itself moves as far as they missed by.
REDRAWN = (("wide_mlp", "adam", "single", "off", 128), ("deep_mlp", "adam", "single", "off", 64),
           ("deep_mlp", "adam", "single", "off", 128), ("transformer_classifier", "adam", "mirrored", "off", 128),
           ("wide_mlp", "rmsprop", "single", "off", 64), ("transformer_classifier", "adam", "single", "off", 64))
REDRAWS = 2


def versions() -> dict:
    info = machine()
    return {key: info[key] for key in info if key in ("tensorflow", "keras", "jax", "numpy", "python")}


def key(step: ModelStep, threads: int | None, real: bool, repeat: int = 0, steps: int = 2) -> str:
    """The cache's key of one run; ``repeat`` > 0 for another draw of the same configuration, ``steps``
    the training steps it measured."""
    tail = ([repeat] if repeat else []) + ([steps] if steps != 2 else [])
    return json.dumps([step.fields(), threads, real] + tail, sort_keys=True)


def run(step: ModelStep, threads: int | None = None, real: bool = False, repeat: int = 0,
        steps: int = 2, cap: str = CAP) -> dict:
    """One measured run of ``steps`` training steps in a fresh kernel (a fork of the harness's preloaded server) capped at
    ``cap``: :func:`snippets.lib.model_step.measure`'s result (``repeat`` only tells draws apart), less its ``square``
    (hundreds of a CNN's tensors by name; read at 16 and 32 on 2026-12-07, none of the 19 architectures' grew as B x B)."""
    with Kernel(env={"TF_NUM_INTEROP_THREADS": str(threads)} if threads else {}, deadline=1200) as kernel:
        setup = kernel.call(devices.configure, step.devices if real else 1, cap, "cpu")
        return {k: v for k, v in kernel.call(model_step.measure, step, steps, setup.devices if real else ()).items()
                if k != "square"}


def architecture(name: str) -> zoo.Architecture:
    """A benchmark architecture by name: :data:`snippets.lib.zoo.ARCHITECTURES` or the held-out :data:`snippets.lib.zoo.HOLDOUT`."""
    return zoo.ARCHITECTURES.get(name) or zoo.HOLDOUT.get(name) or zoo.FRESH[name]


#: Optimizers the held-out architectures (:data:`snippets.lib.zoo.HOLDOUT`) are measured with, in every mode.
HOLDOUT_OPTIMIZERS = OPTIMIZERS[:1]

#: Optimizers the architectures measured later (:data:`snippets.lib.zoo.FRESH`) are measured with, in every mode: both, as
#: the rows (Adam first; RMSprop after, no rule for batches above 32 changed in between).
FRESH_OPTIMIZERS = OPTIMIZERS


def configurations(names: Sequence[str], optimizers: Sequence[str] = OPTIMIZERS):
    """(name, base step) for every architecture x optimizer x mode."""
    for name in names:
        arch = architecture(name)
        for optimizer in optimizers:
            for strategy, xla in MODES:
                yield name, ModelStep(arch.target, optimizer, 1, xla, strategy, 2 if strategy == "mirrored" else 1,
                                      loss=arch.loss, kwargs=arch.kwargs)


def jobs(names: Sequence[str], optimizers: Sequence[str] = OPTIMIZERS):
    """Every run the benchmark needs: (step, threads, real_strategy, repeat). The planner's batches
    at the planner's thread counts (:func:`snippets.lib.model_plan.plan_threads`) and the targets
    at one and at two (TensorFlow's default on this machine; ``None``) inter-op threads come first,
    configuration by configuration, then the targets' extra draws without XLA (:data:`REPEATS`,
    :data:`HOST_THREADS`), the sets of :data:`REDRAWN`; then the real strategy's pool peaks and the linearity runs."""
    for name, base in configurations(names, optimizers):
        replicas = base.devices if base.strategy == "mirrored" else 1
        for b in model_plan.SMALL_BATCHES:
            for threads in model_plan.plan_threads(base):
                yield base.at_batch(b * replicas), threads, False, 0, 2
        for b in TARGETS:
            for threads in (1, None):
                yield base.at_batch(b * replicas), threads, False, 0, 2
    for name, base in configurations(names, optimizers):
        replicas = base.devices if base.strategy == "mirrored" else 1
        for b in TARGETS:
            yield from target_jobs(base.at_batch(b * replicas))[2:]
    for name, base in configurations(names, optimizers):
        replicas = base.devices if base.strategy == "mirrored" else 1
        for b in TARGETS:
            if (name, base.optimizer, base.strategy, base.xla, b) in REDRAWN:
                for draw in range(1, REDRAWS + 1):
                    yield from target_jobs(base.at_batch(b * replicas), draw)
    for name, base in configurations(names, optimizers):
        for b in TARGETS:
            if base.strategy == "mirrored" and base.optimizer == OPTIMIZERS[0]:
                yield base.at_batch(b * base.devices), None, True, 0, 2
    for name, base in linearity_configurations(names):
        for b in LINEARITY[name]:
            yield base.at_batch(b), 1, False, 0, 2
    for name, base in spread_configurations(names):
        replicas = base.devices if base.strategy == "mirrored" else 1
        for repeat in range(1, PLAN_REPEATS + 1):
            for b in model_plan.SMALL_BATCHES:
                for threads in model_plan.plan_threads(base):
                    yield base.at_batch(b * replicas), threads, False, repeat, 2


def spread_configurations(names: Sequence[str]):
    """(name, base step) for the architectures of :data:`SPREAD`: Adam, without XLA, one device and mirrored."""
    for name, base in configurations(names, OPTIMIZERS[:1]):
        if name in SPREAD and base.xla == "off":
            yield name, base


def stale(job: tuple, result: dict | None) -> bool:
    """Whether ``job``'s cached ``result`` must be measured again: missing, from a ``model_step`` older
    than ``largest_variable``, or a planner's run (its small or wide batches) from before a run took
    quick steps up to :data:`snippets.lib.model_step.MAX_STEPS` (``max_steps``), or a target's run at
    :data:`HOST_THREADS` without XLA from before then: "measured" must draw at least as many orders
    at eight threads as the planner's runs do, or a plan levelled at a draw its runs saw reads over
    a target that simply drew fewer (a wide MLP, Adam, before the targets took more: 832.5 MiB in one
    of six steps at 32, at most 713 MiB in the 14 steps at 64). The targets' runs at one and two threads stand."""
    if not result or "largest_variable" not in result:
        return True
    step, threads, real, repeat, steps = job
    replicas = step.devices if step.strategy == "mirrored" else 1
    planners = (*model_plan.SMALL_BATCHES, model_plan.WIDE_BATCH)
    planner = step.batch // replicas in planners and threads in model_plan.plan_threads(step)
    host = step.xla == "off" and step.batch // replicas in TARGETS and threads == HOST_THREADS
    return (not real and steps == 2 and (planner or host) and result.get("max_steps") != model_step.MAX_STEPS)


def thread_runs(cache: dict, base: ModelStep, replicas: int, batch: int, repeat: int = 0) -> list[dict] | None:
    """The cached runs of ``base`` at ``batch`` per device, one per planner thread count
    (:func:`snippets.lib.model_plan.plan_threads`), of draw ``repeat`` (:data:`PLAN_REPEATS`), or None if
    one is missing or did not complete."""
    runs = [cache.get(key(base.at_batch(batch * replicas), threads, False, repeat))
            for threads in model_plan.plan_threads(base)]
    return runs if all(r and r["completed"] and "largest_variable" in r for r in runs) else None


def lowest(runs: Sequence[dict]) -> int:
    """The planner's floor at the batch of ``runs`` (:func:`snippets.lib.model_plan.floor_step`), bytes."""
    return model_plan.floor_step(runs)


def wide_why(cache: dict, base: ModelStep, replicas: int, repeat: int = 0) -> str | None:
    """Whether the planner would run :data:`snippets.lib.model_plan.WIDE_BATCH` for ``base``, from its cached
    small runs of draw ``repeat``, as :func:`snippets.lib.model_plan.plan_model` decides
    (:func:`snippets.lib.model_plan.wide_reason`: "flat", "cheap" or ""); None if a run is missing."""
    groups = [thread_runs(cache, base, replicas, b, repeat) for b in model_plan.SMALL_BATCHES]
    if None in groups:
        return None
    return model_plan.wide_reason([lowest(runs) for runs in groups])


def wide_jobs(cache: dict, names: Sequence[str], optimizers: Sequence[str] = OPTIMIZERS):
    """The planner's run at :data:`snippets.lib.model_plan.WIDE_BATCH` for each configuration whose
    small runs (cached) hardly differ or put it within reach (:func:`wide_why`), as
    :func:`jobs` yields them: known only once those runs are in."""
    spread = {base for _, base in spread_configurations(names)}
    for name, base in configurations(names, optimizers):
        replicas = base.devices if base.strategy == "mirrored" else 1
        for repeat in range(PLAN_REPEATS + 1 if base in spread else 1):
            if wide_why(cache, base, replicas, repeat):
                for threads in model_plan.plan_threads(base):
                    yield base.at_batch(model_plan.WIDE_BATCH * replicas), threads, False, repeat, 2


def linearity_configurations(names: Sequence[str]):
    """(name, step) for the architectures of :data:`LINEARITY`: Adam, one device, no XLA."""
    for name, base in configurations(names):
        if name in LINEARITY and (base.optimizer, base.strategy, base.xla) == ("adam", "single", "off"):
            yield name, base


def small_line(small: Sequence[dict], batch: int) -> float:
    """The line through ``small``, runs at the planner's small batches (one thread, one order), at ``batch``
    samples per device, no margins: bytes."""
    peaks = tuple(r["step_peak"] for r in small)
    slope = max(0.0, (peaks[-1] - peaks[0]) / (model_plan.SMALL_BATCHES[-1] - model_plan.SMALL_BATCHES[0]))
    return max(peaks) + slope * (batch - model_plan.SMALL_BATCHES[-1])


def linearity(cache: dict) -> list[dict]:
    """For each :data:`LINEARITY` architecture: the line through the runs at the planner's batches
    against runs at large batches, all at one inter-op thread (one order), without margins: ``{"architecture",
    "batch_per_device", "line", "measured", "ratio"}``."""
    out = []
    for name, base in linearity_configurations(list(LINEARITY)):
        small = [cache.get(key(base.at_batch(b), 1, False)) for b in model_plan.SMALL_BATCHES]
        if not all(r and r["completed"] for r in small):
            continue
        for b in LINEARITY[name]:
            big = cache.get(key(base.at_batch(b), 1, False))
            if big and big["completed"]:
                line = small_line(small, b)
                out.append({"architecture": name, "batch_per_device": b, "line": round(line),
                            "measured": big["step_peak"], "ratio": line / big["step_peak"]})
    return out


@functools.cache
def weights(name: str) -> tuple:
    """An architecture's weights, read without allocating them, as the reader's command reads them."""
    from snippets import decide

    arch = architecture(name)
    module, function = arch.target.split(":")
    return tuple(decide.model_weights(getattr(importlib.import_module(module), function), **dict(arch.kwargs)))


def planned(cache: dict, base: ModelStep, replicas: int, repeat: int = 0,
            cheap: bool = True) -> model_plan.ModelPlan | None:
    """The plan :func:`snippets.lib.model_plan.plan_model` would make from the cached runs of draw ``repeat``
    (its floor under a line's slope from the weights, as ``python -m snippets.decide`` passes them), or None.
    ``cheap=False``: as before a cheap run at the wide batch was made (its small runs alone)."""
    counts = model_plan.plan_threads(base)
    batches = list(model_plan.SMALL_BATCHES)
    groups = [thread_runs(cache, base, replicas, b, repeat) for b in batches]
    if None in groups:
        return None
    why = wide_why(cache, base, replicas, repeat)
    if why == "cheap" and not cheap:
        why = ""
    if why:
        batches.append(model_plan.WIDE_BATCH)
        groups.append(thread_runs(cache, base, replicas, model_plan.WIDE_BATCH, repeat))
        if groups[-1] is None:
            return None
    small = [max(runs, key=lambda r: r["step_peak"]) for runs in groups]
    return model_plan.ModelPlan(base.at_batch(1), "extrapolated", tuple(batches),
                                tuple(r["step_peak"] for r in small), largest_variable=small[0]["largest_variable"],
                                **plan_runs.run_figures(groups), threads=counts,
                                rule_slope=model_plan.rule_slope(weights(base.model.rsplit(":", 1)[1]), base),
                                wide_why=why)


def target_jobs(step: ModelStep, draw: int = 0) -> list[tuple]:
    """The runs "measured" takes at ``step`` (its global batch), as :func:`jobs` yields them: at one and two
    threads, then without XLA :data:`REPEATS` more at two, :data:`HOST_REPEATS` at :data:`HOST_THREADS` and one
    of :data:`HOST_STEPS` steps there. ``draw`` > 0: another whole set of them (:data:`REDRAWN`)."""
    tag = plan_accuracy.REDRAW_TAG * draw  # apart from every repeat of the first set
    found = [(step, 1, False, tag, 2), (step, None, False, tag, 2)]
    if step.xla == "off":
        found += [(step, None, False, tag + repeat, 2) for repeat in range(1, REPEATS + 1)]
        found += [(step, HOST_THREADS, False, tag + repeat, 2) for repeat in range(HOST_REPEATS)]
        found += [(step, HOST_THREADS, False, tag, HOST_STEPS)]
    return found


def target_runs(cache: dict, step: ModelStep, draw: int = 0) -> tuple[dict, list[dict], list[dict]] | None:
    """The cached runs of :func:`target_jobs`: ``({1: run, None: run}, more runs at the default thread count,
    runs at HOST_THREADS)``, or None if one is missing or did not complete."""
    found = [cache.get(key(*job)) for job in target_jobs(step, draw)]
    if not all(r and r["completed"] for r in found):
        return None
    extra = 2 + (REPEATS if step.xla == "off" else 0)
    return {1: found[0], None: found[1]}, found[2:extra], found[extra:]


def plan_spread(cache: dict) -> list[dict]:
    """For each :data:`SPREAD` configuration and target: the plans made from each draw of the planner's runs (the
    published one and :data:`PLAN_REPEATS` more) against the same "measured" (:func:`rows`): ``{"architecture",
    "strategy", "batch_per_device", "planned": [bytes, ...], "measured", "spread", "own_runs", "largest"}`` (``spread``:
    the highest plan over the lowest; ``own_runs``: the plan runs that batch itself, from the one set of the planner's
    runs cached there, so it cannot move: :func:`far_checked`; ``largest``: each plan's largest global batch per card,
    :func:`snippets.lib.batch_limits.largest_batches`). Configurations with a run missing are left out."""
    out = []
    for name, base in spread_configurations(list(SPREAD)):
        replicas = base.devices if base.strategy == "mirrored" else 1
        plans = [planned(cache, base, replicas, repeat) for repeat in range(PLAN_REPEATS + 1)]
        if None in plans:
            continue
        for b in TARGETS:
            found = target_runs(cache, base.at_batch(b * replicas))
            if found is None:
                continue
            measured = max(r["step_peak"] for r in [*found[0].values(), *found[1], *found[2]])
            peaks, own = zip(*[far_checked(plan, base, b, found[0], found[2]) for plan in plans])  # as rows() plans
            out.append({"architecture": name, "strategy": base.strategy, "batch_per_device": b, "planned": list(peaks),
                        "measured": measured, "spread": max(peaks) / min(peaks), "own_runs": own[0],
                        "largest": [batch_limits.largest_batches(plan) for plan in plans]})
    return out


def far_checked(plan: model_plan.ModelPlan, base: ModelStep, b: int, runs: dict, host: list[dict]) -> tuple[int, bool]:
    """The plan's figure at per-device batch ``b``, bytes, and whether the planner runs ``b`` too (:func:`snippets.lib.plan_runs.runs_far`:
    twice past its largest run or more, the lines within reach there): then its own runs there are the target's runs at the planner's
    thread counts (one and eight without XLA, the first of each, else two), the same draws "measured" takes, and the figure their worst
    (or a smaller batch's) plus the margin."""
    host_bytes = model_step.default_cap(base.at_batch(b * (base.devices if base.strategy == "mirrored" else 1))) / (1 + model_plan.MARGIN)
    if not plan_runs.runs_far(b, plan.batches[-1], plan.line_peak(b), host_bytes):
        return plan.peak_at(b), False
    own = [runs[None]] if base.jit else [runs[1], host[0]]
    return round(max(*plan.peaks, *(r["step_peak"] for r in own)) * (1 + model_plan.MARGIN)), True


class OwnSlopes(model_plan.ModelPlan):
    """A plan whose lines past its runs keep each thread count's own slope, as before they took the steepest count's
    (:meth:`snippets.lib.model_plan.ModelPlan.lines`, a rule made after every row was measured): ``ratio_own_slopes``."""

    def lines(self, beyond: bool = False) -> list[tuple[float, float]]:
        return super().lines()


def rows(cache: dict, names: Sequence[str]) -> list[dict]:
    """Planner vs measured at each target, from the cached runs (configurations with a missing run are skipped).

    "Measured" is the worst per-device step peak over steps 0 and 1, over one and two (the default here) inter-op
    threads, and without XLA over :data:`REPEATS` more runs at the default, :data:`HOST_REPEATS` at :data:`HOST_THREADS`
    and one of :data:`HOST_STEPS` steps there; ``draws`` counts the steps; ``measured_sets``, for :data:`REDRAWN`,
    "measured" of each set of those runs; ``ratio_*``, the plan without a rule (each set where it is made).
    """
    out = []
    for name, base in configurations(names):
        replicas = base.devices if base.strategy == "mirrored" else 1
        plan = planned(cache, base, replicas)
        if plan is None:
            continue
        for b in TARGETS:
            step = base.at_batch(b * replicas)
            found = target_runs(cache, step)
            if found is None:
                continue
            runs, extra, host = found
            fewer = max(r["step_peak"] for r in [*runs.values(), *extra])
            planned_b, far = far_checked(plan, base, b, runs, host)
            extra += host
            worst = max(r["step_peak"] for r in [*runs.values(), *extra])
            row = {"architecture": name, "optimizer": base.optimizer, "strategy": base.strategy,
                   "devices": base.devices, "xla": base.xla, "batch_per_device": b, "planned": planned_b,
                   "measured": worst, "far_check": far, "squared": bool(plan.squared),
                   "ratio": planned_b / worst, "weights": runs[None]["weights_bytes"],
                   "draws": sum(len(r["step_peaks"]) for r in [*runs.values(), *extra]),
                   "one_thread_over_two": runs[1]["step_peak"] / runs[None]["step_peak"],
                   "seconds_per_step_cpu": runs[None]["seconds_per_step"]}
            if host:
                # The 8-thread runs alone, and the worst without them: what eight threads add.
                row["host_threads_peak"] = max(r["step_peak"] for r in host)
                row["fewer_threads_peak"] = fewer
            if (name, base.optimizer, base.strategy, base.xla, b) in REDRAWN:
                # "Measured" of each set of its runs, the first the one above (REDRAWN).
                sets = [target_runs(cache, step, draw) for draw in range(REDRAWS + 1)]
                if None not in sets:
                    row["measured_sets"] = [max(r["step_peak"] for r in [*one[0].values(), *one[1], *one[2]])
                                            for one in sets]
            pool = cache.get(key(step, None, True))
            if pool and pool["completed"]:
                row["pool_peak"] = pool["step_peak"]
            row["ratio_own_slopes"] = far_checked(OwnSlopes(**vars(plan)), base, b, runs, host)[0] / worst
            # The same plan with each line's slope between its worst peaks, as before upper quartiles (ModelPlan.lines).
            row["ratio_worst_slopes"] = replace(plan, uppers=()).peak_at(b) / worst
            if plan.wide_why == "cheap":
                # And without the run at the wide batch that a cheap one adds (model_plan.WIDE_PEAK).
                row["ratio_without_cheap"] = planned(cache, base, replicas, cheap=False).peak_at(b) / worst
                # And between the runs on the lines no lower than the chord, as between flat runs (_measured_peak_at).
                row["ratio_on_lines"] = replace(plan, wide_why="flat").peak_at(b) / worst
            elif plan.wide_why == "flat":
                # And the other way: between flat runs on the chord instead of the lines, as between cheap ones.
                row["ratio_on_chord"] = replace(plan, wide_why="cheap").peak_at(b) / worst
            out.append(row)
    return out


#: The fractions tried for :data:`snippets.lib.model_plan.MARGIN` and :data:`~snippets.lib.model_plan.EXTRAPOLATION`: 5% steps.
CHOICES = (0.0, 0.05, 0.10, 0.15)


def margin_choice(cache: dict, names: Sequence[str]) -> dict:
    """How the planner's margins were chosen, from the cached runs: the lowest planned / measured of
    every row at each margin of :data:`CHOICES` (the extra at the planner's), then, at the planner's
    margin, of the rows without XLA at each extra beyond the largest batch run (``{"margin": {"0.05":
    ratio, ...}, "extrapolation": {...}}``). Each is the smallest choice with no row under 0.95
    (docs/performance.md). The module's two constants are set for each recount and restored."""
    saved = model_plan.MARGIN, model_plan.EXTRAPOLATION
    found: dict[str, dict[str, float]] = {"margin": {}, "extrapolation": {}}
    try:
        for fraction in CHOICES:
            model_plan.MARGIN = fraction
            found["margin"][f"{fraction:.2f}"] = min(r["ratio"] for r in rows(cache, names))
        model_plan.MARGIN = saved[0]
        for fraction in CHOICES:
            model_plan.EXTRAPOLATION = fraction
            found["extrapolation"][f"{fraction:.2f}"] = min(r["ratio"] for r in rows(cache, names) if r["xla"] == "off")
    finally:
        model_plan.MARGIN, model_plan.EXTRAPOLATION = saved
    return found


#: Inter-op thread counts the reader's command (:data:`benchmarks.decide_timing.DECIDE_RESNET`) is run at, at its own batch
#: (:func:`decide_check`), one run each, as "measured" takes the rows' targets without XLA (:func:`rows`).
CHECK_THREADS = (1, None, HOST_THREADS)

#: Their allocator cap: one replica of a 224 px ResNet50 at 64 samples is planned near 6.7 GiB, over
#: :data:`snippets.lib.model_step.CAP_BOUND` of :data:`CAP`, where a cap can hold a step's peak down.
CHECK_CAP = "12GiB"


def check_jobs(decide_run: dict | None) -> list[tuple]:
    """The runs of :func:`decide_check`: the step of ``decide_run`` (:func:`time_decide`'s result) at its own
    batch, one replica's program as the planner runs it, at each of :data:`CHECK_THREADS`, then at the
    planner's small batches at one thread (the line, as :func:`linearity` draws it); [] if untimed."""
    if not decide_run:
        return []
    step = ModelStep(**decide_run["plan"]["plan"]["step"])
    replicas = step.devices if step.strategy == "mirrored" else 1
    return [*[(step, threads, False, 0, 2) for threads in CHECK_THREADS],
            *[(step.at_batch(b * replicas), 1, False, 0, 2) for b in model_plan.SMALL_BATCHES]]


def decide_check(cache: dict, decide_run: dict | None) -> dict | None:
    """The reader's command's plan held against its own batch, measured: ``{"batch_per_device", "planned",
    "measured", "ratio", "peaks", "line", "line_ratio"}`` (bytes; ``measured`` the worst of the runs' steps,
    ``peaks`` each thread count's, keyed by the count run; ``line`` the line through the runs at the planner's
    small batches at one thread, no margins, at the reader's batch, over that batch's run at one thread), or
    None if a run is missing. The rows' steps and :func:`linearity`'s stay near 3 GiB or under; this is a
    224 px step of several GiB, the size the reader plans."""
    jobs_ = check_jobs(decide_run)
    runs = [cache.get(key(*job)) for job in jobs_]
    if not runs or not all(r and r["completed"] for r in runs):
        return None
    own, small = runs[:len(CHECK_THREADS)], runs[len(CHECK_THREADS):]
    plan = decide_run["plan"]["plan"]
    measured = max(r["step_peak"] for r in own)
    per_device = plan["step"]["batch"] // plan["step"]["devices"]
    line = small_line(small, per_device)
    one = own[CHECK_THREADS.index(1)]["step_peak"]
    return {"batch_per_device": per_device, "planned": plan["step_peak"],
            "measured": measured, "ratio": plan["step_peak"] / measured,
            "peaks": {str(threads or devices.CPU_INTER_OP_THREADS): r["step_peak"]
                      for (_, threads, *_), r in zip(jobs_, own)},
            "line": round(line), "line_ratio": line / one}


def save(text: str) -> None:
    """Write :data:`RESULTS` whole or not at all (a file beside it, then renamed): the pages' tests read it while
    a benchmark runs, and a half-written one would fail them."""
    part = RESULTS.with_suffix(".part")
    part.write_text(text)
    part.replace(RESULTS)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.model_planner", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(zoo.ARCHITECTURES), metavar="NAME",
                        help="architectures to measure (default: all)")
    parser.add_argument("--fresh", action="store_true", help="ignore the cache")
    parser.add_argument("--optimizers", nargs="+", choices=OPTIMIZERS, default=list(OPTIMIZERS),
                        help="optimizers to measure (default: all)")
    parser.add_argument("--workers", type=int, default=2, help="kernels side by side (default 2)")
    parser.add_argument("--budget", type=float, default=3600, help="stop starting runs after this many seconds")
    parser.add_argument("--time-decide", action="store_true",
                        help="also time the reader's command for a 224 px ResNet50 (benchmarks.decide_timing)")
    args = parser.parse_args(argv)
    names = args.only or list(zoo.ARCHITECTURES)
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() and not args.fresh else {}
    if data.get("versions") != versions():
        data = {}
    cache = data.get("runs", {})
    # A run of an older model_step is measured again (stale). Apart: HOLDOUT with Adam (a rule came from them), FRESH both.

    def every(make, *cached, names=names, optimizers=args.optimizers):
        """``make``'s jobs (:func:`jobs`, :func:`wide_jobs`) for the rows' architectures and the ones measured apart."""
        return [*make(*cached, names, optimizers), *make(*cached, list(zoo.HOLDOUT), HOLDOUT_OPTIMIZERS),
                *make(*cached, list(zoo.FRESH), FRESH_OPTIMIZERS)]

    todo = [job for job in every(jobs) if stale(job, cache.get(key(*job)))]
    began = time.perf_counter()

    def one(job):
        if time.perf_counter() - began > args.budget:
            return job, None
        try:
            return job, run(*job)
        except Exception as error:  # recorded as not completed, with the reason
            return job, {"completed": False, "error": str(error).splitlines()[0] if str(error) else repr(error)}

    # Twice: the planner's wide runs are known only once its small runs are in (wide_jobs).
    for todo in (todo, None):
        if todo is None:
            todo = [job for job in every(wide_jobs, cache) if stale(job, cache.get(key(*job)))]
        with ThreadPoolExecutor(args.workers) as pool:
            for job, result in pool.map(one, todo):
                if result is None:
                    continue
                cache[key(*job)] = result
                print(f"{job[0].label()} threads={job[1]} real={job[2]} repeat={job[3]}: "
                      f"{result.get('step_peak')} ({time.perf_counter() - began:.0f} s)", flush=True)
                # Each run saved as it lands, with the last published rows kept (an interrupted
                # benchmark leaves the pages' figures as they were, and its runs cached).
                save(json.dumps({**data, "versions": versions(), "runs": cache}, indent=0))
    decide_run = time_decide() if args.time_decide else data.get("decide_resnet50_224")
    for job in check_jobs(decide_run):
        # One at a time, under a cap of their own: a replica of several GiB each.
        if stale(job, cache.get(key(*job))) and time.perf_counter() - began <= args.budget:
            cache[key(*job)] = run(*job, cap=CHECK_CAP)
            print(f"{job[0].label()} threads={job[1]}: {cache[key(*job)].get('step_peak')} "
                  f"({time.perf_counter() - began:.0f} s)", flush=True)
    seconds = time.perf_counter() - began + data.get("seconds", 0)
    table = rows(cache, list(zoo.ARCHITECTURES))
    everything = {"names": list(zoo.ARCHITECTURES), "optimizers": OPTIMIZERS}
    wanted = {key(*job) for job in [*every(jobs, **everything), *every(wide_jobs, cache, **everything),
                                     *check_jobs(decide_run)]}
    if wanted <= cache.keys():
        # Every run the rows need is here: runs of an older method of measuring go.
        cache = {k: v for k, v in cache.items() if k in wanted}
    save(json.dumps({"versions": versions(), "seconds": round(seconds), "rows": table,
                     "margins": margin_choice(cache, list(zoo.ARCHITECTURES)),
                     "linearity": linearity(cache), "plan_spread": plan_spread(cache),
                     # Apart: the planner's constants were chosen on the rows above, not on these.
                     "holdout": rows(cache, list(zoo.HOLDOUT)), "fresh": rows(cache, list(zoo.FRESH)),
                     "decide_resnet50_224": decide_run, "decide_check": decide_check(cache, decide_run),
                     "runs": cache}, indent=0))
    missing = [*every(jobs), *every(wide_jobs, cache), *check_jobs(decide_run)]
    print(f"{len(table)} rows; {sum(1 for j in missing if stale(j, cache.get(key(*j))))} "
          "runs missing; "
          f"{seconds:.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
