"""The benchmark's own tools measure and report what they say (no wall-clock assertions)."""

from benchmarks import figures, report
from benchmarks.measure import machine, python, run_child


def test_benchmark_reads_a_childs_peak_rss():
    touch = "b = bytearray(256 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('done')"
    child = run_child(python("-c", touch))
    assert (child.returncode, child.output.strip()) == (0, "done")
    assert 256 * 2**20 <= child.peak_rss_bytes < 1024 * 2**20
    assert run_child(python("-c", "raise SystemExit(3)")).returncode == 3


def test_benchmark_table_says_what_was_not_measured():
    absent = figures.requires("snippets/no_such_module.py")(lambda runs: None)
    measured = figures.Figure("x", "A measurement", "How.", [figures.Quantity("size", "bytes", [2**30, 3, 2**30])])
    results = {
        "machine": machine(), "commit": "abc1234", "runs": 3,
        "figures": [{**measured.to_json(), "measured_at": "2026-01-01 00:00", "load_at_start": 0.5,
                     "commit": "abc1234"},
                    absent(3).to_json()],
    }
    text = report.table(results)
    assert "not measured: snippets.no_such_module not present" in text
    assert "| A measurement" in text and "1073741824 B (1 GiB)" in text and "1 GiB, 3 B, 1 GiB" in text
    assert report.format_value(12.3456, "s") == "12.35 s"
    assert report.format_value(1.00000003, "ratio") == "1.000000"
