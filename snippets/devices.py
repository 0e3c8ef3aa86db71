"""Make "N devices of M MiB each" on whatever hardware is present.

This is the only module in the project that configures TensorFlow devices.
Call :func:`configure` first thing in a process, before any TensorFlow op
runs; it picks one of three modes and says which:

``gpu``
    At least N real GPUs: the first N are kept, each capped with a logical
    device ``memory_limit`` of M MiB, so an 80 GB card behaves like a
    V100-SXM2-32GB (32480 MiB).
``split-gpu``
    Fewer GPUs than N, but room for N x M: each GPU is split into several
    logical GPUs of M MiB (one 141 GB H200 = 4 emulated V100-32GB).
``cpu``
    No GPU: N logical CPUs and TensorFlow's BFC allocator on the host, capped
    with ``TF_CPU_ALLOCATOR_USE_BFC=true`` and ``TF_CPU_BFC_MEM_LIMIT_IN_MB``.
    The allocator refuses a tensor larger than the cap before touching a
    page, so the full-size OOM reproduces in seconds on a laptop.

What CPU mode cannot emulate: the cap belongs to the process, not to a
device. All N logical CPUs draw from one pool of M MiB (by default), so CPU
mode reproduces "one tensor does not fit one device", but cannot show N
devices each filling M MiB at once; per-device figures then come from
where variables are placed (see ``snippets.memory``), not from the allocator.

Sources: ``tf.config.set_logical_device_configuration`` and
``tf.config.LogicalDeviceConfiguration`` (API pages, TensorFlow 2.21);
the ``TF_CPU_*`` variables are read by ``tensorflow/core/common_runtime/
process_state.cc`` when the CPU allocator is first created.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from snippets.memory import GiB, MiB, parse_size

MODES = ("auto", "gpu", "split-gpu", "cpu")

#: Most logical devices this site configures. TensorFlow has no limit of its
#: own, but starting thousands of logical CPUs takes minutes; no real host
#: here has more than 16 GPUs.
MAX_DEVICES = 64

#: MiB left free on each GPU in ``split-gpu`` mode for the CUDA context,
#: cuBLAS/cuDNN handles and TensorFlow's own bookkeeping, which live outside
#: the logical devices' ``memory_limit``. Contexts measure a few hundred MiB
#: (CUDA C Programming Guide, "Initialization": the context holds the
#: module images and per-thread stacks); 1 GiB is a safe margin.
GPU_RESERVE_MIB = GiB // MiB


class DeviceConfigError(RuntimeError):
    """Devices cannot be configured as asked; the message names the fix."""


@dataclass(frozen=True)
class GpuInfo:
    """A physical GPU as TensorFlow lists it, with its memory if known (MiB)."""

    name: str
    memory_mib: int | None


@dataclass(frozen=True)
class DevicePlan:
    """How N devices of M MiB map onto the hardware.

    Attributes:
        mode: ``"gpu"``, ``"split-gpu"`` or ``"cpu"``.
        count: number of logical devices N.
        device_mib: memory per logical device M, in MiB.
        gpu_limits_mib: for each physical GPU used, the ``memory_limit`` (MiB)
            of each logical GPU made on it; empty in CPU mode.
    """

    mode: str
    count: int
    device_mib: int
    gpu_limits_mib: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class DeviceSetup:
    """The devices :func:`configure` made.

    Attributes:
        plan: the :class:`DevicePlan` that was applied.
        devices: logical device names, e.g. ``("/device:CPU:0", ...)``.
        pool_mib: CPU mode only: the one BFC cap (MiB) all logical CPUs share.
    """

    plan: DevicePlan
    devices: tuple[str, ...]
    pool_mib: int | None = None

    @property
    def mode(self) -> str:
        return self.plan.mode

    @property
    def device_bytes(self) -> int:
        """Capacity of one emulated device in bytes."""
        return self.plan.device_mib * MiB

    def describe(self) -> str:
        """One line saying which mode was chosen and what it means."""
        n, m = self.plan.count, self.plan.device_mib
        if self.mode == "cpu":
            return (
                f"cpu mode: {n} logical CPUs sharing one BFC allocator capped at "
                f"{self.pool_mib} MiB (the cap is per process, not per device)"
            )
        if self.mode == "gpu":
            return f"gpu mode: {n} GPUs, each capped at {m} MiB"
        gpus = len(self.plan.gpu_limits_mib)
        return f"split-gpu mode: {n} logical GPUs of {m} MiB on {gpus} physical GPU(s)"


def check_request(count: int, device_mib: int, mode: str = "auto") -> None:
    """Refuse a device request that cannot be right, before TensorFlow is imported.

    Raises:
        DeviceConfigError: for a count that is not an integer from 1 to
            :data:`MAX_DEVICES`, less than 1 MiB per device, or an unknown mode.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise DeviceConfigError(f"device count must be a positive integer, not {count!r}")
    if count > MAX_DEVICES:
        raise DeviceConfigError(f"device count {count} is more than {MAX_DEVICES}; ask for fewer devices")
    if device_mib < 1:
        raise DeviceConfigError(
            "device memory must be at least 1 MiB (TensorFlow sets memory_limit and the CPU cap in whole MiB)"
        )
    if mode not in MODES:
        raise DeviceConfigError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")


