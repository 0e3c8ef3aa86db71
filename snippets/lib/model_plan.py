"""Plan the reader's own model: its step peak measured at small batches and extrapolated in the batch.

A training step's peak is the state the step keeps (weights, gradients, optimizer slots, the update's temporaries),
which does not depend on the batch, plus what the batch makes (activations and their gradients), which grows linearly
in it: measured on CNNs, a Transformer, an LSTM and MLPs (benchmarks, ``model_planner``). So the planner runs the
reader's real step (:mod:`snippets.lib.model_step`) at two small per-device batches ``b1 < b2``, each at one and eight
inter-op threads (:func:`plan_threads`) in a fresh capped process, fits a line ``peak(b) = state + per_sample * b``
for each thread count through its runs (and :data:`WIDE_BATCH` when ``b1`` and ``b2`` hardly differ or it is cheap:
:func:`wide_reason`) and reads the highest line at the reader's batch (a peak is the larger of the backward pass's,
which grows with the batch, and the update's, which does not, so it is convex in the batch: the steepest order
carries). A smaller batch is run as well, for its own figure. Every figure says how it was obtained
(:attr:`ModelPlan.method`, :meth:`ModelPlan.how`):

``measured``
    the reader's own per-device batch was run.
``interpolated``
    the reader's batch lies between two runs (after a run at :data:`WIDE_BATCH`): the chord between their worst
    peaks where the floors grow, else the lines (without :data:`EXTRAPOLATION`) no lower than that chord; either
    no lower than a smaller batch's worst peak (:meth:`ModelPlan._measured_peak_at`); plus :data:`MARGIN`.
``extrapolated``
    beyond the runs: one line per inter-op thread count, levelled at its worst peak, at the steepest count's slope
    between its runs' upper-quartile steps, or past a far run the chord to it (:meth:`ModelPlan.lines`), and the
    highest line at the reader's batch, plus :data:`MARGIN`.
``rule``
    the model's weights are too large to run on this host: weights, gradients, slots and the update's temporaries by
    the rule of :mod:`snippets.lib.planner` (held to the allocator within a few % on ``Dense`` layers), activations
    counted for ``Dense`` layers only, which makes the figure a lower bound for any other layer.

Under ``mirrored`` a replica holds every variable whole and runs ``B / N`` of the batch; what is run is one
replica's program alone (:mod:`snippets.lib.model_step` says why and how).

What the CPU emulation cannot show (cuDNN / cuBLAS workspaces, XLA:GPU's buffer assignment, NCCL's buffers, the GPU
layout optimizer's transposes) :data:`CAVEATS` says beside every verdict; :mod:`snippets.lib.plan_caveats` the sources.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from snippets.lib import batch_square, compiled_curve, fork_server, planner, units
from snippets.lib.compiled_how import compiled_how
from snippets.lib.run_how import run_how
from snippets.lib.model_step import ModelError, ModelStep, check_step, default_cap, measure_many
from snippets.lib.plan_caveats import (  # noqa: F401 (the pages print them as model_plan's)
    ALL_REDUCE_CAVEAT, CAVEATS, COMPILED_CAVEATS, COMPILED_HALF_CAVEAT, FEW_STEPS, GPU_CAVEATS, HALF_CAVEAT,
    ORDER_SPREAD, THREADS_CAVEAT, few_steps_caveat, gpu_caveats, order_caveat)
from snippets.lib.plan_accuracy import ACCURACY, accuracy_line, accuracy_summary, published_accuracy  # noqa: F401 (read as model_plan's)
from snippets.lib.rule_report import rule_how
from snippets.lib.model_rule import rule_slope, runs_here  # noqa: F401 (read as model_plan's)
from snippets.lib.plan_curve import below_first, chord, far_chord, faster_than_linear, largest_fitting, last_fitting
from snippets.lib.plan_runs import (  # noqa: F401 (read as model_plan's)
    CHECK_REACH, CHECKED_PAST, COMPILED_THREADS, EXTRAPOLATION, FAR_PAST, FAR_PEAK, FLAT_GROWTH, HALF_RUN, LINE_CHECKED,
    MARGIN, PARALLEL, PLAN_THREADS, SLOPE_CAP, SMALL_BATCHES, SQUARE_SHARE, WIDE_BATCH, WIDE_PEAK, far_not_run, far_past,
    floor_step, grew_words, in_16_bits, plan_threads, run_figures, run_past, runs_far, runs_flat, stderr_progress,
    thread_counts, upper_step, wide_reason)


@dataclass(frozen=True)
class ModelPlan:
    """Each device's step peak for the reader's configuration, and how it was obtained.

    Attributes:
        step: the reader's configuration (global batch).
        method: ``"measured"``, ``"interpolated"``, ``"extrapolated"``, ``"rule"`` (module docstring) or ``"compiled"``.
        batches: per-device batches that were run (empty for ``rule``).
        peaks: each run's per-device step peak, bytes (worst of its steps).
        init_peak: per-device allocator peak while building the model, bytes.
        weights_bytes: the model's variables, bytes.
        seconds_per_step: wall time of one step at the largest batch run (on this CPU; not a GPU's).
        rule_peak: for ``rule``, the planner's per-device step peak, bytes.
        rule_note: for ``rule``, :func:`snippets.lib.rule_report.rule_how`'s sentence.
        largest_variable: the largest trainable variable, bytes (for the record).
        floors: each batch's floor, the lower-quartile step (:func:`floor_step`) over its steps and thread counts,
            bytes: the slope between these bounds each thread count's (:data:`SLOPE_CAP`): racing threads
            add or drop a whole buffer from one run to the next (a recommender's 49 MiB table).
        rule_slope: bytes per sample per device the rule counts (:func:`rule_slope`): no line is flatter (0: no weights).
        threads: the inter-op thread counts run (:func:`plan_threads`; None: :data:`snippets.lib.devices.CPU_INTER_OP_THREADS`).
        by_threads: for each thread count run (:attr:`threads`), its worst step peak at each
            batch of ``batches``, bytes: one line each (:meth:`lines`), levelled at these. Empty: one
            line, the slope of ``floors`` (or ``peaks``), levelled at the highest worst peak.
        uppers: as :attr:`by_threads`, each run's upper-quartile step (:func:`upper_step`), bytes: the lines' slopes (empty: by_threads's).
        thread_floors: as :attr:`by_threads`, each run's own lower-quartile step (:func:`floor_step` of that run), bytes:
            a thread count whose own floors grow holds its slope at most of its steps, which is its order's growth, not a
            race, and its line may be as steep as twice that (:meth:`lines`). Empty: the floors' slope alone caps.
        wide_why: why the run at :data:`WIDE_BATCH` was wanted (:func:`wide_reason`), "" if it was not.
        wide_ran_out: the run at :data:`WIDE_BATCH` was wanted and ran out of this host's cap: the small runs' plan (:meth:`how`).
        steps_run: the fewest and the most steps a run took (more while quick:
            :data:`snippets.lib.model_step.MAX_STEPS`); empty: as asked (:func:`snippets.lib.model_step.steps_measured`).
        raced_steps: the fewest steps a run at the most inter-op threads took, where threads race (0: one thread
            count, or not told): below :data:`FEW_STEPS`, :attr:`caveats` says a racing order may be missing.
        short_of: the smallest per-device batch above the reader's whose run ran out of this host's cap (the lines stop below); 0: none.
        faster: ``(batch, peak, line)`` when the runs (their floor: helper-81's CTC OCR model drew its worst step at 64
            12-14% over its line, its lower quartile under it, and 3 plans in 9 stopped every card there) or the
            compile at the reader's batch past :data:`CHECKED_PAST` peaked over the line through the smaller batches by
            more than :data:`MARGIN`: the peak grows faster than linearly, so the largest batch stops there (bytes; empty
            if not). At a run short of it, :func:`plan_model` refuses.
        x_alone: why the model's own ``train_step`` ran on x alone (its error on ``(x, y)``, one line); "" if it did not.
        confirmed: for ``compiled``, ``(batch, figure)`` per device, ascending: batches compiled to check the largest
            batch that fits :attr:`confirmed_for` bytes (:func:`snippets.lib.jax_step.confirm_largest`), which
            :meth:`largest_batch` then offers from these figures alone.
        confirmed_for: the capacity :attr:`confirmed` checked, bytes per device (0: none).
        confirm_failed: each batch a check failed to compile at, and why (one line; "": none); no batch past the largest
            compiled is offered for any capacity then (helper-55: a card's batch past one that failed failed too).
        accumulated: for ``compiled``, ``(k, figure)``: the step with ``gradient_accumulation_steps=k`` compiled at the
            reader's per-device batch over ``k``, bytes per device (:func:`snippets.lib.jax_step.confirm_accumulation`).
        accumulator_extra: for a run plan, bytes the step with ``gradient_accumulation_steps=2`` peaked above this one at
            its first batch (:func:`snippets.lib.model_accumulation.measure_accumulation`; 0: not measured).
        optimizer_unused: that step's runs applied no step of the compiled optimizer (a ``train_step`` of the model's own
            applies others): no accumulation remedy (:func:`snippets.lib.model_remedies.unused_optimizer_note`).
        checked: for ``compiled``, ``(batch, figure)`` per device of the cards' batches (:func:`jax_step.confirm_cards`).
        half_layers: a run found layers that compute in 16 bits (a policy of their own, or the step's): :func:`in_16_bits`.
        square: ``(bytes per sample squared, tensors, largest, ((power, bytes per sample**power), ...))`` of the step's
            tensors that grew as the square of the batch or faster between its runs
            (:func:`snippets.lib.batch_square.from_runs`), added past the last: :meth:`square_extra`.
        jax: Keras on JAX can compile the step, so a sentence may offer ``--backend jax`` (False: a layer it runs without
            jit, or a ``train_step(data)`` of the model's own: :func:`snippets.lib.model_report.jax_line`).
    """

    step: ModelStep
    method: str
    batches: tuple[int, ...] = ()
    peaks: tuple[int, ...] = ()
    init_peak: int = 0
    weights_bytes: int = 0
    seconds_per_step: float | None = None
    rule_peak: int = 0
    rule_note: str = ""
    largest_variable: int = 0
    floors: tuple[int, ...] = ()
    by_threads: tuple[tuple[int, ...], ...] = ()
    uppers: tuple[tuple[int, ...], ...] = ()
    thread_floors: tuple[tuple[int, ...], ...] = ()
    threads: tuple[int | None, ...] = ()
    rule_slope: float = 0.0
    wide_ran_out: bool = False
    wide_why: str = ""
    steps_run: tuple[int, ...] = ()
    raced_steps: int = 0
    short_of: int = 0
    faster: tuple[int, ...] = ()
    x_alone: str = ""
    confirmed: tuple[tuple[int, int], ...] = ()
    confirmed_for: int = 0
    confirm_failed: str = ""
    accumulated: tuple[tuple[int, int], ...] = ()
    accumulator_extra: int = 0
    optimizer_unused: bool = False
    checked: tuple[tuple[int, int], ...] = ()
    half_layers: bool = False
    jax: bool = True
    square: tuple = ()

    @property
    def replicas(self) -> int:
        return self.step.devices if self.step.strategy == "mirrored" else 1

    @property
    def compiled_points(self) -> dict[int, int]:
        """Every compiled figure, per-device batch to bytes: :attr:`batches`, :attr:`confirmed` and :attr:`checked`."""
        return {**dict(zip(self.batches, self.peaks)), **dict(self.confirmed), **dict(self.checked)}

    @property
    def device_batch(self) -> int:
        """Samples each device runs per step."""
        return self.step.batch // self.replicas

    def _first(self) -> int:
        """Index of the batch the lines start from: the first of 16 or more unless that leaves one; past CHECKED_PAST, the half."""
        if self.method == "compiled" and self.batches and self.batches[-1] > CHECKED_PAST:
            return len(self.batches) - 2
        first = next((i for i, b in enumerate(self.batches) if b >= SMALL_BATCHES[0]), 0)
        return first if first < len(self.batches) - 1 else 0

    def _floor_slope(self) -> float:
        """Bytes per sample between :attr:`floors` (else peaks) at :meth:`_first` and the last batch, at least 0."""
        if len(self.batches) < 2:
            return 0.0
        low, first = self.floors or self.peaks, self._first()
        return max(0.0, (low[-1] - low[first]) / (self.batches[-1] - self.batches[first]))

    def lines(self, beyond: bool = False) -> list[tuple[float, float]]:
        """The fitted lines, ``(intercept, slope)`` in bytes and bytes per sample per device.

        With :attr:`by_threads`: one per thread count, its level at the last batch the highest of its worst peaks, at
        its own slope (:meth:`_slopes`), and ``beyond`` (past the last batch run) all at the steepest count's, or at the
        chord from a far run to the last where steeper (:func:`~snippets.lib.plan_curve.far_chord`): the activations
        grow alike in every order of the ops, and a count whose first run drew a high step has its own slope flattened
        (helper-66: a seq2seq Transformer's replica at 8 threads peaked 550 MB at 16 and 612 at 32; its own line read
        0.92-0.94 of the step at 64). Between runs, where lines are drawn down from the last, each keeps its own. A
        slope runs between its upper-quartile steps (:attr:`uppers`, else its worst peaks) at the first batch of 16 or
        more (:meth:`_first`) and the last, in ``[0, SLOPE_CAP x`` the floors' slope ``]``, the steeper of all runs'
        floors and the count's own (:attr:`thread_floors`; helper-41: a MoCo queue's replica at 8 threads grew 2 MiB per
        sample at every step, at one thread 0.1; capped by both, 0.82 of its step at 768). A draw that kept a buffer
        live longer is a level, counted once there (through worst peaks, a GRU stack's one step of 96.61 MiB at 32 read
        1.81 of its step at 128); a peak does not fall as the batch grows (a wide MLP, RMSprop, 8 threads: 769 MiB at
        16, 643 at 32, 769 at 64; levelled at 32, 0.92). tests/test_model_plan.py keeps these. Without: one line, the
        floors' slope, the same level. No slope under :attr:`rule_slope`. ``[]`` for ``rule``; one flat line for a
        single run.
        """
        if not self.batches:
            return []
        last, slopes = self.batches[-1], self._slopes()
        levels = [max(peaks) for peaks in self.by_threads] if self.by_threads and len(self.batches) > 1 else [max(self.peaks)]
        steepest = [max(*slopes, far_chord(self.batches, self.peaks))] * len(levels)  # past a far run, its chord too
        return [(level - slope * last, slope) for level, slope in zip(levels, steepest if beyond else slopes)]

    def _slopes(self) -> list[float]:
        """Each thread count's own slope, bytes per sample (:meth:`lines`); one, the floors', without :attr:`by_threads`."""
        if len(self.batches) < 2:
            return [0.0]
        floor_slope, first, found = self._floor_slope(), self._first(), []
        if not self.by_threads:
            return [max(floor_slope, self.rule_slope)]
        span = self.batches[-1] - self.batches[first]
        for t, middle in enumerate(self.uppers or self.by_threads):
            own = self.thread_floors[t] if self.thread_floors else ()
            cap = SLOPE_CAP * max(floor_slope, (own[-1] - own[first]) / span if own else 0.0)
            found.append(max(min(max(0.0, (middle[-1] - middle[first]) / span), cap), self.rule_slope))
        return found

    @property
    def floor_only(self) -> bool:
        """Whether every line past the last run holds :attr:`rule_slope`, not a slope the runs measured: they grew less
        than the activations the rule counts (fixed buffers, such as a large kernel's update, hide the rest), so no run
        checked growth past them, and :meth:`largest_batch` stops at the last (helper-49: a 500k x 64 Embedding with Adam,
        flat from 16 to 512 per device, had a V100-SXM2-32GB's batch put at 20.9 million on a 1.27 KiB floor)."""
        steeper = self.method == "compiled" and compiled_curve.last_slope(self) > self.rule_slope  # checks past the line
        flat = self.method != "compiled" and runs_flat(self.batches, self.floors or self.peaks)  # whatever the rule counts
        return len(self.batches) > 1 and (max(self._slopes()) <= self.rule_slope or flat) and not steeper

    @property
    def squared(self) -> tuple[int, int, int, int]:
        """For a run plan, :func:`~snippets.lib.plan_curve.faster_than_linear` of its runs (worst peaks and floors, with
        :data:`MARGIN`): ``(b0, worst peak at b0, b1, floor at b1)``, bytes, where the step grew faster than linearly
        between two runs, so no line past the largest holds (:meth:`largest_batch` stops there, :func:`plan_model`
        refuses a batch past it); ``()`` if not, or not run (a compiled plan: :func:`compiled_curve.grows_faster`)."""
        if self.method not in ("measured", "interpolated", "extrapolated"):
            return ()
        return faster_than_linear(self.batches, self.peaks, self.floors, MARGIN)

    @property
    def squared_words(self) -> str:
        """What :attr:`squared` found, in words: "at b0 and b1 samples per device the step peaked at ... which no peak
        linear in the batch reaches" (the plan's how() and :func:`plan_model`'s refusal say it); "" if nothing."""
        if not self.squared:
            return ""
        b0, worst, b1, floor = self.squared
        return (f"at {b0} and {b1} samples per device the step peaked at {units.human_bytes(worst)} and at least "
                f"{units.human_bytes(floor)}, more than {b1 / b0:g} times as much, which no peak linear in the batch reaches")

    def _line_at(self, device_batch: int) -> tuple[float, float]:
        """The highest of :meth:`lines` at ``device_batch``: ``(intercept, slope)``."""
        return max(self.lines(device_batch > self.batches[-1]), key=lambda line: (line[0] + line[1] * device_batch, line[1]))

    @property
    def per_sample(self) -> float:
        """Bytes per sample per device at the reader's batch: the slope of the highest line there
        (:meth:`lines`); 0 for one run or ``rule``."""
        if len(self.batches) < 2:
            return 0.0
        return self._line_at(self.device_batch)[1]

    @property
    def state(self) -> float:
        """Bytes per device that do not grow with the batch: the highest line's intercept at the
        reader's batch (the rule's peak for ``rule``). A fitted line's, not a sum of buffers: it can sit
        below the weights, gradients and slots (a small step's activations reuse memory the update
        frees), since the line holds only over the batches it was fitted to and beyond."""
        if not self.batches:
            return float(self.rule_peak)
        return self._line_at(self.device_batch)[0]

    def _reaching_lines(self, device_batch: int) -> list[tuple[float, float]]:
        """:meth:`lines` as they stand at ``device_batch``: beyond the largest batch run, each slope
        with :data:`EXTRAPOLATION` on the part past that batch (Keras on JAX's compiled figures: as fitted)."""
        if self.method == "compiled" or not self.batches or device_batch <= self.batches[-1]:
            return self.lines()
        last = self.batches[-1]
        return [(c - EXTRAPOLATION * s * last, s * (1 + EXTRAPOLATION)) for c, s in self.lines(beyond=True)]

    def line_peak(self, device_batch: int) -> float:
        """The highest line at ``device_batch``, bytes, no margin."""
        return max(c + s * device_batch for c, s in self._reaching_lines(device_batch))

    def peak_at(self, device_batch: int) -> int:
        """Planned per-device step peak at ``device_batch`` samples per device, bytes."""
        if self.method == "compiled":
            # One buffer assignment: the compiled figure itself, or the line between two of them.
            # Every compiled figure, the checks' too (helper-53: 1024, between the checks at 907 and 1360, read 585 MiB
            # off the line where 907 had compiled to 665).
            batches, peaks = compiled_curve.points(self)
            if device_batch in batches:
                return peaks[batches.index(device_batch)]
            if device_batch < batches[0]:
                return round(below_first(batches, peaks, device_batch, self.weights_bytes, bool(self.faster)))
            # Past the largest: no lower than the line through the two largest (helper-54: checks far above the line).
            return round(chord(batches, peaks, device_batch) or max(self.line_peak(device_batch), peaks[-1],
                                                                    compiled_curve.beyond(self, device_batch)))
        return self._measured_peak_at(device_batch)

    def _measured_peak_at(self, device_batch: int) -> int:
        """Planned per-device step peak at ``device_batch`` samples per device, bytes, with :data:`MARGIN`: a
        batch run, its own figure; between two runs, the chord (floors that grow) or the lines no lower than
        it (flat floors); beyond them, the lines. ``rule``: the rule's peak, whatever the batch.
        """
        if self.method == "rule":
            return self.rule_peak
        if device_batch in self.batches:
            # The worst order seen at this batch or a smaller one (a peak does not fall as the batch grows: :meth:`lines`).
            return round(max(self.peaks[:self.batches.index(device_batch) + 1]) * (1 + MARGIN))
        # Between runs (after a run at WIDE_BATCH), no lower than a smaller batch's worst peak, nor than the chord between the
        # runs around it: a peak is convex in the batch, so the chord is above it (a 4-layer MLP at 96: 0.91 on a line down
        # from the last run at the rule's slope). Growing floors: the chord, under the lines (DenseNet121's replicas at 64:
        # 1.27 on them, 1.19 on it); flat floors are a race, which a chord can pass under (a wide MLP at 64: 0.945): lines.
        seen = max((peak for batch, peak in zip(self.batches, self.peaks) if batch < device_batch), default=0)
        if device_batch < self.batches[0]:  # no further under the first run than the flattest count's slope falls: a line
            # levelled at a larger run's peak can pass under it (a wide MLP's, flat from 16 to 1024: 15 at 572 MiB, 16 at 776)
            seen = self.peaks[0] - min(self._slopes()) * (self.batches[0] - device_batch)
        between = chord(self.batches, self.peaks, device_batch)
        lines = 0 if between and self.wide_why == "cheap" else self.line_peak(device_batch)
        return round(max(lines, seen, between) * (1 + MARGIN)) + self.square_extra(device_batch)

    def square_extra(self, device_batch: int) -> int:
        """Bytes :attr:`square`'s tensors add past the largest run, all counted at once (an upper bound): their bytes
        per sample squared times ``device_batch**2`` less the last run's batch squared, and so for each higher power
        (:func:`snippets.lib.batch_square.extra`); 0 within the runs, or with none.
        helper-83: a two-view contrastive loss's ``[B, 2B]`` logits, hidden at 2425 per device under a LayerNorm backward
        that peaked higher, overtook it past about 4000, and a plan without them said "Fits" at 7247, where a run ran out."""
        return round(batch_square.extra(self.square, device_batch, self.batches[-1] if self.batches else 0))

    @property
    def step_peak(self) -> int:
        """Planned per-device step peak at the reader's batch, bytes."""
        return self.peak_at(self.device_batch)

    @property
    def total(self) -> int:
        """What each device's allocator must give: the larger of the init and step peaks, bytes."""
        return max(self.init_peak, self.step_peak)

    @property
    def line_step_peak(self) -> int:
        """:attr:`step_peak` without :meth:`square_extra`'s upper bound (the line's alone past the runs), bytes."""
        return self.step_peak - self.square_extra(self.device_batch)

    def largest_batch(self, capacity: int, past_floor: bool = False) -> int:
        """The largest global batch (a multiple of the replicas) whose planned peak fits ``capacity`` bytes; 0 if none.

        For :attr:`confirmed_for`, the largest compiled batch that fits, up to the largest :attr:`confirmed` checked.
        ``past_floor``: not stopped at the last batch by :attr:`floor_only` (the batch found is to be compiled:
        :func:`snippets.lib.jax_step.confirm_largest`, which compiles what no compiled figure showed past it).

        Found on the lines, then among every batch up to there or the last batch run
        (:func:`snippets.lib.plan_curve.largest_fitting`): a batch run keeps its own figure and one between two
        runs can lie on their chord, both below the lines (a thread count's slope held by :data:`SLOPE_CAP` or at 0
        pins its line at its highest peak), so the planned peak is not monotone there: 16 can fit where 17 does not.
        """
        if self.method == "rule":
            return 0 if self.total > capacity else self.step.batch
        if self.confirmed_for and capacity == self.confirmed_for:
            # The line's batch and any past it were compiled (jax_step.confirm_largest): the largest offered only if its
            # figure fits, else the largest compiled batch below it that does (XLA's figure can jump between batches);
            # where a check failed to compile, only a compiled batch (helper-54: the failed one had been offered).
            line = max((b for b, _ in self.confirmed), default=max(self.compiled_points))
            return max((b for b, p in self.compiled_points.items() if b <= line and p <= capacity), default=0) * self.replicas
        if self.confirmed_for:  # no more than a smaller capacity's compiled batch, no less than a larger one's
            checked, other = replace(self, confirmed_for=0).largest_batch(capacity), self.largest_batch(self.confirmed_for)
            return max(checked, other) if capacity > self.confirmed_for else min(checked, other)
        top = max(self.compiled_points) if self.method == "compiled" else self.batches[-1]  # read off lines and chords
        lines = self._reaching_lines(self.batches[-1] + 1)
        margin = 0 if self.method == "compiled" else MARGIN
        room = capacity / (1 + margin)
        if any(slope <= 0 and intercept > room for intercept, slope in lines):
            per_device = 0
        elif not any(slope > 0 for _, slope in lines):
            # Flat beyond the last batch run: the reader's batch if it fits, else nothing past that batch.
            fits = max(self.init_peak, self.peak_at(self.device_batch)) <= capacity
            per_device = self.device_batch if fits else min(self.device_batch, self.batches[-1])
        else:
            # Where the lowest-reaching line meets the capacity; the loop settles the rounding.
            per_device = int(min((room - intercept) // slope for intercept, slope in lines if slope > 0))
        # Nothing run past it, or no growth measured up to it (unless the batch is to be compiled: past_floor).
        capped = (self.short_of or self.faster or self.squared or (self.floor_only and not past_floor) or self.confirm_failed
                  or (self.method == "compiled" and compiled_curve.grows_faster(self)))
        per_device = min(per_device, top) if capped else per_device
        # Monotone between two runs: the lines grow, and a chord that falls stays under the smaller run's peak.
        found = largest_fitting(lambda b: max(self.init_peak, self.peak_at(b)) <= capacity,
                                sorted(self.compiled_points) if self.method == "compiled" else self.batches, max(per_device, top))
        return (compiled_curve.grouped(self, found) if self.method == "compiled" else found) * self.replicas

    def how(self) -> str:
        """One sentence: how the figure was obtained (a ``rule`` plan: its own note)."""
        if self.method == "rule":
            return self.rule_note
        grew = (f" At {self.faster[0]} per device {'it came to' if self.method == 'compiled' else '3 steps in 4 peaked at'} "
                f"{units.human_bytes(self.faster[1])}{'' if self.method == 'compiled' else ' or more'}, above the "
                f"{units.human_bytes(self.faster[2])} the line through the smaller batches put there: the peak grows faster than "
                "linearly in the batch (as a loss over pairs within the batch does), or faster than the smaller batches "
                "showed (a fixed buffer, such as a large kernel's update, hid the growth there), so no larger batch is "
                "planned." if self.faster else "")
        if self.method == "compiled":
            return compiled_how(self, grew)
        if self.squared and not self.faster:  # a run past the lines said so already (helper-75: twice, two figures)
            return (f"{run_how(self, grew)} A{self.squared_words[1:]}: it grows faster than linearly, so no batch past "
                    f"{self.squared[2]} per device is planned.")
        return run_how(self, grew) + batch_square.words(self.square, self.batches[-1])

    @property
    def order_apart(self) -> tuple[int, int, int] | None:
        """``(batch, low, high)``: the batch run whose worst steps at two thread counts (:attr:`by_threads`) lie
        furthest apart, :data:`ORDER_SPREAD` or more (bytes); None if none does, or the step was not run without XLA."""
        if self.method not in ("measured", "interpolated", "extrapolated") or self.step.jit:
            return None
        spans = [(max(peaks) / min(peaks), batch, min(peaks), max(peaks))
                 for batch, peaks in zip(self.batches, zip(*self.by_threads)) if len(peaks) > 1 and min(peaks) > 0]
        widest = max(spans, default=None)
        return widest[1:] if widest and widest[0] >= ORDER_SPREAD else None

    @property
    def caveats(self) -> str:
        """What the CPU emulation could not show for this plan: :data:`COMPILED_CAVEATS` for Keras on JAX's compiled plan
        (with :data:`ALL_REDUCE_CAVEAT` over several devices), :func:`gpu_caveats` for a step on TensorFlow (as they
        apply), with :data:`THREADS_CAVEAT` for one without XLA; with :data:`HALF_CAVEAT` for a step run here under a
        16-bit policy (:data:`COMPILED_HALF_CAVEAT` for one compiled here); with :func:`few_steps_caveat` for a step
        without XLA whose runs at the most threads took fewer than :data:`FEW_STEPS` steps; with :func:`order_caveat` for
        one without XLA whose runs at one batch peaked :data:`ORDER_SPREAD` or more apart (:attr:`order_apart`)."""
        half = in_16_bits(self)
        if self.method == "compiled":
            found = f"{COMPILED_CAVEATS} {ALL_REDUCE_CAVEAT}" if self.replicas > 1 else COMPILED_CAVEATS
            return f"{found} {COMPILED_HALF_CAVEAT}" if half else found
        found = gpu_caveats(self.replicas, self.step.jit) + ("" if self.step.jit else f" {THREADS_CAVEAT}")
        run = self.method in ("measured", "interpolated", "extrapolated")
        if run and not self.step.jit and 0 < self.raced_steps < FEW_STEPS:
            found = f"{found} {few_steps_caveat(self.raced_steps)}"
        if self.order_apart:
            found = f"{found} {order_caveat(*self.order_apart)}"
        return f"{found} {HALF_CAVEAT}" if half and run else found


#: Said before the runs of a step XLA compiles: XLA:CPU compiles it in each run, which took helper-91's keras-io ConvLSTM
#: (three ConvLSTM2D layers of 64 filters on 5 frames of 32 x 32) several minutes a run.
XLA_FIRST = " (each compiles the step with XLA:CPU first: minutes for a recurrent model)"


def plan_model(step: ModelStep, weights: Sequence[planner.Weight] | None = None, *,
               cap: int | None = None, progress: Callable[[str], None] | None = None,
               run: Callable[..., dict] | None = None, jax: bool = True) -> ModelPlan:
    """Plan ``step``: measure it (fresh capped processes) where the host can run it, else by rule.

    Args:
        step: the reader's configuration; ``strategy`` ``"single"`` or ``"mirrored"``.
        weights: the model's variables, read without allocating them
            (:func:`snippets.lib.model_source.model_weights`); needed to decide whether
            the model runs here and for the ``rule`` method. None: measure.
        cap: allocator cap per run, bytes (default :func:`snippets.lib.model_step.default_cap`).
        progress: called with one line before each run (the CLI prints it to stderr).
        run: ``run(step, cap, inter_op_threads=...)`` measures one configuration in a fresh process (the tests' fakes)
            and returns :func:`snippets.lib.model_step.measure`'s result; None (the default): all runs through
            :func:`snippets.lib.model_step.measure_many` (one TensorFlow import, a fork per run).
        jax: :attr:`ModelPlan.jax`: whether a refusal, or the plan, may offer ``--backend jax``.

    Raises:
        ModelError: the model cannot be measured as given (one line naming the fix).
        ValueError: a bad field of ``step``.
    """
    check_step(step)
    say = progress or (lambda line: None)
    if weights is not None and not runs_here(weights, step, cap):
        policy = step.policy if step.policy in units.POLICIES else None
        budget = planner.plan(weights, step.optimizer, step.strategy, step.devices, policy,
                              batch=step.batch, xla=step.xla, accumulation=step.accumulation)[0]
        return ModelPlan(step, "rule", init_peak=budget.init_peak, rule_peak=budget.step_peak,
                         weights_bytes=sum(units.tensor_bytes(w.shape, w.dtype) for w in weights),
                         rule_note=rule_how(weights, too_large=True))
    if step.strategy == "mirrored" and step.jit:
        # The replica's program copies each gradient (step_ledger.copy_on_aggregation) with an op XLA:CPU does not compile
        # (DeepCopy), and a real MirroredStrategy step compiled by XLA does not run on the emulated devices either.
        raise ModelError("--xla on under --strategy mirrored cannot be measured on this CPU's emulated devices "
                         "(XLA:CPU compiles no DeepCopy, which the all-reduced gradient needs): plan --xla auto "
                         "(Keras turns XLA off for a model created under a strategy)" + (", or --backend jax" if jax else ""))
    replicas = step.devices if step.strategy == "mirrored" else 1
    target = step.batch // replicas
    # SMALL_BATCHES whatever the reader's batch (a card's largest is read off their lines), and the reader's if smaller.
    batches = sorted({*SMALL_BATCHES, target} if target < SMALL_BATCHES[-1] else set(SMALL_BATCHES))
    counts = plan_threads(step)

    def measured(ats: Sequence[int]) -> list[dict]:  # a run per batch (per device) and thread count, in that order
        wanted = [(step.at_batch(at * replicas), threads) for at in ats for threads in counts]
        return (measure_many([(s, cap, threads) for s, threads in wanted], parallel=PARALLEL, progress=progress)
                if run is None else [run(s, cap, inter_op_threads=threads) for s, threads in wanted])

    jobs = [(step.at_batch(b * replicas), threads) for b in batches for threads in counts]
    say(f"measuring {step.source} at {', '.join(map(str, batches[:-1]))} and {batches[-1]} samples per device, at "
        f"{' and '.join(map(str, thread_counts(counts)))} inter-op thread{'s' if counts != (1,) else ''}, a fresh process "
        f"per run, {PARALLEL} at a time" + (XLA_FIRST if step.jit else "") + " ...")
    flat = measured(batches)
    out = min((s.batch // replicas for (s, _), r in zip(jobs, flat) if not r["completed"]), default=0)
    if out > target:  # a run past the reader's own batch: the lines stop below it
        kept = [i for i, (s, _) in enumerate(jobs) if s.batch // replicas < out]
        jobs, flat, batches = [jobs[i] for i in kept], [flat[i] for i in kept], [b for b in batches if b < out]
    for (s, _), result in zip(jobs, flat):
        if not result["completed"]:
            raise ModelError(f"the model ran out of this host's {units.human_bytes(cap or default_cap(step))} cap "
                             f"at {s.batch // replicas} samples per device ({result['failed_phase']}); plan a "
                             "smaller --batch or free memory")
    per = len(counts)  # each batch's figure is the worse of its thread counts, its floor their lower quartile
    groups = [flat[i * per:(i + 1) * per] for i in range(len(batches))]
    wide_ran_out = False
    wide_why = "" if out else wide_reason([floor_step(groups[batches.index(b)]) for b in SMALL_BATCHES])
    if wide_why:
        say((f"the runs at {' and '.join(map(str, SMALL_BATCHES))} hardly differ (fixed buffers can hide the activations)"
             if wide_why == "flat" else f"a run at {WIDE_BATCH} is cheap") +
            f": running {WIDE_BATCH} samples per device too, {per} more run{'s' if per > 1 else ''} ...")
        more = measured([WIDE_BATCH])
        wide_ran_out = not all(r["completed"] for r in more)  # the plan is the small runs', and says so
        if not wide_ran_out:
            batches, flat = [*batches, WIDE_BATCH], [*flat, *more]
            groups.append(more)

    def assemble(faster: tuple[int, ...] = ()) -> ModelPlan:
        results = [max(group, key=lambda r: r["step_peak"]) for group in groups]
        taken = [r["step_peaks"] for group in groups for r in group]
        method = "measured" if target in batches else "interpolated" if target < batches[-1] else "extrapolated"
        return ModelPlan(step, method, tuple(batches), tuple(r["step_peak"] for r in results),
                         max(r["init_peak"] for r in results), results[0]["weights_bytes"],
                         groups[-1][-1]["seconds_per_step"], largest_variable=results[0]["largest_variable"],
                         **run_figures(groups), threads=counts,
                         rule_slope=rule_slope(weights, step) if weights is not None else 0.0,
                         wide_ran_out=wide_ran_out, wide_why=wide_why,
                         steps_run=(min(map(len, taken)), max(map(len, taken))), short_of=out if out > target else 0,
                         raced_steps=min(len(group[-1]["step_peaks"]) for group in groups) if len(counts) > 1 else 0,
                         faster=faster, x_alone=next((r["x_alone"] for group in groups for r in group if r.get("x_alone")), ""),
                         half_layers=any(r.get("half") for group in groups for r in group), jax=jax)

    plan = assemble()
    # Past CHECKED_PAST the reader's batch is run where the lines put it within room, else the largest they do from twice
    # CHECKED_PAST or a quarter past it (helper-39: a contrastive step at 8192, not run, 0.64 of its peak), else the
    # largest whose growth past the last run they do, under the host's cap and CHECK_REACH: a large kernel's update can
    # hide the growth at every run (helper-42: flat to 256, 0.84 of its step at 4096, "Fits"). A run short of a quarter
    # past CHECKED_PAST checks what the benchmarks did. Over the cap a run tells nothing.
    room, host = min(WIDE_PEAK, cap or default_cap(step)) / (1 + MARGIN), (cap or default_cap(step)) / (1 + MARGIN)
    start, past = plan.line_peak(batches[-1]), run_past(step, plan.half_layers)

    def cheap(b: int) -> bool:
        # The reader's own batch up to WIDE_PEAK itself: a refusal names a run's batch, which a new draw's line can put a
        # little over room, and the next run fell short again (helper-48: refused at 5478, 4981 and 4881 in turn).
        return plan.line_peak(b) <= (min(WIDE_PEAK, host) if b == target else room)

    def grows(b: int) -> bool:
        return plan.line_peak(b) - start <= room and plan.line_peak(b) <= host and b <= CHECK_REACH * batches[-1]

    def largest(fits: Callable[[int], bool]) -> int:  # past run_past's 32 under 16 bits (an audit: none for 33-319)
        return target if fits(target) else (last_fitting(fits, 2 * past, target - 1) or
                                            last_fitting(fits, past * 5 // 4, min(target, 2 * past) - 1))

    check = largest(cheap)
    grown = not check
    check = check or largest(grows)
    far = runs_far(target, batches[-1], plan.line_peak(target), host)  # helper-60: a 3D CNN
    check = target if far else check
    if (far or target > max(past, batches[-1])) and not (out or wide_ran_out) and check:
        line = plan.line_peak(check)
        say(f"{target} samples per device lies " + (
            f"at least {FAR_PAST} times past {batches[-1]}, where a peak can grow faster than the lines, or slower: running it too"
            if far else f"past {past}, where " + ("the benchmarks held the line" if past == CHECKED_PAST
            else "no benchmark row held a 16-bit policy's lines") + ": running "
            + ("it too" if check == target else f"{check} per device, the largest batch "
               + (f"whose growth past {batches[-1]} " if grown else "") + "the lines put under "
               f"{units.human_bytes(round(room))}")) + f", {per} more run{'s' if per > 1 else ''} ...")
        more = measured([check])
        done = all(r["completed"] for r in more)
        floor = floor_step(more) if done else 0  # growth is the floor's: one racing draw is a level (helper-81)
        # Short of the reader's batch, an excess over the lines as fitted (without EXTRAPOLATION) is a B x B term, which
        # grows with the square of the batch past the run (an audit: accepted within 10% at 4473, 0.71 of the step at
        # 32768; within the 5% beyond the runs, 0.91): refused unless, so grown, it stays within SQUARE_SHARE there.
        bound = line if check == target else max(c + s * check for c, s in plan.lines(check > batches[-1]))
        grown_excess = (floor - bound) * (target / check) ** 2
        if done and (check == target or grown_excess <= SQUARE_SHARE * plan.line_peak(target)):
            batches, groups = [*batches, check], [*groups, more]
            plan = assemble((target, floor, round(line)) if floor > line * (1 + MARGIN) else ())
        else:
            raise ModelError(f"at {check} samples per device " + (
                f"3 steps in 4 peaked at {units.human_bytes(floor)} or more, above" if done else
                f"the step ran out of this host's {units.human_bytes(cap or default_cap(step))} cap, over") +
                f" the {units.human_bytes(round(bound))} the line through the smaller runs put there: its peak may grow "
                "faster than linearly in the batch (as a loss over pairs within the batch does), or faster than the smaller "
                "runs showed (a fixed buffer, such as a large kernel's update, hid the growth there)" +
                (f", and no run here reaches {target}" if check < target else "") + ": plan " +
                (f"--batch {check * replicas} or less" if done else "a smaller --batch") + (", or --backend jax (compiled, not run)"
                                                                                 if jax else ""))
    if plan.squared and target > plan.batches[-1]:  # helper-74: a line past runs that grew faster than linearly
        raise ModelError(f"{plan.squared_words}, so it grows faster than linearly (as a loss over pairs within the batch, "
                         f"or a tensor that routes a batch's tokens, does), and no run here reaches {target}: plan --batch "
                         f"{plan.squared[2] * replicas} or less" + (", or --backend jax (compiled, not run)" if jax else ""))
    if run is None:
        fork_server.release()  # ends unused within a minute: its ~700 MiB stayed as long as a notebook's kernel (an audit)
    return plan
