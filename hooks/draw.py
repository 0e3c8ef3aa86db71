"""Draw the site's pictures as SVG, one light and one dark variant each, from the shared layer's numbers.

Every number comes from :mod:`snippets.lib.pictures` (which reads the
planner, the placements and the card table); this module only draws. Each
picture is a function ``(theme) -> matplotlib Figure`` in :data:`PICTURES`;
:func:`render_all` saves each in both themes as
``assets/pictures/<name>-light.svg`` and ``-dark.svg``, and a page shows
the one that matches Material's palette with the ``#only-light`` /
``#only-dark`` URL fragments.

The SVGs are crisp at any zoom (vectors; text drawn as paths, so no font is
needed), have no background (figure, axes and legend are transparent), and
are byte-for-byte reproducible (no date, fixed element ids). Bars carry an
``id`` (matplotlib's ``gid``) such as ``step-mirrored-0-weights``, and their
heights are in GiB (2**30 B), which ``tests/test_pictures.py`` reads back.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

from snippets.lib import pictures, units  # noqa: E402

FOLDER = "assets/pictures"


@dataclass(frozen=True)
class Theme:
    """Colours of one palette: Material's light ``default`` or dark ``slate`` page behind the SVG."""

    name: str
    text: str
    muted: str
    grid: str
    empty: str  # the part of W[D, F] a device does not hold


THEMES = {
    "light": Theme("light", text="#1f2328", muted="#57606a", grid="#d0d7de", empty="#eef1f4"),
    "dark": Theme("dark", text="#e3e6ec", muted="#a3abb8", grid="#444b59", empty="#2b303b"),
}

#: One colour per device (0..3), and one per layer of a step peak: mid-tones
#: (Tableau 10) that read on white and on slate's dark grey alike.
DEVICE_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1")
LAYER_COLOURS = {"weights": "#4e79a7", "gradients": "#f28e2b", "slots": "#59a14f",
                 "temporaries": "#e15759", "activations": "#b07aa1"}
PLACEMENT_NAMES = {
    "mirrored": "MirroredStrategy\n(mirrored variable, no XLA)",
    "column": "column split W[D, F_model]\n(update XLA-compiled per shard)",
    "row": "row split W[D_model, F]\n(update XLA-compiled per shard)",
}


def _rc(theme: Theme) -> dict:
    return {
        "svg.fonttype": "path", "svg.hashsalt": "tensor-too-big", "font.size": 10,
        "figure.facecolor": "none", "axes.facecolor": "none", "savefig.facecolor": "none",
        "savefig.transparent": True, "legend.frameon": False,
        "text.color": theme.text, "axes.labelcolor": theme.text, "axes.edgecolor": theme.muted,
        "xtick.color": theme.text, "ytick.color": theme.text, "axes.titlecolor": theme.text,
        "grid.color": theme.grid,
    }


def svg(draw: Callable[[Theme], plt.Figure], theme: Theme) -> bytes:
    """``draw(theme)`` saved as SVG bytes (transparent, no date), the figure closed afterwards."""
    with plt.rc_context(_rc(theme)):
        figure = draw(theme)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight", pad_inches=0.05)
    plt.close(figure)
    return buffer.getvalue()


def _blank_axes(figsize: tuple[float, float]):
    figure, axes = plt.subplots(figsize=figsize)
    axes.set_axis_off()
    axes.set_aspect("equal")
    return figure, axes


def _kernel(axes, x: float, y: float, piece: pictures.Piece, shape, colour: str, theme: Theme,
            height: float = 1.0) -> None:
    """``W[D, F]`` as a box (D down, F across, to scale) with ``piece`` filled in ``colour``."""
    d, f = shape
    width = height * f / d
    axes.add_patch(Rectangle((x, y), width, height, facecolor=theme.empty, edgecolor=theme.muted, linewidth=0.8))
    (r0, r1), (c0, c1) = piece.rows, piece.cols
    axes.add_patch(Rectangle((x + width * c0 / f, y + height * (1 - r1 / d)), width * (c1 - c0) / f,
                             height * (r1 - r0) / d, facecolor=colour, edgecolor="none",
                             gid=f"piece-{piece.device}-{r0}-{c0}"))


