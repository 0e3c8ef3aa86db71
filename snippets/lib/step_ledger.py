"""Each device's own peak during real ``fit`` steps, and scale models of the seed on 4 x V100-32GB.

The planner (:func:`snippets.lib.planner.plan`) predicts each device's peak in a
training step. Checking that on a CPU has one obstacle: in the CPU emulation
all logical devices draw from one capped allocator, so its peak is the sum
over devices, not any one device's. So this module runs **one device's
program alone, in a fresh process, under that device's own cap**: the layer
(or the shard of it) that the device holds, the part of the batch it sees,
its optimizer update, compiled as the placement compiles it on a GPU host.
On a GPU every device has its own allocator, so the device's peak is its
program's peak; that is what is measured:

============  ==========================================  ==============  ============
placement     device program (kernel ``W[D, F]``, N devs)  batch           XLA (auto)
============  ==========================================  ==============  ============
single        ``Dense(F)`` on ``x[B, D]``                   B               whole step
mirrored      the same, one replica                         B / N           off
column        ``Dense(F / N)`` on ``x[B, D]``               B (broadcast)   per update
row           ``Dense(F)`` on ``x[B, D / N]``               B               per update
ps worker     ``Dense(F)`` on ``x[B, D]``, update elsewhere  B               off
offload       ``Dense(F)`` on ``x[B, D]``, update on device  B               off
============  ==========================================  ==============  ============

What a single program leaves out, and the page says so: the collective
buffers (MirroredStrategy's all-reduce of the gradient, the column layout's
all-gather of ``y``, the row layout's all-reduce of the partial outputs),
NCCL's own buffers, CUDA streams and cuBLAS/cuDNN workspaces. The planner
counts the all-reduced gradient as an ``aggregation`` buffer; for RMSprop and
Adam without XLA the update's temporaries are larger, so the peak does not
depend on it.

**Scale models.** Bytes are linear in the tensor sizes, so the seed's kernel
``[131072, 65536]`` at 1/k of its elements, on devices of 1/k of a V100's
30976 MiB, models the full problem, down to the scale where the BFC
allocator's absolute 128 MiB split threshold starts to matter: 1/16 is
faithful (within 1%), 1/64 peaked about 20% high. :func:`scale_run` runs
three ``fit`` steps of a device's program under the scaled cap and reports
whether they complete or in which phase the allocator refused.

Sources: ``tf.config.experimental.get_memory_info`` / ``reset_memory_stats``
(TF 2.21 API pages); the phase order is Keras's ``train_step``
(keras/src/backend/tensorflow/trainer.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from snippets.lib import hardware, placements, planner, private, probe_cache, units
from snippets.lib.errors import is_oom, phase_of
from snippets.lib.seed import SEED_SHAPE

#: Placements whose device program this module can run alone. ``parameter_server``
#: and ``offload``: the device that runs the layer reads the whole variable
#: (the shards concatenated, or a copy from the host) and computes the whole
#: gradient; the program holds that copy as its variable, so running out while
#: creating it is the forward pass's failure.
PROGRAMS = ("single", "mirrored", "column", "row", "parameter_server", "offload")


@dataclass(frozen=True)
class StepCase:
    """One device's program: the seed-like Dense layer under a placement.

    Attributes:
        placement: one of :data:`PROGRAMS`.
        optimizer: a name in :data:`snippets.lib.optimizers.OPTIMIZERS`.
        precision: a name in :data:`snippets.lib.probe_cache.PRECISIONS`.
        xla: ``"auto"``, ``"on"`` or ``"off"`` (:func:`snippets.lib.placements.resolve_xla`).
        shape: the whole kernel ``[D, F]`` (the device holds its piece).
        devices: N.
        batch: global batch B.
        initializer: kernel initializer (the bias is zeros).
    """

    placement: str
    optimizer: str
    precision: str = "float32"
    xla: str = "auto"
    shape: tuple[int, int] = (16384, 4096)
    devices: int = 4
    batch: int = 64
    initializer: str = "zeros"

    @property
    def var_dtype(self) -> str:
        return units.POLICIES[self.precision][0] if self.precision in units.POLICIES else self.precision

    @property
    def policy(self) -> str | None:
        return self.precision if self.precision in units.POLICIES else None

    @property
    def program(self) -> tuple[tuple[int, int], int]:
        """(kernel shape the device holds, batch it sees)."""
        d, f = self.shape
        n = self.devices
        if self.placement == "column":
            return (d, f // n), self.batch
        if self.placement == "row":
            return (d // n, f), self.batch
        if self.placement == "mirrored":
            return (d, f), self.batch // n
        return (d, f), self.batch

    def label(self) -> str:
        return (f"{self.placement} x{self.devices} {self.optimizer} {self.precision} xla-{self.xla} "
                f"{list(self.shape)} B={self.batch}")


def planned(case: StepCase) -> planner.DeviceBudget:
    """The planner's budget for device 0 of ``case`` (kernel only, no bias)."""
    weight = planner.Weight(tuple(case.shape), case.var_dtype, case.initializer)
    return planner.plan([weight], case.optimizer, case.placement, case.devices, case.policy,
                       batch=case.batch, xla=case.xla)[0]


