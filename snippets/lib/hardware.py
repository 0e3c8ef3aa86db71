"""What a real GPU gives TensorFlow: a small table by card, and the reserve rule.

A "32 GB" card does not give TensorFlow 32 GB. The driver reports its total
(``nvidia-smi --query-gpu=memory.total``); creating the CUDA context takes a
few hundred MiB of it; then TensorFlow keeps ``MinSystemMemory`` back for
cuBLAS/cuDNN workspaces and the like, and hands the rest to its BFC allocator.
That last figure is what a tensor has to fit in, and TensorFlow logs it when
the device is created::

    Created device /job:localhost/replica:0/task:0/device:GPU:0 with 30976 MB memory:
      -> device: 0, name: Tesla V100-SXM2-32GB, pci bus id: 0000:89:00.0, compute capability: 7.0

(the figure is ``bytes_limit >> 20``, so "MB" there means MiB).

>>> card("V100-SXM2-32GB").allocator_mib
30976
>>> min_system_memory_mib((7, 0)), min_system_memory_mib((8, 0)), min_system_memory_mib((9, 0))
(1050, 1536, 1800)
>>> allocator_bytes("V100-SXM2-32GB") / 2**30
30.25

A logical device made with ``tf.config.LogicalDeviceConfiguration(memory_limit=M)``
gets exactly M MiB and skips the reserve: that is why a "V100" emulated with
``memory_limit=32480`` has about 1.5 GiB more than a real one, and why this
site's default capacity is the logged figure, not the box's.

Sources: ``MinSystemMemory`` in ``tensorflow/core/common_runtime/gpu/gpu_device.cc``
(TF 2.1x: 1050 MiB for compute capability <= 7.x, 1536 MiB for 8.x, 1800 MiB
for 9.x and newer; 225 MiB when less than 2 GiB is free;
``TF_DEVICE_MIN_SYS_MEMORY_IN_MB`` overrides it); each card's figures cite
the logs they were read from. The logged figure varies by a few tens of MiB
with the driver and TensorFlow version; the table keeps one observed value.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 2**20


@dataclass(frozen=True)
class Card:
    """One GPU model as TensorFlow sees it.

    Attributes:
        name: the short name this site uses (``"V100-SXM2-32GB"``).
        total_mib: memory the driver reports (``nvidia-smi`` ``memory.total``), MiB.
        compute_capability: ``(major, minor)``.
        allocator_mib: what TensorFlow's BFC allocator gets by default, MiB
            (the "Created device ... with N MB memory" log line).
        source: where ``total_mib`` and ``allocator_mib`` were read.
    """

    name: str
    total_mib: int
    compute_capability: tuple[int, int]
    allocator_mib: int
    source: str

    @property
    def reserve_mib(self) -> int:
        """TensorFlow's ``MinSystemMemory`` for this card, MiB."""
        return min_system_memory_mib(self.compute_capability)

    @property
    def context_mib(self) -> int:
        """What the CUDA context and other users held when the log was taken, MiB (by difference)."""
        return self.total_mib - self.reserve_mib - self.allocator_mib


#: Cards the site plans for. The logged allocator figures are single
#: observations from TensorFlow logs (new-format "Created device ... MB memory:
#: -> device" lines, TF 2.1x); they vary by some tens of MiB across drivers.
CARDS = {
    card.name: card
    for card in (
        Card("V100-SXM2-32GB", 32510, (7, 0), 30976,
             "nvidia-smi 32510 MiB (driver 410-450); TF log 'with 30976 MB memory ... Tesla V100-SXM2-32GB, "
             "compute capability: 7.0' (other logs 30988-31134)"),
        Card("V100-PCIE-16GB", 16160, (7, 0), 14784,
             "nvidia-smi 16160 MiB (V100 16 GB, driver 440.64, k8s-vgpu-scheduler issue 7); TF log "
             "'with 14784 MB memory ... Tesla V100-PCIE-16GB'"),
        Card("A100-40GB", 40960, (8, 0), 38482,
             "nvidia-smi 40960 MiB (modal-client PR 2797); TF log 'with 38482 MB memory ... A100-SXM4-40GB' "
             "(other logs 38068-38420)"),
        Card("A100-80GB", 81920, (8, 0), 79261,
             "nvidia-smi 81920 MiB (modal-client PR 2797); TF log 'with 79261 MB memory ... A100-SXM4-80GB' "
             "(other logs 78945-79197)"),
        Card("H100-80GB", 81559, (9, 0), 78763,
             "nvidia-smi 81559 MiB (NVIDIA/nccl issue 1264); TF log 'with 78763 MB memory ... "
             "NVIDIA H100 80GB HBM3, compute capability: 9.0'"),
        Card("H200", 143771, (9, 0), 138533,
             "nvidia-smi 143771 MiB (NVIDIA/cuda-samples issue 311); TF 2.17 log 'with 138533 MB memory ... "
             "NVIDIA H200, compute capability: 9.0'"),
    )
}

