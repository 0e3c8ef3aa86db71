"""Make "N devices of M MiB each" on whatever hardware is present.

This is the only module in the project that configures TensorFlow devices.
Call :func:`configure` first thing in a process, before any TensorFlow op
runs; it picks one of three modes and says which:

``gpu``
    At least N real GPUs: the first N are kept, each capped with a logical
    device ``memory_limit`` of M MiB, so an 80 GB card behaves like a
    V100-SXM2-32GB (30976 MiB, what its allocator really gets).
``split-gpu``
    Fewer GPUs than N, but room for N x M: each GPU is split into several
    logical GPUs of M MiB (one 141 GB H200 = 4 emulated V100-32GB).
``cpu``
    No GPU: N + 1 logical CPUs and TensorFlow's BFC allocator on the host,
    capped with ``TF_CPU_ALLOCATOR_USE_BFC=true`` and
    ``TF_CPU_BFC_MEM_LIMIT_IN_MB``. As on a GPU host, one device plays the
    host (``CPU:0``, :attr:`DeviceSetup.host`) and N others play the GPUs
    (``CPU:1`` .. ``CPU:N``, :attr:`DeviceSetup.devices`), and ops that name
    no device run on the first "GPU": :func:`configure` enters
    ``tf.device(devices[0])`` for the rest of the process, the way a GPU
    host's default device is ``GPU:0``. The allocator refuses a tensor larger
    than the cap before touching a page, so the full-size OOM reproduces in
    seconds on a laptop.

What CPU mode cannot emulate: the cap belongs to the process, not to a
device. All logical CPUs, the host included, draw from one pool of M MiB (by
default), so CPU mode reproduces "one tensor does not fit one device", but
cannot show N devices each filling M MiB at once: per-device peaks are
measured by running one device's program alone under its own cap
(:mod:`snippets.lib.step_ledger`). Nor does it have NCCL's buffers, CUDA
streams, or cuBLAS/cuDNN workspaces. XLA is the other difference: Keras
resolves ``jit_compile="auto"`` to False on a CPU-only machine, True on a GPU
machine without a strategy; :func:`jit_compile` answers as a GPU host would,
and the snippets pass its answer to ``compile``.

oneDNN is the third: on x86 CPUs with AVX-512 VNNI, AVX-512 BF16 or AMX
(recent Intel Xeons, AMD Zen 4), TensorFlow turns on its oneDNN rewrites by
default (TensorFlow 2.9 release notes; RFC 400, "Enabling oneDNN operations
for x86 CPUs"). They
swap ops for ``_Mkl*`` kernels (so ``MatMul`` is no longer a ``MatMul`` in
the placed graph) and give the host a different CPU allocator (one that
reports statistics even without ``TF_CPU_ALLOCATOR_USE_BFC``). A GPU runs
neither, so importing this module sets ``TF_ENABLE_ONEDNN_OPTS=0`` (unless
the environment says otherwise) and CPU mode refuses a TensorFlow imported
with oneDNN on. TensorFlow reads the variable once, when it is imported (it
logs "oneDNN custom operations are on" from ``tensorflow/core/util/port.cc``
then; measured on TF 2.21: set after the import, it changes nothing).

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

from snippets.lib import hardware, private
from snippets.lib.units import GiB, MiB, parse_size
from snippets.lib.placements import resolve_xla

MODES = ("auto", "gpu", "split-gpu", "cpu")

#: What TensorFlow must find in the environment when it is imported, for CPU
#: mode to behave like a GPU host (see the module docstring); set here, at
#: import, so a snippet that imports this module before TensorFlow has it.
ENVIRONMENT = {"TF_ENABLE_ONEDNN_OPTS": "0"}
for _name, _value in ENVIRONMENT.items():
    os.environ.setdefault(_name, _value)

#: Threads TensorFlow's executor runs independent ops with in CPU mode.
#: Without XLA, an optimizer update's peak depends on the order of its
#: independent ops (an elementwise op reuses its input's buffer only if it is
#: that input's last reader): Keras 3 RMSprop under MirroredStrategy peaks at
#: 6x its variable with two inter-op threads and 5x with one, which is what
#: TensorFlow's default gave on a CI machine (tests/test_step_ledger.py).
#: Fixed, so a measured peak is the same on every machine;
#: ``TF_NUM_INTEROP_THREADS`` in the environment still wins.
CPU_INTER_OP_THREADS = 2

#: Default capacity per device: what TensorFlow's allocator gets on a real
#: V100-SXM2-32GB (30976 MiB, snippets.lib.hardware), not the box's 32 GB.
DEFAULT_DEVICE_MEMORY = f"{hardware.card(hardware.DEFAULT_CARD).allocator_mib}MiB"

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
        devices: the N devices that play GPUs, e.g.
            ``("/job:localhost/replica:0/task:0/device:CPU:1", ...)`` in CPU mode.
        pool_mib: CPU mode only: the one BFC cap (MiB) all logical CPUs share;
            None with ``capped=False`` (TensorFlow's default CPU allocator, no cap).
        host: the device that plays the host (``CPU:0``).
    """

    plan: DevicePlan
    devices: tuple[str, ...]
    pool_mib: int | None = None
    host: str = "/job:localhost/replica:0/task:0/device:CPU:0"

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
            gpus = "CPU:1 plays the GPU" if n == 1 else f"CPU:1-{n} play the GPUs"
            if self.pool_mib is None:
                return f"cpu mode: host CPU:0, {gpus}; TensorFlow's default CPU allocator, no cap"
            return f"cpu mode: host CPU:0, {gpus}; one BFC pool of {self.pool_mib} MiB for all"
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

    >>> plan_devices(4, 30976, [GpuInfo("H200", 143771)]).gpu_limits_mib
    ((30976, 30976, 30976, 30976),)
    >>> plan_devices(4, 30976, []).mode
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
_active_request: tuple[int, int, str, int, bool] | None = None


