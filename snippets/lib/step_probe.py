"""What one training step allocates beyond weights and slots, measured on the installed Keras.

Resident state (weights, optimizer slots) is not the peak of a training step.
During ``fit`` the device also holds the gradient and, while the optimizer
updates the variable, the update's own temporaries: without XLA, RMSprop's
``rho * v``, ``g * g``, ``(1 - rho) * g * g``, ``lr * g / sqrt(v + eps)`` are
each a new full-size tensor; with ``jit_compile=True`` XLA fuses them into
one kernel that writes in place. How much that is depends on the optimizer,
the precision, XLA and the Keras version, so it is measured, never typed in:

1. a fresh process with TensorFlow's BFC allocator capped on the CPU
   (``snippets.lib.devices`` CPU mode) builds ``Dense(4096, use_bias=False)`` on
   inputs of width 16384 (a 256 MiB float32 kernel, large enough that the
   allocator's 256-byte rounding and chunk reuse are below 0.1%);
2. it runs one warm-up ``fit`` step on a batch of 2 (traces the step, builds
   the slots), reads the allocator's bytes in use, resets the peak
   statistics, runs a second step and reads the peak;
3. ``(peak - in use before the step) / kernel bytes`` is the step's
   transient in units of the variable: the gradient plus the update
   temporaries (plus, with a mixed policy, the compute copy and loss-scaling
   temporaries).

A fresh process per figure, because a used BFC allocator has holes: it hands
a request a whole free chunk when the chunk is less than twice the request and
the slack is under 128 MiB, and counts the whole chunk (``bfc_allocator.cc``).

The results live in ``snippets/lib/data/step_probes.json`` (with the slot layouts
of :mod:`snippets.lib.optimizers`), so the planner answers without importing
TensorFlow; ``python -m snippets.lib.step_probe --write`` re-measures everything
(about 10 minutes on 2 cores) and the tests re-probe a sample.

The cache's reader is :mod:`snippets.lib.probe_cache`; this module measures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from snippets.lib import cli
from snippets.lib.optimizers import OPTIMIZERS, check_optimizer
from snippets.lib.probe_cache import (CACHE, PRECISIONS, PROBE_BATCH, PROBE_SHAPE, SLOT_DTYPES, SLOT_RANKS,
                                      XLA_MODES, check_precision, key, load_cache, rounded_units, xla_mode)
from snippets.lib.units import POLICIES, tensor_bytes


def measure_step(optimizer: str, precision: str = "float32", jit_compile: bool | str = False,
                 shape: Sequence[int] = PROBE_SHAPE, batch: int = PROBE_BATCH) -> dict:
    """Allocator figures of one ``fit`` step of ``Dense(shape[1])`` on inputs of width ``shape[0]``.

    Call it in a process whose devices are in CPU mode (:func:`snippets.lib.devices.configure`),
    with nothing else allocated: the result is only clean in a fresh allocator.
    The model runs on the default device (the first that plays a GPU); the
    figures are the pool's, read through ``CPU:0``.

    Returns:
        ``{"variable": kernel bytes, "resident": bytes in use before the
        measured step (kernel, slots, Keras's scalars), "peak": allocator peak
        during the step, "units": (peak - resident) / variable}``; bytes are ints.
    """
    import keras
    import numpy as np
    import tensorflow as tf

    from snippets.lib import optimizers

    check_optimizer(optimizer)
    check_precision(precision)
    mode = xla_mode(jit_compile)
    var_dtype = POLICIES[precision][0] if precision in POLICIES else precision
    pool = "CPU:0"
    model = keras.Sequential([keras.Input((shape[0],)),
                              keras.layers.Dense(shape[1], use_bias=False, kernel_initializer="zeros",
                                                 dtype=precision)])
    if mode == "xla-update":
        optimizers.compile_sharded(model, optimizers.make_optimizer(optimizer), "mean_squared_error", True)
    else:
        model.compile(optimizers.make_optimizer(optimizer), "mean_squared_error", jit_compile=mode == "xla")
    x, y = np.ones((batch, shape[0]), "float32"), np.ones((batch, shape[1]), "float32")
    model.fit(x, y, batch_size=batch, verbose=0)
    resident = tf.config.experimental.get_memory_info(pool)["current"]
    tf.config.experimental.reset_memory_stats(pool)
    model.fit(x, y, batch_size=batch, verbose=0)
    peak = tf.config.experimental.get_memory_info(pool)["peak"]
    variable = tensor_bytes(shape, var_dtype)
    return {"variable": variable, "resident": resident, "peak": peak, "units": (peak - resident) / variable}


def probe_fresh(optimizer: str, precision: str = "float32", jit_compile: bool | str = False,
                shape: Sequence[int] = PROBE_SHAPE, batch: int = PROBE_BATCH) -> dict:
    """:func:`measure_step` in a new Python process with its own capped allocator (16 x the kernel).

    Raises:
        RuntimeError: if the process fails; the message has its last line.
    """
    cap_mib = max(64, 16 * tensor_bytes(shape, "float32") // 2**20)
    command = [sys.executable, "-m", "snippets.lib.step_probe", "--measure", optimizer, precision,
               xla_mode(jit_compile), "--shape", *map(str, shape), "--batch", str(batch),
               "--device-memory", f"{cap_mib}MiB"]
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
                          cwd=Path(__file__).resolve().parents[2])
    if done.returncode:
        raise RuntimeError(f"probe {key(optimizer, precision, jit_compile)} failed: "
                           f"{(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_all(workers: int = 2, known: dict | None = None, save=None) -> dict:
    """Probe every optimizer x precision x XLA in fresh processes, ``workers`` at a time.

    Entries already in ``known`` are kept; ``save(results)`` is called after
    each new one, so an interrupted run resumes where it stopped.
    """
    results = dict(known or {})
    jobs = [(o, p, x) for o in OPTIMIZERS for p in PRECISIONS for x in XLA_MODES
            if key(o, p, x) not in results]

    def run(job):
        units = rounded_units(probe_fresh(*job)["units"])
        results[key(*job)] = units
        if save is not None:
            save(results)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(run, jobs))
    order = [key(o, p, x) for o in OPTIMIZERS for p in PRECISIONS for x in XLA_MODES]
    return {name: results[name] for name in order}


def slot_layouts_live() -> dict:
    """Slot layouts from Keras for every optimizer, rank in :data:`SLOT_RANKS` and dtype in :data:`SLOT_DTYPES`."""
    from snippets.lib import optimizers

    return {
        f"{o}/{rank}/{dtype}": [[list(map(list, s.dims)), s.dtype]
                                for s in optimizers.probe_slot_layout(o, rank, dtype)]
        for o in OPTIMIZERS for rank in SLOT_RANKS for dtype in SLOT_DTYPES
    }


def versions() -> dict:
    """The versions the cache was measured with (Keras and TensorFlow)."""
    from importlib.metadata import version

    return {"keras": version("keras"), "tensorflow": version("tensorflow")}


def main(argv: Sequence[str] | None = None) -> int:
    from snippets.lib import devices

    parser = argparse.ArgumentParser(prog="python -m snippets.lib.step_probe",
                                     description="Measure a training step's transient memory per optimizer, "
                                     "precision and XLA, and keep it in snippets/lib/data/step_probes.json.")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="re-measure everything and rewrite the cache")
    action.add_argument("--show", action="store_true", help="print the cached table")
    action.add_argument("--measure", nargs=3, metavar=("OPTIMIZER", "PRECISION", "XLA"),
                        help=f"measure one configuration in this process (XLA: {', '.join(XLA_MODES)}); "
                        "prints JSON")
    cli.add_shape(parser, list(PROBE_SHAPE), "the probe's kernel")
    parser.add_argument("--batch", type=int, default=PROBE_BATCH)
    parser.add_argument("--device-memory", default="4096MiB", metavar="SIZE")
    parser.add_argument("--keep", action="store_true",
                        help="with --write: keep the cached entries, measure only the missing ones")
    args = parser.parse_args(argv)
    if args.show:
        cache = load_cache()
        print(f"measured with {cache['versions']}, probe {cache['probe']}")
        for name, units in cache["transient_units"].items():
            print(f"{name:36} {units:5.3f} x the variable")
        return 0
    if args.measure:
        optimizer, precision, xla = args.measure
        try:
            check_optimizer(optimizer)
            check_precision(precision)
            xla_mode(xla)
        except ValueError as error:
            parser.error(str(error))
        devices.configure(1, args.device_memory, "cpu")
        print(json.dumps(measure_step(optimizer, precision, xla, args.shape, args.batch)))
        return 0
    partial = CACHE.with_suffix(".partial.json")
    known = json.loads(partial.read_text()) if partial.exists() else {}
    if args.keep and CACHE.exists():
        known = {**load_cache()["transient_units"], **known}

    def save(results):
        partial.write_text(json.dumps(results, indent=1, sort_keys=True))

    CACHE.parent.mkdir(exist_ok=True)
    cache = {"versions": versions(),
             "probe": {"shape": list(PROBE_SHAPE), "batch": PROBE_BATCH, "allocator": "CPU BFC, fresh process"},
             "transient_units": measure_all(known=known, save=save),
             "slots": slot_layouts_live()}
    CACHE.write_text(json.dumps(cache, indent=1) + "\n", encoding="utf-8")
    partial.unlink(missing_ok=True)
    print(f"wrote {CACHE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
