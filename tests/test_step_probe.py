"""The committed step-probe cache is what the installed Keras does: re-probed on a sample, slots in full."""

import json

import pytest

from harness import Kernel
from snippets.lib import devices, hardware, optimizers, probe_cache, step_probe

CACHE = json.loads(probe_cache.CACHE.read_text())


def test_cache_covers_every_optimizer_precision_and_xla():
    expected = {probe_cache.key(o, p, x) for o in optimizers.OPTIMIZERS for p in probe_cache.PRECISIONS
                for x in probe_cache.XLA_MODES}
    assert set(CACHE["transient_units"]) == expected
    # The gradient alone is one variable: every training step needs at least that.
    assert all(units >= 1 for units in CACHE["transient_units"].values())


def test_cache_was_measured_on_the_installed_versions():
    from importlib.metadata import version

    assert CACHE["versions"] == {"keras": version("keras"), "tensorflow": version("tensorflow")}


# One fresh kernel per figure: a used allocator has holes.
SAMPLE = [("rmsprop", "float32", "no-xla"), ("rmsprop", "float32", "xla-update"), ("adam", "float32", "xla"),
          ("adam", "mixed_float16", "no-xla")]


@pytest.mark.parametrize("optimizer, precision, jit", SAMPLE)
def test_sampled_probe_matches_the_cache(optimizer, precision, jit):
    with Kernel() as kernel:
        kernel.call(devices.configure, 1, "4096MiB", "cpu")
        row = kernel.call(step_probe.measure_step, optimizer, precision, jit)
    cached = probe_cache.transient_units(optimizer, precision, jit)
    if jit == "no-xla":
        # Without XLA the update's ops race: an order can free one full-size temporary before the next is
        # made (RMSprop read 3 units where the cache's run read 4 in one CI run). The cache must not be
        # under a run, and a run is at most that one temporary under the cache.
        assert cached - 1 - 0.0625 <= row["units"] <= cached + 0.0625, (row, cached)
    else:
        assert abs(row["units"] - cached) <= 0.0625, (row, cached)


def test_slot_layouts_in_the_cache_are_what_keras_builds():
    with Kernel() as kernel:
        live = kernel.call(step_probe.slot_layouts_live)
    assert live == CACHE["slots"]


def test_planning_the_seed_imports_no_tensorflow():
    import subprocess
    import sys

    from harness import ROOT

    # What keeps the seed's answer instant: no TensorFlow or Keras import (a wall-clock bound
    # would test the machine's load, not the code).
    code = ("import sys; from snippets import decide; "
            "decide.main(['--shape', '131072', '65536', '--optimizer', 'rmsprop', '--json']); "
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'imported TF'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fits"] is False


def test_card_table_follows_the_reserve_rule():
    for card in hardware.CARDS.values():
        assert card.allocator_mib < card.total_mib - card.reserve_mib
        # The CUDA context and whatever else held memory: tens of MiB to a few GiB, never negative.
        assert 0 < card.context_mib < 4096, card
    assert hardware.card("v100-sxm2-32gb").allocator_mib == 30976
    assert hardware.min_system_memory_mib((8, 0)) == 1536
    assert hardware.min_system_memory_mib((9, 0), available_mib=1500) == 225
    with pytest.raises(ValueError, match="unknown card 'V100'; use one of V100-SXM2-32GB"):
        hardware.card("V100")