def _runtime_started() -> bool:
    from snippets.lib import private

    return private.runtime_started()


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
    device_memory: str | int = DEFAULT_DEVICE_MEMORY,
    mode: str = "auto",
    cpu_pool: str | int | None = None,
    *,
    capped: bool = True,
) -> DeviceSetup:
    """Configure ``count`` logical devices of ``device_memory`` each, once per process.

    Args:
        count: number of devices N (the replicas of a MirroredStrategy).
        device_memory: capacity of each device, e.g. ``"30976MiB"`` (what
            TensorFlow's allocator gets on a V100-SXM2-32GB, the default),
            ``"32GiB"`` or ``"32GB"``; see :func:`snippets.lib.units.parse_size`.
        mode: ``"auto"`` (default: real GPUs, else a split GPU, else CPU),
            or force ``"gpu"``, ``"split-gpu"`` or ``"cpu"``.
        cpu_pool: CPU mode only: the process-wide BFC cap; default
            ``device_memory`` (one device's worth, which is where the OOM
            happens).
        capped: CPU mode only. False leaves TensorFlow's default CPU
            allocator in place (no ``TF_CPU_*`` cap, no allocator statistics),
            for code the capped BFC allocator breaks: measured on TF 2.21, an
            eager DTensor op on a tensor of zero bytes (the empty ``shape``
            argument of a scalar ``tf.zeros``, as tf_keras's metrics and
            optimizer make) fails under it with ``InternalError: TF_TensorData
            returned nullptr`` (``snippets/tf_keras.py``). GPU modes ignore it.

    Returns:
        A :class:`DeviceSetup`; ``setup.devices`` feeds
        ``tf.distribute.MirroredStrategy(setup.devices)``.

    Raises:
        DeviceConfigError: if TensorFlow's runtime already started in this
            process (an op ran first), if devices were configured differently
            earlier in this process, if the hardware cannot hold the
            request, or (CPU mode) if TensorFlow was imported with oneDNN
            on. Calling again with the same arguments returns the same setup.
    """
    global _active, _active_request
    device_mib = parse_size(device_memory) // MiB
    pool_mib = device_mib if cpu_pool is None else parse_size(cpu_pool) // MiB
    check_request(count, min(device_mib, pool_mib), mode)
    request = (count, device_mib, mode, pool_mib, capped)
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
            "snippets.lib.devices.configure() first thing, or restart Python (or the notebook kernel)"
        )
    plan = plan_devices(count, device_mib, physical_gpus(), mode)
    if plan.mode == "cpu":
        setup = _apply_cpu(tf, plan, pool_mib if capped else None)
    else:
        setup = _apply_gpu(tf, plan)
    _active, _active_request = setup, request
    return setup