def kernel_splits(theme: Theme) -> plt.Figure:
    """(a) What each of 4 devices holds of ``W[131072, 65536]`` when mirrored, split by column, split by row."""
    shape, rows = pictures.SEED_SHAPE, ("mirrored", "column", "row")
    figure, axes = _blank_axes((8.2, 6.0))
    for r, strategy in enumerate(rows):
        pieces = pictures.kernel_pieces(strategy, shape)
        top = -r * 2.0
        total = sum(p.nbytes for p in pieces)
        axes.text(-0.2, top + 0.5, f"{PLACEMENT_NAMES[strategy]}\n\n4 devices hold "
                  f"{units.human_bytes(total)} in all", ha="right", va="center", fontsize=9)
        for piece in pieces:
            x = piece.device * 1.5
            _kernel(axes, x, top, piece, shape, DEVICE_COLOURS[piece.device], theme)
            axes.text(x + 0.25, top + 1.08, f"device {piece.device}", ha="center", va="bottom", fontsize=9)
            axes.text(x + 0.25, top - 0.08, f"{list(piece.shape)}\n{units.human_bytes(piece.nbytes)}",
                      ha="center", va="top", fontsize=8, color=theme.muted)
    axes.text(2.5, 1.45, f"W[D, F] = {list(shape)} float32, {units.human_bytes(units.tensor_bytes(shape))}: "
              "D down, F across, to scale", ha="center", va="bottom", fontsize=10)
    axes.set_xlim(-3.4, 5.2)
    axes.set_ylim(-4.7, 1.8)
    return figure


def mesh(theme: Theme) -> plt.Figure:
    """(b) A ``("batch", "model")`` = (2, 2) mesh: each device's kernel half and batch half."""
    shape, batch = pictures.SEED_SHAPE, 64
    cells = pictures.mesh_cells({"batch": 2, "model": 2}, shape, batch)
    figure, axes = _blank_axes((7.6, 5.6))
    for cell in cells:
        b, m = cell.position
        x, y = m * 3.0, -b * 2.4
        axes.add_patch(Rectangle((x - 0.2, y - 0.75), 2.75, 2.25, facecolor="none", edgecolor=theme.muted,
                                 linewidth=1.0, linestyle=(0, (4, 2))))
        axes.text(x + 1.175, y + 1.15, f"device {cell.device}", ha="center", va="bottom", fontsize=10,
                  fontweight="bold")
        _kernel(axes, x, y, cell.kernel, shape, DEVICE_COLOURS[m], theme)
        axes.text(x + 0.6, y + 0.9, f"W[D, F_model]\n{list(cell.kernel.shape)}\n"
                  f"{units.human_bytes(cell.kernel.nbytes)}", ha="left", va="top", fontsize=8)
        # x[B, D]: B down (the batch), drawn as a bar; this batch row's half filled
        bx, (s0, s1) = x + 2.1, cell.batch_rows
        axes.add_patch(Rectangle((bx, y), 0.25, 1.0, facecolor=theme.empty, edgecolor=theme.muted, linewidth=0.8))
        axes.add_patch(Rectangle((bx, y + 1.0 - s1 / batch), 0.25, (s1 - s0) / batch, facecolor=theme.muted,
                                 edgecolor="none"))
        axes.text(bx + 0.25, y - 0.08, f"x[B_batch, D]\n[{s1 - s0}, {shape[0]}]", ha="right", va="top",
                  fontsize=8)
    for m in range(2):
        axes.text(m * 3.0 + 1.2, 1.95, f'model = {m}', ha="center", va="bottom", fontsize=10, color=theme.muted)
    for b in range(2):
        axes.text(-0.35, -b * 2.4 + 0.5, f'batch = {b}', ha="right", va="center", fontsize=10, color=theme.muted,
                  rotation=90)
    axes.text(2.7, 2.4, f'mesh ("batch", "model") = (2, 2); W[D, F] = {list(shape)} float32, batch {batch}\n'
              "each kernel half is stored once per batch row; the gradient is all-reduced over \"batch\"",
              ha="center", va="bottom", fontsize=9)
    axes.set_xlim(-0.8, 5.8)
    axes.set_ylim(-3.3, 3.1)
    return figure


