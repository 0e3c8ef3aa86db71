"""Tensors of a training step that grow with the square of the batch, read from the graph ``fit`` traced.

A loss over the pairs in a batch (SimCLR's and CLIP's contrastive losses, a triplet loss over every pair) keeps
``[B, B]`` logits, their softmax and their gradient: bytes that grow as ``B x B``. Runs at small batches do not show
them when a linear part of the step peaks higher there (helper-83: a LayerNorm MLP with a two-view contrastive loss,
XLA, peaked in its LayerNorm backward at 2425 samples, and its ``[B, 2B]`` logits overtook it only past about 4000: a
plan drawn through the runs said "Fits" at 7247 per device, and that step ran out). So each run reads the step's own
graph, as ``fit`` traced it for the run's batch (nothing more is traced or run): :func:`candidates` lists the
tensors with two or more dimensions that are multiples of the batch, and :func:`squared` keeps those whose bytes grew
with the square of the batch from one run's batch to another's (a dimension that is a multiple of the batch by chance,
a 64-channel kernel at 16 or 32 samples, does not grow).

Their sum is an upper bound on what such tensors hold at once: each is counted as if all were live together
(the logits, their softmax and their gradient need not be; both branches of a ``cond`` are counted).
:mod:`snippets.lib.model_plan` adds its growth past the largest run to a plan there.

Also found: every pair in one dimension (``[B * B, d]``, helper-85's pair scorer), and tensors that grow faster, as a
cube (``[B, B, B]``), each grown past the runs by its own power. Not found (docs/decide.md says so): a pair tensor whose
shape the graph leaves unknown (a ``boolean_mask`` of the pairs), more views than :data:`MULTIPLES`; and nothing is read
from a step run eagerly or a graph this module cannot read (then nothing is added, as before this module).

Source: ``tf.function`` traces a function for the shapes it is first called with (``reduce_retracing`` relaxes them
only on a second trace), so the graph Keras's ``fit`` runs (``_make_function`` in
keras/src/backend/tensorflow/trainer.py, Keras 3.15: ``one_step_on_data``, called from ``multi_step_on_iterator``)
carries static shapes on its ops' outputs; ``FuncGraph.get_operations``, TensorFlow 2.21.
"""

from __future__ import annotations

from collections.abc import Mapping


#: A dimension up to this many times the batch is counted as the batch's: ``[B, 2B]`` for two views, ``[2B, 2B]``
#: for NT-Xent over both views of a pair, ``[kB, kB]`` for k views. A bound, so that at 16 samples a width of 512 or a
#: vocabulary is not read as one; more views than this are not found (docs/decide.md says so).
MULTIPLES = 8

#: Per-device batch up to which a run reads its graph: the planner compares its first two batches, which are at most
#: its second small batch (``snippets.lib.plan_runs.SMALL_BATCHES``, tests/test_model_plan.py), and a read costs a
#: large model's run about a second of CPU.
READ_UP_TO = 32

#: Ops whose outputs are no new array: views of their input, constants, placeholders, shapes, handles' reads, and the
#: outputs of a function they call (a ``cond``, a loop, ``fit``'s own step), counted inside it: left out.
NOT_NEW = frozenset({"Identity", "IdentityN", "Reshape", "ExpandDims", "Squeeze", "StopGradient", "Const", "Shape",
                     "ReadVariableOp", "Placeholder", "NoOp", "PartitionedCall", "StatefulPartitionedCall", "While",
                     "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase"})

#: How far the bytes' growth between two runs may lie from a power of the batches' ratio and still be read as it:
#: ``[2B, 2B - 1]`` (NT-Xent without its diagonal) grows by 4.06 from 16 to 32 samples, a linear tensor by 2.
GROWTH_TOLERANCE = 0.1


