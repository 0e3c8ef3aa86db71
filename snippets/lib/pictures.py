"""What the site's pictures draw: the numbers behind each figure, with no drawing in here.

The build hook (``hooks/plots.py``, drawing with ``hooks/draw.py``) turns these
records into SVGs; ``tests/test_pictures.py`` holds the drawn figures against
them and against the planner. Everything is pure arithmetic on shapes
(:mod:`snippets.lib.placements`, :mod:`snippets.lib.planner`,
:mod:`snippets.lib.units`): no TensorFlow, no matplotlib.

>>> [p.shape for p in kernel_pieces("column")][0], human_bytes(kernel_pieces("column")[0].nbytes)
((131072, 16384), '8 GiB')
>>> capacity_label()
'V100-SXM2-32GB: 30976 MiB = 30.25 GiB usable'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from snippets.lib import hardware, placements, planner
from snippets.lib.seed import SEED_SHAPE
from snippets.lib.units import GiB, human_bytes, tensor_bytes  # noqa: F401 (GiB: doctests)


# --- the capacity line --------------------------------------------------------


def capacity_bytes(card: str = hardware.DEFAULT_CARD) -> int:
    """Bytes TensorFlow's allocator gets on one ``card`` (the line every bar plot draws)."""
    return hardware.allocator_bytes(card)


def capacity_label(card: str = hardware.DEFAULT_CARD) -> str:
    """The capacity line's label, in the allocator's MiB and the axis's GiB (both binary units)."""
    return f"{card}: {hardware.card(card).allocator_mib} MiB = {human_bytes(capacity_bytes(card))} usable"


# --- (a) what each device holds of W[D, F] -------------------------------------


@dataclass(frozen=True)
class Piece:
    """The block of a kernel ``W[D, F]`` one device holds.

    Attributes:
        device: device index 0 .. N-1.
        rows: ``(start, stop)`` along D (axis 0), stop exclusive.
        cols: ``(start, stop)`` along F (axis 1), stop exclusive.
        nbytes: bytes of the block in ``dtype`` (:func:`snippets.lib.units.tensor_bytes`).
    """

    device: int
    rows: tuple[int, int]
    cols: tuple[int, int]
    nbytes: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows[1] - self.rows[0], self.cols[1] - self.cols[0])


def kernel_pieces(strategy: str, shape: Sequence[int] = SEED_SHAPE, devices: int = 4,
                  dtype: str = "float32") -> list[Piece]:
    """The block of ``W[D, F]`` each of ``devices`` holds under ``strategy`` (a name in
    :data:`snippets.lib.placements.PLACEMENTS`): the whole kernel on every device for
    ``mirrored``, ``W[D, F_model]`` for ``column``, ``W[D_model, F]`` for ``row``.

    >>> [(p.rows, p.cols) for p in kernel_pieces("row", (8, 4), 4)]
    [((0, 2), (0, 4)), ((2, 4), (0, 4)), ((4, 6), (0, 4)), ((6, 8), (0, 4))]
    >>> sum(p.nbytes for p in kernel_pieces("mirrored")) // GiB
    128

    Raises:
        ValueError: for a shape that is not 2-D, or what :func:`placements.local_shape` refuses.
    """
    if len(shape) != 2:
        raise ValueError(f"a picture of W[D, F] needs a 2-D shape, not {list(shape)}")
    d, f = shape
    local = placements.local_shape(shape, strategy, devices)
    axis = placements.shard_axis(shape, strategy)
    pieces = []
    for device in range(devices):
        rows, cols = (0, d), (0, f)
        if axis == 0:
            rows = (device * local[0], (device + 1) * local[0])
        elif axis == 1:
            cols = (device * local[1], (device + 1) * local[1])
        pieces.append(Piece(device, rows, cols, tensor_bytes(local, dtype)))
    return pieces


# --- (b) a batch x model mesh --------------------------------------------------


@dataclass(frozen=True)
class MeshCell:
    """One device of a 2-D ``batch x model`` mesh and what it holds.

    Attributes:
        device: device index, assigned row-major over the mesh (DTensor's
            ``create_mesh`` order: device ``b * M + m`` sits at ``(b, m)``).
        position: ``(batch index, model index)``.
        kernel: the block of ``W[D, F]`` it holds, ``W[D, F_model]``.
        batch_rows: ``(start, stop)`` of the global batch it reads, ``x[B_batch, D]``.
    """

    device: int
    position: tuple[int, int]
    kernel: Piece
    batch_rows: tuple[int, int]


def mesh_cells(mesh: Mapping[str, int] | None = None, shape: Sequence[int] = SEED_SHAPE,
               batch: int = 64, dtype: str = "float32") -> list[MeshCell]:
    """Each device of a ``{"batch": b, "model": m}`` mesh: its kernel block and its part of the batch.

    The kernel is laid out ``[UNSHARDED, "model"]`` and the batch
    ``["batch", UNSHARDED]``, as in the DTensor chapter, so every kernel
    block is stored once per batch row.

    >>> [(c.device, c.position, c.kernel.cols, c.batch_rows) for c in mesh_cells(shape=(4, 8), batch=4)]
    [(0, (0, 0), (0, 4), (0, 2)), (1, (0, 1), (4, 8), (0, 2)), (2, (1, 0), (0, 4), (2, 4)), (3, (1, 1), (4, 8), (2, 4))]
    """
    mesh = dict(mesh or {"batch": 2, "model": 2})
    rows_n, cols_n = mesh["batch"], mesh["model"]
    by_column = kernel_pieces("column", shape, cols_n, dtype)
    local_batch = placements.local_shape((batch,), "column", rows_n)[0]
    cells = []
    for b in range(rows_n):
        for m in range(cols_n):
            piece = by_column[m]
            cells.append(MeshCell(b * cols_n + m, (b, m), Piece(b * cols_n + m, piece.rows, piece.cols, piece.nbytes),
                                  (b * local_batch, (b + 1) * local_batch)))
    return cells