def _build(case: StepCase):
    """The device program's model, compiled as the placement compiles it on a GPU host."""
    import keras

    from snippets.lib import optimizers

    kernel, _ = case.program
    jit = placements.resolve_xla(case.xla, case.placement)
    model = keras.Sequential([
        keras.Input((kernel[0],)),
        keras.layers.Dense(kernel[1], use_bias=False, kernel_initializer=case.initializer,
                           dtype=case.policy or case.var_dtype),
    ])
    # The parameter servers update the variable; the worker only computes
    # the gradient, which plain SGD consumes in place (no slot, no temporary).
    optimizer = optimizers.make_optimizer(case.optimizer if placements.get(case.placement).updates_on_device else "sgd")
    if case.placement in ("column", "row"):
        optimizers.compile_sharded(model, optimizer, "mean_squared_error", jit_compile=jit)
    else:
        if case.placement == "mirrored" and case.devices > 1:
            copy_on_aggregation(optimizer)
        model.compile(optimizer, "mean_squared_error", jit_compile=jit)
    return model


def copy_on_aggregation(optimizer) -> None:
    """Give each gradient a reduced copy before the update, as an all-reduce does on a replica.

    A replica's all-reduce (NCCL on GPUs) writes the summed gradient into a
    new buffer while the local one still exists. A program running alone has
    nothing to reduce with, so this makes the same buffer: ``DeepCopy`` of each
    gradient in Keras's aggregation hook (``_all_reduce_sum_gradients``,
    private, checked against Keras 3.15).
    """
    import tensorflow as tf

    def aggregate(grads_and_vars):
        return [(tf.raw_ops.DeepCopy(x=g), v) for g, v in grads_and_vars]

    private.set_gradient_aggregation(optimizer, aggregate)


