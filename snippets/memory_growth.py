"""Memory growth: when TensorFlow reserves GPU memory, never how much one tensor needs.

Run it: ``python -m snippets.memory_growth --help``. It turns memory growth on
for every GPU (nothing to do on a CPU-only host), then asks the allocator for
one tensor of the shape you give, under a cap of the size you give, and
shows that the answer depends only on the tensor's bytes and the cap.

What memory growth does. By default TensorFlow's GPU allocator takes
(almost) all of a GPU's memory as one region at its first allocation; with
growth on, it adds regions as tensors need them, and never returns one while
the process lives (``BFCAllocator::Extend`` only grows). That lets several processes share a
GPU, and makes ``nvidia-smi`` show what a process really uses.
``tf.config.experimental.set_memory_growth(gpu, True)`` turns it on per GPU
from Python; the environment variable ``TF_FORCE_GPU_ALLOW_GROWTH=true``
turns it on for every GPU allocator of the process (read when each
allocator is created, ``gpu_bfc_allocator.cc``).

What it cannot do. It never adds capacity: a tensor larger than what the
device has left is refused with growth on or off. The seed kernel needs
34359738368 B on every replica; a V100-SXM2-32GB has 34057748480 B:

>>> units.tensor_bytes([131072, 65536], "float32"), hardware.V100_CAPACITY
(34359738368, 32480690176)

The CPU stand-in: TensorFlow's capped CPU allocator (``snippets.lib.devices``,
CPU mode) is a BFC allocator created with ``allow_growth = true``
(``tensorflow/core/common_runtime/process_state.cc``), so CPU runs show
exactly the "growth on" behaviour: reserve on demand, refuse past the cap.

The rules, from ``tensorflow/python/eager/context.py`` (TF 2.21):

* ``set_memory_growth`` raises ``RuntimeError("Physical devices cannot be
  modified after being initialized")`` once the runtime started (an op ran),
  unless the value is unchanged;
* it raises ``ValueError`` on a CPU ("non-GPU and non-Pluggable devices") and
  on a GPU split into logical devices ("virtual devices configured");
* growth set on a GPU that is *then* split into logical devices is dropped
  without a word (the GPU options carry growth only when no GPU is split);
* growth must be the same on every visible GPU, or the runtime refuses to
  start: ``ValueError("Memory growth cannot differ between GPU devices")``.
  Hence :func:`enable_memory_growth` sets it on all of them.

Sources: ``tf.config.experimental.set_memory_growth`` API page; TensorFlow
guide "Use a GPU", section "Limiting GPU memory growth".
"""

from __future__ import annotations

import argparse
import os
from collections.abc import MutableMapping, Sequence

from snippets.lib import allocator, cli, hardware, units  # noqa: F401 (hardware: the doctests)

#: Environment variable read by every GPU BFC allocator when it is created.
GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"


class MemoryGrowthError(RuntimeError):
    """Memory growth cannot be set as asked; the message names the fix."""


def _config(config):
    if config is None:
        import tensorflow as tf

        return tf.config
    return config


def enable_memory_growth(config=None) -> list[str]:
    """Turn memory growth on for every physical GPU TensorFlow lists.

    Call it first thing in the process, before any TensorFlow op. Calling it
    again later is harmless while growth is already on (TensorFlow allows
    setting an unchanged value). On a host without GPUs it does nothing.

    Args:
        config: ``tf.config`` (default) or an object with the same
            ``list_physical_devices`` and ``experimental.set_memory_growth``,
            which is how the GPU paths are unit-tested without a GPU.

    Returns:
        The names of the GPUs now growing on demand (``[]`` without GPUs).

    Raises:
        MemoryGrowthError: if TensorFlow's runtime already started with growth
            off (fix: call this before any op, set ``TF_FORCE_GPU_ALLOW_GROWTH=true``
            before Python starts, or restart the kernel), or if a GPU is
            already split into logical devices (fix: choose one; a logical
            device's ``memory_limit`` already bounds what it reserves).
    """
    config = _config(config)
    gpus = config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            config.experimental.set_memory_growth(gpu, True)
        except RuntimeError as error:
            raise MemoryGrowthError(
                f"cannot turn on memory growth for {gpu.name}: TensorFlow's runtime already "
                f"started ({error}). Call enable_memory_growth() before any TensorFlow op, or "
                f"set {GROWTH_ENV}=true before starting Python, or restart the kernel"
            ) from error
        except ValueError as error:
            if "virtual devices" not in str(error):
                raise
            raise MemoryGrowthError(
                f"cannot turn on memory growth for {gpu.name}: it is split into logical devices "
                f"({error}). Choose one: logical devices with a memory_limit, which already "
                "bounds what each reserves, or memory growth on the whole GPU"
            ) from error
    return [gpu.name for gpu in gpus]