#: The card of the seed report.
DEFAULT_CARD = "V100-SXM2-32GB"


def min_system_memory_mib(compute_capability: tuple[int, int], available_mib: int | None = None) -> int:
    """TensorFlow's ``MinSystemMemory`` in MiB for a GPU of ``compute_capability``.

    ``available_mib`` is the free memory after the CUDA context; under 2 GiB
    the reserve is 225 MiB whatever the card (``gpu_device.cc``).

    Raises:
        ValueError: for a compute capability that is not ``(major, minor)`` with major >= 1.
    """
    major = compute_capability[0] if len(compute_capability) == 2 else 0
    if not isinstance(major, int) or major < 1:
        raise ValueError(f"compute capability must be (major, minor), not {compute_capability!r}")
    if available_mib is not None and available_mib < 2048:
        return 225
    if major <= 6:
        return 500
    if major == 7:
        return 1050
    if major == 8:
        return 1536
    return 1800


def card(name: str) -> Card:
    """The :class:`Card` called ``name`` (case-insensitive).

    Raises:
        ValueError: for a card not in :data:`CARDS`; the message lists them.
    """
    for key, value in CARDS.items():
        if key.lower() == str(name).lower():
            return value
    raise ValueError(f"unknown card {name!r}; use one of {', '.join(CARDS)}, or give --device-memory")


def allocator_bytes(name: str = DEFAULT_CARD) -> int:
    """Bytes TensorFlow's allocator gets on one card ``name`` by default (no ``memory_limit``)."""
    return card(name).allocator_mib * MiB


#: What TensorFlow's allocator really gets on one V100-SXM2-32GB: 30976 MiB
#: (snippets.lib.hardware), the capacity every verdict on this site is held to.
V100_CAPACITY = allocator_bytes("V100-SXM2-32GB")


#: The share of a GPU's total memory JAX preallocates for its pool when neither
#: ``XLA_CLIENT_MEM_FRACTION`` nor its old name ``XLA_PYTHON_CLIENT_MEM_FRACTION`` is set
#: (docs.jax.dev, "GPU memory allocation": "JAX will preallocate 75% of the total GPU
#: memory"; the variables are read by ``generate_pjrt_gpu_plugin_options`` in
#: jaxlib/xla_client.py, jaxlib 0.10.2). Newer documentation adds that the default pool
#: may grow past it; a plan should not count on that, so it sets the fraction.
JAX_DEFAULT_MEM_FRACTION = 0.75


#: Bytes an allocator can lose beside one tensor: 128 MiB. TensorFlow's BFC allocator (a GPU's and the capped CPU
#: one alike; JAX's GPU pool is the same class) hands a request the whole free chunk it finds unless the chunk is at
#: least twice the request or the rest would be 128 MiB or more (``FindChunkPtr`` in xla/tsl/framework/
#: bfc_allocator.cc: ``max_internal_fragmentation_bytes``, 128 MiB unless ``fragmentation_fraction`` is set, which
#: TensorFlow sets from ``GPUOptions.Experimental.internal_fragmentation_fraction``, default 0). Measured on a small CNN
#: at a 768 MiB pool by ``python -m benchmarks.pool_edge`` (:mod:`snippets.lib.pool_edge`, quoted in docs/decide.md).
ALLOCATOR_SLACK = 128 * MiB

#: How a verdict's capacity says it is :func:`usable_bytes`.
SLACK_WORDS = ("less what its allocator can hand a tensor as part of a whole chunk: 128 MiB, or half of a pool "
               "under 256 MiB")