def plan_devices(
    count: int,
    device_mib: int,
    gpus: Sequence[GpuInfo],
    mode: str = "auto",
    reserve_mib: int = GPU_RESERVE_MIB,
) -> DevicePlan:
    """Decide how to make ``count`` devices of ``device_mib`` MiB on ``gpus``.

    Pure function: it reads nothing from TensorFlow, so the GPU decisions are
    unit-tested here on a machine without a GPU.

    >>> plan_devices(4, 32480, [GpuInfo("H200", 143771)]).gpu_limits_mib
    ((32480, 32480, 32480, 32480),)
    >>> plan_devices(4, 32480, []).mode
    'cpu'

    Raises:
        DeviceConfigError: for a count that is not a positive integer, an
            unknown mode, GPUs smaller than ``device_mib``, or GPUs that
            together cannot hold ``count`` x ``device_mib``.
    """
    check_request(count, device_mib, mode)
    if mode == "cpu" or (mode == "auto" and not gpus):
        return DevicePlan("cpu", count, device_mib)
    if not gpus:
        raise DeviceConfigError(f"mode {mode!r} needs a GPU and TensorFlow sees none; use mode 'cpu'")

    if len(gpus) >= count and mode in ("auto", "gpu"):
        for index, gpu in enumerate(gpus[:count]):
            if gpu.memory_mib is not None and gpu.memory_mib < device_mib:
                raise DeviceConfigError(
                    f"GPU {index} ({gpu.name}) has {gpu.memory_mib} MiB, less than the "
                    f"{device_mib} MiB asked per device; ask for at most {gpu.memory_mib}MiB"
                )
        return DevicePlan("gpu", count, device_mib, ((device_mib,),) * count)
    if mode == "gpu":
        raise DeviceConfigError(
            f"mode 'gpu' needs {count} GPUs and TensorFlow sees {len(gpus)}; "
            "use mode 'split-gpu' or 'cpu', or fewer devices"
        )

    limits: list[tuple[int, ...]] = []
    remaining = count
    for index, gpu in enumerate(gpus):
        if gpu.memory_mib is None:
            raise DeviceConfigError(
                f"cannot tell how much memory GPU {index} ({gpu.name}) has (nvidia-smi "
                "not found), so cannot split it; use mode 'cpu' or as many GPUs as devices"
            )
        fits = max(0, (gpu.memory_mib - reserve_mib) // device_mib)
        take = min(fits, remaining)
        if take:
            limits.append((device_mib,) * take)
            remaining -= take
        if not remaining:
            return DevicePlan("split-gpu", count, device_mib, tuple(limits))
    sizes = ", ".join(f"{g.memory_mib} MiB" for g in gpus)
    raise DeviceConfigError(
        f"{len(gpus)} GPU(s) of {sizes} hold {count - remaining} logical devices of "
        f"{device_mib} MiB (keeping {reserve_mib} MiB each for the CUDA context), not {count}; "
        "ask for fewer devices or less memory per device, or use mode 'cpu'"
    )


_active: DeviceSetup | None = None
_active_request: tuple[int, int, str, int] | None = None


def _runtime_started() -> bool:
    # TensorFlow has no public "is the runtime up?" call; its own
    # set_logical_device_configuration checks this same handle to decide
    # whether to raise "cannot be modified after being initialized".
    from tensorflow.python.eager import context

    return context.context()._context_handle is not None


def _gpu_memory_mib() -> list[int]:
    """Total memory of each visible GPU in MiB, from nvidia-smi ([] if absent)."""
    if shutil.which("nvidia-smi") is None:
        return []
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=False,
    ).stdout
    return [int(line) for line in out.split() if line.strip().isdigit()]


