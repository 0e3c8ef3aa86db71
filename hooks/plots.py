"""MkDocs hook: draw the "Memory budget" chapter's stacked bar plot at build time.

The figures come from the planner (:func:`snippets.decide.figure_data`), not
from a committed image: the PNG is rendered with matplotlib's Agg backend
(no display needed) and added to the site as a generated file,
``assets/memory-budget.png``, which ``docs/memory-budget.md`` links to.
Registered in ``mkdocs.yml`` under ``hooks:``.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLOT_PATH = "assets/memory-budget.png"

#: Stack order, bottom to top: the DeviceBudget fields of a step's peak.
LAYERS = ("weights", "slots", "gradients", "activations", "step extra")


def _layer(budget, layer: str) -> int:
    if layer == "step extra":  # the update's temporaries or the aggregation buffer, whichever peaks
        return max(budget.update_temporaries, budget.aggregation)
    return getattr(budget, layer)


def render_png() -> bytes:
    """The stacked bar plot of per-device memory per remedy, as PNG bytes."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # slot counting imports Keras
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from snippets.lib import hardware, units
    from snippets import decide

    rows = decide.figure_data()
    labels = ["\n".join(label.split(" ", 2)) for label, _ in rows]
    figure, axes = plt.subplots(figsize=(10, 5.2), dpi=100)
    bottoms = [0.0] * len(rows)
    for layer in LAYERS:
        heights = [_layer(budget, layer) / units.GiB for _, budget in rows]
        axes.bar(range(len(rows)), heights, bottom=bottoms, label=layer)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    capacity = hardware.V100_CAPACITY / units.GiB
    axes.axhline(capacity, color="black", linestyle="--", linewidth=1)
    axes.text(len(rows) / 2, capacity + 2, f"V100-SXM2-32GB allocator: {units.human_bytes(hardware.V100_CAPACITY)}",
              ha="center", va="bottom")
    axes.set_xticks(range(len(rows)), labels, fontsize=8)
    axes.set_ylabel("GiB on the fullest device (step peak)")
    axes.set_title("Seed layer W[131072, 65536] + RMSprop, batch 64, 4 devices: step peak per device")
    axes.legend(loc="upper right")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def on_files(files, config):
    """Add the rendered plot to the site's files (MkDocs 1.6 ``File.generated``)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PLOT_PATH, content=render_png()))
    return files
