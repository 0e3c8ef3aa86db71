"""Bytes on the wire and the time they take: PCIe copies, ring collectives, FLOPs.

Pure arithmetic on shapes and dtypes, no TensorFlow; link figures come from
:mod:`snippets.lib.hardware`.
"""

from __future__ import annotations

from collections.abc import Sequence

from snippets.lib.hardware import PCIE3_X16_BYTES_PER_S, V100_NVLINK_BYTES_PER_S
from snippets.lib.splits import check_count
from snippets.lib.units import check_shape, tensor_bytes


def transfer_seconds(nbytes: int, bytes_per_s: float = PCIE3_X16_BYTES_PER_S) -> float:
    """Least time (s) to move ``nbytes`` over a link of ``bytes_per_s`` (default PCIe 3.0 x16).

    >>> round(transfer_seconds(34359738368), 3)
    2.181

    Raises:
        ValueError: for a negative size or a bandwidth that is not positive.
    """
    if nbytes < 0 or bytes_per_s <= 0:
        raise ValueError(f"need nbytes >= 0 and bandwidth > 0, got {nbytes} B at {bytes_per_s} B/s")
    return nbytes / bytes_per_s


def offload_step_bytes(kernel_shape: Sequence[int], dtype: str = "float32",
                       batch: int = 1, compute: str = "device") -> dict[str, int]:
    """Bytes one training step moves over each GPU's host link when a Dense kernel lives on the host.

    ``kernel_shape`` is ``W[D, F]``. ``compute="device"``: the layer runs on
    the GPU (a host variable read on a GPU, or ``CentralStorageStrategy``), so
    each replica copies all of W in to read it and sends its gradient dW
    (same shape) out for the update on the host. ``compute="host"``: the layer
    also runs on the host, so only activations cross: y[B, F] in, dy[B, F]
    out (the input x[B, D] is assumed to come from the host input pipeline).

    Returns:
        ``{"host_to_device": bytes, "device_to_host": bytes}`` per replica per step.

    >>> offload_step_bytes([131072, 65536])
    {'host_to_device': 34359738368, 'device_to_host': 34359738368}
    >>> offload_step_bytes([131072, 65536], batch=64, compute="host")
    {'host_to_device': 16777216, 'device_to_host': 16777216}

    Raises:
        ValueError: for a bad shape or dtype, or ``compute`` not "device"/"host".
    """
    d, f = check_shape(kernel_shape)
    if compute == "device":
        w = tensor_bytes((d, f), dtype)
        return {"host_to_device": w, "device_to_host": w}
    if compute == "host":
        y = tensor_bytes((batch, f), dtype)
        return {"host_to_device": y, "device_to_host": y}
    raise ValueError(f"compute must be 'device' or 'host', not {compute!r}")


def dense_train_flops(batch: int, d: int, f: int, input_grad: bool = False) -> int:
    """FLOPs of one training step of ``x[B, D] @ W[D, F]``: 2BDF forward, 2BDF for dW, 2BDF for dx.

    ``dx`` is computed only when something before the layer trains
    (``input_grad``); the seed's Dense reads the model's input, so its step is 4BDF.

    >>> dense_train_flops(64, 131072, 65536) / 1e12, dense_train_flops(64, 131072, 65536, True) / 1e12
    (2.199023255552, 3.298534883328)
    """
    return (6 if input_grad else 4) * batch * d * f


def low_rank_bytes(d: int, f: int, rank: int, dtype: str = "float32") -> int:
    """Bytes of ``U[D, r] @ V[r, F]``, the rank-``r`` factorisation of ``W[D, F]``.

    >>> low_rank_bytes(131072, 65536, 512)
    402653184
    """
    return tensor_bytes((d, rank), dtype) + tensor_bytes((rank, f), dtype)


#: Collectives a training step of a split Dense layer uses.
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def ring_bytes(collective: str, nbytes: int, devices: int) -> int:
    """Bytes each device sends in a ring ``collective`` over ``devices`` devices.

    ``nbytes`` is the size of the full result (the reduced tensor for
    all-reduce, the gathered tensor for all-gather, the input for
    reduce-scatter). A ring all-reduce sends ``2 (N - 1) / N`` of it from
    every device, all-gather and reduce-scatter ``(N - 1) / N`` (NCCL's
    "bus bandwidth" factors, nccl-tests doc/PERFORMANCE.md; Patarasuk & Yuan
    2009 for the ring all-reduce's optimality).

    >>> ring_bytes("all_reduce", 34359738368, 4)
    51539607552
    >>> ring_bytes("all_gather", 16777216, 4)
    12582912

    Raises:
        ValueError: for an unknown collective, a negative size or a bad count.
    """
    check_count(devices)
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; use one of {', '.join(COLLECTIVES)}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, not {nbytes}")
    factor = 2 if collective == "all_reduce" else 1
    return factor * (devices - 1) * nbytes // devices


