"""Every "change to your script" diff on the site starts from the seed script and runs.

A chapter shows its remedy as a ``diff`` against the script of the report
(``docs/reproduce.md``): a Keras model with ``Dense(65536)`` on inputs of
width 131072 under ``MirroredStrategy``. A diff is not Python, so Sybil does
not run it; this test does. It checks that the diff's old side is that
script, word for word, and runs its new side at 1/64 of the seed's size
(``131072 -> 2048``, ``65536 -> 1024``) in a fresh kernel of the page's kind
(TensorFlow, or Keras on JAX for a page whose first line says
``<!-- kernel: jax -->``), with ``x`` and ``y`` given: three ``fit`` steps
must give three finite losses.
"""

import re
from pathlib import Path

import pytest

from harness import Kernel
from harness.sybil_remote import declared_backend

DOCS = Path(__file__).resolve().parents[1] / "docs"

#: The user's script from the report, the old side of every diff.
SEED_SCRIPT = '''import tensorflow as tf
import keras

strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((131072,)), keras.layers.Dense(65536, name="dense")])
    model.compile(optimizer="rmsprop", loss="mse")
model.fit(x, y, batch_size=64, epochs=3)'''

#: The seed's sizes and their 1/64 stand-ins (8 MiB instead of 32 GiB).
SCALE = {"131072": "2048", "65536": "1024"}


def diff_blocks(path: Path) -> list[str]:
    """The bodies of the ```diff blocks in a page, in order."""
    return re.findall(r"^```diff\n(.*?)^```", path.read_text(encoding="utf-8"), flags=re.S | re.M)


def sides(diff: str) -> tuple[str, str]:
    """The old and new scripts of a unified diff body (no headers): ``-``/`` `` and ``+``/`` `` lines."""
    old, new = [], []
    for line in diff.splitlines():
        mark, rest = line[:1], line[1:]
        if mark in ("-", " ", ""):
            old.append(rest)
        if mark in ("+", " ", ""):
            new.append(rest)
    return "\n".join(old).strip("\n"), "\n".join(new).strip("\n")


def scaled(script: str) -> str:
    """``script`` with the seed's sizes replaced by :data:`SCALE`'s."""
    for full, small in SCALE.items():
        script = script.replace(full, small)
    return script


CASES = [(path.name, index, body) for path in sorted(DOCS.glob("*.md"))
         for index, body in enumerate(diff_blocks(path))]


def run_script(source: str) -> list[float]:
    """Kernel side: run ``source`` with a batch ``x[64, 2048]``, ``y[64, 1024]``; the losses of ``fit``."""
    import numpy as np

    rng = np.random.default_rng(0)
    namespace = {"x": rng.standard_normal((64, int(SCALE["131072"])), dtype=np.float32),
                 "y": rng.standard_normal((64, int(SCALE["65536"])), dtype=np.float32)}
    exec(compile(source, "<diff>", "exec"), namespace)
    return [float(loss) for loss in namespace["model"].history.history["loss"]]


def test_the_site_shows_diffs():
    pages = {name for name, _, _ in CASES}
    assert {"tensor-parallel.md", "keep-fit.md", "precision.md", "smaller-layers.md"} <= pages


#: Pages whose diffs change an activation-bound reader's script, not the seed report's: each side
#: must be Python, and a side that trains runs with a small ``build_model`` (its ``x``, ``y``).
READER_SCRIPT_PAGES = {"activations.md"}


def run_reader_script(source: str) -> dict:
    """Kernel side: run ``source`` with ``build_model`` a small Dense model and a batch ``x[64, 32]``,
    ``y[64, 8]``; what ``fit`` recorded and the optimizer's accumulation steps."""
    import keras
    import numpy as np

    def build_model():
        return keras.Sequential([keras.Input((32,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(8)])

    rng = np.random.default_rng(0)
    namespace = {"build_model": build_model, "x": rng.standard_normal((64, 32), dtype=np.float32),
                 "y": rng.standard_normal((64, 8), dtype=np.float32)}
    exec(compile(source, "<diff>", "exec"), namespace)
    model = namespace["model"]
    return {"losses": [float(v) for v in model.history.history["loss"]],
            "accumulation": model.optimizer.gradient_accumulation_steps}


@pytest.mark.parametrize("page, index, body", CASES, ids=[f"{c[0]}#{c[1]}" for c in CASES])
def test_diff_starts_from_the_seed_script_and_runs(page, index, body):
    old, new = sides(body)
    if page in READER_SCRIPT_PAGES:
        import textwrap

        for side in (old, new):
            compile(textwrap.dedent(side), f"{page}#{index}", "exec")  # a fragment must still be Python
        if "model.fit" in new:
            with Kernel(deadline=300) as kernel:
                ran = kernel.call(run_reader_script, new)
            assert ran["losses"] and all(loss == loss for loss in ran["losses"]) and ran["accumulation"] > 1, ran
        return
    assert old == SEED_SCRIPT, f"{page}: the diff's old side is not the report's script"
    backend = declared_backend((DOCS / page).read_text(encoding="utf-8"))  # the page's own kernel
    with Kernel(backend=backend, deadline=300) as kernel:
        losses = kernel.call(run_script, scaled(new))
    assert len(losses) == 3 and all(loss == loss and abs(loss) < float("inf") for loss in losses), losses


def test_sides_split_a_diff():
    old, new = sides(" a\n-b\n+c\n\n d")
    assert (old, new) == ("a\nb\n\nd", "a\nc\n\nd")