def batch_dims(shape: tuple[int, ...], batch: int) -> int:
    """How many of ``shape``'s dimensions are the batch's: a multiple of ``batch`` up to :data:`MULTIPLES` times it, or
    one less than such a multiple (a pair matrix without its diagonal), counts once; a multiple of ``batch`` squared up to
    :data:`MULTIPLES` times it (every pair in one dimension, ``[B * B, d]``) counts twice.

    >>> batch_dims((16, 32), 16), batch_dims((16, 10), 16), batch_dims((3, 3, 64, 64), 16), batch_dims((16, 200), 16)
    (2, 1, 2, 1)
    >>> batch_dims((32, 31), 16), batch_dims((256, 10), 16), batch_dims((1024, 10), 32)
    (2, 2, 2)
    """
    square = batch * batch
    return sum(2 if d % square == 0 and d // square <= MULTIPLES else
               1 if d // batch <= MULTIPLES and 0 in (d % batch, (d + 1) % batch) else 0 for d in shape if d)


def _graphs(graph):
    """``graph`` and the function graphs its ops call (``fit``'s step is a call from the outer function), once each."""
    found, stack, seen = [], [graph], set()
    while stack:
        g = stack.pop()
        found.append(g)
        for op in g.get_operations():
            for attr in ("f", "body", "cond", "then_branch", "else_branch"):
                try:
                    name = op.get_attr(attr).name
                except (ValueError, AttributeError):
                    continue
                function = g._get_function(name) if name not in seen else None  # noqa: SLF001 (no public lookup)
                seen.add(name)
                if function is not None and hasattr(function, "graph"):
                    stack.append(function.graph)
    return found


def candidates(model, batch: int) -> dict[str, int] | None:
    """Bytes of each output (``"<op name>:<index>"``) of the step ``fit`` traced for ``model`` at ``batch`` samples that
    has two or more dimensions multiple of it (:func:`batch_dims`); None where no traced step is found (a step run
    eagerly) or its graph cannot be read: then nothing is claimed, and the plan is the runs' alone."""
    try:
        return _candidates(model, batch)
    except Exception:  # noqa: BLE001 (private TensorFlow structures; a run's figures must not fail on them)
        return None


def _candidates(model, batch: int) -> dict[str, int] | None:
    import tensorflow as tf

    function = getattr(model, "train_function", None)
    traced = [c.cell_contents for c in (getattr(function, "__closure__", None) or ())
              if hasattr(c.cell_contents, "_list_all_concrete_functions")]
    concrete = [f for t in traced for f in t._list_all_concrete_functions()]  # noqa: SLF001 (fit's own trace)
    if not concrete:
        return None
    found = {}
    for graph in _graphs(concrete[0].graph):
        for op in graph.get_operations():
            if op.type in NOT_NEW:
                continue
            for i, t in enumerate(op.outputs):
                # Tensors of bytes (bool, int8, half, ...): not handles, strings or variants, which hold no array.
                if (t.dtype not in (tf.resource, tf.string, tf.variant) and t.shape.is_fully_defined()
                        and batch_dims(tuple(t.shape), batch) >= 2):
                    found[f"{op.name}:{i}"] = t.shape.num_elements() * t.dtype.size
    return found


def squared(small: Mapping[str, int], large: Mapping[str, int], b0: int, b1: int) -> dict:
    """The tensors in both runs' :func:`candidates` (at ``b0`` < ``b1`` samples) whose bytes grew by ``(b1 / b0)**k`` for
    a power ``k`` of 2 or more, within :data:`GROWTH_TOLERANCE`: ``{"per_square": the squares' bytes at b1 over b1
    squared, summed (float), "higher": [[k, their bytes at b1 over b1**k, summed], ...] for k of 3 or more (a triplet
    loss over every triplet keeps ``[B, B, B]``: helper-85's grew as the cube, and a square term read it as nothing),
    "tensors": how many, "largest": the largest's name, "<op name>:<output index>"}``.

    >>> squared({"logits:0": 1024, "kernel:0": 16384, "x:0": 2048}, {"logits:0": 4096, "kernel:0": 16384}, 16, 32)
    {'per_square': 4.0, 'higher': [], 'tensors': 1, 'largest': 'logits:0'}
    >>> squared({"pairs:0": 1024, "triplets:0": 16 ** 3}, {"pairs:0": 4096, "triplets:0": 32 ** 3}, 16, 32)["higher"]
    [[3, 1.0]]
    """
    import math

    ratio, terms, grew = b1 / b0, {}, {}
    for name, size in small.items():
        if not size or name not in large:
            continue
        power = round(math.log(large[name] / size, ratio))
        if power >= 2 and abs(large[name] / size - ratio ** power) <= GROWTH_TOLERANCE * ratio ** power:
            terms[power] = terms.get(power, 0.0) + large[name] / b1 ** power
            grew[name] = large[name]
    return {"per_square": terms.pop(2, 0.0), "higher": [[k, terms[k]] for k in sorted(terms)], "tensors": len(grew),
            "largest": max(grew, key=grew.get, default="")}


def from_runs(groups) -> tuple:
    """``(per_square, tensors, largest, higher)`` of :func:`squared` between the first two batches run (``groups``: each
    batch's results of :func:`snippets.lib.model_step.measure`, whose ``"square"`` holds the run's batch per device and
    its :func:`candidates`; ``higher`` as a tuple of ``(power, bytes per sample**power)``); ``()`` where none grew so, or
    fewer than two batches were read."""
    found = [r["square"] for group in groups for r in group[:1] if r.get("square")]
    if len(found) < 2 or found[0]["batch"] == found[1]["batch"]:
        return ()
    grew = squared(found[0]["tensors"], found[1]["tensors"], found[0]["batch"], found[1]["batch"])
    higher = tuple((k, c) for k, c in grew["higher"])
    return (grew["per_square"], grew["tensors"], grew["largest"], higher) if grew["tensors"] else ()


def extra(square: tuple, batch: int, last: int) -> float:
    """Bytes :func:`from_runs`'s ``square`` terms add from ``last`` to ``batch`` samples (0 where ``batch`` <= ``last``).

    >>> extra((4.0, 1, "logits:0", ((3, 1.0),)), 64, 32)
    241664.0
    """
    if not square or batch <= last:
        return 0.0
    per_square, higher = square[0], square[3] if len(square) > 3 else ()
    return per_square * (batch ** 2 - last ** 2) + sum(c * (batch ** k - last ** k) for k, c in higher)


def words(square: tuple, last: int) -> str:
    """A plan's sentence on :func:`from_runs`'s ``square`` past its largest run, ``last`` samples per device ("" if none).

    >>> words((36.0, 9, "compile_loss/info_nce/MatMul:0", ()), 256)[:112]
    ' Past 256 per device it adds the growth of the 9 tensors of the step whose bytes grew as the square of the batch'
    """
    if not square:
        return ""
    per_square, count, largest = square[:3]
    powers = "".join(f" and {c:.4g} B per sample to the power {k}" for k, c in (square[3] if len(square) > 3 else ()))
    return (f" Past {last} per device it adds the growth of the {count} tensor{'s' if count > 1 else ''} of the step "
            f"whose bytes grew as the square of the batch{' or faster' if powers else ''} between the runs (a loss over "
            f"pairs within the batch keeps such logits, as does any product over the batch axis, such as a tensordot "
            f"over a whole batch meant per sample; the largest: {largest}), {per_square:.4g} B per sample squared"
            f"{powers}, counted as if all were live at once: an upper bound.")
