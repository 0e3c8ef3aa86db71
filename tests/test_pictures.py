"""The site's pictures (hooks/draw.py) draw the planner's numbers, in GiB, on no background.

Runs in the test process: drawing needs matplotlib and the planner, never
TensorFlow. Expected values come from :mod:`snippets.lib.planner` and
:mod:`snippets.lib.hardware` directly, not from the figure-data module the
pictures are drawn from, so a slip in either shows.
"""

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from hooks import draw
from snippets.lib import hardware, pictures, planner, units

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30
FIGURE = re.compile(r"!\[((?:[^\[\]]|\[[^\[\]]*\])+)\]\(assets/pictures/([\w-]+)-(light|dark)\.svg#only-(light|dark)\)")


@pytest.fixture(scope="module")
def rendered() -> dict[str, bytes]:
    return draw.render_all()


def drawn(name: str, theme: str = "light"):
    """The matplotlib figure of picture ``name``, drawn as the hook draws it."""
    with plt.rc_context(draw._rc(draw.THEMES[theme])):
        return draw.PICTURES[name](draw.THEMES[theme])


def bars(figure) -> dict[str, float]:
    """Bar heights by gid (``step-mirrored-0-weights``), in the axis's unit."""
    return {p.get_gid(): p.get_height() for ax in figure.axes for p in ax.patches if p.get_gid()}


def texts(figure) -> list[str]:
    found = [t.get_text() for t in figure.findobj(lambda a: hasattr(a, "get_text"))]
    return [t for t in found if t]


def test_every_picture_builds_in_both_themes_as_svg_without_a_background(rendered):
    assert set(rendered) == {draw.path(n, t) for n in draw.PICTURES for t in ("light", "dark")}
    for path, content in rendered.items():
        root = ET.fromstring(content)
        assert root.tag.endswith("svg"), path
        text = content.decode()
        assert not re.search(r"fill:\s*(#fff\b|#ffffff|white)", text, re.I), f"{path}: white fill"
        assert "background" not in text and "<image" not in text and "@font-face" not in text, path
        assert "<text" not in text, f"{path}: text must be drawn as paths (no font needed)"
        assert "dc:date" not in text, f"{path}: a date makes the build unreproducible"
    assert rendered[draw.path("step-peaks", "light")] != rendered[draw.path("step-peaks", "dark")]


def test_step_peak_bars_are_the_planners_bytes_in_gib(rendered):
    figure = drawn("step-peaks")
    heights = bars(figure)
    expected = {}
    for strategy in ("mirrored", "column", "row"):
        for b in planner.per_device([131072, 65536], "float32", "rmsprop", strategy, 4, batch=64):
            parts = {"weights": b.weights, "gradients": b.gradients, "slots": b.slots,
                     "temporaries": max(b.update_temporaries, b.aggregation), "activations": b.activations}
            assert sum(parts.values()) == b.step_peak
            expected.update({f"step-{strategy}-{b.device}-{k}": v / GiB for k, v in parts.items()})
    assert heights == pytest.approx(expected, rel=1e-12, abs=0)
    assert sum(v for k, v in heights.items() if k.startswith("step-mirrored-0-")) == pytest.approx(224 + 20 / 1024)  # + 20 MiB of activations
    svg = rendered[draw.path("step-peaks", "dark")].decode()
    assert all(f'id="{gid}"' in svg for gid in expected)
    plt.close(figure)


def test_remedies_bars_are_the_fullest_devices_step_peaks():
    figure = drawn("memory-budget")
    heights = bars(figure)
    for x, (label, strategy, dtype, policy, xla) in enumerate(pictures.REMEDY_CONFIGS):
        weights = [planner.Weight((131072, 65536), dtype), planner.Weight((65536,), dtype, "zeros")]
        fullest = max(planner.plan(weights, "rmsprop", strategy, 4, policy, xla=xla), key=lambda b: b.total)
        stacked = sum(v for k, v in heights.items() if k.startswith(f"remedy-{x}-"))
        assert stacked == pytest.approx(fullest.step_peak / GiB, rel=1e-12), label
    plt.close(figure)


