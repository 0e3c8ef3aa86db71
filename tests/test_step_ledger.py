"""Planner against each device's measured step peak (tests/test_scale_models.py runs the verdicts).

Each figure comes from one device's program run alone in a fresh kernel under
its own cap (snippets.step_ledger explains why).
"""

import pytest

from snippets import step_ledger
from tests.step_runs import run_all


#: Every third configuration, at least one per placement: the benchmarks measure all of them
#: (planner_vs_step_peak, which the Memory budget chapter asserts); the suite re-checks a sample.
SAMPLE = step_ledger.AGREEMENT_CASES[::3]


@pytest.fixture(scope="module")
def agreement():
    return [step_ledger.compare(case, row) for case, row in zip(SAMPLE, run_all([(c,) for c in SAMPLE], 2))]


def test_planner_within_5_percent_of_each_devices_measured_step_peak(agreement):
    assert len(step_ledger.AGREEMENT_CASES) >= 20 and len(agreement) >= 7
    assert {case.placement for case in SAMPLE} == {"single", "column", "row", "mirrored"}
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
