"""The Memory budget chapter: the planner held to what TensorFlow really allocates.

Two judges. :mod:`snippets.lib.ledger` reads what each device holds once a
layer is built for real; this module runs the allocator's judgement: a set of
configurations (initialisation with zeros, Glorot, He; float32, float16,
bfloat16, mixed_float16; optimizer slots plus gradients for SGD, momentum,
RMSprop, Adam, AMSGrad), each measured as the capped allocator's peak with
``tf.config.experimental.get_memory_info`` after ``reset_memory_stats``, so
the tests hold the planner to the allocator within 2%.

Run it: ``python -m snippets.memory_budget --help``.
"""

from __future__ import annotations

import argparse
import gc
from collections.abc import Sequence
from dataclasses import dataclass

from snippets.lib import allocator, cli, devices, ledger, optimizers, placements, planner, splits, units


@dataclass(frozen=True)
class AllocatorCase:
    """One planner-versus-allocator configuration (a Dense layer, one phase).

    Attributes:
        name: short label.
        phase: ``"init"`` (create the variables) or ``"state"`` (build the
            optimizer's slots and compute one gradient per weight, keeping
            them).
        dtype: variable dtype, or None with ``policy``.
        policy: None or ``"mixed_float16"``.
        initializer: kernel initializer.
        optimizer: for the ``state`` phase.
        raw: ``init`` phase only: create a bare ``tf.Variable`` from the
            initializer (``"zeros"`` uses ``tf.zeros``) instead of a Dense layer.
    """

    name: str
    phase: str
    dtype: str | None = "float32"
    policy: str | None = None
    initializer: str = "zeros"
    optimizer: str | None = None
    raw: bool = False


#: The configurations the tests hold the planner to (field case F18 first).
ALLOCATOR_CASES = (
    AllocatorCase("tf.zeros variable", "init", raw=True),
    AllocatorCase("GlorotUniform variable", "init", initializer="glorot_uniform", raw=True),
    AllocatorCase("Dense glorot float32", "init", initializer="glorot_uniform"),
    AllocatorCase("Dense zeros float32", "init"),
    AllocatorCase("Dense he_normal float32", "init", initializer="he_normal"),
    AllocatorCase("Dense glorot float16", "init", "float16", initializer="glorot_uniform"),
    AllocatorCase("Dense glorot bfloat16", "init", "bfloat16", initializer="glorot_uniform"),
    AllocatorCase("Dense glorot mixed_float16", "init", None, "mixed_float16", "glorot_uniform"),
    AllocatorCase("state float32 sgd", "state", optimizer="sgd"),
    AllocatorCase("state float32 sgd_momentum", "state", optimizer="sgd_momentum"),
    AllocatorCase("state float32 rmsprop", "state", optimizer="rmsprop"),
    AllocatorCase("state float32 adam", "state", optimizer="adam"),
    AllocatorCase("state float32 adam_amsgrad", "state", optimizer="adam_amsgrad"),
    AllocatorCase("state float16 rmsprop", "state", "float16", optimizer="rmsprop"),
    AllocatorCase("state bfloat16 adam", "state", "bfloat16", optimizer="adam"),
    AllocatorCase("state mixed_float16 sgd", "state", None, "mixed_float16", optimizer="sgd"),
    AllocatorCase("state mixed_float16 rmsprop", "state", None, "mixed_float16", optimizer="rmsprop"),
)


