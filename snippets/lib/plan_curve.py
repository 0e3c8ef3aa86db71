"""A planned peak between and below the batches a plan ran or compiled, and the largest batch under a capacity.

A plan holds a peak (bytes) at a few per-device batches, ascending. Between two of them the peak is read
on their chord: a step's peak is convex in the batch (the larger of an update the batch does not grow
and a backward pass it does), so the chord lies above it. Below the smallest, a compiled plan reads the
line through the two smallest: through its two largest (the steeper line, for a convex peak) it went
negative at small batches for a step whose peak grows faster than the batch (an audit: -53 MiB at 16
per device, a batch that "fit" 12 MiB at 1.9 MiB, where it needed 16 MiB).

:func:`largest_fitting` finds the largest batch whose planned peak fits, in a few dozen evaluations:
scanning every batch up to the largest run took 30 s for a plan run at a million samples per device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def chord(batches: Sequence[int], peaks: Sequence[float], batch: int) -> float:
    """The line between the two of ``batches`` on either side of ``batch``, at ``batch``; 0 outside them.

    Args:
        batches: per-device batches, ascending.
        peaks: bytes at each of ``batches``.
        batch: a per-device batch, strictly between two of ``batches`` for a figure.

    >>> chord((16, 32, 256), (100, 132, 580), 24)
    116.0
    >>> chord((16, 32), (100, 132), 8)
    0
    """
    return max((p0 + (p1 - p0) * (batch - b0) / (b1 - b0) for (b0, p0), (b1, p1)
                in zip(zip(batches, peaks), zip(batches[1:], peaks[1:])) if b0 < batch < b1), default=0)


def below_first(batches: Sequence[int], peaks: Sequence[float], batch: int, floor: float, convex: bool) -> float:
    """A compiled peak at ``batch`` below the smallest of ``batches`` (bytes), no lower than ``floor`` (the
    weights, which every step holds).

    ``convex`` (the peak grew faster than linearly where it was compiled): the smallest figure itself, which
    a peak that does not fall as the batch grows cannot exceed below it; a line through two figures of such
    a step falls under it. Else the line through the two smallest.

    >>> below_first((1024, 2048), (26, 58), 512, 4, convex=False)
    10.0
    >>> below_first((1024, 2048), (26, 58), 16, 4, convex=False)
    4
    >>> below_first((1024, 2048, 4096), (26, 58, 170), 16, 4, convex=True)
    26
    """
    if convex or len(batches) < 2:
        return peaks[0]
    (b0, b1), (p0, p1) = batches[:2], peaks[:2]
    return max(p0 - (p1 - p0) / (b1 - b0) * (b0 - batch), floor)


def last_fitting(fits: Callable[[int], bool], low: int, high: int) -> int:
    """The largest batch in ``[low, high]`` for which ``fits``, or 0, where ``fits`` changes at most once over
    the range (a peak monotone there, either way): by bisection.

    >>> last_fitting(lambda b: b <= 700, 1, 10**6)
    700
    >>> last_fitting(lambda b: b >= 5, 1, 9), last_fitting(lambda b: False, 1, 9), last_fitting(bool, 5, 4)
    (9, 0, 0)
    """
    if low > high:
        return 0
    if fits(high):
        return high
    if not fits(low):
        return 0
    while high - low > 1:  # fits(low), not fits(high)
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def largest_fitting(fits: Callable[[int], bool], batches: Sequence[int], upper: int) -> int:
    """The largest per-device batch in ``[1, upper]`` for which ``fits``, or 0.

    ``fits`` must be monotone (either way) below the smallest of ``batches``, on each stretch between two of
    them and above the largest, but not across one: a batch run keeps its own figure, which can lie under
    the lines either side of it, so batch 16 can fit where 17 does not. Each stretch is bisected.

    >>> largest_fitting(lambda b: b == 16 or b < 10, (16, 32), 100)
    16
    >>> largest_fitting(lambda b: b <= 70, (16, 32), 100)
    70
    """
    stretches, low = [], 1
    for batch in sorted(b for b in batches if b <= upper):
        stretches += [(low, batch - 1), (batch, batch)]
        low = batch + 1
    stretches.append((low, upper))
    return next((found for found in (last_fitting(fits, *s) for s in reversed(stretches)) if found), 0)


#: A largest run this many times past the run before it or more: the chord between their worst peaks carries past it.
FAR_APART = 4


def far_chord(batches: Sequence[int], peaks: Sequence[float]) -> float:
    """Bytes per sample between the worst ``peaks`` of the two largest ``batches`` where the largest is :data:`FAR_APART`
    times the one before or more, else 0 (and at least 0). Past the largest run a peak convex in the batch grows at least
    that fast, and a slope between upper-quartile steps misses growth that only the worst step has (helper-70: an MLP's
    first step, XLA-compiled, held about 8 KB per sample more than its others; through the runs at 256 and 8192 per device
    its lines grew 26.4 KiB per sample, its worst peaks 35.3 KB, and its step at 36260, offered for 1155 MiB, peaked at
    1278). Runs closer together are left to the lines: there a draw that kept a buffer live longer would
    steepen the chord by a level, which the slope between upper-quartile steps leaves out.

    >>> far_chord((16, 32, 256, 8192), (19.1e6, 19.7e6, 25.25e6, 305.2e6)) > 35e3, far_chord((16, 32), (10e6, 30e6))
    (True, 0.0)
    """
    if len(batches) < 2 or batches[-1] < FAR_APART * batches[-2]:
        return 0.0
    return max(0.0, (peaks[-1] - peaks[-2]) / (batches[-1] - batches[-2]))


#: Bytes a run's floor must pass the most a linear peak reaches before :func:`faster_than_linear` reads it as growth
#: faster than linearly: the allocator's rounding can double a tiny step's figure.
FASTER_FLOOR = 1 << 20


def faster_than_linear(batches: Sequence[int], peaks: Sequence[float], floors: Sequence[float],
                       slack: float) -> tuple[int, int, int, int]:
    """``(b0, worst peak at b0, b1, floor at b1)`` for the largest run ``b1`` of ``batches`` and a smaller one ``b0`` whose
    worst peak, grown ``b1 / b0`` times and by ``slack``, stays under the floor at ``b1`` (its lower-quartile step) by
    :data:`FASTER_FLOOR` or more; ``()`` if none. A peak linear in the batch, ``c + s * b`` with ``c >= 0``, or the larger
    of two such (an update and a backward pass) is at most ``b1 / b0`` times its figure at ``b0``; one past that grows
    faster than linearly (helper-74: keras-io's Switch Transformer, its expert capacity following the batch, peaked 11.8,
    36.8 and 2000 MB at 16, 32 and 256 per device, and a card's batch read off the line past 256 ran out at 1.5 times
    its pool). Bytes; ``floors`` empty: ``peaks``.

    >>> faster_than_linear((16, 32, 256), (11.8e6, 36.8e6, 2.0e9), (), 0.1), faster_than_linear((16, 32), (100e6, 199e6), (), 0.1)
    ((16, 11800000.0, 256, 2000000000.0), ())
    """
    low = floors or peaks
    for b0, worst in zip(batches[:-1], peaks[:-1]):
        if b0 > 0 and low[-1] - batches[-1] / b0 * worst * (1 + slack) >= FASTER_FLOOR:
            return b0, worst, batches[-1], low[-1]
    return ()
