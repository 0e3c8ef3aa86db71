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
    assert "not measured (snippets.no_such_module not present)" in text
    assert "| size " in text and "| 1 GiB " in text and "3 B to 1 GiB" in text  # unknown quantities still shown
    assert "abc1234" not in text and "0.5" not in text  # commits and load stay in the JSON
    assert report.format_value(12.3456, "s") == "12.35 s"
    assert report.format_value(1.00000003, "ratio") == "1.000000"


def test_benchmark_page_speaks_plain_units():
    assert [report.seconds(s) for s in (0.4656, 25.61, 198.27)] == ["0.47 s", "25.6 s", "3 min 18 s"]
    assert report.plain(1.0000000298023224, "ratio") == "1" and report.plain(4.0, "ratio") == "4"
    assert report.plain(2**30 + 2**29, "bytes") == "1.5 GiB" and report.plain(1.2282, "%") == "1.23 %"
    assert report.spread([3, 3, 3], "bytes") == "the same in all 3"
    assert report.spread([25.02, 28.62, 25.61], "s") == "25.0 s to 28.6 s"


def test_published_page_hides_machine_detail_and_labels_every_quantity():
    results = report.read(report.PUBLISHED / report.JSON_NAME)
    text = (report.PUBLISHED / report.TABLE_NAME).read_text()
    assert report.published_table_is_current()
    commits = {f["commit"] for f in results["figures"]} | {results["commit"]}
    assert not [c for c in commits if c in text] and "+dirty" not in text
    assert "1.000000" not in text and "tests/test_" not in text and "::" not in text
    for figure in results["figures"]:
        for q in figure["quantities"]:
            if figure["name"] not in ("sharding_balance", "shard_creation_peak") or q["unit"] == "bytes":
                assert (figure["name"], q["label"]) in report.READER_LABELS
