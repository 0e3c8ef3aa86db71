"""The overview chapter "Shard the tensor": the three methods' results side by side.

The three chapters' ``shard_summary`` functions build a ``[1024, 512]``
kernel for real and read what each device holds; this module sets their
rows in one table, and the seed's step peak per device for each method
from the planner.
"""

from __future__ import annotations

from collections.abc import Sequence

from snippets.lib import hardware, pieces, placements, planner, units
from snippets.lib.seed import SEED_SHAPE


def comparison_table(summaries: Sequence[dict]) -> str:
    """The summaries (:func:`snippets.lib.ledger.comparison_row` rows) as one text table."""
    from tabulate import tabulate

    rows = [(s["method"], " ".join(pieces.short_device(d) for d in s["where"]), list(s["local_shape"]),
             s["kernel_bytes"][0], s["measured"][0], s["planned"][0]) for s in summaries]
    return tabulate(rows, headers=["method", "pieces on", "piece", "kernel B", "read B", "planned B"])


def seed_step_rows(devices: int = 4) -> list[tuple[str, int, str]]:
    """``(method, step peak per device in bytes, device kind)`` for the seed, float32, RMSprop, batch 64.

    The tf.device layers compile each shard's update with XLA; DTensor's
    hand-written update is not compiled; a parameter-server task holds its
    shard and the velocity next to it; the worker reads the whole kernel.
    """
    def step(strategy: str, xla: str = "auto") -> int:
        return planner.per_device(SEED_SHAPE, "float32", "rmsprop", strategy, devices, xla=xla)[0].total

    shard = units.tensor_bytes(placements.local_shape(SEED_SHAPE, "parameter_server", devices))
    return [
        ("MirroredStrategy (for reference)", step("mirrored"), "GPU"),
        ("tf.device layers, XLA updates", step("column"), "GPU"),
        ("DTensor, hand-written update (no XLA)", step("column", "off"), "GPU"),
        ("ParameterServerStrategy, each ps (+ velocity)", 2 * shard, "CPU host"),
        ("ParameterServerStrategy, the worker", step("parameter_server"), "GPU"),
    ]


def seed_step_table(devices: int = 4) -> str:
    """:func:`seed_step_rows` as a text table with a "fits a V100" column."""
    from tabulate import tabulate

    return tabulate([(m, units.human_bytes(b), b <= hardware.V100_CAPACITY, kind) for m, b, kind in seed_step_rows(devices)],
                    headers=["step peak per device", "bytes", "fits a V100", "device"])
