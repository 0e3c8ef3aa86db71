"""MkDocs hook: draw the "Memory budget" chapter's stacked bar plot at build time.

The figures come from the planner (:func:`snippets.plan.figure_data`), not
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

#: Stack order, bottom to top, and the DeviceBudget field each layer shows.
LAYERS = ("weights", "gradients", "slots", "transient", "reserve")


def render_png() -> bytes:
    """The stacked bar plot of per-device memory per remedy, as PNG bytes."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # slot counting imports Keras
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from snippets import memory, plan

    rows = plan.figure_data()
    labels = [label.replace(" ", "\n", 1) for label, _ in rows]
    figure, axes = plt.subplots(figsize=(9, 4.8), dpi=100)
    bottoms = [0.0] * len(rows)
    for layer in LAYERS:
        heights = [getattr(budget, layer) / memory.GiB for _, budget in rows]
        axes.bar(labels, heights, bottom=bottoms, label=layer)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    capacity = memory.V100_32GB_MIB * memory.MiB / memory.GiB
    axes.axhline(capacity, color="black", linestyle="--", linewidth=1)
    axes.text(len(rows) - 0.5, capacity, f"V100-32GB: {memory.V100_32GB_MIB} MiB", ha="right", va="bottom")
    axes.set_ylabel("GiB on the fullest device")
    axes.set_title("Seed layer W[131072, 65536] + RMSprop on 4 devices: planner's peak per device")
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