def measure(case: StepCase, steps: int = 1, build_slots: bool = True) -> dict:
    """Run ``case``'s device program: build, one warm-up step, then ``steps`` measured steps.

    ``build_slots``: create the optimizer's slots before the warm-up step
    (the default), or leave it to Keras inside that step, as a user's ``fit`` does.

    Call it in a fresh process whose devices are in CPU mode, on the device
    that plays the GPU. The allocator's figures are read with
    ``get_memory_info`` on that device (in CPU mode: the whole pool, which
    holds only this program).

    Returns:
        ``{"case", "init_peak", "step_peak", "completed", "failed_phase"}``:
        peaks in bytes over the allocator's starting level; ``failed_phase``
        is None or the phase ("init", "forward", "backward", "update") in
        which the allocator refused.
    """
    import numpy as np
    import tensorflow as tf

    device = "CPU:0"
    result = {"case": asdict(case), "init_peak": None, "step_peak": None, "completed": False,
              "failed_phase": None}
    start = tf.config.experimental.get_memory_info(device)["current"]
    tf.config.experimental.reset_memory_stats(device)
    try:
        model = _build(case)
    except (tf.errors.OpError, ValueError) as error:
        if not is_oom(error):
            raise
        # A worker or an offloading device does not initialise the variable;
        # it runs out holding the copy it reads in the forward pass.
        result["failed_phase"] = "forward" if case.placement in ("parameter_server", "offload") else "init"
        return result
    result["init_peak"] = tf.config.experimental.get_memory_info(device)["peak"] - start
    (d, f), batch = case.program
    try:
        # Keras would create the slots inside the first step; create them before it,
        # so that every step is a steady one, whose phases the planner predicts
        # (slots are held from the forward pass on).
        if build_slots:
            model.optimizer.build(model.trainable_variables)
    except (tf.errors.OpError, ValueError) as error:
        if not is_oom(error):
            raise
        result["failed_phase"] = "forward"
        return result
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, d)).astype("float32")
    y = rng.standard_normal((batch, f)).astype("float32")
    try:
        model.fit(x, y, batch_size=batch, verbose=0)
        tf.config.experimental.reset_memory_stats(device)
        model.fit(x, y, batch_size=batch, epochs=steps, verbose=0)
    except (tf.errors.OpError, ValueError) as error:
        if not is_oom(error):
            raise
        result["failed_phase"] = phase_of(error)
        result["error"] = [line for line in str(error).splitlines() if "node" in line.lower()][:2]
        return result
    result["step_peak"] = tf.config.experimental.get_memory_info(device)["peak"] - start
    result["completed"] = True
    return result


def default_cap(case: StepCase) -> str:
    """The cap a device program is measured under by default: 16 x its float32 kernel piece, at least 64 MiB."""
    kernel, _ = case.program
    return f"{max(64, 16 * units.tensor_bytes(kernel, 'float32') // units.MiB)}MiB"