def _apply_cpu(tf, plan: DevicePlan, pool_mib: int | None) -> DeviceSetup:
    if private.onednn_enabled():
        raise DeviceConfigError(
            "TensorFlow was imported with oneDNN on (TF_ENABLE_ONEDNN_OPTS), which a GPU host does "
            "not run: import snippets.lib.devices before tensorflow, or set TF_ENABLE_ONEDNN_OPTS=0 "
            "before Python starts"
        )
    # Read by TensorFlow when the CPU allocator is created, i.e. when the
    # runtime starts: after import is fine, after the first op is too late.
    if pool_mib is not None:
        os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
        os.environ["TF_CPU_BFC_MEM_LIMIT_IN_MB"] = str(pool_mib)
    tf.config.set_visible_devices([], "GPU")
    if not os.environ.get("TF_NUM_INTEROP_THREADS"):
        tf.config.threading.set_inter_op_parallelism_threads(CPU_INTER_OP_THREADS)
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(plan.count + 1)]
    )
    host, *names = (d.name for d in tf.config.list_logical_devices("CPU"))
    if pool_mib is not None:
        _take_one_region(tf, pool_mib)
    # A GPU host runs ops that name no device on GPU:0; so does the emulation,
    # on the first device that plays a GPU. Entered for good: the eager
    # context's device stack is what every later op and traced function sees.
    global _default_scope
    _default_scope = tf.device(names[0])
    _default_scope.__enter__()
    return DeviceSetup(plan, tuple(names), pool_mib, host)


_default_scope = None


def leave_default_device() -> None:
    """Stop running unplaced ops on the first emulated GPU (CPU mode; a no-op otherwise).

    Call it before the process joins a cluster (``ParameterServerStrategy``,
    ``tf.config.experimental_connect_to_cluster``): joining renames every
    local device (``/job:localhost/...`` becomes ``/job:chief/...``), and a
    default device named the old way would be "unknown". On a GPU host the
    default device is chosen by TensorFlow, so there is nothing to leave.
    """
    global _default_scope
    if _default_scope is not None:
        _default_scope.__exit__(None, None, None)
        _default_scope = None


def _take_one_region(tf, pool_mib: int, host_device: str = "CPU:0") -> None:
    """Make the CPU allocator hold its whole pool as one region, as a GPU's does.

    Without memory growth, a GPU's BFC allocator takes all of its memory as
    one region at its first allocation and never returns it; requests are
    then split from that region. The CPU BFC allocator grows instead, region
    by region, and a request served from a region less than twice its size
    (and with under 128 MiB of slack) takes the whole chunk, so the
    emulation would count more than a GPU does (measured: a 36 MiB kernel
    counted as about 64 MiB). One uninitialised allocation of the pool, freed
    at once, leaves the same single free region a GPU has: no page is touched.

    Linux refuses to map, in one piece, more than the host's RAM (the
    default heuristic overcommit), so a pool larger than 3/4 of the RAM keeps
    the growing regions; there requests are GiB-sized and every chunk with
    128 MiB or more of slack is split, so the counts stay exact.
    """
    import psutil

    if pool_mib < 64 or pool_mib * MiB > 0.75 * psutil.virtual_memory().total:
        return
    # 16 MiB stay for the small region TensorFlow's start-up may already have made.
    region = tf.raw_ops.Empty(shape=[pool_mib - 16, 2**18], dtype=tf.float32, init=False)  # 1 MiB rows
    del region
    # The reader's first get_memory_info should show their own allocations (field case F17).
    tf.config.experimental.reset_memory_stats(host_device)


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


def jit_compile(placement: str = "single") -> bool:
    """The ``jit_compile`` Keras would choose for ``placement`` on a GPU host; pass it to ``compile``.

    Keras resolves ``jit_compile="auto"`` from the machine
    (``_resolve_auto_jit_compile``, keras/src/trainers/trainer.py, Keras
    3.15): False on a CPU-only machine, so an emulation that left it to Keras
    would never see XLA. This answers as a GPU host would, from one place
    (:func:`snippets.lib.placements.resolve_xla`): True for a single device, False
    under a ``tf.distribute`` strategy.

    >>> jit_compile("single"), jit_compile("mirrored")
    (True, False)
    """
    return resolve_xla("auto", placement)