def _box(axes, x: float, y: float, text: str, theme: Theme, colour: str | None = None, width: float = 1.85) -> None:
    # A light wash of the device's colour under the palette's own text colour: it reads on both
    # backgrounds, where dark text on the full colour did not (3.7:1 on the blue in dark mode).
    if colour:
        axes.add_patch(Rectangle((x - width / 2, y - 0.28), width, 0.56, facecolor=colour, alpha=0.3,
                                 edgecolor="none"))
    axes.add_patch(Rectangle((x - width / 2, y - 0.28), width, 0.56, facecolor="none",
                             edgecolor=colour or theme.muted, linewidth=1.0))
    axes.text(x, y, text, ha="center", va="center", fontsize=8, color=theme.text)


def _arrow(axes, start, end, theme: Theme) -> None:
    axes.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9, color=theme.muted,
                                   linewidth=0.9, shrinkA=0, shrinkB=0))


def megatron(theme: Theme) -> plt.Figure:
    """(c) Column-parallel ``W1[D, H]`` then row-parallel ``W2[H, F]``: one collective, at the end."""
    devices = 4
    figure, axes = _blank_axes((8.4, 5.4))
    xs = [i * 2.0 for i in range(devices)]
    centre = sum(xs) / devices
    _box(axes, centre, 4.75, "x[B, D]: the same batch on every device", theme, width=4.2)
    # The batch reaches every device over one bus, so no arrow crosses a device's label.
    axes.plot([centre, centre], [4.47, 4.3], color=theme.muted, linewidth=0.9)
    axes.plot([xs[0], xs[-1]], [4.3, 4.3], color=theme.muted, linewidth=0.9)
    for i, x in enumerate(xs):
        colour = DEVICE_COLOURS[i]
        _arrow(axes, (x, 4.3), (x, 3.68), theme)
        _box(axes, x, 3.4, f"W1[D, H_model]\ncolumn shard {i}", theme, colour)
        _arrow(axes, (x, 3.12), (x, 2.68), theme)
        _box(axes, x, 2.4, "h_i = relu(x W1_i)\n[B, H_model]", theme)
        _arrow(axes, (x, 2.12), (x, 1.68), theme)
        _box(axes, x, 1.4, f"W2[H_model, F]\nrow shard {i}", theme, colour)
        _arrow(axes, (x, 1.12), (x, 0.68), theme)
        _box(axes, x, 0.4, "y_i = h_i W2_i\n[B, F], partial", theme)
        axes.add_patch(Rectangle((x - 0.97, -0.05), 1.94, 4.1, facecolor="none", edgecolor=theme.muted,
                                 linewidth=0.8, linestyle=(0, (4, 2))))
        axes.text(x - 0.92, 4.0, f"device {i}", ha="left", va="top", fontsize=8, color=theme.muted)
        _arrow(axes, (x, 0.12), (centre, -0.52), theme)
    _box(axes, centre, -0.8, "y = y_0 + y_1 + y_2 + y_3  [B, F]\nthe one collective of the forward pass", theme,
         width=4.2)
    axes.text(centre, -1.25, "an all-reduce in Megatron-LM; the tf.device layers here sum on device 0.\n"
              "h is never gathered: the column layer's output slices are the row layer's input slices.",
              ha="center", va="top", fontsize=8.5, color=theme.muted)
    axes.set_xlim(-1.0, xs[-1] + 1.0)
    axes.set_ylim(-2.0, 5.1)
    return figure


def _capacity(axes, theme: Theme) -> float:
    """The card's allocator capacity as a dashed line across ``axes``, named in the legend; returns it in GiB."""
    capacity = pictures.capacity_bytes() / units.GiB
    axes.axhline(capacity, color=theme.text, linestyle="--", linewidth=1, gid="capacity",
                 label=pictures.capacity_label())
    return capacity


def _stack(axes, x: float, parts: dict[str, int], gid: str, width: float, tallest: dict[str, int]) -> None:
    """One stacked bar; ``tallest`` keeps each layer's largest part so far (the first bar names it)."""
    bottom = 0.0
    for layer in pictures.LAYERS:
        height = parts[layer] / units.GiB
        label = layer if layer not in tallest else None
        tallest[layer] = max(tallest.get(layer, 0), parts[layer])
        axes.bar(x, height, bottom=bottom, width=width, color=LAYER_COLOURS[layer], label=label,
                 gid=f"{gid}-{layer}", linewidth=0)
        bottom += height


