"""The benchmark results as JSON, and the Markdown the Performance page includes, written for readers.

The JSON keeps everything (every run, the commit, the load average, the
test ids of the slowest tests, full-precision ratios); the page shows what a
reader needs: what was measured, how, on what machine, the median and the
spread of the runs, in plain units. The Markdown is made from the JSON alone
(:func:`table`), so the committed Markdown can be checked against the
committed JSON without measuring again (:func:`published_table_is_current`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tabulate import tabulate

from benchmarks.measure import ROOT
from snippets.lib.seed import SEED_SHAPE
from snippets.lib.units import format_bytes, human_bytes, tensor_bytes

BUILD = ROOT / "build"
PUBLISHED = ROOT / "benchmarks" / "results"
JSON_NAME = "benchmarks.json"
TABLE_NAME = "performance-table.md"


# --- numbers as a reader reads them ------------------------------------------


def format_value(value: float | int, unit: str) -> str:
    """A median as the JSON's unit demands: seconds to 0.01 s, bytes exactly (with GiB/MiB), ratios to 6 places.

    The exact form, for logs and for a figure's own check; the page uses :func:`plain`.
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


def seconds(value: float) -> str:
    """A duration as a reader says it: ``0.47 s``, ``25.6 s``, ``3 min 18 s``."""
    if value < 1:
        return f"{value:.2f} s"
    if value < 60:
        return f"{value:.1f} s"
    minutes, rest = divmod(round(value), 60)
    return f"{minutes} min {rest:02d} s"


def plain(value: float | int, unit: str) -> str:
    """One number for the page: durations in s or min, bytes in binary units (GiB = 2**30 B),
    percentages to 3 significant digits, buffers to 2 decimals, ratios without trailing zeros.

    >>> plain(198.27, "s"), plain(630165504, "bytes"), plain(0.0027971, "%"), plain(1.0515747, "variables")
    ('3 min 18 s', '600.97 MiB', '0.0028 %', '1.05 buffers')
    """
    if unit == "s":
        return seconds(value)
    if unit == "bytes":
        return human_bytes(int(value))
    if unit == "%":
        return f"{value:.3g} %"
    if unit == "variables":
        return f"{value:.2f} buffers"
    if unit == "ratio":
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return f"{value:g} {unit}"


def spread(runs: list[float | int], unit: str) -> str:
    """The runs' range, ``25.0 s to 28.6 s``, or ``the same in all 3`` when they print alike."""
    low, high = plain(min(runs), unit), plain(max(runs), unit)
    return f"the same in all {len(runs)}" if low == high else f"{low} to {high}"


# --- what each quantity means -------------------------------------------------

#: (figure, quantity label in the JSON) -> what the page calls it. The JSON's labels name the
#: measurement's internals; these say what a reader gets. A quantity not listed here is shown
#: under its JSON label, so a new measurement is never dropped.
READER_LABELS = {
    ("oom_reproduction", "wall time"): "Reproduce the OOM at full shape (`python -m snippets.reproduce`)",
    ("oom_reproduction", "CPU time"): "the same, CPU time",
    ("planner_seed", "first call (after imports)"): "Plan the seed model with `snippets.decide`, first call after imports",
    ("planner_seed", "later calls (best of 3)"): "the same, once warm",
    ("test_suite", "wall time"): "Run the whole test suite (`python -m pytest`)",
    # wait4's: its kernels are forks of fork servers pytest's workers never wait for (a cgroup read about 3x this).
    ("test_suite", "CPU time"): "the same, CPU time of the processes it waits for (not its kernels)",
    ("mkdocs_build", "wall time"): "Build both editions of the site (`make build`)",
    ("mkdocs_build", "CPU time"): "the same, CPU time",
    ("oom_reproduction", "peak RSS"): "Peak memory of the OOM reproduction's process",
    ("planner_seed", "tensor bytes allocated (allocator peak)"): "Tensor memory the planner allocates for the seed",
    ("shard_creation_peak", "process RSS after each reservation"):
        f"Process memory after reserving the {human_bytes(tensor_bytes(SEED_SHAPE))} of shards (pages untouched)",
    ("planner_vs_allocator", "max relative error"):
        "Planner vs allocator, variables and slots: largest error",
    ("planner_vs_step_peak", "compiled updates: max |relative error|"):
        "Planner vs a measured training step, XLA-compiled update: largest error",
    ("planner_vs_step_peak", "no-XLA updates: largest undershoot"):
        "the same, update without XLA: most the planner fell short",
    ("planner_vs_step_peak", "no-XLA updates: largest overshoot"):
        "the same, update without XLA: most the planner was over",
    ("planner_vs_step_peak", "largest drop with one inter-op thread (no-XLA updates)"):
        "the same, one executor thread instead of two: most the peak dropped",
    ("planner_vs_step_peak", "one inter-op thread: worst error outside the planner's bounds"):
        "the same, one executor thread: worst error outside the planner's bounds",
    ("schedule_margin", "largest measured peak above the probe's order"):
        "Update without XLA at 384-512 MiB variables: most a peak rose above the probe's order",
    ("schedule_margin", "largest drop with one inter-op thread"):
        "the same, one executor thread instead of two: most the peak dropped",
    ("schedule_margin", "largest change from building the slots inside fit"):
        "the same, slots built inside `fit` instead of before it: largest change",
}

