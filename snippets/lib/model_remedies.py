"""Remedies for an activation-bound step, derived from the planner's measurement of it.

:func:`batch_remedies` reads a :class:`snippets.lib.model_plan.ModelPlan` (the reader's real step
measured at small batches and fitted in the batch) and plans the changes a practitioner reaches for
when the activations, not the weights, set the peak: a smaller batch, gradient accumulation over
micro-batches, more replicas, and last, as a rule's best case this host cannot measure, mixed
precision. Each says how its figure follows from the measurement and what it costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from snippets.lib import compiled_curve, units
from snippets.lib.model_accumulation import accumulation_how, accumulations
from snippets.lib.model_plan import MARGIN, ModelPlan


@dataclass(frozen=True)
class BatchRemedy:
    """A change to the reader's step that the measurement plans, and how.

    Attributes:
        label: what changes, as the reader would write it.
        peak: planned per-device peak, bytes.
        how: how the figure follows from the measurement.
        cost: what the change costs besides memory: numerics, time, hardware.
        estimate: True when the figure is a rule's best case, or read from another program's run (an XLA
            step for a strategy that compiles none), not derived from a run of this step.
    """

    label: str
    peak: int
    how: str
    cost: str = ""
    estimate: bool = False


def batch_remedies(plan: ModelPlan, capacity: int, devices: int, trainable_bytes: int,
                   half: bool = False, batchnorm: bool = True) -> list[BatchRemedy]:
    """Activation-bound remedies that fit ``capacity`` bytes per device, derived from ``plan``'s lines, smallest change first.

    - a smaller batch: the largest that fits (the lines themselves);
    - the same effective batch through ``gradient_accumulation_steps=k``: ``B / k``
      samples per step plus what the accumulating step measured above the step without
      (:func:`snippets.lib.model_accumulation.accumulation_how`), else, an estimate, one accumulator per trainable
      variable (``trainable_bytes``, Keras 3.15 keeps them in the variables' dtype;
      field case F22), the smallest ``k`` that fits; a step already accumulating over ``k0``
      (``plan.step.accumulation``) was measured with its accumulators, so ``k0 x k`` steps add none; a compiled
      plan's is the accumulating step's compiled figure (``plan.accumulated``), else that rule, an estimate;
    - ``MirroredStrategy`` over ``devices`` (or twice the replicas already used), else twice or four times
      that, up to 8 (one host's GPUs), the fewest that fit and divide the batch:
      ``B / N`` samples per replica, the lines at that batch (plus the all-reduced gradient when they
      are a single device's; an estimate when they are Keras on JAX's one-device compile). Not from
      TensorFlow's XLA step, which a strategy does not compile: :func:`strategy_note` says so instead.

    - last, and only as an estimate (``estimate=True``): ``mixed_float16`` for a float32 step,
      :func:`mixed_precision_peak`, which this host cannot measure; not where ``half``: layers of the
      model compute in 16 bits under a dtype policy of their own
      (:attr:`snippets.lib.model_source.SourceFacts.own_policies`).

    ``batchnorm``: the model may train a BatchNorm (:func:`snippets.lib.model_source.trains_batchnorm`), whose
    statistics come from each micro-batch and each replica's share: said in the costs of accumulation and more replicas
    (helper-68: said of a model whose every BatchNorm was frozen).

    Rematerialisation changes the model's code (``keras.remat`` around the blocks you choose),
    so it is not derived here: measure the changed builder (docs/activations.md).
    """
    if plan.method == "rule" or plan.per_sample <= 0:
        return []
    found = []
    b, replicas = plan.device_batch, plan.replicas

    def basis(per_device: int, at: str, check: bool = False) -> str:
        """What ``plan.peak_at(per_device)`` rests on (ModelPlan._measured_peak_at), ``at`` naming the batch; ``check``:
        off a compiled batch, how to compile it."""
        if plan.method == "compiled":
            if per_device in plan.compiled_points:
                return f"the compiled figure {at}"
            # helper-51: XLA:CPU's figure for a seq2seq Transformer jumped from 1754 MiB at 200 to 4110 at 245, and
            # "batch 248", read off the line through 256 and 512, fitted 4 GiB there; compiled at 248 it did not.
            return (f"the line through the compiled batches {at}, not compiled there: XLA's figure can jump between batches"
                    + (f", so plan --batch {per_device * replicas} to compile it" if check else ""))
        if per_device in plan.batches:
            return f"the measured run {at}"
        if per_device < plan.batches[0]:
            # helper-99: "drawn below them" read as a figure under the runs' own.
            return f"the line through the measured runs, extended below the smallest run ({plan.batches[0]} per device), {at}"
        if per_device > plan.batches[-1]:  # helper-73: "the measured line" read as a batch that was run
            return f"the line through the measured runs, extrapolated past {plan.batches[-1]} per device, {at}"
        # helper-98: "the chord between the measured runs at that batch" read as runs made at that batch.
        return f"the {'chord between' if plan.wide_why == 'cheap' else 'line through'} the measured runs, read {at}"

    largest = plan.largest_batch(capacity)
    if 0 < largest < plan.step.batch:
        found.append(BatchRemedy(f"batch {largest}", plan.peak_at(largest // replicas),
                                 basis(largest // replicas, "at that batch", check=True),
                                 "fewer samples per update: retune the learning rate"))
    # A step that accumulates already was measured with its accumulators: k more micro-batches add none.
    k0 = plan.step.accumulation
    extra, accumulators, unmeasured = (
        (0, f" (its accumulators measured with it, for gradient_accumulation_steps={k0})", False) if k0 > 1 else
        (trainable_bytes, " + one accumulator per trainable variable (by rule)", False) if plan.method == "compiled"
        else accumulation_how(plan, trainable_bytes))
    compiled = dict(plan.accumulated)
    # helper-98: a train_step of the model's own that applies other optimizers accumulates nothing through this one.
    for k in () if plan.optimizer_unused else accumulations(b, compiled_curve.group(plan) if plan.method == "compiled" else 1):
        peak = round(plan.peak_at(b // k) + extra)
        how = basis(b // k, f"at {b // k} per device") + accumulators
        # Keras on JAX's accumulating step, compiled (jax_step.confirm_accumulation): the rule's one accumulator per
        # variable put a wide MLP's at 725 MiB, compiled 986 (helper-53). Not compiled: the rule, an estimate.
        guess = plan.method == "compiled" and k0 == 1 and k not in compiled
        if k in compiled:
            peak, how = compiled[k], (f"the compiled figure of the step with gradient_accumulation_steps={k} at "
                                      f"{b // k} per device, its accumulators in it")
        elif guess:
            # No lower than an accumulating step compiled at a larger micro-batch: its accumulators do not shrink.
            peak = max(peak, min(compiled.values(), default=0))
            how += (f"; Keras on JAX's accumulating step can hold more than one accumulator per variable: set "
                    f"gradient_accumulation_steps={k} on the optimizer and plan --batch {plan.step.batch // k} to "
                    "compile it")
        if peak <= capacity:
            found.append(BatchRemedy(f"gradient_accumulation_steps={k0 * k} (batch {plan.step.batch // k} per step, "
                                     f"same effective batch {plan.step.batch * k0})", peak, how,
                                     f"{k} steps per update: about the time of one step at the full batch if the smaller "
                                     "one keeps the same samples per second, more if it does not; the large batch's "
                                     "losses up to rounding (docs/activations.md), except " + ("with BatchNorm, whose "
                                     "statistics come from each micro-batch, and " if batchnorm else "") + "a loss over "
                                     "pairs within the batch, which sees only the pairs within each micro-batch",
                                     estimate=guess or unmeasured))
            break
    # The fewest that fit, up to four times as many: MirroredStrategy is one host's GPUs (8 on a DGX H100 or A100).
    for more in (max(devices, 2 * replicas) << i for i in range(3)):
        if more > max(devices, 8):
            break
        if more <= replicas or plan.step.batch % more:
            continue
        # Measured on one device, the lines lack a replica's all-reduced gradient (one copy of the
        # trainable weights, step_ledger.copy_on_aggregation); and under a strategy Keras compiles no
        # XLA step for jit_compile="auto", so a line from a compiled step is another program's.
        single = plan.step.strategy != "mirrored"
        peak = plan.peak_at(plan.step.batch // more) + (trainable_bytes if single else 0)
        if plan.step.strategy == "mirrored" or plan.step.xla == "off":
            peak = max(peak, plan.init_peak)
        # helper-99 could not tell whether a mirrored plan's figure held the gradient: its runs are a replica's program.
        how = basis(plan.step.batch // more, "at that per-replica batch") + (
            ", plus the all-reduced gradient" if single else ", a replica's program, its all-reduced gradient included")
        # Keras on JAX jits the replicas' step too (keras.distribution.DataParallel): only the one-device
        # compile is another program's; on TensorFlow a compiled line is, since a strategy compiles none.
        on_jax = plan.method == "compiled"
        if plan.step.jit and not on_jax:  # strategy_note instead: helper-91's ConvLSTM replica peaked 1.7x its estimate
            break
        estimate = single and on_jax
        if on_jax and single:
            how += f"; from the one-device compiled step: compile it with --strategy mirrored --devices {more}"
        elif on_jax:  # helper-54: "the compiled figure" read as compiled over these devices
            how += (f", compiled over {replicas} devices: each device's program is the same over {more} (every variable "
                    "whole, its gradients all-reduced)")
        if peak <= capacity:
            name = "keras.distribution.DataParallel" if on_jax else "MirroredStrategy"
            found.append(BatchRemedy(f"{name} over {more} (batch {plan.step.batch // more} per replica)",
                                     peak, how, f"{more} GPUs; an all-reduce of the gradients every step" +
                                     ("; BatchNorm statistics per replica" if batchnorm else "") +
                                     # helper-85: said of micro-batches, not of replicas.
                                     "; a loss over pairs within the batch sees only each replica's pairs (gather them "
                                     "across replicas to keep them all)", estimate=estimate))
            break
    if in_float32(plan, half):
        peak = mixed_precision_peak(plan, trainable_bytes)
        if peak <= capacity:
            found.append(BatchRemedy(
                MIXED, peak,
                f"by rule, the best case: the {'compiled' if plan.method == 'compiled' else 'measured'} bytes per "
                "sample halved (activations in 16 bits) plus a 16-bit copy of each trainable variable; variables, "
                "gradients and slots stay float32. " + (
                    "XLA compiles it too: plan it with --policy mixed_float16 for XLA's own figure"
                    if plan.method == "compiled" else "Not measurable on this host: TensorFlow's CPU kernels "
                    "compute half precision through float32 copies. Check it with a step on the GPU"),
                "float16's 10-bit mantissa under a LossScaleOptimizer (Keras adds it in compile); compute "
                "capability 7.0 or newer for speed (a V100 has it); mixed_bfloat16 needs no loss scale, and "
                "its Tensor Core speed needs compute capability 8.0 or newer (an A100; a V100 is 7.0)",
                estimate=True))
    return found


def unused_optimizer_note(plan: ModelPlan) -> str:
    """Why no accumulation remedy is offered where ``plan``'s runs applied no step of the compiled optimizer
    (:attr:`~snippets.lib.model_plan.ModelPlan.optimizer_unused`), one sentence; "" elsewhere.

    >>> from dataclasses import replace
    >>> from snippets.lib.model_step import ModelStep
    >>> plan = ModelPlan(ModelStep("m:f", "rmsprop", 64, "off", "single"), "measured", (16, 32), (2**30, 2**31))
    >>> unused_optimizer_note(plan)
    ''
    >>> print(unused_optimizer_note(replace(plan, optimizer_unused=True)))
    Gradient accumulation is not offered: the runs never applied the optimizer the model is compiled with (its iterations stayed 0), so its own train_step applies others, and gradient_accumulation_steps on that one would accumulate nothing. Set it on the optimizers your train_step applies, and plan that function with --model.
    """
    if not plan.optimizer_unused:
        return ""
    return ("Gradient accumulation is not offered: the runs never applied the optimizer the model is compiled with (its "
            "iterations stayed 0), so its own train_step applies others, and gradient_accumulation_steps on that one would "
            "accumulate nothing. Set it on the optimizers your train_step applies, and plan that function with --model.")


#: The label of the mixed-precision remedy (:func:`batch_remedies`).
MIXED = "keras.mixed_precision.set_global_policy('mixed_float16'), before the model is built"


def float32_note(plan: ModelPlan, capacity: int, found: list[BatchRemedy], layers: dict[str, int]) -> str:
    """Where the plan reads a 16-bit best case (:func:`half_best_case` for a 16-bit step over ``capacity`` bytes per
    device, "Not known to fit" as that fits; :func:`mixed_precision_peak` for the listed ``mixed_float16`` remedy, in
    ``found``) of a model with ``layers`` that keep float32 tensors under a 16-bit policy
    (:func:`snippets.lib.model_source.float32_layers`, ``{class name: layers}``): that a GPU's step peaks above it, in
    one sentence; "" elsewhere. helper-94: a BatchNorm CNN's and a Transformer's best cases halved what those layers
    keep in float32 on a GPU too (the Transformer's 16-bit run here ran out on its float32 attention logits).

    >>> from snippets.lib.model_step import ModelStep
    >>> plan = ModelPlan(ModelStep("m:f", "adam", 32, "off", "single"), "measured", (16, 32), (2**30, 2**31))
    >>> found = [BatchRemedy(MIXED, 2**30, "", "", estimate=True)]
    >>> print(float32_note(plan, 2**31, found, {"BatchNormalization": 1, "MultiHeadAttention": 2}))
    The mixed_float16 remedy below is a best case: under a 16-bit policy Keras keeps float32 tensors in this model, on a GPU too: 1 BatchNormalization layer casts its inputs up, and 2 MultiHeadAttention layers without dropout compute their attention logits and softmax in float32; what they keep for the backward pass does not halve, so a GPU's 16-bit step peaks above it.
    >>> float32_note(plan, 2**31, found, {}), float32_note(plan, 2**31, [], {"LayerNormalization": 3})
    ('', '')
    """
    best_case = units.computes_in_16_bits(plan.step.policy) and plan.total > capacity >= half_best_case(plan)
    if not layers or not (best_case or any(remedy.label == MIXED for remedy in found)):
        return ""
    norms = {name: count for name, count in sorted(layers.items()) if name != "MultiHeadAttention"}
    parts = []
    if norms:
        total = sum(norms.values())
        parts.append(" and ".join(f"{count} {name}" for name, count in norms.items())
                     + (" layer casts its" if total == 1 else " layers cast their") + " inputs up")
    if attention := layers.get("MultiHeadAttention"):
        parts.append(f"{attention} MultiHeadAttention layer{'s' if attention > 1 else ''} without dropout compute"
                     f"{'' if attention > 1 else 's'} {'their' if attention > 1 else 'its'} attention logits and "
                     "softmax in float32")
    kept = f"Keras keeps float32 tensors in this model, on a GPU too: {', and '.join(parts)}; what they keep for the backward pass does not halve"
    if best_case:
        return f"Under a 16-bit policy {kept}, so a GPU's 16-bit step peaks above the best case given here."
    # helper-99: said among a float32 plan's notes, it read as a caveat on the float32 step, not on its remedy.
    return f"The mixed_float16 remedy below is a best case: under a 16-bit policy {kept}, so a GPU's 16-bit step peaks above it."


def in_float32(plan: ModelPlan, half: bool = False) -> bool:
    """Whether ``plan``'s step computes in float32, so that mixed precision is a remedy for it: its policy is float32 and
    no layer has a 16-bit policy of its own (``half``)."""
    return plan.step.policy in (None, "float32") and not half


def precision_note(plan: ModelPlan, capacity: int, trainable_bytes: int, half: bool = False) -> str:
    """Why mixed precision is not among :func:`batch_remedies`'s for a float32 step over ``capacity`` bytes per device:
    its best case (:func:`mixed_precision_peak`) is over it too, in one sentence. "" where nothing is derived (a rule plan,
    or runs that did not grow: :func:`batch_remedies` lists nothing then either), where the plan fits, where it is over
    only by the upper bound on tensors that grow as the square of the batch (not known not to fit:
    :func:`snippets.lib.model_report.unknown_why`), where that best case fits (it is listed, unless ``--top`` cuts the
    list short), or where the step already computes in 16 bits. helper-82 looked for mixed precision among a
    Transformer's remedies and found no word on why it was absent."""
    if (plan.method == "rule" or plan.per_sample <= 0 or not in_float32(plan, half)
            or max(plan.init_peak, plan.line_step_peak) <= capacity):
        return ""
    peak = mixed_precision_peak(plan, trainable_bytes)
    if peak <= capacity:
        return ""
    return (f"Mixed precision does not fit either: by rule, its best case (mixed_float16: activations in 16 bits, "
            f"variables, gradients and slots in float32) comes to {units.human_bytes(peak)} per device, over "
            f"{units.human_bytes(capacity)}.")


def half_best_case(plan: ModelPlan) -> int:
    """Best-case per-device peak on a GPU of ``plan``'s step under a 16-bit policy, run or compiled here, bytes.

    This host computes 16-bit matmuls on float32 copies a GPU does not make (:data:`snippets.lib.plan_caveats.HALF_CAVEAT`;
    XLA:CPU too: COMPILED_HALF_CAVEAT), so what it measured is high. A GPU keeps at least half of the bytes that grow
    with the batch (above the line's intercept, at least the variables: :attr:`ModelPlan.state`): a 16-bit tensor is
    half of its float32 copy. Not counted: the upper bound on tensors that grow as the square of the batch
    (:meth:`ModelPlan.square_extra`), a best case's other unknown. The margins stay; the initialisation's peak, which is
    not a step's, stays whole. helper-84: a U-Net's mixed_float16 step, XLA-compiled here, peaked as high as its float32
    step and read "Does not fit", while its float32 plan listed mixed_float16 as fitting by
    :func:`mixed_precision_peak`, this halving plus a 16-bit copy of each trainable variable.
    """
    margin = 0 if plan.method == "compiled" else MARGIN
    state = max(plan.state, plan.weights_bytes)
    above = max(plan.line_step_peak / (1 + margin) - state, 0)
    return max(plan.init_peak or 0, round((state + above / 2) * (1 + margin)))


def mixed_precision_peak(plan: ModelPlan, trainable_bytes: int) -> int:
    """Best-case per-device step peak of ``plan``'s float32 step under ``mixed_float16``, bytes.

    The activations a mixed policy keeps are 16-bit: the planned bytes above the state (the line's intercept,
    :attr:`ModelPlan.state`, at least the weights) halve at most; the variables, their gradients and the
    optimizer's slots stay float32 (field case F21, docs/activations.md); each layer computes
    with a 16-bit copy of its kernel, counted as half of ``trainable_bytes``. A lower bound on
    what a GPU would measure: tensors a policy keeps in float32 (the loss, softmax outputs,
    BatchNorm's statistics) halve less. Source: Keras's ``DTypePolicy`` docstring
    (keras/src/dtype_policies/dtype_policy.py: "the use of float16 or bfloat16 for computations
    and float32 for variables").
    """
    margin = 0 if plan.method == "compiled" else MARGIN
    per_device = plan.device_batch
    # The float32 figure as planned (between two runs, a chord can sit under the lines), before its margin. The state
    # holds the float32 variables at least: a line through a peak that grows faster than linearly can cross zero
    # (helper-39: -200 MB), which put the estimate at 0.14 of what XLA compiled under mixed_float16.
    state = max(plan.state, plan.weights_bytes)
    # Without the upper bound on tensors that grow as B x B (ModelPlan.square_extra): a best case.
    activations = (plan.peak_at(per_device) - plan.square_extra(per_device)) / (1 + margin) - state
    return round((state + trainable_bytes / 2 + activations / 2) * (1 + margin))


def strategy_note(plan: ModelPlan, capacity: int) -> str:
    """Why ``MirroredStrategy`` is not among the remedies of a TensorFlow plan of an XLA-compiled step that does not fit
    ``capacity`` bytes, and the command that plans it; "" for any other plan. Under a strategy Keras compiles no XLA
    step for ``jit_compile="auto"``, so the replica runs the step without XLA, whose peak the compiled lines do not
    give: helper-91's keras-io ConvLSTM, planned with XLA on one device at 32, had MirroredStrategy over 2 offered at
    752 MiB, an estimate under its 896 MiB capacity; the replica's step at 16 without XLA peaked at 1.25 GiB.

    >>> from snippets.lib.model_step import ModelStep
    >>> plan = ModelPlan(ModelStep("m:f", "adam", 32, "on", "single"), "measured", (16, 32), (2**30, 2**31))
    >>> strategy_note(plan, 2**30)[:60]
    'MirroredStrategy is not among the remedies: under a strategy'
    >>> strategy_note(plan, 2**32), strategy_note(ModelPlan(ModelStep("m:f", "adam", 32, "off", "single"), "measured",
    ...                                                              (16, 32), (2**30, 2**31)), 2**30)
    ('', '')
    """
    if not plan.step.jit or plan.method == "compiled" or plan.step.strategy == "mirrored" or plan.total <= capacity:
        return ""
    return ("MirroredStrategy is not among the remedies: under a strategy Keras compiles no XLA step, and this plan's "
            "lines are the compiled step's, which can take far less memory than the step without XLA that each replica runs. "
            f"Plan it: --strategy mirrored --devices 2 (or 4, 8) --batch {plan.step.batch} --xla auto.")