#: Placements whose per-step communication :func:`step_communication` knows:
#: ``mirrored`` (data parallel, the batch split, W replicated), ``column``
#: (W[D, F_N], output gathered), ``row`` (W[D_N, F], partial outputs
#: summed) and ``column_row`` (the Megatron pair W1[D, H_N], W2[H_N, F]).
COMM_STRATEGIES = ("mirrored", "column", "row", "column_row")


def step_communication(kernel_shape: Sequence[int], batch: int, strategy: str,
                       devices: int = 4, dtype: str = "float32", input_grad: bool = False,
                       out_width: int | None = None) -> dict[str, int]:
    """Bytes each device sends in one training step of ``x[B, D] @ W[D, F]``, by collective.

    * ``mirrored``: each replica computes a full gradient dW[D, F] on its
      part of the batch; one all-reduce of dW per step, whatever the batch.
    * ``column``: W[D, F_N]; every device needs the whole input x[B, D]:
      with an input pipeline that gives each device B/N rows, an all-gather
      of x (forward). The output slices y[B, F_N] are all-gathered into
      y[B, F] (forward). Backward needs no collective for dW; dx[B, D] is a
      sum of N partial products, one all-reduce, only if ``input_grad`` (a
      layer before this one trains).
    * ``row``: W[D_N, F]; the partial outputs y_i[B, F] are all-reduced
      (forward); dx[B, D_N] stays split, all-gathered only if ``input_grad``.
    * ``column_row``: W1[D, H_N] then W2[H_N, F] with ``kernel_shape`` =
      [D, H] and ``out_width`` = F: one all-reduce of y[B, F] forward, and of
      dx[B, D] backward if ``input_grad`` (Shoeybi et al. 2019,
      arXiv:1909.08053, section 3: "two all-reduce operations in the forward
      path and two in the backward path" per transformer layer, i.e. one per
      MLP block each way).

    Returns:
        ``{collective: bytes sent per device}``, with a ``"total"`` entry.

    >>> step_communication([131072, 65536], 64, "mirrored")
    {'all_reduce': 51539607552, 'total': 51539607552}
    >>> step_communication([131072, 65536], 64, "column")
    {'all_gather': 37748736, 'total': 37748736}

    Raises:
        ValueError: for a bad shape, batch, strategy, dtype or device count.
    """
    d, f = check_shape(kernel_shape)
    check_shape([batch])
    check_count(devices)
    if strategy not in COMM_STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; use one of {', '.join(COMM_STRATEGIES)}")
    x = tensor_bytes((batch, d), dtype)
    sent: dict[str, int] = {}

    def add(collective: str, nbytes: int) -> None:
        sent[collective] = sent.get(collective, 0) + ring_bytes(collective, nbytes, devices)

    if strategy == "mirrored":
        add("all_reduce", tensor_bytes((d, f), dtype))
    elif strategy == "column":
        add("all_gather", x)
        add("all_gather", tensor_bytes((batch, f), dtype))
        if input_grad:
            add("all_reduce", x)
    elif strategy == "row":
        add("all_reduce", tensor_bytes((batch, f), dtype))
        if input_grad:
            add("all_gather", x)
    else:
        add("all_reduce", tensor_bytes((batch, out_width or d), dtype))
        if input_grad:
            add("all_reduce", x)
    sent["total"] = sum(sent.values())
    return sent


def step_seconds(nbytes_sent: int, bytes_per_s: float = V100_NVLINK_BYTES_PER_S) -> float:
    """Least time (s) for a device to send ``nbytes_sent`` at ``bytes_per_s`` (default V100 NVLink).

    >>> round(step_seconds(51539607552) * 1e3, 1)  # the mirrored all-reduce of dW, in ms
    343.6
    """
    return transfer_seconds(nbytes_sent, bytes_per_s)
