"""Planner against each device's measured step peak (tests/test_scale_models.py runs the verdicts).

Each figure comes from one device's program run alone in a fresh kernel under
its own cap (snippets.lib.step_ledger explains why).
"""

import pytest

from snippets.lib import step_ledger
from tests.step_runs import run_all, run_case


#: Every third configuration, at least one per placement: the benchmarks measure all of them
#: (planner_vs_step_peak, which the Memory budget chapter asserts); the suite re-checks a sample.
SAMPLE = step_ledger.AGREEMENT_CASES[::3]


@pytest.fixture(scope="module")
def agreement():
    return [step_ledger.compare(case, row) for case, row in zip(SAMPLE, run_all([(c,) for c in SAMPLE], 2))]


def test_planner_is_each_devices_measured_step_peak_or_just_above(agreement):
    assert len(step_ledger.AGREEMENT_CASES) >= 20 and len(agreement) >= 7
    assert {case.placement for case in SAMPLE} == {"single", "column", "row", "mirrored"}
    for row in agreement:
        print(f"{row['label']:60} planned {row['planned'] / 2**20:8.1f} MiB measured "
              f"{row['measured'] / 2**20:8.1f} MiB ({row['error']:+.2%}, slack {row['slack'] / 2**20:.0f} MiB)")
    # Never under by more than 5%: a "fits" must fit. Over by at most 5% plus the schedule
    # slack where the executor's order of a no-XLA update decides how many buffers live at once.
    assert all(step_ledger.within_bounds(row) for row in agreement), agreement
    # Compiled updates have one buffer assignment: those are held to 5% both ways.
    assert all(abs(row["error"]) < 0.05 for row in agreement if not row["slack"])
    assert any(row["slack"] for row in agreement) and any(not row["slack"] for row in agreement)


#: The case CI once measured one buffer lower than here: TensorFlow's default inter-op pool
#: differed, so Keras 3 RMSprop's update reused one more buffer.
SCHEDULED = step_ledger.StepCase("mirrored", "rmsprop", "float32", "auto", (4096, 3072))


def test_one_inter_op_thread_saves_at_most_one_update_buffer_and_the_planner_holds_both():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:  # forks of the harness's server: no TensorFlow import each
        two, one = pool.map(lambda n: step_ledger.compare(SCHEDULED, run_case(SCHEDULED, inter_op_threads=n)),
                            (2, 1))
    variable = 4096 * 3072 * 4
    assert step_ledger.schedule_slack(SCHEDULED) == 2 * variable
    # Two threads may run the update's independent ops at once, one more buffer live, or in turn, as one thread does:
    # a draw of the order, not a constant. CI drew the second (the stop of 2026-12-06: 252070400 B at two threads,
    # 251872768 at one), the suite here mostly the first; either way the planner holds both.
    extra = two["measured"] - one["measured"]
    assert min(abs(extra), abs(extra - variable)) < 0.05 * variable, (two, one)
    assert step_ledger.within_bounds(two) and step_ledger.within_bounds(one)
    assert two["planned"] >= two["measured"] and one["planned"] >= one["measured"]


def test_compiled_updates_and_the_parameter_server_worker_have_no_schedule_slack():
    assert step_ledger.schedule_slack(step_ledger.StepCase("column", "rmsprop", "float32", "on", (4096, 4096))) == 0
    assert step_ledger.schedule_slack(step_ledger.StepCase("parameter_server", "rmsprop", "float32", "off",
                                                           (4096, 4096))) == 0
    assert step_ledger.schedule_slack(step_ledger.StepCase("single", "sgd", "float32", "off", (4096, 4096))) == 0
    assert step_ledger.schedule_slack(step_ledger.StepCase("column", "adam", "bfloat16", "off", (4096, 4096))) \
        == 2 * 4096 * 1024 * 2


def test_agreement_covers_placements_optimizers_xla_and_precisions():
    cases = step_ledger.AGREEMENT_CASES
    assert {c.placement for c in cases} >= {"single", "mirrored", "column", "row"}
    assert len({c.optimizer for c in cases}) >= 6
    assert {c.xla for c in cases} >= {"on", "off", "auto"}
    assert {c.precision for c in cases} >= {"float32", "float16", "bfloat16", "mixed_float16"}
