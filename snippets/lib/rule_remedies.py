"""The remedies the rule tries for a model that does not fit: other placements and precisions, ranked.

Every placement of :data:`REMEDY_STRATEGIES` with every precision of :data:`PRECISIONS`, planned by
:func:`snippets.lib.planner.plan` with the reader's optimizer, device count, batch and XLA setting, kept
when each device's peak fits, fewest changes first. ``python -m snippets.decide`` lists them
(docs/decide.md); the batch remedies of a measured model are :mod:`snippets.lib.model_remedies`'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from snippets.lib import placements, planner, units

#: Precision changes the remedies try: (label, variable dtype or None, policy).
PRECISIONS = (
    ("as given", None, None),
    ("float16", "float16", None),
    ("bfloat16", "bfloat16", None),
    ("mixed_float16", "float32", "mixed_float16"),
)

#: Placements the remedies try, and ``single`` too on one device: there it is not ``mirrored`` over
#: one, since Keras compiles a strategy-free step with XLA on a GPU host (``xla="auto"``) and a
#: strategy's without (:func:`snippets.lib.placements.resolve_xla`), so their update temporaries
#: differ. TensorFlow's only: a remedy changes a script's placement or precision, not its backend;
#: Keras 3 on JAX (``model_parallel``, ``data_parallel``) is a row of docs/decide.md's seed table instead.
REMEDY_STRATEGIES = ("mirrored", "column", "row", "parameter_server", "offload")
#: The placements tried for a reader on Keras on JAX (docs/keep-fit.md), whose device memory is JAX's pool.
JAX_REMEDY_STRATEGIES = ("data_parallel", "model_parallel")


def with_precision(weights: Sequence[planner.Weight], dtype: str | None) -> list[planner.Weight]:
    """``weights`` with every floating-point weight stored as ``dtype`` (None: unchanged)."""
    if dtype is None:
        return list(weights)
    units.dtype_bytes(dtype)
    return [
        planner.Weight(w.shape, dtype if w.dtype.startswith(("float", "bfloat")) else w.dtype,
                      w.initializer, w.trainable, w.path)
        for w in weights
    ]


def in_effect(weights: Sequence[planner.Weight], policy: str | None, dtype: str | None,
              new_policy: str | None) -> bool:
    """Whether a precision of :data:`PRECISIONS` (``dtype``, ``new_policy``; both None: "as given")
    leaves the reader's (``policy``; ``weights``' dtypes) as it is: no remedy then, and none to name.

    >>> w = [planner.Weight((4, 4), "float16")]
    >>> in_effect(w, None, None, None), in_effect(w, None, "float16", None), in_effect(w, None, "bfloat16", None)
    (True, True, False)
    >>> in_effect(w, "mixed_float16", "float32", "mixed_float16"), in_effect(w, "mixed_float16", "float16", None)
    (True, False)
    """
    if dtype is None and new_policy is None:
        return True
    if new_policy is not None:
        return new_policy == policy
    floats = [w.dtype for w in weights if w.dtype.startswith(("float", "bfloat"))]
    return policy is None and bool(floats) and all(d == dtype for d in floats)


@dataclass(frozen=True)
class Remedy:
    """A configuration that fits: what changes, and each device's peak.

    Attributes:
        strategy: placement name (:data:`snippets.lib.placements.STRATEGIES`).
        precision: label from :data:`PRECISIONS`.
        budgets: per-device budgets under this configuration.
        changes: how many things differ from the reader's configuration.
        host: bytes moved to host or coordinator RAM (:func:`snippets.lib.planner.host_bytes`).
        whole: how many of a model's weights the split keeps whole (:func:`snippets.lib.planner.held_whole`).
    """

    strategy: str
    precision: str
    budgets: tuple[planner.DeviceBudget, ...]
    changes: int
    host: int = 0
    whole: int = 0

    @property
    def peak(self) -> int:
        return max(b.total for b in self.budgets)

    def label(self, devices: int) -> str:
        where = {"single": "one device, no strategy", "mirrored": f"mirrored over {devices}" if devices > 1
                 else "MirroredStrategy over one device",
                 "column": f"{devices}-way column shard", "row": f"{devices}-way row shard",
                 "parameter_server": f"{devices} parameter servers", "offload": "variables offloaded to the host",
                 "model_parallel": f"{devices}-way ModelParallel (JAX)",
                 "tf_keras_dtensor": f"{devices}-way tf_keras DTensor column shard",
                 "data_parallel": f"DataParallel over {devices} (JAX)"}[self.strategy]
        if self.whole:
            where += f" ({self.whole} weight{'s' if self.whole != 1 else ''} held whole)"
        return where if self.precision == "as given" else f"{where} + {self.precision}"


def remedies(
    weights: Sequence[planner.Weight],
    optimizer: str | None,
    strategy: str,
    devices: int,
    capacity: int,
    policy: str | None = None,
    reserve: int = 0,
    *,
    batch: int = 64,
    xla: str = "auto",
    accumulation: int = 1,
) -> list[Remedy]:
    """Configurations whose step peak fits ``capacity`` bytes per device, ranked.

    Fewest changes first; among those, the ones that need no host or
    coordinator RAM; then the smallest peak.

    Tries ``strategy`` itself and every placement in :data:`REMEDY_STRATEGIES` (and ``single`` on one
    device), or in :data:`JAX_REMEDY_STRATEGIES` when ``strategy`` runs on JAX (a Keras-on-JAX reader is
    offered Keras on JAX, against the same pool), with every precision
    in :data:`PRECISIONS`, with the same optimizer, gradient accumulation, device count, batch and
    XLA setting; splits that do not divide a bare shape's dimension are skipped, as is one that keeps
    every weight of a model whole (:func:`snippets.lib.planner.held_whole`), and so
    is a "shard" over one device (it is no remedy), and so is a precision already in effect
    (:func:`in_effect`: the reader's own policy, or every float weight already of that dtype).
    """
    found = []
    on_jax = placements.get(strategy).backend == "jax"
    tried = JAX_REMEDY_STRATEGIES if on_jax else (("single",) if devices == 1 else ()) + REMEDY_STRATEGIES
    # The reader's own placement, with another precision, is one change (tf_keras's DTensor + float16).
    tried = tried if strategy in tried else (strategy, *tried)
    for candidate in tried:
        if devices == 1 and candidate in ("column", "row", "parameter_server", "model_parallel"):
            continue
        for label, dtype, new_policy in PRECISIONS:
            chosen_policy = policy if label == "as given" else new_policy
            if (candidate == strategy or label != "as given") and in_effect(weights, policy, dtype, new_policy):
                continue
            changed = with_precision(weights, dtype)
            whole = len(planner.held_whole(changed, candidate, devices))
            if whole == len(changed):
                continue  # a split that keeps every weight whole is no split
            try:
                budgets = planner.plan(changed, optimizer, candidate, devices, chosen_policy, reserve,
                                      batch=batch, xla=xla, accumulation=accumulation)
            except ValueError:
                continue
            if max(b.total for b in budgets) <= capacity:
                changes = (candidate != strategy) + (label != "as given")
                host = planner.host_bytes(changed, optimizer, candidate, devices, chosen_policy, accumulation)
                found.append(Remedy(candidate, label, tuple(budgets), changes, host, whole))
    return sorted(found, key=lambda r: (r.changes, r.host > 0, r.peak, r.strategy))


def remedy_json(remedy: Remedy, devices: int, capacity: int) -> dict:
    """A :class:`Remedy` as the CLI's ``--json`` lists it, in bytes: ``{"label", "strategy", "precision",
    "changes", "peak", "spare", "host"}`` (``peak`` per device; ``host``: host or coordinator RAM)."""
    return {"label": remedy.label(devices), "strategy": remedy.strategy, "precision": remedy.precision,
            "changes": remedy.changes, "peak": remedy.peak, "spare": capacity - remedy.peak, "host": remedy.host}
