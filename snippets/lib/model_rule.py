"""What the rule (:mod:`snippets.lib.planner`) says of a model the planner measures: the floor under a
measured line's slope, and whether the model's step can run on this host at all."""

from __future__ import annotations

from collections.abc import Sequence

from snippets.lib import planner, units
from snippets.lib.model_step import ModelStep, default_cap

#: The per-device batch :func:`rule_slope` counts activations at: the larger of the planner's small batches
#: (:data:`snippets.lib.model_plan.SMALL_BATCHES`, which imports this module).
SLOPE_BATCH = 32


def rule_slope(weights: Sequence[planner.Weight], step: ModelStep) -> float:
    """Bytes per sample per device of the activations the rule counts (:mod:`snippets.lib.planner`:
    Dense layers, and one row per sample of each Embedding table: :func:`lookup_slope`; a lower bound): the floor
    under a measured line's slope. Between 16 and 32 samples a step can peak in its optimizer's update, which the
    batch does not grow, so its runs show no slope: a 1 GiB Dense(65536) with Adam read 8 to 536 KiB per sample from
    one plan to the next, and its largest batch on a 32 GB card 44 thousand to 2.9 million; the rule counts 784 KiB."""
    batch = SLOPE_BATCH
    policy = step.policy if step.policy in units.POLICIES else None
    dense = planner.plan(weights, step.optimizer, "single", 1, policy, batch=batch, xla=step.xla)[0].activations / batch
    return dense + lookup_slope(weights, step.policy)


def lookup_slope(weights: Sequence[planner.Weight], policy: str | None = None) -> float:
    """Bytes per sample of what each Embedding table (:attr:`~snippets.lib.planner.Weight.embedding_table`) looks up: one row
    per sample, its output and, where the table trains, that output's gradient, in the policy's compute dtype (2 bytes
    under a 16-bit one, else 4). A sample looks up one row or more (a sequence, one per position), so this is a floor.

    helper-71: a two-tower recommender (two 100k x 64 tables, a dot product, Adam) has no Dense layer, so the floor
    was 0; its runs at 16, 32 and 256 per device grew 16 B per sample, the input alone (each table's update hid the
    rest), and its V100-SXM2-32GB batch was put 3.4 times past what its steps, 1.04 KiB per sample, fit.

    >>> table = planner.Weight((100_000, 64), path="two_tower/user_embedding/embeddings")
    >>> lookup_slope([table, planner.Weight((64, 1), path="head/kernel")]), lookup_slope([table], "mixed_float16")
    (512.0, 256.0)
    """
    size = 2 if units.computes_in_16_bits(policy) else 4
    return float(sum(w.shape[1] * size * (2 if w.trainable else 1) for w in weights if w.embedding_table))


def _rule_state(weights: Sequence[planner.Weight], step: ModelStep) -> int:
    """The rule's per-device peak without activations (bytes): what a run here would hold at least."""
    budget = planner.plan(weights, step.optimizer, step.strategy, step.devices, step.policy if step.policy in
                          units.POLICIES else None, batch=max(step.batch, 1), xla=step.xla,
                          accumulation=step.accumulation)[0]
    return budget.total - budget.activations


def runs_here(weights: Sequence[planner.Weight], step: ModelStep, cap: int | None = None) -> bool:
    """Whether the model's step can run at a small batch on this host within ``cap`` bytes per device."""
    cap = cap or default_cap(step)
    return _rule_state(weights, step) * 1.5 + 256 * units.MiB <= cap
