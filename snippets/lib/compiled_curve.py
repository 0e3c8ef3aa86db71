"""A compiled plan's figures as one curve: every batch XLA compiled, the checks' included.

:class:`snippets.lib.model_plan.ModelPlan` of method ``"compiled"`` holds the batches its line was drawn through
(``batches``) and the batches compiled to check the largest batch for the reader's capacity (``confirmed``,
:func:`snippets.lib.jax_step.confirm_largest`). These read a batch off all of them: helper-54's trial found the
line through the first two carried past checks that had come out far above it (a loss over pairs: a card's batch read
off it compiled to 2.7 times the card's pool, and the plan said its growth was under the rule's).
"""

from __future__ import annotations

import math

from snippets.lib.plan_runs import MARGIN

#: Batches a compiled plan offers or compiles are multiples of the reader's per-device batch's common divisor with
#: this: a loss over pairs wants even batches, over triplets multiples of 3 (helper-55: an odd card batch, and an odd
#: half of the reader's, failed to compile), and 24 holds every group size up to 4, and 6, 8 and 12.
GROUPS = 24


def points(plan) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(batches, figures)`` of every compiled figure of ``plan``, per device, ascending."""
    found = sorted(plan.compiled_points.items())
    return tuple(b for b, _ in found), tuple(p for _, p in found)


def last_slope(plan) -> float:
    """Bytes per sample between the two largest compiled batches (0 for fewer than two)."""
    batches, figures = points(plan)
    return (figures[-1] - figures[-2]) / (batches[-1] - batches[-2]) if len(batches) > 1 else 0.0


def beyond(plan, device_batch: int) -> float:
    """Past the largest compiled batch: the line through the two largest compiled figures, bytes (0 for fewer)."""
    batches, figures = points(plan)
    return figures[-1] + last_slope(plan) * (device_batch - batches[-1]) if len(batches) > 1 else 0.0


def grows_faster(plan) -> bool:
    """Whether some compiled figure lies above the line through the two compiled batches below it by more than
    :data:`~snippets.lib.plan_runs.MARGIN`: past the largest compiled batch no line holds (a loss over pairs), so no
    larger batch is read off one.

    Only batches at least a sixteenth apart count: a jump between two close batches (a seq2seq Transformer's figure,
    1754 MiB at 200 per device, 4110 at 245) is a step, not a growth."""
    batches, figures = points(plan)
    for i in range(2, len(batches)):
        (b0, b1, b2), (p0, p1, p2) = batches[i - 2:i + 1], figures[i - 2:i + 1]
        if (b1 - b0) * 16 < b1 or (b2 - b1) * 16 < b2:
            continue
        if p2 > (p1 + (p1 - p0) / (b1 - b0) * (b2 - b1)) * (1 + MARGIN):
            return True
    return False


def group_of(device_batch: int) -> int:
    """:data:`GROUPS`' common divisor with a reader's per-device batch (8 for 256, 6 for 300, 1 for 257)."""
    return math.gcd(device_batch, GROUPS)


def group(plan) -> int:
    """What every batch ``plan`` offers or compiles is a multiple of (:func:`group_of` its per-device batch)."""
    return group_of(plan.device_batch)


def down_to(group_size: int, device_batch: int) -> int:
    """``device_batch`` down to a multiple of ``group_size``, unless that is 0."""
    return device_batch // group_size * group_size or device_batch


def grouped(plan, device_batch: int) -> int:
    """``device_batch`` down to a multiple of :func:`group`, unless that is 0.

    >>> from types import SimpleNamespace
    >>> grouped(SimpleNamespace(device_batch=35490), 179807), grouped(SimpleNamespace(device_batch=512), 5)
    (179802, 5)
    """
    return down_to(group(plan), device_batch)


#: A compiled batch that fits its capacity with more than this share of it to spare is followed past (:func:`past_top`,
#: :func:`snippets.lib.jax_step.confirm_largest`).
ROOM = 1 / 32


def past_top(plan, capacity: int) -> int | None:
    """The per-device batch to compile past the largest compiled one, where that one is what ``plan`` offers for
    ``capacity`` bytes and fits it with more than :data:`ROOM` to spare: on the line through it and the compiled batch
    below it, a multiple of :func:`group`. None where it is not the offer, leaves no such room, or the two did not grow,
    or where a compile failed (``plan.confirm_failed``: a larger batch can fail too, and none past them is offered).

    The largest compiled batch caps a card's offer where the compiled figures grew faster than linearly
    (:func:`grows_faster`): helper-66's seq2seq Transformer's A100-80GB stopped at 2624 per device, 40.88 of its 60 GiB
    pool, where 3856 fit.
    """
    batches, figures = points(plan)
    if len(batches) < 2 or plan.confirm_failed or plan.largest_batch(capacity) // plan.replicas != batches[-1]:
        return None
    if capacity - figures[-1] <= capacity * ROOM or last_slope(plan) <= 0:
        return None
    found = down_to(group(plan), batches[-1] + int((capacity - figures[-1]) / last_slope(plan)))
    return found if found > batches[-1] else None


def fills(plan, capacity: int, device_batch: int) -> bool:
    """Whether ``device_batch`` compiled within :data:`ROOM` of ``capacity`` bytes (and under it): no batch past it is
    sought (:func:`past_top`), and none past it is taken to fit."""
    figure = plan.compiled_points.get(device_batch)
    return figure is not None and capacity * (1 - ROOM) <= figure <= capacity
