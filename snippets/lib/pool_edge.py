"""A plan's largest batch checked at the pool's edge: why verdicts leave :data:`~snippets.lib.hardware.ALLOCATOR_SLACK`.

The planner's runs are made under roomy caps (:func:`snippets.lib.model_step.default_cap`); a card's largest batch is
read where its planned peak meets the pool. There TensorFlow's BFC allocator can hand a tensor a whole free chunk up
to twice its size when less than 128 MiB would be left over (``FindChunkPtr``, xla/tsl/framework/bfc_allocator.cc),
which no roomy run shows. ``python -m benchmarks.pool_edge`` plans :data:`STEP`, then runs it in fresh processes
capped at :data:`POOL` at the largest batch the plan puts in the whole pool and at the one it puts in
:func:`~snippets.lib.hardware.usable_bytes` of it, at one and eight inter-op threads as the planner runs a step
without XLA, and once under a roomy cap for the peak. Where a run runs out, the allocator's own dump (its bins, at
``TF_CPP_MIN_LOG_LEVEL=0``) gives what the chunks in use held beyond what was asked of them: :func:`chunk_loss`.
About a minute and a half on two cores, so decide.md reads :data:`RESULTS` (committed), never runs it.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

from snippets.lib import units
from snippets.lib.model_step import ModelStep
from snippets.lib.plan_runs import PLAN_THREADS

#: The check's model: a small CNN at 32 px, Adam, one device, without XLA (the planner's widest draws).
STEP = ModelStep("snippets.lib.zoo:small_cnn", "adam", 64, "off", loss="sparse_categorical_crossentropy",
                 kwargs=(("size", 32),))

#: The pool checked, bytes: small, so that one chunk's 128 MiB is a large share of it.
POOL = 768 * units.MiB

#: Inter-op thread counts each check runs at: the planner's for a step without XLA.
THREADS = PLAN_THREADS

#: The committed results of ``python -m benchmarks.pool_edge``.
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "pool_edge.json"

# One line of BFC's dump per bin, e.g. "Bin (268435456): Total Chunks: 1, Chunks in use: 1. 337.18MiB allocated
# for chunks. 337.18MiB in use in bin. 209.50MiB client-requested in use in bin." (BFCAllocator::DumpMemoryLog).
_BIN = re.compile(r"Bin \(\d+\):.*?([\d.]+[KMG]?i?B) in use in bin\. ([\d.]+[KMG]?i?B) client-requested in use in bin")


def chunk_loss(log: str) -> int | None:
    """Bytes the chunks in use held beyond their requests when the allocator ran out, from its dump in ``log``
    (TensorFlow's stderr at ``TF_CPP_MIN_LOG_LEVEL=0``); None where the log has no dump. The allocator dumps its bins
    at each request it refuses, so a step that ran out more than once shows the same chunks in each dump: the most
    any one dump shows (helper-76: two dumps of one 117 MiB loss had been added to 234 MiB).

    >>> bins = ("Bin (256): Total Chunks: 3, Chunks in use: 2. 768B allocated for chunks. 512B in use in bin. "
    ...         "300B client-requested in use in bin.\\n"
    ...         "Bin (268435456): Total Chunks: 1, Chunks in use: 1. 337.18MiB allocated for chunks. "
    ...         "337.18MiB in use in bin. 209.50MiB client-requested in use in bin.\\n")
    >>> refused = "Allocator (bfc_cpu_allocator_for_gpu) ran out of memory trying to allocate 2.25MiB\\n"
    >>> units.human_bytes(chunk_loss(refused + bins)), units.human_bytes(chunk_loss(2 * (refused + bins)))
    ('127.68 MiB', '127.68 MiB')
    >>> chunk_loss("no dump") is None
    True
    """
    dumps = [sum(units.parse_size(used) - units.parse_size(asked) for used, asked in _BIN.findall(part))
             for part in re.split(r"ran out of memory trying to allocate", log) if _BIN.search(part)]
    return max(dumps) if dumps else None


def results(path: Path = RESULTS) -> dict:
    """The published check (:data:`RESULTS`): ``{"step", "pool", "planned", "batches", "runs", "roomy", ...}``, bytes.

    Raises:
        FileNotFoundError: naming the command that writes it, if it was never published.
    """
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run python -m benchmarks.pool_edge")
    return json.loads(path.read_text(encoding="utf-8"))


def summary(data: dict | None = None) -> str:
    """The check in lines: the step, its roomy peak, then each batch, what the plan puts it at and each run under the
    pool's cap (with what its chunks held beyond their requests where it ran out)."""
    data = results() if data is None else data
    h, step = units.human_bytes, data["step"]
    model = f"{step['model'].split(':')[1]}({', '.join(f'{k}={v}' for k, v in step['kwargs'])})"
    lines = [f"{model}, {step['optimizer']}, one device, no XLA, under a cap of {h(data['pool'])}.",
             f"Its peak at {data['batches']['pool']} under a roomy cap ({h(data['roomy_cap'])}): {h(data['roomy'])}."]
    for which, words in (("pool", "the whole pool"), ("usable", "the pool less 128 MiB")):
        batch = data["batches"][which]
        said = "; ".join(f"{r['threads']} thread{'s' if r['threads'] > 1 else ''}: " + (
            "completed" if r["completed"] else "ran out" + (f", its chunks {h(r['chunk_loss'])} over their requests"
                                                            if r.get("chunk_loss") else ""))
            for r in data["runs"] if r["batch"] == batch)
        lines.append(textwrap.fill(f"Batch {batch}, the largest for {words} (planned {h(data['planned'][which])}): "
                                   f"{said}.", 100, subsequent_indent="  "))
    return "\n".join(lines)