def physical_gpus() -> list[GpuInfo]:
    """The GPUs TensorFlow can see, with total memory from nvidia-smi where available."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    memory = _gpu_memory_mib()
    infos = []
    for index, gpu in enumerate(gpus):
        name = tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name)
        infos.append(GpuInfo(name, memory[index] if index < len(memory) else None))
    return infos


def configure(
    count: int = 4,
    device_memory: str | int = "32480MiB",
    mode: str = "auto",
    cpu_pool: str | int | None = None,
) -> DeviceSetup:
    """Configure ``count`` logical devices of ``device_memory`` each, once per process.

    Args:
        count: number of devices N (the replicas of a MirroredStrategy).
        device_memory: capacity of each device, e.g. ``"32480MiB"`` (a
            V100-SXM2-32GB), ``"32GiB"`` or ``"32GB"``; see
            :func:`snippets.memory.parse_size`.
        mode: ``"auto"`` (default: real GPUs, else a split GPU, else CPU),
            or force ``"gpu"``, ``"split-gpu"`` or ``"cpu"``.
        cpu_pool: CPU mode only: the process-wide BFC cap; default
            ``device_memory`` (one device's worth, which is where the OOM
            happens).

    Returns:
        A :class:`DeviceSetup`; ``setup.devices`` feeds
        ``tf.distribute.MirroredStrategy(setup.devices)``.

    Raises:
        DeviceConfigError: if TensorFlow's runtime already started in this
            process (an op ran first), if devices were configured differently
            earlier in this process, or if the hardware cannot hold the
            request. Calling again with the same arguments returns the
            same setup.
    """
    global _active, _active_request
    device_mib = parse_size(device_memory) // MiB
    pool_mib = device_mib if cpu_pool is None else parse_size(cpu_pool) // MiB
    check_request(count, min(device_mib, pool_mib), mode)
    request = (count, device_mib, mode, pool_mib)
    if _active is not None:
        if request == _active_request:
            return _active
        raise DeviceConfigError(
            f"devices are already configured in this process ({_active.describe()}); "
            "TensorFlow fixes devices once per process: restart Python (or the notebook "
            "kernel) to configure them differently"
        )

    import tensorflow as tf

    if _runtime_started():
        raise DeviceConfigError(
            "TensorFlow's runtime already started in this process (an op ran or devices "
            "were listed), so devices can no longer be configured: call "
            "snippets.devices.configure() first thing, or restart Python (or the notebook kernel)"
        )
    plan = plan_devices(count, device_mib, physical_gpus(), mode)
    if plan.mode == "cpu":
        setup = _apply_cpu(tf, plan, pool_mib)
    else:
        setup = _apply_gpu(tf, plan)
    _active, _active_request = setup, request
    return setup


def _apply_cpu(tf, plan: DevicePlan, pool_mib: int) -> DeviceSetup:
    # Read by TensorFlow when the CPU allocator is created, i.e. when the
    # runtime starts: after import is fine, after the first op is too late.
    os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    os.environ["TF_CPU_BFC_MEM_LIMIT_IN_MB"] = str(pool_mib)
    tf.config.set_visible_devices([], "GPU")
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(plan.count)]
    )
    names = tuple(d.name for d in tf.config.list_logical_devices("CPU"))
    return DeviceSetup(plan, names, pool_mib)


def _apply_gpu(tf, plan: DevicePlan) -> DeviceSetup:
    gpus = tf.config.list_physical_devices("GPU")[: len(plan.gpu_limits_mib)]
    # Splitting a GPU into logical devices silently drops a memory-growth
    # setting made earlier (measured on TF 2.21): refuse rather than lose it.
    grown = [gpu.name for gpu in gpus if tf.config.experimental.get_memory_growth(gpu)]
    if grown:
        raise DeviceConfigError(
            f"memory growth is on for {', '.join(grown)}, and giving a GPU a memory_limit "
            "drops it; the limit already caps each device, so leave growth off, or set "
            "TF_FORCE_GPU_ALLOW_GROWTH=true before Python starts"
        )
    tf.config.set_visible_devices(gpus, "GPU")
    for gpu, limits in zip(gpus, plan.gpu_limits_mib):
        tf.config.set_logical_device_configuration(
            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=m) for m in limits]
        )
    names = tuple(d.name for d in tf.config.list_logical_devices("GPU"))
    return DeviceSetup(plan, names)


def add_arguments(parser) -> None:
    """Add ``--devices``, ``--device-memory`` and ``--mode`` to an argparse parser."""
    parser.add_argument("--devices", type=int, default=4, metavar="N",
                        help="number of devices (replicas); default 4")
    parser.add_argument("--device-memory", default="32480MiB", metavar="SIZE",
                        help="memory per device: 32480MiB (V100-SXM2-32GB, default), 32GiB (2^30 B), "
                        "32GB (10^9 B); a bare number is MiB")
    parser.add_argument("--mode", choices=MODES, default="auto",
                        help="auto: real GPUs, else one GPU split, else CPU emulation")


def configure_from_args(args, parser, **kwargs) -> DeviceSetup:
    """:func:`configure` from parsed arguments; bad input exits 2 with one line."""
    # A command-line run wants its own output, not TensorFlow's start-up INFO lines.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return configure(args.devices, args.device_memory, args.mode, **kwargs)
    except (DeviceConfigError, ValueError) as error:
        parser.error(str(error))
