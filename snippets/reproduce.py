"""Reproduce the seed OOM at full shape, then diagnose it from the model.

The scenario: a Keras model whose ``Dense(65536)`` layer reads inputs of width
131072, so its kernel is ``W[131072, 65536]`` float32, created and compiled
(RMSprop, mean squared error) inside ``tf.distribute.MirroredStrategy`` over
4 devices of 30976 MiB (V100-SXM2-32GB). Creating the kernel fails on
device 0, because 131072 x 65536 x 4 B = 32 GiB is more than one device holds
and MirroredStrategy wants a full copy on every device.

Run it::

    python -m snippets.reproduce                       # the seed, 4 x 30976 MiB
    python -m snippets.reproduce --device-memory 32GB  # other capacities
    python -m snippets.reproduce --help

On a CPU-only machine it runs in CPU mode (see :mod:`snippets.lib.devices`): the
capped BFC allocator refuses the 32 GiB request before touching a page, so it
needs well under 2 GiB of RAM. If the allocator would accept the model
instead, so that the run would really allocate it, it first checks the host
can spare that memory and refuses otherwise.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from snippets.lib import allocator, cli, devices, planner, units
from snippets.lib.errors import oom_line
from snippets.lib.seed import SEED_INPUT_DIM, SEED_UNITS, VariableSpec, build_seed_model, seed_model, variable_specs


def reproduce(setup: devices.DeviceSetup, build_model=build_seed_model, *args, **kwargs) -> str | None:
    """Build ``build_model(...)`` inside ``MirroredStrategy(setup.devices).scope()``.

    Returns:
        The OOM as one line (see :func:`oom_line`), or None if the model fit.
    """
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(setup.devices)
    try:
        with strategy.scope():
            build_model(*args, **kwargs)
    except tf.errors.ResourceExhaustedError as error:
        return oom_line(error)
    return None


@dataclass(frozen=True)
class Diagnosis:
    """What the OOM means, in bytes computed from the model's variables.

    Attributes:
        largest: the largest variable (the one that fails first).
        weights_per_replica: bytes of all variables; MirroredStrategy puts all
            of them on every replica.
        replicas: number of devices (replicas).
        device_bytes: capacity of one device.
    """

    largest: VariableSpec
    weights_per_replica: int
    replicas: int
    device_bytes: int

    @property
    def all_replicas(self) -> int:
        return self.weights_per_replica * self.replicas

    @property
    def fits(self) -> bool:
        return self.weights_per_replica <= self.device_bytes

    def step_multiple(self) -> float:
        """The planner's RMSprop step peak on one replica, in units of the largest variable."""
        dtype = self.largest.dtype if self.largest.dtype in units.DTYPE_BYTES else "float32"
        step = planner.per_device(self.largest.shape, dtype, "rmsprop", "mirrored", self.replicas)[0]
        return step.step_peak / self.largest.nbytes

    def lines(self) -> list[str]:
        big = self.largest
        short = big.nbytes - self.device_bytes
        verdict = (
            f"short by {units.format_bytes(short)}" if short > 0
            else f"{units.format_bytes(-short)} to spare"
        )
        return [
            f"largest variable: {big.path} {list(big.shape)} {big.dtype} = {units.format_bytes(big.nbytes)}",
            f"device capacity: {self.device_bytes // units.MiB} MiB = "
            f"{units.format_bytes(self.device_bytes)}: {verdict}",
            f"replicas: {self.replicas}; MirroredStrategy keeps a full copy of every variable on each",
            f"weights per replica: {units.format_bytes(self.weights_per_replica)}",
            f"weights on all replicas: {units.format_bytes(self.all_replicas)} "
            f"(the devices hold {units.format_bytes(self.device_bytes * self.replicas)} together)",
            "why the total does not help: each device's allocator serves only that device; "
            "memory is never pooled, so every replica must hold the whole variable by itself.",
            f"a training step needs {self.step_multiple():.0f} x the variable with RMSprop under MirroredStrategy "
            "(gradient, slot and the update's temporaries; see the Memory budget chapter).",
        ]


def diagnose(specs: Sequence[VariableSpec], setup: devices.DeviceSetup) -> Diagnosis:
    """Compute the :class:`Diagnosis` of ``specs`` under ``setup``'s devices."""
    largest = max(specs, key=lambda s: s.nbytes)
    return Diagnosis(largest, sum(s.nbytes for s in specs), setup.plan.count, setup.device_bytes)


def check_host_safe(specs: Sequence[VariableSpec], setup: devices.DeviceSetup) -> None:
    """In CPU mode, refuse a run whose variables the allocator would really accept.

    Variables larger than the cap are refused by the allocator before a page
    is touched; the others are really allocated, up to the cap.

    Raises:
        allocator.HostMemoryError: if that could exceed what the host can spare.
    """
    if setup.mode != "cpu":
        return
    cap = setup.pool_mib * units.MiB
    accepted = sum(s.nbytes for s in specs if s.nbytes <= cap) * setup.plan.count
    allocator.check_host_can_hold(min(accepted, cap), "building this model in CPU mode")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snippets.reproduce",
        description="Reproduce the seed OOM (Dense kernel [131072, 65536] float32 under "
        "MirroredStrategy) on real GPUs, a split GPU or CPU emulation, then diagnose it.",
    )
    cli.add_device_arguments(parser)
    cli.add_shape(parser, [SEED_INPUT_DIM, SEED_UNITS], "the Dense layer's kernel")
    args = parser.parse_args(argv)
    try:
        units.check_shape(args.shape)
    except ValueError as error:
        parser.error(str(error))
    setup = cli.configure_from_args(args, parser)
    specs = variable_specs(seed_model, *args.shape)
    try:
        check_host_safe(specs, setup)
    except allocator.HostMemoryError as error:
        parser.exit(2, f"{parser.prog}: refused: {error}\n")
    print(f"Devices: {setup.describe()}")
    print(f"Building Dense({args.shape[1]}) on inputs of width {args.shape[0]} "
          f"under MirroredStrategy over {len(setup.devices)} devices...\n")
    line = reproduce(setup, build_seed_model, *args.shape)
    print(line if line else "No OOM: the model fits every replica.")
    print("\nDiagnosis")
    for text in diagnose(specs, setup).lines():
        print(f"  {text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