def growth_before_split(config=None, gpus: Sequence | None = None) -> list[str]:
    """Names of ``gpus`` (default: all) with memory growth on.

    Splitting such a GPU into logical devices silently drops its growth
    setting; :mod:`snippets.lib.devices` can call this before it splits GPUs and
    refuse with a clear message instead.
    """
    config = _config(config)
    gpus = config.list_physical_devices("GPU") if gpus is None else gpus
    return [gpu.name for gpu in gpus if config.experimental.get_memory_growth(gpu)]


def allow_growth_env(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Set ``TF_FORCE_GPU_ALLOW_GROWTH=true`` in ``environ`` (default ``os.environ``).

    Takes effect only for GPU allocators created afterwards, i.e. set it
    before the first TensorFlow op (or in the shell, for every process that
    shares the GPU). Unlike :func:`enable_memory_growth` it also applies to
    GPUs split into logical devices, because each logical device's allocator
    reads it.

    Returns:
        The previous value, or None if it was unset.
    """
    environ = os.environ if environ is None else environ
    previous = environ.get(GROWTH_ENV)
    environ[GROWTH_ENV] = "true"
    return previous


def allocator_use(sizes: Sequence[tuple[Sequence[int], str]], device: str = "CPU:0") -> list[int]:
    """Bytes in use on ``device``'s allocator before and after creating each tensor.

    Needs an allocator with statistics: the capped CPU allocator
    (``snippets.lib.devices`` CPU mode) or a GPU. The tensors are freed on return.

    Returns:
        ``[in use before, after tensor 1, after tensor 2, ...]`` in bytes.
    """
    import tensorflow as tf

    held = []
    use = [tf.config.experimental.get_memory_info(device)["current"]]
    with tf.device(device):
        for shape, dtype in sizes:
            held.append(tf.zeros(units.check_shape(shape), dtype))
            use.append(tf.config.experimental.get_memory_info(device)["current"])
    del held
    return use


def one_tensor(shape: Sequence[int], dtype: str = "float32", device: str = "CPU:0") -> str | None:
    """Ask the allocator for one ``tf.random.uniform(shape)``; return its OOM as one line, or None.

    This is field case F09: under a 256 MiB cap, ``[131072, 1024]`` float32
    (536870912 B) is refused with ``ResourceExhaustedError`` although the
    allocator grows on demand.
    """
    import tensorflow as tf

    from snippets.lib.errors import oom_line

    try:
        with tf.device(device):
            tensor = tf.random.uniform(units.check_shape(shape), dtype=dtype)
    except tf.errors.ResourceExhaustedError as error:
        return oom_line(error)
    del tensor
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m snippets.memory_growth", description=__doc__.split("\n\n")[0]
    )
    cli.add_shape(parser, [131072, 1024], 'shape of the one tensor to allocate', kernel=False)
    parser.add_argument("--cap", default="256MiB",
                        help="CPU mode: allocator cap, e.g. 256MiB (default); ignored with a GPU")
    parser.add_argument("--devices", type=int, default=1, metavar="N",
                        help="CPU mode: logical CPUs sharing the cap (default 1); ignored with a GPU")
    args = parser.parse_args(argv)
    try:
        nbytes = units.tensor_bytes(args.shape)
        cap = units.parse_size(args.cap)
        allocator.check_host_can_hold(min(nbytes, cap), "allocating this tensor")
    except (ValueError, allocator.HostMemoryError) as error:
        parser.error(str(error))

    from snippets.lib import devices

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        grown = enable_memory_growth()  # first: nothing may run before it
        if grown:
            # Real GPUs: growth on, no logical split (a split would drop the growth setting).
            device = "GPU:0"
            print(f"memory growth on: {', '.join(grown)}")
        else:
            setup = devices.configure(args.devices, f"{cap // units.MiB}MiB")
            device = setup.devices[0]
            print(setup.describe())
            print("no GPU: the capped CPU allocator grows on demand, like a GPU with growth on")
    except (MemoryGrowthError, devices.DeviceConfigError) as error:
        parser.error(str(error))
    print(f"tensor {args.shape} float32 needs {units.format_bytes(nbytes)}")
    line = one_tensor(args.shape, device=device)
    print(line or "allocated: it fits")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