#: Sections of the page's tables: (heading, figures whose quantities it lists).
SECTIONS = (
    ("How long things take", ("oom_reproduction", "planner_seed", "test_suite", "mkdocs_build"), ("s",)),
    ("How much memory", ("oom_reproduction", "planner_seed", "shard_creation_peak"), ("bytes",)),
    ("How close the planner comes", ("planner_vs_allocator", "planner_vs_step_peak", "schedule_margin"),
     ("%", "variables")),
)

#: What the sharding table calls each method (by the JSON's label).
METHODS = {
    "column slices, `tf.device` (W[D, F_model])": "Column slices with `tf.device`, `W[D, F_model]`",
    "row slices, `tf.device` (W[D_model, F])": "Row slices with `tf.device`, `W[D_model, F]`",
    'DTensor layout [UNSHARDED, "model"]': 'DTensor layout `[UNSHARDED, "model"]`',
    "MirroredStrategy, at [1024, 256]": "MirroredStrategy (measured at `[1024, 256]`: the full shape is the OOM)",
}

#: What the page calls each measurement (the JSON's ``title`` names modules and ratios).
TITLES = {
    "oom_reproduction": "Reproducing the OOM", "planner_seed": "Planning the seed model",
    "planner_vs_allocator": "Planner vs allocator", "planner_vs_step_peak": "Planner vs a measured training step",
    "schedule_margin": "The planner's margin for updates without XLA",
    "sharding_balance": "Largest device / even share", "shard_creation_peak": "Allocated beyond the shards",
    "test_suite": "Test suite", "mkdocs_build": "Site build",
}

#: How each measurement was made, in plain words (the JSON's ``method`` has the internals).
HOW = {
    "oom_reproduction": "the whole command in a fresh process, TensorFlow's import included, on logical "
                        "CPUs standing in for the GPUs; peak memory is the process's resident set",
    "planner_seed": "in a process that has already imported Keras and TensorFlow; the seed model is built "
                    "without allocating its variables (`keras.StatelessScope`)",
    "planner_vs_allocator": "{configs} configurations of one Dense layer (initialisers, precisions, "
                            "optimizers) built for real under a capped allocator, against the planner",
    "planner_vs_step_peak": "{configs} configurations (placements, optimizers, XLA on and off, precisions), each "
                            "device's program of a `fit` step run alone under its own capped allocator, "
                            "against the planner's step peak; error = (planned - measured) / measured",
    "schedule_margin": "{configs} updates without XLA at variables of 384 and 512 MiB, each device program run "
                       "alone under its own capped allocator at 1, 2 and 8 executor threads, against the "
                       "planner's step peak without its one-buffer margin",
    "sharding_balance": "the seed kernel reserved through the allocator without writing a page; the largest "
                        "device's bytes divided by an even share",
    "shard_creation_peak": "the allocator's peak while the shards are created, minus the shards themselves: "
                           "a method that built the whole kernel first would show the whole kernel again here; "
                           "these show only the allocator's rounding",
    "test_suite": "as a contributor runs it, every chapter in its own kernel",
    "mkdocs_build": "both editions, strict, English then Chinese, into an empty directory each time",
}


def machine_line(machine: dict) -> str:
    """The machine in one sentence, e.g. ``2 CPU cores (AMD EPYC), 23.5 GiB of RAM and no GPU, ...``."""
    gpu = "no GPU" if machine["gpu"] in (None, "none") else f"GPU {machine['gpu']}"
    return (
        f"{machine['cores']} CPU cores ({machine['cpu']}), {human_bytes(machine['ram_bytes'])} of RAM and {gpu}, "
        f"running {machine['os'].split()[0]} with Python {machine['python']}, TensorFlow {machine['tensorflow']}, "
        f"Keras {machine['keras']} and MkDocs {machine['mkdocs']}"
    )


