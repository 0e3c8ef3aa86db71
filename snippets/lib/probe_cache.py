"""The committed step measurements: update temporaries and slot layouts, read without TensorFlow.

Written by ``python -m snippets.lib.step_probe --write`` (which says how each
figure is measured) into ``snippets/lib/data/step_probes.json``; read by the
planner and by :mod:`snippets.lib.optimizers`.

>>> transient_units("rmsprop", "float32", jit_compile=False)
4.0
>>> transient_units("rmsprop", "float32", jit_compile=True)
1.0
"""

from __future__ import annotations

import functools
import json
from pathlib import Path


#: Where the measurements are kept (committed; re-probed by tests/test_step_probe.py).
CACHE = Path(__file__).with_name("data") / "step_probes.json"


#: Variable precisions probed: plain dtypes, and Keras mixed policies (float32 variables).
PRECISIONS = ("float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16")


#: The probe kernel: 256 MiB in float32.
PROBE_SHAPE = (16384, 4096)
PROBE_BATCH = 2


#: Slot layouts are cached for weights of these ranks and dtypes.
SLOT_RANKS = (0, 1, 2, 3, 4)
SLOT_DTYPES = ("float32", "float16", "bfloat16")


def check_precision(precision: str) -> str:
    """Return ``precision`` if it is one of :data:`PRECISIONS`, else raise ValueError."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    return precision


#: How XLA is applied: not at all, to the whole training step
#: (``model.compile(jit_compile=True)``), or to each variable's update alone
#: on its device (:func:`snippets.lib.optimizers.colocate_updates`, for
#: models that cannot be compiled whole).
XLA_MODES = ("no-xla", "xla", "xla-update")


def xla_mode(jit_compile: bool | str) -> str:
    """``False`` -> ``"no-xla"``, ``True`` -> ``"xla"``; a name in :data:`XLA_MODES` passes through.

    Raises:
        ValueError: for anything else.
    """
    if jit_compile is True or jit_compile is False:
        return "xla" if jit_compile else "no-xla"
    if jit_compile not in XLA_MODES:
        raise ValueError(f"XLA mode must be a bool or one of {', '.join(XLA_MODES)}, not {jit_compile!r}")
    return jit_compile


def key(optimizer: str, precision: str, jit_compile: bool | str) -> str:
    """The cache key, e.g. ``"rmsprop/float32/xla"``, ``".../no-xla"``, ``".../xla-update"``."""
    return f"{optimizer}/{precision}/{xla_mode(jit_compile)}"


def rounded_units(units: float) -> float:
    """A measured transient rounded to 1/8 of the variable: allocator slack is not a property of Keras."""
    return round(units * 8) / 8


@functools.lru_cache(maxsize=None)
def load_cache() -> dict:
    """The committed measurements: ``{"versions", "probe", "transient_units", "slots"}``.

    Raises:
        FileNotFoundError: if the cache is missing (``python -m snippets.lib.step_probe --write``).
    """
    return json.loads(CACHE.read_text(encoding="utf-8"))


def transient_units(optimizer: str, precision: str = "float32", jit_compile: bool | str = False) -> float:
    """Step transient of ``optimizer`` in units of the variable: gradient + update temporaries.

    From the cache; see the module docstring for how it was measured.
    ``jit_compile``: False, True (the whole step) or a name in :data:`XLA_MODES`.

    Raises:
        ValueError: for an unknown optimizer, precision or XLA mode.
    """
    check_precision(precision)
    measured = load_cache()["transient_units"]
    if key(optimizer, precision, jit_compile) not in measured:
        known = sorted({name.split("/")[0] for name in measured})
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of {', '.join(known)}")
    return measured[key(optimizer, precision, jit_compile)]
