"""Where MirroredStrategy puts variables: one full copy per replica, never pooled.

Run it: ``python -m snippets.placement --help``. At CI scale it shows, on N
logical devices (real GPUs, a split GPU or logical CPUs, see
:mod:`snippets.lib.devices`):

* a variable created in ``strategy.scope()`` is a mirrored variable with one
  full-size component per replica;
* a variable created outside any strategy lands whole on device 0: nothing
  spills onto the other devices when device 0 is full;
* ``tf.device(...)`` inside ``strategy.scope()`` does not pin a variable: it is
  still mirrored; outside the scope it does;
* on a capped allocator, replicas share one buffer until the first write, so
  a mirrored variable that "fits" can OOM at its first update.

Sources: ``tf.distribute.MirroredStrategy`` API page ("creates one replica per
GPU device. Each variable in the model is mirrored across all the
replicas"); the distributed-training guide, "MirroredStrategy".
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from snippets.lib import allocator, cli, devices, pieces, units


def mirrored_variable(setup: devices.DeviceSetup, shape: Sequence[int], dtype: str = "float32"):
    """Create ``tf.Variable(tf.zeros(shape))`` in ``MirroredStrategy(setup.devices).scope()``."""
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(setup.devices)
    with strategy.scope():
        return tf.Variable(tf.zeros(units.check_shape(shape), dtype=dtype))


def plain_variable(shape: Sequence[int], dtype: str = "float32"):
    """Create ``tf.Variable(tf.zeros(shape))`` with no strategy and no ``tf.device``."""
    import tensorflow as tf

    return tf.Variable(tf.zeros(units.check_shape(shape), dtype=dtype))


def device_inside_scope(setup: devices.DeviceSetup, device: str, shape: Sequence[int] = (8,)):
    """Create a variable under ``with tf.device(device)`` inside a MirroredStrategy scope.

    The strategy's variable creator wins over ``tf.device``: the variable is
    still mirrored over every replica (field case F12).
    """
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(setup.devices)
    with strategy.scope(), tf.device(device):
        return tf.Variable(tf.zeros(units.check_shape(shape)))


def first_write(variable) -> None:
    """``variable.assign_add(1)`` on every replica: the first write gives each its own buffer."""
    import tensorflow as tf

    variable.assign_add(tf.ones(variable.shape, variable.dtype))


def table(variable) -> str:
    """A table of ``variable``'s components: device, shape, dtype, bytes."""
    from tabulate import tabulate

    rows = [(pieces.short_device(c.device), list(c.shape), c.dtype, c.nbytes) for c in pieces.of_variable(variable)]
    return tabulate(rows, headers=["device", "shape", "dtype", "bytes"], intfmt=",")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snippets.placement", description=__doc__.split("\n\n")[0]
    )
    cli.add_device_arguments(parser)
    cli.add_shape(parser, [1024, 256], 'shape of the variable to mirror', kernel=False)
    args = parser.parse_args(argv)
    try:
        allocator.check_host_can_hold(
            units.tensor_bytes(args.shape) * args.devices, "mirroring this variable"
        )
    except (ValueError, allocator.HostMemoryError) as error:
        parser.error(str(error))
    setup = cli.configure_from_args(args, parser)
    print(setup.describe())
    import tensorflow as tf

    try:
        variable = mirrored_variable(setup, args.shape)
    except tf.errors.ResourceExhaustedError as error:
        from snippets.lib.errors import oom_line

        parser.exit(1, f"{parser.prog}: the mirrored variable does not fit: {oom_line(error)}\n")
    print(f"\nMirrored variable {type(variable).__name__}, one full copy per replica:")
    print(table(variable))
    total = sum(c.nbytes for c in pieces.of_variable(variable))
    print(f"\nIn all: {units.format_bytes(total)}; each device must hold "
          f"{units.format_bytes(pieces.of_variable(variable)[0].nbytes)} by itself.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
