"""Where TensorFlow really ran a function's ops, and what it copied between devices.

Both are read from the run metadata of the call that instantiates a
``tf.function``: the placer's partition graphs, one per device, joined by
``_Send``/``_Recv`` pairs. Used by the tensor-parallel chapter (which device
ran each matmul and update) and the offload chapter (what crosses PCIe).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from snippets.lib import private
from snippets.lib.pieces import short_device
from snippets.lib.units import tensor_bytes


@dataclass(frozen=True)
class Transfer:
    """A tensor TensorFlow copied between devices in one call: what, from, to, and its size.

    Attributes:
        tensor: the op whose output was sent, e.g. ``dense/Cast/ReadVariableOp``.
        source, destination: device names as :func:`snippets.lib.pieces.short_device` gives them.
        shape, dtype, nbytes: from the traced function graph (static shapes);
            None for a tensor Grappler created under a new name.
    """

    tensor: str
    source: str
    destination: str
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    nbytes: int | None = None

    @property
    def kind(self) -> str:
        """``weights`` (a variable read), ``gradients`` or ``activations`` (inputs, outputs, loss)."""
        if "ReadVariableOp" in self.tensor:
            return "weights"
        if "gradient_tape/" in self.tensor:
            return "gradients"
        return "activations"


@dataclass(frozen=True)
class Placement:
    """Where TensorFlow ran each op of one function, and what it copied between devices.

    Attributes:
        ops: ``(op type, op name, short device)`` for every op.
        transfers: one :class:`Transfer` per ``_Send`` op (control-only
            edges left out), sorted by source and destination.
    """

    ops: tuple[tuple[str, str, str], ...]
    transfers: tuple[Transfer, ...]

    def devices(self, op_type: str, name_part: str = "") -> list[str]:
        """Sorted devices of the ops of ``op_type`` whose name contains ``name_part``."""
        return sorted(d for t, n, d in self.ops if t == op_type and name_part in n)

    def bytes_moved(self, source: str | None = None, destination: str | None = None) -> int:
        """Bytes of the copies from ``source`` to ``destination`` (None: any device).

        Raises:
            ValueError: if a matching copy's size is unknown.
        """
        total = 0
        for t in self.transfers:
            if source not in (None, t.source) or destination not in (None, t.destination):
                continue
            if t.nbytes is None:
                raise ValueError(f"size of {t.tensor} ({t.source} -> {t.destination}) is unknown")
            total += t.nbytes
        return total


def placement(function, *args) -> Placement:
    """Run ``function(*args)`` once and read where TensorFlow really ran each op and what it copied.

    ``function`` must be a ``tf.function`` that has not run yet: TensorFlow
    records the partitioned graphs (one per device: the placer's decision,
    not what the Python code asked for) with the run metadata of the call
    that instantiates the function
    (``tensorflow.python.eager.context.enable_run_metadata``, the mechanism
    behind TensorBoard's graph view). Each ``_Send`` (or ``_HostSend``)
    whose two devices differ is one copy per call: on a GPU machine, a PCIe
    or NVLink transfer.

    Raises:
        ValueError: if no graph was recorded (the function had already run).
    """
    metadata = private.run_metadata(lambda: function(*args))
    graph = function.get_concrete_function(*args).graph  # the trace just run, not a new one
    ops, moved = [], []
    for function_graph in metadata.function_graphs:
        for partition in function_graph.partition_graphs:
            for node in partition.node:
                ops.append((node.op, node.name, short_device(node.device)))
                sent = node.attr["tensor_name"].s.decode()
                # The partitioner also groups control dependencies that cross devices into a
                # scalar sent from a "GroupCrossDeviceControlEdges" node: an ordering signal, not data.
                if (node.op in ("_Send", "_HostSend") and "GroupCrossDeviceControlEdges" not in sent
                        and node.attr["send_device"].s != node.attr["recv_device"].s):
                    moved.append(_transfer(graph, sent, node))
    if not ops:
        raise ValueError("no graphs were recorded: pass a tf.function that has not run yet")
    moved.sort(key=lambda t: (t.source, t.destination, t.tensor))
    return Placement(tuple(ops), tuple(moved))


_EDGE = re.compile(r"^edge_\d+_")


def _transfer(graph, sent: str, node) -> Transfer:
    """The :class:`Transfer` of one send node, sized from the traced graph's tensor if it has it."""
    source = short_device(node.attr["send_device"].s.decode())
    destination = short_device(node.attr["recv_device"].s.decode())
    name, _, index = _EDGE.sub("", sent).partition(":")
    try:
        tensor = graph.get_operation_by_name(name).outputs[int(index or 0)]
    except KeyError:
        return Transfer(name, source, destination)
    shape = tuple(int(d) for d in tensor.shape)
    dtype = tensor.dtype.name
    return Transfer(name, source, destination, shape, dtype, tensor_bytes(shape, dtype))


def train_step_function(model):
    """``model.train_step`` as a ``tf.function`` (the step ``fit`` runs), with the optimizer built."""
    import tensorflow as tf

    model.optimizer.build(model.trainable_variables)
    return tf.function(model.train_step)
