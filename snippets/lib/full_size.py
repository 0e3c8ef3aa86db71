"""A sharded kernel at full shape without the memory: reserved pieces against the planner.

The pieces go through the allocator (in CPU mode, the capped BFC pool, which
must hold all of them: ``devices.configure(N, cpu_pool=full_shape_pool())``)
with no page written (:func:`snippets.lib.allocator.reserve`), so the seed's
32 GiB kernel is split and placed on a laptop; the report sets each device's
step peak from the planner beside what was built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from snippets.lib import devices, pieces, placements, planner, units
from snippets.lib.seed import SEED_SHAPE


@dataclass(frozen=True)
class FullShapeReport:
    """Per-device bytes of the seed kernel split over N devices, reserved and planned.

    Attributes:
        strategy: "column" or "row".
        shards: the reserved kernel shards (device, shape, bytes), read from
            the layer's variables after building it with :class:`snippets.lib.initializers.Uninitialized`.
        budgets: ``snippets.lib.planner.per_device`` for the same split, RMSprop,
            batch 64, each shard's update XLA-compiled on its device (what
            :func:`snippets.lib.optimizers.colocate_updates` does under ``jit_compile="auto"``).
        unfused: the same without XLA (the update's temporaries not fused).
        mirrored: the same budget under MirroredStrategy (XLA off, as Keras decides).
        device_bytes: capacity of one device's allocator.
        allocated: bytes the allocator handed out while building the layer
            (``get_memory_info`` of the pool).
        rss: the process's resident memory afterwards (psutil), bytes.
    """

    strategy: str
    shards: tuple[pieces.Piece, ...]
    budgets: tuple
    unfused: object
    mirrored: object
    device_bytes: int
    allocated: int = 0
    rss: int = 0

    def verdict(self, nbytes: int) -> str:
        """"fits in 30976 MiB, 6.17 GiB to spare" or "does NOT fit in 30976 MiB, short by ..."."""
        cap = f"{self.device_bytes // units.MiB} MiB"
        spare = self.device_bytes - nbytes
        if spare >= 0:
            return f"fits in {cap}, {units.human_bytes(spare)} to spare"
        return f"does NOT fit in {cap}, short by {units.human_bytes(-spare)}"

    def lines(self) -> list[str]:
        out = [f"{self.strategy}-parallel kernel {list(SEED_SHAPE)} float32 over {len(self.shards)} devices, "
               "RMSprop, batch 64:"]
        for shard, budget in zip(self.shards, self.budgets):
            out.append(f"  {pieces.short_device(shard.device)}: shard {list(shard.shape)}, step peak "
                       f"{units.human_bytes(budget.total)} with XLA updates: {self.verdict(budget.total)}")
        out.append(f"  without XLA: step peak {units.human_bytes(self.unfused.total)} "
                   f"({self.unfused.peak_phase}): {self.verdict(self.unfused.total)}")
        out.append(f"  reserved {units.human_bytes(self.allocated)} for the shards, pages untouched: "
                   f"process RSS {units.human_bytes(self.rss)}")
        out.append(f"  MirroredStrategy instead: step peak {units.human_bytes(self.mirrored.total)} per device "
                   f"({self.mirrored.peak_phase}): {self.verdict(self.mirrored.total)}")
        return out


def rss() -> int:
    """This process's resident memory (psutil), bytes: what reserving pieces really cost the host."""
    import psutil

    return psutil.Process().memory_info().rss


def full_shape_pool(shape: Sequence[int] = SEED_SHAPE) -> str:
    """CPU pool (``devices.configure(cpu_pool=...)``) that holds all shards of ``shape`` float32.

    The shards add up to the full tensor, whatever their number; 1 GiB more
    covers the allocator's rounding and small tensors.

    >>> full_shape_pool()
    '35433480192B'
    """
    return f"{units.tensor_bytes(shape, 'float32') + units.GiB}B"


def report(setup: devices.DeviceSetup, kind: str, built: Sequence[pieces.Piece], allocated: int,
           shape: Sequence[int] = SEED_SHAPE) -> FullShapeReport:
    """:class:`FullShapeReport` of kernel shards ``built`` for ``shape`` split ``kind`` over ``setup.devices``.

    Each device's step peak comes from :func:`snippets.lib.planner.per_device`
    with the same split (RMSprop, batch 64), checked against the shards
    actually built: their shapes must be the planner's local shape.

    Raises:
        AssertionError: if a built shard's shape differs from the plan.
    """
    d, f = units.check_shape(shape)
    n = len(setup.devices)
    budgets = planner.per_device((d, f), "float32", "rmsprop", kind, n, initializer="glorot_uniform")
    expected = placements.local_shape((d, f), kind, n)
    if any(s.shape != expected for s in built):
        raise AssertionError(f"built shards {[s.shape for s in built]} differ from the plan {expected}")
    unfused = planner.per_device((d, f), "float32", "rmsprop", kind, n, xla="off")[0]
    mirrored = planner.per_device((d, f), "float32", "rmsprop", "mirrored", n)[0]
    return FullShapeReport(kind, tuple(built), tuple(budgets), unfused, mirrored, setup.device_bytes,
                           allocated, rss())
