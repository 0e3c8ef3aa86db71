"""Planner against each device's measured step peak, and scale models of every verdict.

Each figure comes from one device's program run alone in a fresh kernel under
its own cap (snippets.step_ledger explains why). Kernels run side by side:
an OOM costs the BFC allocator's 10 s of retries, mostly waiting.
"""

from concurrent.futures import ThreadPoolExecutor

import pytest

from snippets import step_ledger
from tests.harness import Kernel


def run_case(case, cap=None, steps=1):
    kernel_piece, _ = case.program
    if cap is None:
        cap = f"{max(64, 16 * kernel_piece[0] * kernel_piece[1] * 4 // 2**20)}MiB"
    with Kernel(deadline=300) as kernel:
        kernel.call("snippets.devices:configure", 1, cap, "cpu")
        return kernel.call("snippets.step_ledger:measure", case, steps)


def run_all(jobs, workers=4):
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda job: run_case(*job), jobs))


@pytest.fixture(scope="module")
def agreement():
    cases = step_ledger.AGREEMENT_CASES
    return [step_ledger.compare(case, row) for case, row in zip(cases, run_all([(c,) for c in cases], 2))]


def test_planner_within_5_percent_of_each_devices_measured_step_peak(agreement):
    assert len(agreement) >= 20
    worst = max(agreement, key=lambda row: abs(row["error"]))
    for row in agreement:
        print(f"{row['label']:60} planned {row['planned'] / 2**20:8.1f} MiB measured "
              f"{row['measured'] / 2**20:8.1f} MiB ({row['error']:+.2%})")
    assert abs(worst["error"]) < 0.05, worst


def test_agreement_covers_placements_optimizers_xla_and_precisions():
    cases = step_ledger.AGREEMENT_CASES
    assert {c.placement for c in cases} >= {"single", "mirrored", "column", "row"}
    assert len({c.optimizer for c in cases}) >= 6
    assert {c.xla for c in cases} >= {"on", "off", "auto"}
    assert {c.precision for c in cases} >= {"float32", "float16", "bfloat16", "mixed_float16"}


# --- scale models: every verdict the site states, at 1/16 of the seed ------------------

#: (placement, precision) pairs the site discusses, each trained with RMSprop and with Adam.
REMEDIES = [(p, prec) for p in ("mirrored", "column", "row", "parameter_server", "offload")
            for prec in ("float32", "float16", "bfloat16", "mixed_float16")]
#: 1/16 of the seed's elements: the smallest scale at which the BFC allocator's absolute
#: 128 MiB split threshold treats the pieces as it does at full size (at 1/64 a 128 MiB
#: shard's slack stays unsplit and the run peaks ~20% above a V100's figure).
K = 16

#: What the CPU cannot emulate: TensorFlow's CPU MatMul computes half precision through
#: float32 copies of its operands, so a half-precision forward pass holds a float32 copy of
#: the kernel that a GPU never makes. Where that decides the outcome, the run is not evidence.
CPU_HALF_MATMUL = {
    ("column", "mixed_float16"): "the float32 copy of the float16 compute copy, on CPU only, "
                                 "exceeds the 1.8% headroom the planner leaves",
    ("row", "mixed_float16"): "same as column",
}
#: Misses that the CPU's extra float32 copy makes fail one phase earlier (forward, not backward).
EARLIER_ON_CPU = {("parameter_server", "float16"), ("parameter_server", "bfloat16")}


@pytest.fixture(scope="module")
def scale_runs():
    jobs, verdicts = [], []
    for placement, precision in REMEDIES:
        for optimizer in ("rmsprop", "adam"):
            case, cap = step_ledger.scale_case(placement, optimizer, precision, k=K)
            jobs.append((case, cap, 2))  # a warm-up step and two more: three fit steps
            verdicts.append(step_ledger.scale_verdict(case, K))
    return list(zip(jobs, verdicts, run_all(jobs, workers=6)))


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
            assert result["failed_phase"] in expected, (case.label(), verdict, result)
    assert checked >= 36


def test_the_seed_trains_on_4_v100_32gb_in_float32_with_rmsprop(scale_runs):
    # The remedy the site leads with: a 4-way column shard, each shard's RMSprop update XLA-compiled on its device.
    column = [r for (case, _, _), _, r in scale_runs
              if (case.placement, case.precision, case.optimizer) == ("column", "float32", "rmsprop")]
    assert column and column[0]["completed"]
    # Its measured step peak, scaled back up, is the planner's within 1%.
    full = step_ledger.planned(step_ledger.StepCase("column", "rmsprop", "float32", "auto", step_ledger.SEED_SHAPE))
    assert abs(column[0]["step_peak"] * K - full.step_peak) < 0.01 * full.step_peak
    # Without XLA the same shard runs out in the update: the verdict depends on the step, not the state.
    no_xla = step_ledger.scale_verdict(step_ledger.scale_case("column", "rmsprop", xla="off", k=K)[0], K)
    assert no_xla == {"fits": False, "failed_phase": "update"}
