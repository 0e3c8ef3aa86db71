"""Run device programs of snippets.lib.step_ledger in fresh kernels, several side by side.

Shared by tests/test_step_ledger.py and tests/test_scale_models.py. Side by side because an OOM
costs the BFC allocator's 10 s of retries, mostly waiting.
"""

from concurrent.futures import ThreadPoolExecutor

from harness import Kernel
from snippets.lib import devices, step_ledger


def run_case(case, cap=None, steps=1, inter_op_threads=None):
    """:func:`snippets.lib.step_ledger.measure` of ``case`` in a fresh kernel capped at ``cap``
    (default :func:`snippets.lib.step_ledger.default_cap`), with ``TF_NUM_INTEROP_THREADS`` set to
    ``inter_op_threads`` if given (the kernel's runtime starts after it is set)."""
    if cap is None:
        cap = step_ledger.default_cap(case)
    env = {"TF_NUM_INTEROP_THREADS": str(inter_op_threads)} if inter_op_threads else {}
    with Kernel(env=env, deadline=300) as kernel:
        kernel.call(devices.configure, 1, cap, "cpu")
        return kernel.call(step_ledger.measure, case, steps)


def run_all(jobs, workers=4):
    """:func:`run_case` for each ``(case, cap, steps)`` tuple (or ``(case,)``), ``workers`` at a time."""
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda job: run_case(*job), jobs))