def _measured(results: dict) -> dict[str, dict]:
    return {f["name"]: f for f in results["figures"] if f["status"] == "measured"}


def _configs(figure: dict) -> str:
    """How many configurations a figure covers, read from its method (``17 configurations ...``)."""
    match = re.match(r"(\d+) configurations", figure["method"])
    return match.group(1) if match else "several"


def _quantity_rows(measured: dict[str, dict], names: tuple[str, ...], units: tuple[str, ...]) -> list[tuple]:
    rows = []
    for name in names:
        for q in measured.get(name, {}).get("quantities", []):
            if q["unit"] in units:
                label = READER_LABELS.get((name, q["label"]), q["label"])
                rows.append((label, plain(q["median"], q["unit"]), spread(q["runs"], q["unit"])))
    return rows


def _sharding_rows(measured: dict[str, dict]) -> list[tuple]:
    balance = {q["label"]: q for q in measured.get("sharding_balance", {}).get("quantities", [])}
    peaks = {q["label"]: q for q in measured.get("shard_creation_peak", {}).get("quantities", [])}
    kernel = tensor_bytes(SEED_SHAPE, "float32")
    rows = []
    for label, q in balance.items():
        ratio = plain(q["median"], "ratio")
        meaning = "an even split" if ratio == "1" else "a full copy on every device" if ratio == "4" else ""
        extra = "not measured"
        if label in peaks:
            extra = human_bytes(round((peaks[label]["median"] - 1) * kernel))
        rows.append((METHODS.get(label, label), f"{ratio} ({meaning})" if meaning else ratio, extra))
    return rows


def table(results: dict) -> str:
    """The Markdown the Performance page includes: the machine, the numbers by topic, how each was measured."""
    measured = _measured(results)
    figures = results["figures"]
    runs = sorted({len(q["runs"]) for f in measured.values() for q in f["quantities"] if q["unit"] == "s"})
    dates = sorted({f["measured_at"].split()[0] for f in measured.values() if f.get("measured_at")})
    busiest = max((f.get("load_at_start", 0) for f in measured.values()), default=0)
    when = f"between {dates[0]} and {dates[-1]}" if len(dates) > 1 else f"on {dates[0]}" if dates else ""
    parts = [
        f"**The machine:** {machine_line(results['machine'])}. Measured {when}; each number is the median of "
        f"{' or '.join(map(str, runs)) or 'several'} runs, and the last column gives the range of the runs.",
    ]
    if busiest > results["machine"]["cores"]:
        parts.append(f"The machine was shared: some runs started at a load average of {busiest:.1f} on its "
                     f"{results['machine']['cores']} cores, so wall times are on the slow side; CPU time is "
                     "less affected.")
    for heading, names, units in SECTIONS:
        rows = _quantity_rows(measured, names, units)
        if rows:
            parts.append(f"### {heading}\n\n" + tabulate(rows, headers=["What", "Median", "Range over the runs"],
                                                          tablefmt="github", disable_numparse=True))
    rows = _sharding_rows(measured)
    if rows:
        shape = "[" + ", ".join(map(str, SEED_SHAPE)) + "]"
        parts.append(f"### How evenly each method splits the seed kernel `W{shape}` over 4 devices\n\n"
                     + tabulate(rows, headers=["Method", "Largest device / even share",
                                               "Allocated beyond the shards while creating them"],
                                tablefmt="github", disable_numparse=True))
    known = {name for _, names, _ in SECTIONS for name in names} | {"sharding_balance"}
    other = [(q["label"], plain(q["median"], q["unit"]), spread(q["runs"], q["unit"]))
             for name, f in measured.items() if name not in known for q in f["quantities"]]
    if other:
        parts.append("### Other measurements\n\n" + tabulate(other, headers=["What", "Median", "Range over the runs"],
                                                            tablefmt="github", disable_numparse=True))
    how = [f"- **{TITLES.get(f['name'], f['title'])}**: " + HOW.get(f["name"], f["method"]).format(configs=_configs(f)) + "."
           for f in figures if f["status"] == "measured"]
    parts.append("### How each was measured\n\n" + "\n".join(how))
    missing = [f"- {f['title']}: not measured ({f['not_measured']})" for f in figures if f["status"] != "measured"]
    if missing:
        parts.append("### Not measured\n\n" + "\n".join(missing))
    return "\n\n".join(parts) + "\n"


# --- files --------------------------------------------------------------------


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
    """True if the committed Markdown is exactly what the committed JSON renders to."""
    results = read(PUBLISHED / JSON_NAME)
    return results is not None and (PUBLISHED / TABLE_NAME).read_text() == table(results)