def _legend(axes, theme: Theme, tallest: dict[str, int]) -> None:
    """The legend, saying of a layer too thin to see at this scale (activations: MiB among GiB) how big it is."""
    hairline = axes.get_ylim()[1] * units.GiB / 200  # under half a percent of the axis
    legend = axes.legend(loc="upper right", fontsize=8.5, labelcolor=theme.text)
    for text in legend.get_texts():
        layer = text.get_text()
        if tallest.get(layer, hairline) < hairline:
            text.set_text(f"{layer} (at most {units.human_bytes(tallest[layer])}: too thin to see)")


def step_peaks(theme: Theme) -> plt.Figure:
    """(d) Each device's step peak, stacked, for the seed kernel mirrored, column-split and row-split."""
    bars = pictures.step_peak_bars()
    figure, axes = plt.subplots(figsize=(8.4, 4.8))
    groups = list(dict.fromkeys(b.group for b in bars))
    capacity = _capacity(axes, theme)
    tallest: dict[str, int] = {}
    ticks, names = [], []
    for bar in bars:
        x = groups.index(bar.group) * 5 + bar.device
        _stack(axes, x, bar.parts, f"step-{bar.group}-{bar.device}", 0.8, tallest)
        ticks.append(x)
        names.append(str(bar.device))
    for g, group in enumerate(groups):
        peak = max(b.total for b in bars if b.group == group)
        axes.text(g * 5 + 1.5, max(peak / units.GiB, capacity) + 3, f"{units.human_bytes(peak)}\nper device", ha="center",
                  va="bottom", fontsize=8.5)
        axes.text(g * 5 + 1.5, -0.13, PLACEMENT_NAMES[group], ha="center", va="top", fontsize=8.5,
                  transform=axes.get_xaxis_transform())
    axes.set_xticks(ticks, names, fontsize=8)
    axes.set_ylabel("GiB per device at the step's peak (1 GiB = 2^30 B)")
    axes.set_xlabel("device", fontsize=8, labelpad=1)
    axes.set_ylim(0, max(b.total for b in bars) / units.GiB * 1.18)
    axes.set_title("W[131072, 65536] float32, RMSprop, batch 64, 4 devices: planner's step peak",
                   fontsize=10)
    _legend(axes, theme, tallest)
    axes.grid(axis="y", linewidth=0.5)
    axes.set_axisbelow(True)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    return figure


def remedies(theme: Theme) -> plt.Figure:
    """The Memory budget chapter's plot: the fullest device's step peak under each remedy."""
    rows = pictures.remedy_rows()
    figure, axes = plt.subplots(figsize=(9.6, 4.8))
    tallest: dict[str, int] = {}
    capacity = _capacity(axes, theme)
    for x, (label, budget) in enumerate(rows):
        _stack(axes, x, pictures.step_layers(budget), f"remedy-{x}", 0.7, tallest)
        axes.text(x, max(budget.step_peak / units.GiB, capacity) + 2, units.human_bytes(budget.step_peak), ha="center",
                  va="bottom", fontsize=8)
    axes.set_xticks(range(len(rows)), ["\n".join(label.split(" ", 2)) for label, _ in rows], fontsize=8)
    axes.set_ylabel("GiB on the fullest device at the step's peak")
    axes.set_ylim(0, max(b.step_peak for _, b in rows) / units.GiB * 1.15)
    axes.set_title("Seed layer W[131072, 65536] + bias, RMSprop, batch 64, 4 devices", fontsize=10)
    _legend(axes, theme, tallest)
    axes.grid(axis="y", linewidth=0.5)
    axes.set_axisbelow(True)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    return figure


#: Every picture by file stem.
PICTURES: dict[str, Callable[[Theme], plt.Figure]] = {
    "kernel-splits": kernel_splits, "mesh-2x2": mesh, "column-row": megatron,
    "step-peaks": step_peaks, "memory-budget": remedies,
}


def path(name: str, theme: str) -> str:
    """Where picture ``name`` in ``theme`` lands in the site, e.g. ``assets/pictures/mesh-2x2-dark.svg``."""
    return f"{FOLDER}/{name}-{theme}.svg"


def render_all() -> dict[str, bytes]:
    """Every picture in every theme: ``{site path: SVG bytes}``."""
    return {path(name, key): svg(draw, theme) for name, draw in PICTURES.items() for key, theme in THEMES.items()}
