"""Which runs a plan of the reader's model makes, and how each run is read.

The per-device batches the planner runs (:data:`SMALL_BATCHES`, :data:`WIDE_BATCH` and why:
:func:`wide_reason`; the reader's own past :data:`CHECKED_PAST`, or more than :data:`FAR_PAST` times past the runs:
:func:`runs_far`; under a 16-bit policy: :func:`run_past`, :func:`in_16_bits`), the inter-op thread counts
(:func:`plan_threads`), how many at once (:data:`PARALLEL`), a run's figures (:func:`upper_step`,
:func:`floor_step`, :func:`run_figures`), how far a check run reaches (:data:`CHECK_REACH`) and the margins a plan adds (:data:`MARGIN`, :data:`EXTRAPOLATION`, :data:`SLOPE_CAP`),
each with the measurement that chose it. :mod:`snippets.lib.model_plan` draws its lines through them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from snippets.lib import batch_square, units
from snippets.lib.devices import CPU_INTER_OP_THREADS
from snippets.lib.model_step import ModelStep

#: Per-device batches the planner draws its lines through, whatever the reader's batch. Not smaller: below
#: about 16 samples fixed-size buffers still weigh, and XLA:CPU's buffer assignment packs small
#: tensors differently, so a line through small batches bends (benchmarks, model_planner:
#: through 4 and 16, a Transformer's XLA step was planned at 0.75x and an LSTM's at 0.67x of
#: the measured peak at 64; through 16 and 32, every one came within the published range).
SMALL_BATCHES = (16, 32)

#: A third per-device batch, run when the first two hardly differ or when it is cheap (:func:`wide_reason`):
#: at 16 and 32 samples fixed-size buffers (the optimizer's update, a convolution's scratch) can hide the
#: activations, so the line through them is flat or too shallow. A CNN under mixed_bfloat16 without
#: XLA peaked at 26.8 and 29.0 MiB at 16 and 32 samples, then 58.8 at 128 and 117.1 at 256: planned
#: from 16 and 32 alone, 0.61 of the peak at 512; a model of custom Dense-like layers read 2.31 and
#: 2.27 MiB, and its largest batch came out as whatever batch the reader asked for.
WIDE_BATCH = 256

#: The growth of the floors (:func:`floor_step`) from the first batch to the second, as a fraction of
#: the second, under which :data:`WIDE_BATCH` is run too. Of the lowest steps, on the benchmark's
#: 78 configurations (the lower quartiles change no configuration's choice) every CNN,
#: Transformer and recurrent step without XLA grew by 20-46% (VGG16's by at most 3.8%, the MLPs' and
#: the seed's by under 1%, the recommender's not at all: it fell by up to 7%); the mixed_bfloat16
#: CNN above by 7.6%.
FLAT_GROWTH = 0.10

#: Bytes up to which :data:`WIDE_BATCH` is run whatever the floors, as the line through the floors at the
#: small batches puts its peak. A fixed buffer can hide part of the activations there, not all, and the
#: floors still grow: keras-io's 1-D CNN for time series (held out, benchmarks.model_planner) peaked at
#: 29.2, 37.0, 62.9 and 125.4 MiB at 16, 32, 64 and 128 samples (one replica, one thread; on one device,
#: outside the benchmark: 281.7 at 256, 1127.4 at 1024); planned through 16 and 32, 0.55 of its peak at 128.
#: Bytes, not seconds: the same model gets the same runs on any machine. At 1 GiB no run at 256 of the
#: benchmark's took long, and a 64 px ResNet50 (its line puts 256 near 2 GiB) keeps its two small runs.
WIDE_PEAK = 1 << 30

#: Inter-op thread counts the planner runs each batch of a step without XLA at; each batch's
#: figure is the worse. The thread count moves the peak either way: independent ops that run at
#: once keep their buffers live at once (a CNN at 48 px, batch 64: 113.8 MiB with one thread,
#: 155.5 MiB with two), and one thread's order can hold a buffer that more threads free early
#: (a 64 px ResNet50's replica grew 7.7 MiB per sample at one thread, 5.5 at two). A GPU's own order,
#: its kernels launched inline one at a time, no CPU run makes (:data:`snippets.lib.plan_caveats.THREADS_CAVEAT`);
#: eight draw more of the orders the dataflow allows: on the benchmark's
#: 104 rows without XLA a run at 8 threads peaked up to 1.41x above the runs at 1 and 2; a plan
#: of lines at 1 and 8 was never under the worst of 1, 2 and 8 threads by more than 5%, where
#: lines at 1 and 2 had fallen to 0.82 of it (benchmarks, model_planner; docs/performance.md).
PLAN_THREADS = (1, 8)

#: The thread counts for a step XLA compiles: one (None: :data:`snippets.lib.devices.CPU_INTER_OP_THREADS`). One program
#: assigns its buffers: on the benchmark's 52 compiled rows one thread against two moved the peak by about 1% (0.99-1.01).
COMPILED_THREADS = (None,)

#: A thread count's slope is held to at most this many times the slope between the batches' floors
#: (:attr:`ModelPlan.floors`). At 16-32 samples one order of the ops can still peak in the update,
#: which the batch does not grow, while another peaks in the backward pass, whose slope carries (a
#: 64 px ResNet50 replica, Adam, no XLA: 7.7 MiB per sample at one thread, 5.5 between the lowest
#: steps; 8.0 between 64 and 128). A slope far above the floors' is a race: a buffer one run held at
#: the larger batch only (a recommender's 49 MiB embedding gradient read as 3 MiB per sample). Over
#: the benchmark's 13 architectures, twice keeps the first and drops the second. The floors are those over every run,
#: or a thread count's own where steeper: an order that keeps a buffer at every step grows (helper-41's MoCo queue).
SLOPE_CAP = 2.0

#: Added to the part of a planned peak extrapolated beyond the largest batch run, as a fraction of
#: it, for a step TensorFlow runs, with or without XLA. A step's peak is convex in the batch (the larger of an update
#: the batch does not grow and a backward pass it does), so a slope between small batches can be lower
#: than further out: DenseNet121 (Adam, no XLA, one thread) grew 2.1 MiB per sample between 16 and
#: 32, 2.9 between 64 and 128. Chosen by the benchmark's rows (benchmarks, model_planner), after
#: :data:`MARGIN`: the smallest multiple of 5% with every row at most 5% under (``margins`` in its
#: results, tests/test_model_plan.py). Those rows ask none of a compiled step, whose targets lie 2-4 times past its
#: runs; 30 times past, helper-48's triplet Siamese (XLA, SGD) grew 13.4 MiB per sample between 16 and 32 and 15.3-15.6
#: from 32 to 768, and as fitted its plan read 0.95 of the step at 984 and said "Fits" a V100-16GB it ran out of.
EXTRAPOLATION = 0.05

#: Per-device batch up to which the benchmarks held a fitted line against a measured step (a small CNN's and
#: the Transformer's: ``benchmarks.model_planner.LINEARITY``, docs/performance.md); past it no run checked it.
LINE_CHECKED = 256

#: A reader's per-device batch past this is run too where the lines put it under :data:`WIDE_PEAK` less :data:`MARGIN`,
#: else the largest batch they do (:func:`snippets.lib.model_plan.plan_model`; on JAX a quarter of it is compiled too): a
#: peak can grow faster than linearly. A loss over the pairs in a batch (SimCLR's, CLIP's) keeps B x B logits: a small
#: contrastive step at 4096 planned from 16, 32 and 256 read 0.24 of its peak (helper-34).
CHECKED_PAST = LINE_CHECKED

#: A reader's per-device batch this many times past the largest run or more is run too, up to :data:`CHECKED_PAST`,
#: where the lines put it within :data:`FAR_PEAK` and this host's cap (:func:`runs_far`): a peak can grow faster than the
#: line through small batches, or slower. helper-60's keras-io 3D CNN for CT scans (Conv3D, MaxPool3D, BatchNorm on 32^3
#: voxels, Adam, MirroredStrategy over 2, no XLA) grew about 10 MB per sample per replica from 16 to 32, 14 from 32 to 64
#: and 17 from 64 to 128: planned from 16 and 32 it read 0.875 of its step at 128, and a run capped at the plan ran out.
#: helper-68's keras-io EfficientNetB0 with a frozen base and augmentation in the model grew 12.8 MiB per sample from 16
#: to 32 and 7.4 from 32 to 64: planned from 16 and 32 it read 1.40-1.43 of its step at 64, twice past (then run only
#: past twice). Re-derived with the run at twice, every benchmark row at 64 per device the lines put within reach read
#: 1.00-1.10 (benchmarks, model_planner).
FAR_PAST = 2

#: Bytes up to which the lines may put that batch: the 3D CNN's 2.2 GiB; not a 224 px ResNet50 replica's 6.7 GiB at 64
#: (twice past 32, where its step held to the line through 16 and 32 within 2%: benchmarks, model_planner, decide_check).
FAR_PEAK = 4 << 30


def far_past(target: int, largest_run: int, bound: int = CHECKED_PAST) -> bool:
    """Whether per-device batch ``target`` lies :data:`FAR_PAST` times past ``largest_run`` or more, up to ``bound``.

    >>> far_past(128, 32), far_past(64, 32), far_past(63, 32), far_past(512, 32)
    (True, True, False, False)
    """
    return FAR_PAST * largest_run <= target <= bound


def runs_far(target: int, largest_run: int, line_peak: float, host: float) -> bool:
    """Whether the reader's per-device batch ``target`` is run too (:data:`FAR_PAST`): that many times past
    ``largest_run`` or more and at most :data:`CHECKED_PAST`, where the lines put it (``line_peak``, bytes) within
    :data:`FAR_PEAK` and ``host`` bytes. The planner and the benchmark that replans its cached runs both ask it.

    >>> runs_far(128, 32, 2.2 * 2**30, 8 * 2**30), runs_far(48, 32, 2**30, 8 * 2**30), runs_far(64, 32, 6.6 * 2**30, 2**34)
    (True, False, False)
    """
    return far_past(target, largest_run) and line_peak <= min(FAR_PEAK, host)


#: Where the lines put every batch past :data:`CHECKED_PAST` over :data:`WIDE_PEAK` less :data:`MARGIN` (a large fixed part,
#: such as a big kernel's update), the run that checks them is the largest batch whose growth past the last run they put
#: within that, at most this many times that run's batch: its compute grows with the batch, of which a slope a fixed
#: buffer hides says nothing. helper-42's Conv1D model under a 256 MiB kernel's Adam update, flat through 256 per device,
#: grew from about 2000 on (0.84 of its step at 4096 when nothing was run past 256); 16 x 256 is 4096.
CHECK_REACH = 16

#: Runs at once (:func:`snippets.lib.model_step.measure_many`): a model's build and tracing are one Python
#: thread each, so two runs overlap them on two cores; the benchmark ran its rows so too.
PARALLEL = 2

#: Added to a planned peak, as a fraction of it: what orders of the step's ops other than the
#: runs' own add (threads race, so one run's order is not the next one's: the same CNN step read
#: 264.6 and 295.7 MiB at batch 16). The benchmarks hold the result to the worst of 18 to 30 steps at one,
#: two and eight threads on :mod:`snippets.lib.zoo` (docs/performance.md); chosen before
#: :data:`EXTRAPOLATION`, as the smallest multiple of 5% with no row of the benchmark under 0.95
#: (``margins``: at 5% the lowest read 0.907).
MARGIN = 0.10

#: The part of :data:`MARGIN` a check run short of the reader's batch may use. Its excess over the lines is read as a
#: B x B term (a loss over the pairs in a batch), grown with the square of the batch to the reader's: the plan is refused
#: unless that stays within this fraction of the lines there, the rest of the margin left for orders no run showed.
#: Accepted within the whole margin, helper-40's contrastive step read 0.71 of its step at 32768 per device from a run at
#: 4473; refused at any excess, an exactly linear step (helper-45: a miniature GPT under XLA, 1.6426 MiB per sample from
#: 32 to 256 and from 256 to 562 per device) was refused in two runs of five, 20 KiB over at 562: the allocator's own
#: difference between processes.
SQUARE_SHARE = MARGIN / 2


def upper_step(result: dict) -> int:
    """A run's upper-quartile step (of ``step_peaks``), bytes: the second-worst of 5-8, the worst of 2-4.
    Racing threads give a step two or more levels: this sits on the higher unless at most one of 8 steps
    drew it, where a median falls on either and the plan with it (``plan_spread``: a GRU stack replica's five
    plans at 64 per device moved 1.07x through these), and leaves out one step above the rest (:meth:`ModelPlan.lines`)."""
    ordered = sorted(result["step_peaks"])
    return ordered[(3 * len(ordered)) // 4]


def floor_step(runs: Sequence[dict]) -> int:
    """A batch's floor (:attr:`ModelPlan.floors`): the lower-quartile step of its ``runs``, bytes. Not the
    lowest: one step can come out a buffer low (a CNN's 33.24 MiB among 36.39-36.77 cut a slope cap to a third)."""
    ordered = sorted(peak for run in runs for peak in run["step_peaks"])
    return ordered[len(ordered) // 4]


def run_figures(groups: Sequence[Sequence[dict]]) -> dict[str, tuple]:
    """What :class:`snippets.lib.model_plan.ModelPlan` reads of its runs, as its keyword arguments: ``groups`` holds each
    batch's runs, one per thread count in the same order (:func:`snippets.lib.model_step.measure`'s results). Bytes:
    ``floors`` each batch's :func:`floor_step` over its runs; ``by_threads``, ``uppers`` and ``thread_floors`` for each
    thread count, its worst step, :func:`upper_step` and own :func:`floor_step` at each batch; ``square``, the tensors
    that grew as the square of the batch (:func:`snippets.lib.batch_square.from_runs`). The planner and the
    benchmark that replans its cached runs both read them here."""
    counts = range(len(groups[0]))
    return {"floors": tuple(floor_step(group) for group in groups),
            "by_threads": tuple(tuple(group[t]["step_peak"] for group in groups) for t in counts),
            "uppers": tuple(tuple(upper_step(group[t]) for group in groups) for t in counts),
            "thread_floors": tuple(tuple(floor_step([group[t]]) for group in groups) for t in counts),
            "square": batch_square.from_runs(groups)}


def wide_reason(floors: Sequence[int]) -> str:
    """Why to run :data:`WIDE_BATCH` too, whatever the reader's batch (a card's largest batch is read off
    the lines, so they are drawn through the same runs for any batch the reader asks for): ``"flat"``, the
    floors at :data:`SMALL_BATCHES` (``floors``, bytes: :func:`floor_step`) grew by less than
    :data:`FLAT_GROWTH` of the second; ``"cheap"``, the line through them puts :data:`WIDE_BATCH` at most at
    :data:`WIDE_PEAK`; else ``""``."""
    if len(floors) < 2 or floors[1] <= 0:
        return ""
    if (floors[1] - floors[0]) < FLAT_GROWTH * floors[1]:
        return "flat"
    b1, b2 = SMALL_BATCHES
    if floors[1] + (floors[1] - floors[0]) / (b2 - b1) * (WIDE_BATCH - b2) <= WIDE_PEAK:
        return "cheap"
    return ""


def plan_threads(step: ModelStep) -> tuple[int | None, ...]:
    """``step``'s inter-op thread counts: :data:`COMPILED_THREADS` if XLA compiles it (``step.jit``), else :data:`PLAN_THREADS`."""
    return COMPILED_THREADS if step.jit else PLAN_THREADS


def thread_counts(threads: Sequence[int | None]) -> list[int]:
    """``threads`` (:func:`plan_threads`) as the runs had them: None is :data:`snippets.lib.devices.CPU_INTER_OP_THREADS`."""
    return [CPU_INTER_OP_THREADS if t is None else t for t in threads]


#: Why a batch past :data:`SMALL_BATCHES` but short of :data:`CHECKED_PAST` was run (:func:`run_past`), in a plan's text.
HALF_RUN = ", under a 16-bit policy, whose growth in the batch no benchmark row checked"


def far_not_run(plan) -> str:
    """What a :class:`snippets.lib.model_plan.ModelPlan` ``plan`` run here says where the reader's per-device batch lies
    :data:`FAR_PAST` times past its largest run or more, up to :data:`CHECKED_PAST`, and was not run: :func:`runs_far` found
    the lines over :data:`FAR_PEAK` or this host's cap, or a run here ran out of that cap. "" where it was run, or lies
    elsewhere. helper-62: a keras-io U-Net at 128 per device, four times past 32, its lines at 4.5 GiB, was planned from
    16 and 32 without a word of it (it read 1.12 of its step there).

    >>> from types import SimpleNamespace as Plan
    >>> at = dict(step=ModelStep("m:f", batch=128), half_layers=False, wide_ran_out=False, short_of=0, device_batch=128)
    >>> far_not_run(Plan(batches=(16, 32), **at))[:72]
    ' 128 per device, at least 2 times past the largest run, was not run here'
    >>> far_not_run(Plan(batches=(16, 32, 128), **at)), far_not_run(Plan(batches=(16, 96), **at))
    ('', '')

    A 16-bit step alike (an audit: its :func:`run_past` of 32 had silenced it); past :data:`CHECKED_PAST`,
    :func:`snippets.lib.run_how.run_how` says no run checked the lines:

    >>> half = ModelStep("m:f", batch=128, policy="mixed_float16")
    >>> far_not_run(Plan(batches=(16, 32), **{**at, "step": half}))[:40]
    ' 128 per device, at least 2 times past t'
    """
    batch, batches = plan.device_batch, plan.batches
    if batch in batches or not far_past(batch, batches[-1]):
        return ""
    why = ("a run ran out of this host's cap" if plan.wide_ran_out or plan.short_of else
           f"the lines put it over {units.human_bytes(FAR_PEAK)} or this host's cap")
    return (f" {batch} per device, at least {FAR_PAST} times past the largest run, was not run here ({why}): "
            "a peak that grows faster than the lines there would not show.")


def run_past(step: ModelStep, half_layers: bool = False) -> int:
    """Per-device batch past which the reader's own batch is run too where the lines put it within room:
    :data:`CHECKED_PAST`, or the last of :data:`SMALL_BATCHES` where the step computes in 16 bits: under a 16-bit
    policy (``units.computes_in_16_bits``), or with ``half_layers``, layers built under one of their own (a run said so).

    No benchmark row is a 16-bit step, and this host's kernels compute half through float32 copies: helper-58's
    keras-io Xception (augmentation, separable convolutions) under mixed_float16 grew 4.1-4.7 MiB per sample from 16 to
    32 per device and 5.2-6.1 from 32 to 64, so its plan at 64 extrapolated from 16 and 32 read 0.90-1.01 of the step.
    A layer given ``dtype="mixed_bfloat16"`` computes so under a float32 policy too.

    >>> run_past(ModelStep("m:f", policy="mixed_float16")), run_past(ModelStep("m:f"), True), run_past(ModelStep("m:f"))
    (32, 32, 256)
    """
    return SMALL_BATCHES[-1] if half_layers or units.computes_in_16_bits(step.policy) else CHECKED_PAST


def in_16_bits(plan) -> bool:
    """Whether ``plan`` (a :class:`snippets.lib.model_plan.ModelPlan`) is of a step that computes in 16 bits: its
    policy's (``plan.step.policy``) or, run here, layers of their own (``plan.half_layers``)."""
    return units.computes_in_16_bits(plan.step.policy) or plan.half_layers


def stderr_progress(line: str) -> None:
    """Progress for a command line: one line on stderr."""
    print(line, file=sys.stderr, flush=True)


def runs_flat(batches: Sequence[int], floors: Sequence[int]) -> bool:
    """Whether runs out to :data:`WIDE_BATCH` or past it (``batches``, per device; ``floors``, bytes: :func:`floor_step`)
    grew by less than :data:`FLAT_GROWTH` of the last from the first: fixed buffers hid the activations at every run, so
    none measured their growth, whatever the rule counts (helper-71: a two-tower recommender, no Dense layer, grew 3.8 KB
    from 16 to 256 per device on 293 MiB, where its steps grow 1.04 KiB per sample, and each card's largest batch was put
    3.4 times past what fits).

    >>> runs_flat((16, 32, 256), (307_225_344, 307_225_600, 307_229_184)), runs_flat((16, 32), (100, 100))
    (True, False)
    >>> runs_flat((16, 32, 256), (100, 104, 130))
    False
    """
    return len(batches) > 2 and batches[-1] >= WIDE_BATCH and floors[-1] - floors[0] < FLAT_GROWTH * floors[-1]


def grew_words(plan) -> str:
    """How the runs of a :class:`snippets.lib.model_plan.ModelPlan` ``plan`` grew where no line past them holds
    (its ``floor_only``), to follow "grew": less than the activations the rule counts, else by under
    :data:`FLAT_GROWTH` (:func:`runs_flat`)."""
    if max(plan._slopes()) <= plan.rule_slope:  # every line on the rule's floor
        return f"less than the {units.human_bytes(round(plan.rule_slope))} per sample of activations the rule counts"
    return f"by under {FLAT_GROWTH:.0%} from {plan.batches[0]} to {plan.batches[-1]} per device"
