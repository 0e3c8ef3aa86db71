"""The chapter "What the usual advice gets wrong": each piece of advice, run.

One piece of advice runs here rather than inline, because the page shows its
code and the tests run it: blocks of a kernel placed with ``tf.device``
inside ``MirroredStrategy.scope()`` (the advice "split the tensor over the
GPUs yourself").
"""

from __future__ import annotations

from collections.abc import Sequence

from snippets.lib import devices, pieces, splits


# --8<-- [start:blocks]
def device_blocks_under_mirrored(setup: devices.DeviceSetup, shape: Sequence[int] = (1024, 512)) -> dict[str, int]:
    """Bytes each device holds after placing column blocks of ``W[shape]`` with ``tf.device``
    inside ``MirroredStrategy(setup.devices).scope()``: one block per device, as the advice says.

    Raises:
        ValueError: if the device count does not divide the columns.
    """
    import tensorflow as tf

    width = splits.check_split("columns", shape[1], len(setup.devices))
    strategy = tf.distribute.MirroredStrategy(setup.devices)
    with strategy.scope():
        blocks = []
        for name in setup.devices:
            with tf.device(name):  # ignored for placement: the strategy mirrors every variable
                blocks.append(tf.Variable(tf.zeros([shape[0], width])))
    return pieces.bytes_per_device(pieces.of_variables(blocks))
# --8<-- [end:blocks]