@pytest.mark.parametrize("name", ["step-peaks", "memory-budget"])
def test_axes_are_in_gib_and_the_capacity_line_is_the_cards_allocator(name):
    figure = drawn(name)
    (axes,) = figure.axes
    assert "GiB" in axes.get_ylabel()
    assert not [t for t in texts(figure) if "GB" in t.replace("V100-SXM2-32GB", "")]  # GB is 10**9 B
    (line,) = [l for l in axes.get_lines() if l.get_gid() == "capacity"]
    card = hardware.card("V100-SXM2-32GB")
    assert set(line.get_ydata()) == {card.allocator_mib * 2**20 / GiB} == {30.25}
    assert line.get_label() == f"V100-SXM2-32GB: {card.allocator_mib} MiB = 30.25 GiB usable"
    assert line.get_label() in [t.get_text() for t in axes.get_legend().get_texts()]
    assert "32480" not in " ".join(texts(figure))  # the emulated box, not the card's allocator
    plt.close(figure)


def test_kernel_pieces_tile_the_kernel():
    d, f = 131072, 65536
    mirrored, column, row = (pictures.kernel_pieces(s) for s in ("mirrored", "column", "row"))
    assert all((p.rows, p.cols, p.nbytes) == ((0, d), (0, f), 2**35) for p in mirrored)
    assert [p.cols for p in column] == [(i * f // 4, (i + 1) * f // 4) for i in range(4)]
    assert [p.rows for p in row] == [(i * d // 4, (i + 1) * d // 4) for i in range(4)]
    assert sum(p.nbytes for p in column) == sum(p.nbytes for p in row) == units.tensor_bytes((d, f)) == 32 * GiB
    cells = pictures.mesh_cells()
    assert [(c.device, c.position, c.kernel.cols, c.batch_rows) for c in cells] == [
        (0, (0, 0), (0, f // 2), (0, 32)), (1, (0, 1), (f // 2, f), (0, 32)),
        (2, (1, 0), (0, f // 2), (32, 64)), (3, (1, 1), (f // 2, f), (32, 64))]


def _quoted(name: str) -> set[str]:
    """Sizes picture ``name`` draws, as :func:`units.human_bytes` writes them."""
    sizes = {pictures.capacity_bytes(), 2**35}
    if name == "kernel-splits":
        sizes |= {p.nbytes for s in ("mirrored", "column", "row") for p in pictures.kernel_pieces(s)} | {4 * 2**35}
    if name == "mesh-2x2":
        sizes |= {c.kernel.nbytes for c in pictures.mesh_cells()}
    if name == "step-peaks":
        sizes |= {v for b in pictures.step_peak_bars() for v in [b.total, *b.parts.values()]}
    if name == "memory-budget":
        sizes |= {b.step_peak for _, b in pictures.remedy_rows()}
    return {units.human_bytes(s) for s in sizes} | {f"{pictures.capacity_bytes() // 2**20} MiB"}


def test_pages_show_each_picture_in_both_palettes_with_alt_text_that_quotes_its_numbers():
    used = set()
    for page in sorted((ROOT / "docs").glob("*.md")):
        found = FIGURE.findall(page.read_text(encoding="utf-8"))
        for (alt, name, theme, only), (alt2, name2, theme2, only2) in zip(found[::2], found[1::2]):
            assert (name2, theme, only, theme2, only2) == (name, "light", "light", "dark", "dark"), page.name
            assert alt == alt2 and len(alt) > 80, f"{page.name}: {name} needs the same, real alt text twice"
            quoted = re.findall(r"\d+(?:\.\d+)? (?:GiB|MiB)", alt)
            assert set(quoted) <= _quoted(name), f"{page.name}: {name}: {set(quoted) - _quoted(name)}"
            shapes = {str(list(p.shape)) for s in ("mirrored", "column", "row") for p in pictures.kernel_pieces(s)}
            shapes |= {str([n, 131072]) for c in pictures.mesh_cells() for n in (c.batch_rows[1] - c.batch_rows[0],)}
            shapes |= {str(list(c.kernel.shape)) for c in pictures.mesh_cells()}
            assert set(re.findall(r"\[\d+, \d+\]", alt)) <= shapes, f"{page.name}: {name}"
            if name in ("step-peaks", "memory-budget"):
                assert pictures.capacity_label() in alt
            used.add(name)
        assert len(found) % 2 == 0, page.name
    assert used == set(draw.PICTURES)