def measure_case(case: AllocatorCase, shape: Sequence[int] = (16384, 1024)) -> dict:
    """Run ``case`` at ``shape`` on ``CPU:0`` and return planned and measured peak bytes.

    The layer is ``Dense(shape[1])`` on inputs of width ``shape[0]`` (kernel
    ``shape`` plus a bias), except ``raw`` cases (one bare variable). The
    measured figure is the allocator's peak during the phase minus its level
    before the layer existed, so resident weights count; the planned figure
    is :attr:`snippets.lib.planner.DeviceBudget.init_peak`, or for the ``state``
    phase the weights, slots and gradients of :func:`snippets.lib.planner.plan`
    (plus the compute copies under a mixed policy); the update's temporaries
    are :mod:`snippets.lib.step_ledger`'s business.

    Needs CPU mode of :mod:`snippets.lib.devices` (allocator statistics).

    Returns:
        ``{"name", "planned", "measured", "error"}``; ``error`` is
        ``(planned - measured) / measured``.
    """
    import keras
    import tensorflow as tf

    from snippets.lib import optimizers

    # Reference cycles (Keras layers) from earlier cases must not be freed
    # in the middle of this one, or the peak reads low: collect the young
    # generations (cheap), then keep the collector off while measuring.
    gc.collect(1)
    enabled = gc.isenabled()
    gc.disable()
    try:
        shape = units.check_shape(shape)
        dtype = case.dtype or units.POLICIES[case.policy][0]
        start = tf.config.experimental.get_memory_info("CPU:0")["current"]
        with tf.device("/CPU:0"):
            if case.raw:
                weights = [planner.Weight(shape, dtype, case.initializer)]
                init = keras.initializers.get(case.initializer)
                peak, variable = allocator.allocator_peak(collect=False, action=lambda: tf.Variable(
                    tf.zeros(shape, dtype) if case.initializer == "zeros" else init(shape, dtype=dtype)))
                planned = planner.plan(weights, None, "single", 1, None, reserve=0)[0].init_peak
                measured = peak
                del variable
            else:
                weights = [planner.Weight(shape, dtype, case.initializer), planner.Weight((shape[1],), dtype, "zeros")]

                def make():
                    layer = keras.layers.Dense(shape[1], kernel_initializer=case.initializer,
                                               dtype=case.policy or case.dtype)
                    layer.build((None, shape[0]))
                    return layer

                peak, layer = allocator.allocator_peak(make, collect=False)
                budget = planner.plan(weights, case.optimizer, "single", 1, case.policy, reserve=0)[0]
                if case.phase == "init":
                    planned, measured = budget.init_peak, peak
                else:
                    compute = units.POLICIES[case.policy][1] if case.policy else dtype

                    def state():
                        opt = optimizers.make_optimizer(case.optimizer) if case.optimizer else None
                        if opt:
                            opt.build(layer.trainable_variables)
                        # A gradient has its variable's shape whatever the loss, so
                        # the loss is a plain sum of the compute copies: a MatMul
                        # would add CPU-only temporaries (float16 MatMul on CPU
                        # computes through float32), which a GPU does not need.
                        with tf.GradientTape() as tape:
                            loss = tf.add_n([tf.cast(tf.reduce_sum(tf.cast(v, compute)), "float32")
                                             for v in layer.trainable_variables])
                        return opt, tape.gradient(loss, layer.trainable_variables)

                    base = tf.config.experimental.get_memory_info("CPU:0")["current"] - start
                    peak, kept = allocator.allocator_peak(state, collect=False)
                    # What this phase keeps: weights, slots, gradients and, under a mixed
                    # policy, the compute copies (no update has run, no batch exists).
                    copies = sum(units.tensor_bytes(w.shape, compute) for w in weights) if case.policy else 0
                    planned = budget.weights + budget.gradients + budget.slots + copies
                    measured = base + peak
                    del kept
                del layer
    finally:
        if enabled:
            gc.enable()
    return {"name": case.name, "planned": planned, "measured": measured,
            "error": (planned - measured) / measured}


def cases() -> tuple[AllocatorCase, ...]:
    """:data:`ALLOCATOR_CASES` (a function, so a test kernel can return them)."""
    return ALLOCATOR_CASES


def allocator_check(shape: Sequence[int] = (16384, 1024), cases=ALLOCATOR_CASES) -> list[dict]:
    """:func:`measure_case` for every case: the planner held to the capped allocator."""
    gc.collect()  # once: each case frees what it made by reference counting
    return [measure_case(case, shape) for case in cases]


