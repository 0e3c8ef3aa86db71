"""Plan the reader's own model: its step peak measured at small batches and extrapolated in the batch.

A training step's peak is the state the step keeps (weights, gradients,
optimizer slots, the update's temporaries), which does not depend on the
batch, plus what the batch makes (activations and their gradients), which
grows linearly in it: measured on CNNs, a Transformer, an LSTM and MLPs
(benchmarks, ``model_planner``). So the planner runs the reader's real step
(:mod:`snippets.lib.model_step`) at two small per-device batches ``b1 < b2``,
each in a fresh capped process, fits ``peak(b) = state + per_sample * b``
through them and reads the fit at the reader's batch. A batch no larger
than ``b2`` is measured itself. Every figure carries how it was obtained
(:attr:`ModelPlan.method`, :meth:`ModelPlan.how`):

``measured``
    the reader's own per-device batch was run.
``extrapolated``
    run at ``b1`` and ``b2``, extrapolated linearly, plus :data:`MARGIN`.
``rule``
    the model's weights are too large to run on this host: weights,
    gradients, slots and the update's temporaries by the rule of
    :mod:`snippets.lib.planner` (held to the allocator within a few % on
    ``Dense`` layers), activations counted for ``Dense`` layers only, which
    makes the figure a lower bound for any other layer.

Under ``mirrored`` a replica holds every variable whole and runs ``B / N``
of the batch; what is run is one replica's program alone
(:mod:`snippets.lib.model_step` says why and how).

What the CPU emulation cannot show, and :data:`CAVEATS` says beside every
verdict: cuDNN / cuBLAS workspaces (TensorFlow lets cuDNN take up to
``TF_CUDNN_WORKSPACE_LIMIT_IN_MB``, default 4096 MiB, per convolution
autotune; GPU convolutions may pick algorithms with larger scratch than
the CPU's Eigen kernels), XLA:GPU's buffer assignment (an XLA figure here is
XLA:CPU's), NCCL's buffers, and the GPU layout optimizer's NHWC/NCHW
transposes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from snippets.lib import allocator, placements, planner, units
from snippets.lib.model_step import ModelError, ModelStep, check_step, default_cap, measure_fresh

#: Per-device batches the planner runs when the reader's batch is larger. Not smaller: below
#: about 8 samples fixed-size buffers still dominate, and XLA:CPU's buffer assignment packs small
#: tensors differently (measured: a Transformer block's slope per sample from batches 2 and 8 was
#: 0.75x its slope from 8 on), so a line through tiny batches undershoots.
SMALL_BATCHES = (4, 16)

#: Added to an extrapolated peak, as a fraction of it. What one run measures varies with the
#: executor's order of independent ops (inter-op threads), and the first step can peak above the
#: second; the benchmarks measure that spread on the architectures of :mod:`snippets.lib.zoo`
#: (docs/performance.md) and this margin covers it.
MARGIN = 0.05

#: What CPU emulation cannot measure, said next to every verdict on a reader's model.
CAVEATS = (
    "Not measurable on a CPU: cuDNN/cuBLAS workspaces (TF_CUDNN_WORKSPACE_LIMIT_IN_MB, default 4096 MiB, "
    "caps cuDNN's), NCCL buffers, the GPU layout optimizer's transposes, and XLA:GPU's buffer assignment "
    "(XLA figures here are XLA:CPU's); leave headroom for them."
)


@dataclass(frozen=True)
class ModelPlan:
    """Each device's step peak for the reader's configuration, and how it was obtained.

    Attributes:
        step: the reader's configuration (global batch).
        method: ``"measured"``, ``"extrapolated"`` or ``"rule"`` (module docstring).
        batches: per-device batches that were run (empty for ``rule``).
        peaks: each run's per-device step peak, bytes (worst of its steps).
        init_peak: per-device allocator peak while building the model, bytes.
        weights_bytes: the model's variables, bytes.
        seconds_per_step: wall time of one step at the largest batch run (on this CPU; not a GPU's).
        rule_peak: for ``rule``, the planner's per-device step peak, bytes.
        rule_note: for ``rule``, :func:`rule_how`'s sentence.
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

    @property
    def replicas(self) -> int:
        return self.step.devices if self.step.strategy == "mirrored" else 1

    @property
    def device_batch(self) -> int:
        """Samples each device runs per step."""
        return self.step.batch // self.replicas

    @property
    def per_sample(self) -> float:
        """Bytes per sample per device: the slope through the first and last runs (0 for one run or ``rule``)."""
        if len(self.batches) < 2:
            return 0.0
        return (self.peaks[-1] - self.peaks[0]) / (self.batches[-1] - self.batches[0])

    @property
    def state(self) -> float:
        """Bytes per device that do not grow with the batch: the fit's intercept."""
        if not self.batches:
            return float(self.rule_peak)
        return self.peaks[0] - self.per_sample * self.batches[0]

    def peak_at(self, device_batch: int) -> int:
        """Planned per-device step peak at ``device_batch`` samples per device, bytes.

        A measured batch gives its own figure; any other gets the linear fit
        plus :data:`MARGIN`. ``rule`` plans have no batch dependence they can trust.
        """
        if self.method == "rule":
            return self.rule_peak
        if device_batch in self.batches:
            return self.peaks[self.batches.index(device_batch)]
        return round((self.state + self.per_sample * device_batch) * (1 + MARGIN))

    @property
    def step_peak(self) -> int:
        """Planned per-device step peak at the reader's batch, bytes."""
        return self.peak_at(self.device_batch)

    @property
    def total(self) -> int:
        """What each device's allocator must give: the larger of the init and step peaks, bytes."""
        return max(self.init_peak, self.step_peak)

    def largest_batch(self, capacity: int) -> int:
        """The largest global batch (a multiple of the replicas) whose planned peak fits ``capacity`` bytes; 0 if none."""
        if self.method == "rule" or self.per_sample <= 0:
            return 0 if self.total > capacity else self.step.batch
        per_device = int((capacity / (1 + MARGIN) - self.state) // self.per_sample)
        while per_device > 0 and max(self.init_peak, self.peak_at(per_device)) > capacity:
            per_device -= 1
        return max(per_device, 0) * self.replicas

    def how(self) -> str:
        """One sentence: how the figure was obtained."""
        where = (f"under MirroredStrategy ({self.device_batch} samples per replica)"
                 if self.step.strategy == "mirrored" else "on one device")
        xla = "XLA:CPU-compiled step" if self.step.jit else "step without XLA"
        if self.method == "rule":
            return self.rule_note
        runs = " and ".join(str(b) for b in self.batches)
        if self.method == "measured":
            return (f"Measured: real fit steps ({xla}) {where}, batch {runs} per device, capped CPU "
                    "allocator, a fresh process per run, worst of 2 steps.")
        return (f"Extrapolated: real fit steps ({xla}) {where} measured at batches {runs} per device "
                f"(capped CPU allocator, a fresh process each, worst of 2 steps), "
                f"{units.human_bytes(round(self.per_sample))} per sample, linear in the batch, "
                f"+{MARGIN:.0%} for the executor's order.")

    def as_json(self) -> dict:
        return {"step": asdict(self.step), "method": self.method, "how": self.how(), "batches": list(self.batches),
                "peaks": list(self.peaks), "per_sample": round(self.per_sample), "state": round(self.state),
                "init_peak": self.init_peak, "step_peak": self.step_peak, "weights_bytes": self.weights_bytes,
                "seconds_per_step_cpu": self.seconds_per_step}


def _rule_state(weights: Sequence[planner.Weight], step: ModelStep) -> int:
    """The rule's per-device peak without activations (bytes): what a run here would hold at least."""
    budget = planner.plan(weights, step.optimizer, step.strategy, step.devices, step.policy if step.policy in
                          units.POLICIES else None, batch=max(step.batch, 1), xla=step.xla)[0]
    return budget.total - budget.activations


def runs_here(weights: Sequence[planner.Weight], step: ModelStep, cap: int | None = None) -> bool:
    """Whether the model's step can run at a small batch on this host within ``cap`` bytes per device."""
    cap = cap or default_cap(step)
    return _rule_state(weights, step) * 1.5 + 256 * units.MiB <= cap


def plan_model(step: ModelStep, weights: Sequence[planner.Weight] | None = None, *,
               cap: int | None = None, progress: Callable[[str], None] | None = None,
               run: Callable[..., dict] = measure_fresh) -> ModelPlan:
    """Plan ``step``: measure it (fresh capped processes) where the host can run it, else by rule.

    Args:
        step: the reader's configuration; ``strategy`` ``"single"`` or ``"mirrored"``.
        weights: the model's variables, read without allocating them
            (:func:`snippets.decide.model_weights`); needed to decide whether
            the model runs here and for the ``rule`` method. None: measure.
        cap: allocator cap per run, bytes (default :func:`snippets.lib.model_step.default_cap`).
        progress: called with one line before each run (the CLI prints it to stderr).
        run: ``run(step, cap)`` measures one configuration in a fresh process and returns
            :func:`snippets.lib.model_step.measure`'s result (default
            :func:`snippets.lib.model_step.measure_fresh`; the tests and benchmarks pass a
            runner that forks a preloaded kernel instead of starting Python).

    Raises:
        ModelError: the model cannot be measured as given (one line naming the fix).
        ValueError: a bad field of ``step``.
    """
    check_step(step)
    say = progress or (lambda line: None)
    if weights is not None and not runs_here(weights, step, cap):
        policy = step.policy if step.policy in units.POLICIES else None
        budget = planner.plan(weights, step.optimizer, step.strategy, step.devices, policy,
                              batch=step.batch, xla=step.xla)[0]
        return ModelPlan(step, "rule", init_peak=budget.init_peak, rule_peak=budget.step_peak,
                         weights_bytes=sum(units.tensor_bytes(w.shape, w.dtype) for w in weights),
                         rule_note=rule_how(weights, too_large=True))
    replicas = step.devices if step.strategy == "mirrored" else 1
    target = step.batch // replicas
    batches = sorted({SMALL_BATCHES[0], target} if target <= SMALL_BATCHES[-1] else set(SMALL_BATCHES))
    results = []
    for b in batches:
        say(f"measuring {step.at_batch(b * replicas).label()} in a fresh process ...")
        result = run(step.at_batch(b * replicas), cap)
        if not result["completed"]:
            raise ModelError(f"the model ran out of this host's {units.human_bytes(cap or default_cap(step))} cap "
                             f"at {b} samples per device ({result['failed_phase']}); plan a smaller --batch "
                             "or free memory")
        results.append(result)
    method = "measured" if target in batches else "extrapolated"
    return ModelPlan(step, method, tuple(batches), tuple(r["step_peak"] for r in results),
                     max(r["init_peak"] for r in results), results[0]["weights_bytes"],
                     results[-1]["seconds_per_step"])


@dataclass(frozen=True)
class BatchRemedy:
    """A change to the reader's step that the measurement plans, and how.

    Attributes:
        label: what changes, as the reader would write it.
        peak: planned per-device peak, bytes.
        how: how the figure follows from the measurement.
    """

    label: str
    peak: int
    how: str


def batch_remedies(plan: ModelPlan, capacity: int, devices: int, trainable_bytes: int) -> list[BatchRemedy]:
    """Activation-bound remedies that fit ``capacity`` bytes per device, derived from ``plan``'s fit, smallest change first.

    - a smaller batch: the largest that fits (the fit itself);
    - the same effective batch through ``gradient_accumulation_steps=k``: ``B / k``
      samples per step plus one accumulator per trainable variable
      (``trainable_bytes``, Keras 3.15 keeps them in the variables' dtype;
      field case F22), the smallest ``k`` that fits;
    - ``MirroredStrategy`` over ``devices`` (or twice the replicas already used):
      ``B / N`` samples per replica, the fit at that batch.

    Mixed precision and rematerialisation change the per-sample bytes themselves, so
    they are not derived here: measure them (``--policy mixed_float16``; docs/activations.md).
    """
    if plan.method == "rule" or plan.per_sample <= 0:
        return []
    found = []
    b, replicas = plan.device_batch, plan.replicas
    largest = plan.largest_batch(capacity)
    if 0 < largest < plan.step.batch:
        found.append(BatchRemedy(f"batch {largest}", plan.peak_at(largest // replicas),
                                 "the measured fit at that batch"))
    for k in (2, 4, 8, 16, 32, 64):
        if b % k:
            continue
        peak = round(plan.peak_at(b // k) + trainable_bytes)
        if peak <= capacity:
            found.append(BatchRemedy(f"gradient_accumulation_steps={k} (batch {plan.step.batch // k} per step, "
                                     f"same effective batch {plan.step.batch})", peak,
                                     f"the measured fit at {b // k} per device + one accumulator per trainable "
                                     "variable (by rule)"))
            break
    more = max(devices, 2 * replicas)
    if more > replicas and plan.step.batch % more == 0:
        peak = plan.peak_at(plan.step.batch // more)
        if plan.step.strategy == "mirrored" or plan.step.xla == "off":
            peak = max(peak, plan.init_peak)
        if peak <= capacity:
            found.append(BatchRemedy(f"MirroredStrategy over {more} (batch {plan.step.batch // more} per replica)",
                                     peak, "the measured fit at that per-replica batch; the step without XLA "
                                     "would need its own measurement" if plan.step.jit else
                                     "the measured fit at that per-replica batch"))
    return found


def rule_how(weights: Sequence[planner.Weight], too_large: bool = False) -> str:
    """How a rule figure was obtained, and whether it is a lower bound, for ``weights``.

    The rule counts activations only for Dense kernels (:attr:`snippets.lib.planner.Weight.dense_kernel`);
    a model with other weights of rank 2 or more gets a figure that leaves theirs out.
    """
    why = "the model's weights are too large to run its step on this host; " if too_large else ""
    other = [w for w in weights if len(w.shape) >= 2 and not w.dense_kernel]
    counted = ("weights, gradients, optimizer slots and the update's temporaries (probed on the installed "
               "Keras), and the activations of each Dense layer")
    if not other:
        return (f"Planned by rule ({why}{counted}); held to each device's measured step peak on Dense layers "
                "(benchmarks, planner_vs_step_peak).")
    return (f"Planned by rule ({why}{counted}): a LOWER BOUND, since the activations of the model's "
            f"{len(other)} other weight(s) of rank 2 or more (convolution, attention, recurrent, embedding) "
            "are not counted; measure the step where it runs (--method auto, strategy single or mirrored).")


def stderr_progress(line: str) -> None:
    """Progress for a command line: one line on stderr."""
    print(line, file=sys.stderr, flush=True)
