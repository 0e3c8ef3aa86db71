"""Every verdict the site states, run as a 1/16 scale model of the seed on 4 x V100-SXM2-32GB.

Each run is one device's program alone in a fresh kernel under 1/16 of a V100's allocator
(snippets.lib.step_ledger explains why). Kernels run side by side: an OOM costs the BFC
allocator's 10 s of retries, mostly waiting.
"""

import pytest

from snippets.lib import hardware, placements, step_ledger
from tests.step_runs import run_all

#: (placement, precision, xla) the site discusses, each trained with RMSprop and with Adam.
REMEDIES = [(p, prec, "auto") for p in ("mirrored", "column", "row", "parameter_server", "offload")
            for prec in ("float32", "float16", "bfloat16", "mixed_float16")]
#: The column split with an update XLA does not compile (DTensor's hand-written step, or
#: tf.device layers left to a CPU-only Keras): the site calls it a miss in float32.
REMEDIES += [("column", "float32", "off"), ("column", "float16", "off")]
#: 1/16 of the seed's elements: the smallest scale at which the BFC allocator's absolute
#: 128 MiB split threshold treats the pieces as it does at full size (at 1/64 a 128 MiB
#: shard's slack stays unsplit and the run peaks ~20% above a V100's figure).
K = 16

#: What the CPU cannot emulate: TensorFlow's CPU MatMul computes half precision through
#: float32 copies of its operands, so a half-precision forward pass holds a float32 copy of
#: the kernel that a GPU never makes. Where that decides the outcome, the run is not evidence.
CPU_HALF_MATMUL = {
    ("column", "mixed_float16"): "the float32 copy of the float16 compute copy, on CPU only, "
                                 "exceeds the ~7% headroom the planner leaves (139 MiB at 1/16)",
    ("row", "mixed_float16"): "same as column",
}
#: Misses that the CPU's extra float32 copy makes fail one phase earlier (forward, not backward).
EARLIER_ON_CPU = {("parameter_server", "float16"), ("parameter_server", "bfloat16")}


@pytest.fixture(scope="module")
def scale_runs():
    jobs, verdicts = [], []
    for placement, precision, xla in REMEDIES:
        for optimizer in ("rmsprop", "adam"):
            case, cap = step_ledger.scale_case(placement, optimizer, precision, xla, k=K)
            jobs.append((case, cap, 1))  # a warm-up step, then the steady step the planner plans
            verdicts.append(step_ledger.scale_verdict(case, K))
    # The runs that fit train longest and hold up to 2 GiB each; the misses mostly wait out the
    # allocator's 10 s of retries. Alternate them, so the waits fill the gaps without piling
    # up fits in memory.
    fits = [i for i in range(len(jobs)) if verdicts[i]["fits"]]
    misses = [i for i in range(len(jobs)) if not verdicts[i]["fits"]]
    order = [i for pair in zip(fits, misses) for i in pair] + fits[len(misses):] + misses[len(fits):]
    results = dict(zip(order, run_all([jobs[i] for i in order], workers=8)))
    return [(jobs[i], verdicts[i], results[i]) for i in range(len(jobs))]


def test_every_scale_model_completes_or_fails_where_the_planner_says(scale_runs):
    checked = 0
    for (case, cap, _), verdict, result in scale_runs:
        where = (case.placement, case.precision)
        print(f"{case.label():70} cap {cap:>12}: planner {verdict}, run completed={result['completed']} "
              f"failed in {result['failed_phase']}" + (f" [not evidence: {CPU_HALF_MATMUL[where]}]"
                                                        if where in CPU_HALF_MATMUL else ""))
        if where in CPU_HALF_MATMUL:
            continue
        checked += 1
        assert result["completed"] == verdict["fits"], (case.label(), verdict, result)
        if not verdict["fits"]:
            expected = {verdict["failed_phase"]} | ({"forward"} if where in EARLIER_ON_CPU else set())
            if verdict["failed_phase"] == "update" and not placements.resolve_xla(case.xla, case.placement):
                # Without XLA the step is a dataflow graph: the update's ops that need no gradient
                # (rho * v) may run, and allocate, while the backward pass is still computing it.
                expected.add("backward")
            assert result["failed_phase"] in expected, (case.label(), verdict, result)
    assert checked >= 40


def test_the_seed_trains_on_4_v100_32gb_in_float32_with_rmsprop(scale_runs):
    # The remedy the site leads with: a 4-way column shard, each shard's RMSprop update XLA-compiled on its device.
    column = [r for (case, _, _), _, r in scale_runs
              if (case.placement, case.precision, case.optimizer) == ("column", "float32", "rmsprop")]
    assert column and column[0]["completed"]
    # Its measured step peak is the planner's for the same scale model within 1%, and scaled
    # back up (activations do not scale down as the kernel does, so this errs high) it stays
    # under a V100's allocator.
    (case, _, _), _, run = next(item for item in scale_runs if item[2] is column[0])
    assert abs(run["step_peak"] - step_ledger.planned(case).step_peak) < 0.01 * run["step_peak"]
    assert run["step_peak"] * K < hardware.V100_CAPACITY
    # Without XLA the same shard runs out in the update: the verdict depends on the step, not the state.
    no_xla = step_ledger.scale_verdict(step_ledger.scale_case("column", "rmsprop", xla="off", k=K)[0], K)
    assert no_xla == {"fits": False, "failed_phase": "update"}
