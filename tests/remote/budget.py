"""Kernel-side helpers for tests/test_plan.py (run inside a tests.harness.Kernel)."""

from __future__ import annotations

import contextlib
import io


def run_cli(argv: list[str]) -> tuple[int, str]:
    """Run ``python -m snippets.decide`` in this process; return (exit status, stdout + stderr)."""
    from snippets import decide

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            status = decide.main(argv)
        except SystemExit as done:
            status = done.code if isinstance(done.code, int) else 1
    return status, out.getvalue()


def seed_json(input_dim: int = 131072, units: int = 65536) -> str:
    """``model.to_json()`` of the seed model, built without allocating its weights."""
    import keras

    from snippets.lib.seed import seed_model

    with keras.StatelessScope(initialize_variables=False):
        return seed_model(input_dim, units).to_json()


def seed_weights_and_context() -> tuple[list, bool]:
    """The seed model's weights as the planner reads them, and whether TF's runtime started."""
    from tensorflow.python.eager import context

    from snippets import decide
    from snippets.lib.seed import seed_model

    weights = decide.model_weights(seed_model)
    return weights, context.context()._context_handle is not None


def mirrored_model_vs_plan(setup, input_dim: int = 1024, units: int = 256, optimizer: str = "rmsprop"):
    """The seed model built for real under MirroredStrategy: (planned, held) per device, resident only.

    Planned rows come from the model's own weights read without allocating
    (snippets.decide.model_weights), with gradients left out: the ledger reads
    what stays resident between steps (weights and slots).
    """
    import tensorflow as tf

    from snippets.lib import ledger, optimizers, planner
    from snippets import decide
    from snippets.lib.seed import seed_model

    weights = decide.model_weights(seed_model, input_dim, units)
    strategy = tf.distribute.MirroredStrategy(setup.devices)
    with strategy.scope():
        model = seed_model(input_dim, units)
        model.compile(optimizer=optimizers.make_optimizer(optimizer), loss="mean_squared_error")
        model.optimizer.build(model.trainable_variables)
    held = ledger.model_ledger(model, setup.devices)
    planned = [planner.DeviceBudget(b.device, b.weights, 0, b.slots, 0, 0)
               for b in planner.plan(weights, optimizer, "mirrored", len(setup.devices), reserve=0)]
    return planned, held