def usable_bytes(pool: int) -> int:
    """What a plan measured at small batches may fill of ``pool`` bytes: the pool less :data:`ALLOCATOR_SLACK`
    (a plan's largest batch and its "Fits" are read at the pool's edge, where its runs, made under roomy caps, could
    not see a chunk handed out whole), and at least half of it: a chunk handed out whole is under twice its request,
    so what it loses is under the tensor it holds, which the plan counts. One chunk's worth: a step that holds
    several such chunks at once can lose more.

    >>> from snippets.lib.units import human_bytes
    >>> human_bytes(usable_bytes(allocator_bytes("V100-PCIE-16GB"))), human_bytes(usable_bytes(200 * MiB))
    ('14.31 GiB', '100 MiB')
    """
    return max(pool - ALLOCATOR_SLACK, pool // 2)


def within_pool_note(peak: int, capacity: int) -> str:
    """For a "Does not fit" whose ``peak`` (bytes) is over ``capacity`` (:func:`usable_bytes` of a pool) but not over
    the pool itself: a sentence saying a run may still complete there, and what the verdict held back; ``""``
    otherwise (helper-88: a "Does not fit" whose step completed under a cap of the pool, unexplained).

    >>> within_pool_note(950 * MiB, usable_bytes(1024 * MiB))
    ' Within the pool itself (1 GiB), a run may complete: the verdict holds back the 128 MiB an allocator can hand a tensor as part of a whole chunk.'
    >>> within_pool_note(1100 * MiB, usable_bytes(1024 * MiB)), within_pool_note(150 * MiB, usable_bytes(200 * MiB))[:37]
    ('', ' Within the pool itself (200 MiB), a ')
    """
    from snippets.lib.units import human_bytes

    # usable_bytes is pool - ALLOCATOR_SLACK from a pool of twice the slack up, half the pool below it.
    pool = capacity + ALLOCATOR_SLACK if capacity >= ALLOCATOR_SLACK else 2 * capacity
    if not capacity < peak <= pool:
        return ""
    return (f" Within the pool itself ({human_bytes(pool)}), a run may complete: the verdict holds back the "
            f"{human_bytes(pool - capacity)} an allocator can hand a tensor as part of a whole chunk.")


def jax_pool_bytes(name: str = DEFAULT_CARD, fraction: float = JAX_DEFAULT_MEM_FRACTION) -> int:
    """Bytes of JAX's GPU memory pool on one card ``name``: ``fraction`` of its total memory.

    A fraction of ``nvidia-smi``'s total (``Card.total_mib``), not of what is
    free, since jaxlib 0.4.1 ("XX% of the total GPU memory"). The CUDA
    context comes on top, so a fraction near 1 may not be granted.

    >>> from snippets.lib.units import human_bytes
    >>> human_bytes(jax_pool_bytes("V100-SXM2-32GB")), human_bytes(jax_pool_bytes("V100-SXM2-32GB", 0.95))
    ('23.81 GiB', '30.16 GiB')

    Raises:
        ValueError: for an unknown card, or a fraction outside (0, 1].
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], not {fraction!r}; JAX reads it as XLA_CLIENT_MEM_FRACTION=.XX")
    return int(card(name).total_mib * MiB * fraction)


#: PCIe 3.0 x16, one direction, in bytes per second: 8 GT/s per lane
#: (PCI Express Base Specification 3.0, PCI-SIG 2010), 128b/130b line code,
#: 16 lanes, 8 bits per byte: 15753846153.8 B/s, about 15.75 GB/s. The
#: "PCIe 32 GB/s" of NVIDIA's Tesla V100 datasheet is both directions
#: rounded. A theoretical peak: real copies reach less, so times computed
#: with it are lower bounds.
PCIE3_X16_BYTES_PER_S = 8e9 * 16 * (128 / 130) / 8


#: Peak float32 throughput of a V100-SXM2 in FLOP/s (NVIDIA Tesla V100
#: datasheet: 15.7 TFLOPS single precision, SXM2 form factor).
V100_FP32_FLOPS = 15.7e12


#: NVLink 2.0 on a V100-SXM2, one direction, bytes per second: the sum of its
#: 6 links x 25 GB/s (NVIDIA Tesla V100 datasheet: "NVLink 300 GB/s", both
#: directions added). Reaching it assumes a topology where a collective can
#: use all six links at once, as NCCL does with several rings on a DGX-1's
#: hybrid cube-mesh; one ring over single links gets 25 GB/s. A peak: NCCL
#: reaches less, so times computed with it are lower bounds.
V100_NVLINK_BYTES_PER_S = 6 * 25e9
