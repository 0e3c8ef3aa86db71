"""Kernel-side helpers for tests/test_plan.py (run inside a tests.harness.Kernel)."""

from __future__ import annotations

import contextlib
import io


def run_cli(argv: list[str]) -> tuple[int, str]:
    """Run ``python -m snippets.plan`` in this process; return (exit status, stdout + stderr)."""
    from snippets import plan

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            status = plan.main(argv)
        except SystemExit as done:
            status = done.code if isinstance(done.code, int) else 1
    return status, out.getvalue()


def seed_json(input_dim: int = 131072, units: int = 65536) -> str:
    """``model.to_json()`` of the seed model, built without allocating its weights."""
    import keras

    from snippets.reproduce_oom import seed_model

    with keras.StatelessScope(initialize_variables=False):
        return seed_model(input_dim, units).to_json()


def seed_weights_and_context() -> tuple[list, bool]:
    """The seed model's weights as the planner reads them, and whether TF's runtime started."""
    from tensorflow.python.eager import context

    from snippets import plan
    from snippets.reproduce_oom import seed_model

    weights = plan.model_weights(seed_model)
    return weights, context.context()._context_handle is not None