# --- (c) column then row -------------------------------------------------------


def megatron_shapes(d: int, h: int, f: int, batch: int, devices: int = 4) -> dict[str, tuple[int, ...]]:
    """Shapes on each device of a column-parallel layer ``W1[D, H]`` feeding a row-parallel ``W2[H, F]``.

    Each device holds ``W1[D, H_model]`` and ``W2[H_model, F]``, makes
    ``h[B, H_model]`` and a partial product ``y_i[B, F]``; the one collective
    sums the N partials into ``y[B, F]`` (Shoeybi et al. 2019, "Megatron-LM",
    section 3).

    >>> megatron_shapes(64, 128, 32, 16)
    {'x': (16, 64), 'W1': (64, 32), 'h': (16, 32), 'W2': (32, 32), 'y_i': (16, 32), 'y': (16, 32)}
    """
    w1 = placements.local_shape((d, h), "column", devices)
    w2 = placements.local_shape((h, f), "row", devices)
    return {"x": (batch, d), "W1": w1, "h": (batch, w1[1]), "W2": w2, "y_i": (batch, f), "y": (batch, f)}


# --- (d) per-device step peaks, stacked ----------------------------------------

#: Stack order, bottom to top, of a step peak's parts (:func:`step_layers`).
LAYERS = ("weights", "gradients", "slots", "temporaries", "activations")


def step_layers(budget: planner.DeviceBudget) -> dict[str, int]:
    """A budget's step peak in :data:`LAYERS`, bytes; the parts add up to ``budget.step_peak``.

    ``temporaries`` is the larger of the update's temporaries and the
    gradient aggregation's buffer (they are not held at once:
    :attr:`planner.DeviceBudget.phases`).

    >>> parts = step_layers(planner.per_device(SEED_SHAPE, "float32", "rmsprop", "mirrored", 4)[0])
    >>> {k: human_bytes(v) for k, v in parts.items()}
    {'weights': '32 GiB', 'gradients': '32 GiB', 'slots': '32 GiB', 'temporaries': '128 GiB', 'activations': '20 MiB'}
    """
    parts = {
        "weights": budget.weights, "gradients": budget.gradients, "slots": budget.slots,
        "temporaries": max(budget.update_temporaries, budget.aggregation), "activations": budget.activations,
    }
    assert sum(parts.values()) == budget.step_peak, (parts, budget.step_peak)
    return parts


@dataclass(frozen=True)
class Bar:
    """One stacked bar: a device's step peak under a placement, in bytes by layer."""

    group: str
    device: int
    parts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())


#: The placements the per-device figure compares (planner names).
STEP_PEAK_STRATEGIES = ("mirrored", "column", "row")


def step_peak_bars(strategies: Sequence[str] = STEP_PEAK_STRATEGIES, shape: Sequence[int] = SEED_SHAPE,
                   optimizer: str = "rmsprop", devices: int = 4, batch: int = 64) -> list[Bar]:
    """Every device's step peak for the seed kernel (float32) under each of ``strategies``.

    XLA as Keras chooses on a GPU host (``xla="auto"``): off under
    MirroredStrategy, each shard's update compiled for column and row.

    >>> [(b.group, b.device, human_bytes(b.total)) for b in step_peak_bars(("mirrored", "column"))][::4]
    [('mirrored', 0, '224.02 GiB'), ('column', 0, '24.08 GiB')]
    """
    bars = []
    for strategy in strategies:
        for budget in planner.per_device(shape, "float32", optimizer, strategy, devices, batch=batch):
            bars.append(Bar(strategy, budget.device, step_layers(budget)))
    return bars


#: The remedies the Memory budget chapter's figure compares: (label, placement,
#: variable dtype, policy, xla) for the seed layer with RMSprop over 4 devices.
REMEDY_CONFIGS = (
    ("mirrored float32", "mirrored", "float32", None, "auto"),
    ("mirrored mixed_float16", "mirrored", "float32", "mixed_float16", "auto"),
    ("mirrored float16", "mirrored", "float16", None, "auto"),
    ("offload float32", "offload", "float32", None, "auto"),
    ("column x4 float32 no XLA", "column", "float32", None, "off"),
    ("column x4 float32 XLA", "column", "float32", None, "auto"),
    ("row x4 float32 XLA", "row", "float32", None, "auto"),
    ("column x4 float16 no XLA", "column", "float16", None, "off"),
)


def seed_weights(dtype: str = "float32") -> list[planner.Weight]:
    """The seed layer's weights without Keras: Glorot kernel [131072, 65536], zero bias [65536]."""
    return [planner.Weight(tuple(SEED_SHAPE), dtype, "glorot_uniform"), planner.Weight((SEED_SHAPE[1],), dtype, "zeros")]


def remedy_rows(optimizer: str | None = "rmsprop", devices: int = 4) -> list[tuple[str, planner.DeviceBudget]]:
    """(label, fullest device's budget) for each of :data:`REMEDY_CONFIGS`: the remedies figure's bars."""
    rows = []
    for label, strategy, dtype, policy, xla in REMEDY_CONFIGS:
        budgets = planner.plan(seed_weights(dtype), optimizer, strategy, devices, policy, xla=xla)
        rows.append((label, max(budgets, key=lambda b: b.total)))
    return rows