def allocator_check_fresh(shape: Sequence[int] = (16384, 1024), cap: str = "1024MiB") -> list[dict]:
    """:func:`allocator_check` in a fresh Python process with its own capped allocator.

    The allocator's peak depends on its history: the BFC allocator hands a
    request a whole free chunk, without splitting it, when the chunk is
    less than twice the request and the slack is under 128 MiB
    (``kMaxInternalFragmentation``; ``BFCAllocator::SplitChunk`` is skipped
    in ``bfc_allocator.cc``), and counts the whole chunk as in use. After other
    work has left holes, a 32 MiB tensor can count as 63 MiB. A fresh process
    has no holes, so the check runs in one: ``python -m snippets.memory_budget
    --allocator-check``.
    """
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    shape = units.check_shape(shape)
    command = [sys.executable, "-m", "snippets.memory_budget", "--allocator-check", "--devices", "1",
               "--device-memory", cap, "--shape", *map(str, shape)]
    environ = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(command, capture_output=True, text=True, env=environ,
                          cwd=Path(__file__).resolve().parents[2], check=False)
    if done.returncode:
        raise RuntimeError(f"allocator check failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout)


def max_allocator_error(shape: Sequence[int] = (16384, 1024)) -> float:
    """Largest ``abs(planned - measured) / measured`` over :data:`ALLOCATOR_CASES` (a fraction).

    The benchmark quotes this figure. Needs CPU mode with a cap of at least
    about 8 x the kernel's bytes (1024 MiB for the default shape).
    """
    return max(abs(row["error"]) for row in allocator_check(shape))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snippets.memory_budget",
        description="Build a Dense layer for real under a placement on N logical devices and "
        "print what each device holds next to the planner's figures.",
    )
    cli.add_device_arguments(parser)
    parser.set_defaults(devices=4, device_memory="1024MiB")
    cli.add_shape(parser, [1024, 256], "the layer to build for real")
    parser.add_argument("--dtype", default="float32", choices=sorted(units.DTYPE_BYTES))
    parser.add_argument("--optimizer", default=None, choices=sorted(optimizers.OPTIMIZERS))
    parser.add_argument("--strategy", default="mirrored",
                        choices=["single", "mirrored", "column", "row", "dtensor_column", "dtensor_row",
                                 "parameter_server", "offload"])
    parser.add_argument("--allocator-check", action="store_true",
                        help="instead: print allocator_check() for --shape as JSON (CPU mode)")
    args = parser.parse_args(argv)
    if args.allocator_check:
        import json

        try:
            units.check_shape(args.shape)
        except ValueError as error:
            parser.error(str(error))
        cli.configure_from_args(args, parser)
        print(json.dumps(allocator_check(args.shape)))
        return 0
    try:
        splits.check_count(args.devices)
        placements.local_shape(args.shape, args.strategy.removeprefix("dtensor_"), args.devices)
        allocator.check_host_can_hold(units.tensor_bytes(args.shape, args.dtype) * 4 * args.devices,
                                   "building this layer for real")
    except (ValueError, allocator.HostMemoryError) as error:
        parser.error(str(error))
    setup = cli.configure_from_args(args, parser)
    from tabulate import tabulate

    planned, held = ledger.compare(setup, args.shape, args.dtype, args.optimizer, args.strategy)
    rows = [
        [f"ps:{p.device}" if args.strategy == "parameter_server" else
         setup.devices[p.device].rsplit("device:", 1)[-1], p.weights, l.weights, p.gradients, l.gradients,
         p.slots, l.slots, "yes" if p == l else "NO"]
        for p, l in zip(planned, held)
    ]
    print(tabulate(rows, headers=["device", "weights plan", "held", "grads plan", "held",
                                  "slots plan", "held", "equal"]))
    return 0 if planned == held else 1


if __name__ == "__main__":
    raise SystemExit(main())
