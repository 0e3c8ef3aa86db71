"""The benchmark results as JSON and as the Markdown table the Performance page includes.

The table is made from the JSON alone (:func:`table`), so the committed
table can be checked against the committed JSON without measuring again.
"""

from __future__ import annotations

import json
from pathlib import Path

from tabulate import tabulate

from benchmarks.measure import ROOT
from snippets.lib.units import format_bytes, human_bytes

BUILD = ROOT / "build"
PUBLISHED = ROOT / "benchmarks" / "results"
JSON_NAME = "benchmarks.json"
TABLE_NAME = "performance-table.md"


def format_value(value: float | int, unit: str) -> str:
    """A median for the table: seconds to 0.01 s, bytes exactly (with GiB/MiB), ratios to 6 places.

    For example 12.3456 s is "12.35 s", a ratio of 1.00000003 is "1.000000" and 2**30 bytes is
    "1073741824 B (1 GiB)" (benchmarks/test_tools.py checks these).
    """
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "bytes":
        return format_bytes(int(value)) if value >= 1024 else f"{int(value)} B"
    if unit == "ratio":
        return f"{value:.6f}"
    if unit == "%":
        return f"{value:.4f} %"
    return f"{value} {unit}"


def format_run(value: float | int, unit: str) -> str:
    """One run for the "Each run" column: like :func:`format_value`, bytes in short form."""
    return human_bytes(int(value)) if unit == "bytes" else format_value(value, unit)


def machine_line(machine: dict) -> str:
    """One sentence naming the machine, e.g. ``2 cores (AMD EPYC), 23.4 GiB RAM, no GPU; ...``."""
    ram = machine["ram_bytes"] / 2**30
    return (
        f"{machine['cores']} cores ({machine['cpu']}), {ram:.1f} GiB RAM, GPU: {machine['gpu']}; "
        f"{machine['os']}, Python {machine['python']}, TensorFlow {machine['tensorflow']}, "
        f"Keras {machine['keras']}, MkDocs {machine['mkdocs']}"
    )


def table(results: dict) -> str:
    """The Markdown the Performance page includes: the machine, one row per quantity, then how."""
    rows = []
    for figure in results["figures"]:
        if figure["status"] != "measured":
            rows.append((figure["title"], "", f"not measured: {figure['not_measured']}", "", ""))
            continue
        for index, quantity in enumerate(figure["quantities"]):
            unit = quantity["unit"]
            runs = ", ".join(format_run(v, unit) for v in quantity["runs"])
            rows.append((figure["title"] if index == 0 else "", quantity["label"],
                         format_value(quantity["median"], unit), str(len(quantity["runs"])), runs))
    body = tabulate(rows, headers=["Measurement", "Quantity", "Median", "Runs", "Each run"],
                    tablefmt="github", disable_numparse=True)
    notes = []
    for figure in results["figures"]:
        if figure["status"] == "measured":
            when = (f"commit `{figure['commit']}`, run started {figure['measured_at']} UTC; load "
                    f"average {figure['load_at_start']:.2f} when this measurement began")
            notes.append(f"- **{figure['title']}**: {figure['method']} "
                         + "".join(f"{note[0].upper()}{note[1:]}. " for note in figure["notes"])
                         + f"({when}.)")
    return (
        f"Machine: {machine_line(results['machine'])}. Each figure is the median of its runs "
        f"(at least 3; see Runs).\n\n{body}\n\n" + "\n".join(notes) + "\n"
    )


def read(path: Path) -> dict | None:
    """The results stored at ``path``, or None if there are none."""
    return json.loads(path.read_text()) if path.exists() else None


def write(results: dict, folder: Path) -> tuple[Path, Path]:
    """Write ``benchmarks.json`` and ``performance-table.md`` into ``folder``; return both paths."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path, table_path = folder / JSON_NAME, folder / TABLE_NAME
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    table_path.write_text(table(results))
    return json_path, table_path


def published_table_is_current() -> bool:
    """True if the committed table is exactly what the committed JSON renders to."""
    results = read(PUBLISHED / JSON_NAME)
    return results is not None and (PUBLISHED / TABLE_NAME).read_text() == table(results)