def measure_fresh(case: StepCase, cap: str | None = None, steps: int = 1,
                  inter_op_threads: int | None = None, build_slots: bool = True) -> dict:
    """:func:`measure` in a new Python process capped at ``cap`` (default: 16 x the device's kernel piece).

    ``inter_op_threads`` sets ``TF_NUM_INTEROP_THREADS`` for that process
    (default: :data:`snippets.lib.devices.CPU_INTER_OP_THREADS`); without XLA the
    order of an update's independent ops, and so its peak, depends on it.

    Raises:
        RuntimeError: if the process fails for another reason than an OOM.
    """
    if cap is None:
        cap = default_cap(case)
    command = [sys.executable, "-m", "snippets.lib.step_ledger", "--case", json.dumps(asdict(case)),
               "--cap", cap, "--steps", str(steps)] + ([] if build_slots else ["--slots-in-fit"])
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    if inter_op_threads is not None:
        env["TF_NUM_INTEROP_THREADS"] = str(inter_op_threads)
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env,
                          cwd=Path(__file__).resolve().parents[2])
    if done.returncode:
        raise RuntimeError(f"{case.label()} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def schedule_slack(case: StepCase) -> int:
    """Bytes by which ``case``'s measured peak may fall below the planner's, from the order of its ops.

    Without XLA, TensorFlow's executor runs an update's independent ops in
    whatever order its threads reach them, and an elementwise op reuses its
    input's buffer only when it is that input's last reader. The planner
    counts the probe's order plus :data:`snippets.lib.planner.SCHEDULE_MARGIN`
    (one buffer the size of the variable), so that no order exceeds it; a
    quiet run measures one buffer below it, and one inter-op thread two
    (benchmarks, ``planner_vs_step_peak``). A compiled update has one buffer
    assignment: no slack.

    Returns:
        0, or ``SCHEDULE_MARGIN + 1`` buffers of the device's kernel piece in its variable dtype.
    """
    if placements.resolve_xla(case.xla, case.placement) or not placements.get(case.placement).updates_on_device:
        return 0  # compiled, or the worker's plain SGD consumes the gradient in place
    precision = case.precision
    if probe_cache.transient_units(case.optimizer, precision, False) <= 1:
        return 0  # an update without temporaries (plain SGD) has no order to vary
    kernel, _ = case.program
    return (planner.SCHEDULE_MARGIN + 1) * units.tensor_bytes(kernel, case.var_dtype)


def compare(case: StepCase, measured: dict) -> dict:
    """Planner against a :func:`measure` result: ``{"label", "planned", "measured", "error", "slack"}``
    (step peaks and :func:`schedule_slack`, bytes).

    Raises:
        ValueError: if the measured run did not complete (its cap was too small to measure).
    """
    if not measured.get("completed"):
        raise ValueError(f"{case.label()} ran out of memory in the {measured.get('failed_phase')} phase; "
                         "give it a larger cap to measure its peak")
    plan = planned(case)
    return {"label": case.label(), "planned": plan.step_peak, "measured": measured["step_peak"],
            "error": (plan.step_peak - measured["step_peak"]) / measured["step_peak"],
            "slack": schedule_slack(case)}


def within_bounds(row: dict, tolerance: float = 0.05) -> bool:
    """Whether a :func:`compare` row holds the planner to its promise.

    The planner may not undershoot by more than ``tolerance`` of the measured
    peak (a verdict that says "fits" must fit), and may overshoot by at most
    ``tolerance`` plus the row's schedule slack.
    """
    measured, planned = row["measured"], row["planned"]
    return -tolerance * measured <= planned - measured <= tolerance * measured + row["slack"]


#: The configurations the planner is held to (Memory budget chapter, benchmarks):
#: placements x optimizers x XLA x precisions x shapes, none of them the probe's own.
AGREEMENT_CASES = tuple(
    [StepCase(p, o, "float32", x, (12288, 3072)) for p in ("single", "column", "row")
     for o, x in (("rmsprop", "off"), ("adam", "on"))]
    + [StepCase("mirrored", o, "float32", "auto", (12288, 3072)) for o in ("rmsprop", "adam")]
    + [StepCase(p, "rmsprop", "float32", "on", (12288, 3072)) for p in ("single", "column")]
    + [StepCase("single", o, "float32", "off", (8192, 6144)) for o in ("sgd_momentum", "adam_amsgrad", "adagrad")]
    + [StepCase("column", "adam", prec, "auto", (16384, 6144)) for prec in ("float16", "bfloat16", "mixed_float16")]
    + [StepCase("mirrored", "rmsprop", prec, "auto", (8192, 4096), batch=256) for prec in ("float16", "mixed_float16")]
    + [StepCase("row", "sgd_momentum", "float32", "auto", (24576, 2048)),
       StepCase("single", "lion", "float32", "on", (8192, 6144)),
       StepCase("single", "adamw", "bfloat16", "off", (8192, 6144))]
)


#: Updates without XLA at variable sizes where BFC's split rule cannot hand a request a chunk
#: of twice its size (a chunk is split when it leaves 128 MiB or more: at 384 MiB a whole
#: chunk is at most a third of a variable too large, at 512 MiB a quarter), for
#: :data:`snippets.lib.planner.SCHEDULE_MARGIN`'s cause (benchmarks, ``schedule_margin``).
#: About 3 GiB of real memory each; one at a time.
MARGIN_CASES = (
    StepCase("single", "rmsprop", "float32", "off", (16384, 6144)),
    StepCase("single", "adam", "float32", "off", (16384, 6144)),
    StepCase("single", "sgd_momentum", "float32", "off", (16384, 8192)),
)


def probe_order_units(case: StepCase) -> float:
    """The planner's step peak for ``case`` without :data:`snippets.lib.planner.SCHEDULE_MARGIN`, in variables."""
    plan = planned(case)
    kernel, _ = case.program
    return (plan.step_peak - plan.margin) / units.tensor_bytes(kernel, case.var_dtype)


# --- scale models -------------------------------------------------------------------


def scale_case(placement: str, optimizer: str, precision: str = "float32", xla: str = "auto",
               k: int = 16, batch: int = 64, initializer: str = "zeros") -> tuple[StepCase, str]:
    """The seed at 1/k of its elements (each dimension / sqrt(k)) and the cap of a 1/k V100-32GB.

    Returns:
        ``(case, cap)`` with ``cap`` in bytes as text for :func:`measure_fresh`.

    Raises:
        ValueError: if ``k`` is not a power of 4 (each dimension is divided by sqrt(k)).
    """
    root = int(round(k ** 0.5))
    if root * root != k or root & (root - 1):
        raise ValueError(f"k must be a power of 4 (4, 16, 64, 256, ...), not {k}")
    shape = (SEED_SHAPE[0] // root, SEED_SHAPE[1] // root)
    if placement in ("parameter_server", "offload"):
        initializer = "zeros"  # initialised elsewhere: the program's variable is the copy it reads
    case = StepCase(placement, optimizer, precision, xla, shape, 4, batch, initializer)
    return case, f"{hardware.allocator_bytes() // k}B"


def scale_verdict(case: StepCase, k: int) -> dict:
    """What the planner says of the full-size configuration ``case`` stands for at scale ``k``.

    Returns:
        ``{"fits": bool, "failed_phase": None or the first phase over capacity}``.
    """
    full = StepCase(case.placement, case.optimizer, case.precision, case.xla, SEED_SHAPE, case.devices,
                    case.batch, case.initializer)
    budget = planned(full)
    capacity = hardware.allocator_bytes()
    over = [name for name, nbytes in budget.phases.items() if nbytes > capacity]
    return {"fits": not over, "failed_phase": over[0] if over else None}


def scale_run(placement: str, optimizer: str, precision: str = "float32", xla: str = "auto",
              k: int = 16, steps: int = 3) -> dict:
    """Three ``fit`` steps of a device's program of the seed at 1/k under 1/k of a V100's allocator.

    Returns:
        :func:`measure`'s result plus ``"planner"``: :func:`scale_verdict`.
    """
    case, cap = scale_case(placement, optimizer, precision, xla, k)
    result = measure_fresh(case, cap, steps=steps - 1)
    result["planner"] = scale_verdict(case, k)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    from snippets.lib import devices

    parser = argparse.ArgumentParser(prog="python -m snippets.lib.step_ledger",
                                     description="Run one device's training program alone under its own cap "
                                     "and print its peaks as JSON.")
    parser.add_argument("--case", required=True, help="a StepCase as JSON")
    parser.add_argument("--cap", default="2048MiB", metavar="SIZE", help="the device's allocator cap")
    parser.add_argument("--steps", type=int, default=1, help="measured steps after the warm-up step")
    parser.add_argument("--slots-in-fit", action="store_true",
                        help="let Keras create the optimizer's slots inside the warm-up step (default: before it)")
    args = parser.parse_args(argv)
    try:
        fields = json.loads(args.case)
        fields["shape"] = tuple(fields["shape"])
        case = StepCase(**fields)
        if case.placement not in PROGRAMS:
            raise ValueError(f"placement must be one of {', '.join(PROGRAMS)}, not {case.placement!r}")
        placements.local_shape(case.shape, case.placement if case.placement != "mirrored" else "single",
                           case.devices)
        probe_cache.check_precision(case.precision)
    except (ValueError, TypeError, KeyError) as error:
        parser.error(str(error).splitlines()[0])
    devices.configure(1, args.cap, "cpu")
    print(json.dumps(measure(case, args.steps, not args.slots_in_fit)), flush=True)
    # After an OOM inside an XLA cluster, TensorFlow 2.21 can abort while tearing the
    # allocator down (a failed CHECK in bfc_allocator.cc); the result is already out.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
