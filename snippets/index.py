"""The home page's answer: the seed kernel against one GPU, in a few lines.

>>> print("\\n".join(answer()))  # doctest: +NORMALIZE_WHITESPACE
kernel W[131072, 65536] float32: 34359738368 B (32 GiB)
one V100-SXM2-32GB gives TensorFlow's allocator 32480690176 B (30.25 GiB)
MirroredStrategy on 4 GPUs: a full copy per GPU; RMSprop step peak up to 224.02 GiB per GPU: OOM
4-way column shard, each shard's update compiled with XLA: 24.08 GiB per GPU: fits
"""

from __future__ import annotations

from snippets.lib import hardware, planner, units
from snippets.lib.seed import SEED_SHAPE


def answer(card: str = hardware.DEFAULT_CARD, devices: int = 4) -> list[str]:
    """The seed (``W[131072, 65536]`` float32, RMSprop, batch 64) on ``devices`` x ``card``.

    Returns:
        Four lines: the kernel's bytes, what one card gives TensorFlow's
        allocator, MirroredStrategy's step peak per GPU and the column shard's
        (:func:`snippets.lib.planner.per_device`), each with its verdict.

    Raises:
        ValueError: for an unknown card or a device count that does not divide the kernel.
    """
    capacity = hardware.allocator_bytes(card)
    mirrored = planner.per_device(SEED_SHAPE, "float32", "rmsprop", "mirrored", devices)[0]
    column = planner.per_device(SEED_SHAPE, "float32", "rmsprop", "column", devices)[0]

    def verdict(budget) -> str:
        return "fits" if budget.total <= capacity else "OOM"

    return [
        f"kernel W{list(SEED_SHAPE)} float32: {units.format_bytes(units.tensor_bytes(SEED_SHAPE))}",
        f"one {card} gives TensorFlow's allocator {units.format_bytes(capacity)}",
        f"MirroredStrategy on {devices} GPUs: a full copy per GPU; RMSprop step peak "
        f"{'up to ' if mirrored.margin else ''}{units.human_bytes(mirrored.total)} per GPU: {verdict(mirrored)}",
        f"{devices}-way column shard, each shard's update compiled with XLA: "
        f"{units.human_bytes(column.total)} per GPU: {verdict(column)}",
    ]
