"""The Performance chapter's reader: the committed benchmark figures, by name.

The figures are measured by ``python -m benchmarks --publish`` into
``benchmarks/results/benchmarks.json``; the chapter quotes them from there.
"""

from __future__ import annotations

import json
from pathlib import Path

from snippets.lib import model_plan, plan_accuracy, units
from snippets.lib.model_step import ModelStep

#: The published measurements (committed).
PUBLISHED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "benchmarks.json"


def figures(path: Path = PUBLISHED) -> dict[str, dict]:
    """Every published figure by name: ``{"name", "title", "method", "quantities", "notes", ...}``.

    Raises:
        FileNotFoundError: if nothing was published (``make benchmark``).
    """
    return {figure["name"]: figure for figure in json.loads(path.read_text(encoding="utf-8"))["figures"]}


def medians(name: str, path: Path = PUBLISHED) -> dict[str, float]:
    """The median of each quantity of figure ``name``, by label.

    Raises:
        KeyError: for a figure that was not published.
    """
    return {q["label"]: q["median"] for q in figures(path)[name]["quantities"]}


#: The planner against the allocator on real architectures (``python -m benchmarks.model_planner``).
MODEL_PLANNER = model_plan.ACCURACY


def planner_rows(path: Path = MODEL_PLANNER, which: str = "rows") -> list[dict]:
    """Every planner-vs-measured row the benchmark published: architecture, optimizer, strategy, xla,
    batch per device, planned and measured per-device step peaks (bytes) and their ratio. ``which``:
    ``"rows"`` (:data:`snippets.lib.zoo.ARCHITECTURES`, on which the planner's constants were chosen) or
    ``"holdout"`` (:data:`snippets.lib.zoo.HOLDOUT`, Adam only, on which none was).

    Raises:
        FileNotFoundError: if nothing was published (``python -m benchmarks.model_planner``).
    """
    return json.loads(path.read_text(encoding="utf-8"))[which]


def planner_table(path: Path = MODEL_PLANNER, which: str = "rows") -> str:
    """One line per architecture (:func:`planner_rows`' ``which``): weights, configurations measured,
    the range of measured peaks and of planned / measured."""
    from tabulate import tabulate

    by_arch: dict[str, list[dict]] = {}
    for row in planner_rows(path, which):
        by_arch.setdefault(row["architecture"], []).append(row)
    lines = []
    for name, rows in by_arch.items():
        ratios = [row["ratio"] for row in rows]
        peaks = [row["measured"] for row in rows]
        lines.append([name, units.human_bytes(rows[0]["weights"]), len(rows),
                      f"{units.human_bytes(min(peaks))}-{units.human_bytes(max(peaks))}",
                      f"{min(ratios):.2f}-{max(ratios):.2f}"])
    # Narrow enough for a desktop page's code block (about 107 characters).
    return tabulate(lines, headers=["architecture", "weights", "rows", "measured peaks", "planned/measured"])


def faster_than_linear(which: str = "rows", path: Path = MODEL_PLANNER) -> list[tuple]:
    """``(architecture, optimizer, strategy, xla, batch per device)`` of the rows in ``which`` whose plan's runs grew
    faster than any peak linear in the batch reaches (the benchmark's ``squared``:
    :attr:`snippets.lib.model_plan.ModelPlan.squared`), which stops every card's largest batch at the largest run."""
    return [(r["architecture"], r["optimizer"], r["strategy"], r["xla"], r["batch_per_device"])
            for r in planner_rows(path, which) if r["squared"]]


def planner_ranges(path: Path = MODEL_PLANNER, which: str = "rows") -> dict[str, str]:
    """planned / measured, as ``"lo-hi"``, for each kind of step the benchmark ran (:func:`planner_rows`' ``which``)."""
    kinds: dict[str, list[float]] = {}
    for row in planner_rows(path, which):
        kind = ("MirroredStrategy, no XLA" if row["strategy"] == "mirrored"
                else f"one device, {'XLA' if row['xla'] == 'on' else 'no XLA'}")
        kinds.setdefault(kind, []).append(row["ratio"])
    return {kind: f"{min(v):.2f}-{max(v):.2f}" for kind, v in sorted(kinds.items())}


def thread_spread(path: Path = MODEL_PLANNER) -> dict[str, str]:
    """The measured peak at one inter-op thread over the peak at two, ``"lo-hi"``, with and without XLA."""
    spread: dict[str, list[float]] = {}
    for row in planner_rows(path):
        spread.setdefault("XLA" if row["xla"] == "on" else "no XLA", []).append(row["one_thread_over_two"])
    return {kind: f"{min(v):.2f}-{max(v):.2f}" for kind, v in sorted(spread.items())}


def replica_against_pool(path: Path = MODEL_PLANNER) -> dict[str, str | bool] | None:
    """Each measured replica program against the real MirroredStrategy's pool peak over its 2 replicas:
    the range of replica / (pool / 2), as ``"lo-hi"``, and whether every replica stays under the whole
    pool (None if no pool peak was measured).

    The pool is one allocator shared by both emulated replicas and by what the strategy keeps on one
    device only: on CPU devices MirroredStrategy reduces gradients with ``ReductionToOneDevice`` (both
    replicas' gradients gathered on the first device, then copied back), where a GPU host uses NCCL
    (``tf.distribute.cross_device_ops``, ``select_cross_device_ops``). So half the pool is not a floor
    for one GPU's peak; the whole pool is a ceiling. The pool ran at the emulation's two inter-op
    threads, so each replica counts its runs at one and two threads, not the one at eight.
    """
    rows = [row for row in planner_rows(path) if "pool_peak" in row]
    if not rows:
        return None
    replica = [row.get("fewer_threads_peak", row["measured"]) for row in rows]
    shares = [peak / (row["pool_peak"] / 2) for peak, row in zip(replica, rows)]
    return {"replica / (pool / 2)": f"{min(shares):.2f}-{max(shares):.2f}",
            "replica <= pool": all(peak <= row["pool_peak"] for peak, row in zip(replica, rows))}


def host_threads(path: Path = MODEL_PLANNER) -> dict[str, str | int] | None:
    """What a GPU host's inter-op pool adds: each target without XLA runs three times at
    ``benchmarks.model_planner.HOST_THREADS`` (8) threads (twice for two steps, once for eight), in
    "measured", as the planner runs its batches at 1 and 8 (:data:`snippets.lib.model_plan.PLAN_THREADS`).
    Returns the worst of those runs' peaks over the worst of the runs at 1 and 2 threads, as
    ``"lo-hi"``, how many rows the 8-thread runs set "measured" for, and the planned figure over that
    worst of 1 and 2 alone (None if no such run was published)."""
    rows = [row for row in planner_rows(path) if "fewer_threads_peak" in row]
    if not rows:
        return None
    over = [row["host_threads_peak"] / row["fewer_threads_peak"] for row in rows]
    planned = [row["planned"] / row["fewer_threads_peak"] for row in rows]
    return {"rows": len(rows), "8 threads / 1 and 2": f"{min(over):.2f}-{max(over):.2f}",
            "rows 8 threads sets": sum(ratio > 1 for ratio in over),
            "planned / 1 and 2": f"{min(planned):.2f}-{max(planned):.2f}"}


def _runs(architecture: str, optimizer: str, strategy: str, xla: str, batch_per_device: int, path: Path):
    """The completed runs of one configuration at one batch per device, not the real strategy's pool nor
    the sets after the first (:data:`snippets.lib.plan_accuracy.REDRAW_TAG`): ``(key fields, run)`` pairs,
    the key's fields as :func:`benchmarks.model_planner.key` lists them."""
    for key, run in json.loads(path.read_text(encoding="utf-8"))["runs"].items():
        fields = json.loads(key)
        step, real = fields[0], fields[2]
        replicas = step["devices"] if step["strategy"] == "mirrored" else 1
        if (not real and run.get("completed") and step["model"].endswith(f":{architecture}")
                and not (len(fields) > 3 and fields[3] >= plan_accuracy.REDRAW_TAG)
                and (step["optimizer"], step["strategy"], step["xla"]) == (optimizer, strategy, xla)
                and step["batch"] == batch_per_device * replicas):
            yield fields, run


def _peaks(architecture: str, optimizer: str, strategy: str, xla: str, batch_per_device: int,
           path: Path = MODEL_PLANNER) -> list[int]:
    """:func:`run_peaks` in bytes, ascending."""
    # At a planner's batch, only the planner's own runs: its thread counts, not the repeats that
    # measure how far plans move.
    return sorted(run["step_peak"] for fields, run in _runs(architecture, optimizer, strategy, xla, batch_per_device, path)
                  if batch_per_device not in model_plan.SMALL_BATCHES
                  or (fields[1] in model_plan.plan_threads(ModelStep(**fields[0])) and len(fields) == 3))


def run_peaks(architecture: str, optimizer: str, strategy: str, xla: str, batch_per_device: int,
              path: Path = MODEL_PLANNER) -> list[str]:
    """Each run that "measured" takes for one configuration at one batch per device (one and two
    inter-op threads, every draw of the first set and without XLA the 8-thread runs; not the real
    strategy's pool, nor the sets of ``REDRAWN``), or
    at one of the planner's batches (:data:`snippets.lib.model_plan.SMALL_BATCHES`) the runs the
    planner takes, its worst step peak, ascending, as text."""
    return [units.human_bytes(peak) for peak in _peaks(architecture, optimizer, strategy, xla, batch_per_device, path)]


def _upper(architecture: str, optimizer: str, strategy: str, xla: str, batch_per_device: int, threads: int,
            path: Path) -> int:
    """The upper-quartile step of the planner's run at one batch and thread count (:func:`step_peaks`), bytes."""
    return model_plan.upper_step({"step_peaks": _steps(architecture, optimizer, strategy, xla, batch_per_device,
                                                        threads, path)})


def _steps(architecture: str, optimizer: str, strategy: str, xla: str, batch_per_device: int, threads: int,
           path: Path) -> list[int]:
    """:func:`step_peaks` in bytes (the planner's run: no repeat, two steps asked)."""
    for fields, run in _runs(architecture, optimizer, strategy, xla, batch_per_device, path):
        if fields[1] == threads and len(fields) == 3:
            return run["step_peaks"]
    raise ValueError(f"no completed run of {architecture} at {batch_per_device} per device and {threads} threads")


def step_peaks(architecture: str, optimizer: str, strategy: str, xla: str, batch_per_device: int, threads: int,
               path: Path = MODEL_PLANNER) -> list[str]:
    """Each step's peak, in the order run, of the planner's run of one configuration at one of its
    batches (:data:`snippets.lib.model_plan.SMALL_BATCHES`) and inter-op thread counts, as text.

    Raises:
        ValueError: if no completed run matches.
    """
    return [units.human_bytes(peak) for peak in _steps(architecture, optimizer, strategy, xla, batch_per_device,
                                                       threads, path)]


def growth(architecture: str, optimizer: str, strategy: str, xla: str, batches: tuple[int, ...],
           threads: int | None = None, path: Path = MODEL_PLANNER) -> list[float]:
    """MiB per sample per device between the worst peaks of :func:`run_peaks` at each two consecutive
    ``batches`` (per device, ascending), rounded to 0.01; with ``threads``, at the planner's batches,
    between the upper-quartile steps (:func:`snippets.lib.model_plan.upper_step`) of its one run at that
    inter-op thread count: the slope of that count's line (:meth:`snippets.lib.model_plan.ModelPlan.lines`),
    before its floor and cap."""
    if threads is not None:
        worst = [_upper(architecture, optimizer, strategy, xla, batch, threads, path) for batch in batches]
    else:
        worst = [max(_peaks(architecture, optimizer, strategy, xla, batch, path)) for batch in batches]
    return [round((high - low) / (b1 - b0) / units.MiB, 2)
            for (b0, low), (b1, high) in zip(zip(batches, worst), zip(batches[1:], worst[1:]))]


def worst_peak(architecture: str, optimizer: str, strategy: str, xla: str, batch_per_device: int,
               path: Path = MODEL_PLANNER) -> int:
    """The worst of :func:`run_peaks` at one batch per device, bytes ("measured" at a target batch).

    Raises:
        ValueError: if no completed run matches.
    """
    return max(_peaks(architecture, optimizer, strategy, xla, batch_per_device, path))


def above(architecture: str, optimizer: str, strategy: str, xla: str, batches: tuple[int, ...], target: int,
          path: Path = MODEL_PLANNER) -> float:
    """MiB by which the worst of :func:`run_peaks` at ``batches`` (per device) lies above the worst at
    ``target``, rounded to 0.01 (negative if below): what a line levelled at its highest peak
    (:meth:`snippets.lib.model_plan.ModelPlan.lines`) keeps that the target's draws did not show."""
    small = max(peak for batch in batches for peak in _peaks(architecture, optimizer, strategy, xla, batch, path))
    return round((small - worst_peak(architecture, optimizer, strategy, xla, target, path)) / units.MiB, 2)


def wide_runs(path: Path = MODEL_PLANNER, why: str = "flat",
              sets: tuple[str, ...] = ("rows",)) -> list[tuple[str, str, str, str]]:
    """The configurations ``(architecture, optimizer, strategy, xla)`` whose plan took the run at
    :data:`snippets.lib.model_plan.WIDE_BATCH` for reason ``why`` (:func:`snippets.lib.model_plan.wide_reason`):
    ``"flat"``, their floors (:func:`snippets.lib.model_plan.floor_step`) at the planner's small batches, over
    the thread counts it runs them at, grew by less than :data:`snippets.lib.model_plan.FLAT_GROWTH`;
    ``"cheap"``, the line through those floors puts that batch within :data:`snippets.lib.model_plan.WIDE_PEAK`.
    From the planner's own runs (not its repeats), as the benchmark decided it; of the architectures of ``sets`` (``"rows"``: :data:`snippets.lib.zoo.ARCHITECTURES`,
    ``"holdout"``, ``"fresh"``: :data:`snippets.lib.zoo.HOLDOUT`, :data:`snippets.lib.zoo.FRESH`); sorted."""
    from snippets.lib import zoo

    names = {name for which in sets for name in {"rows": zoo.ARCHITECTURES, "holdout": zoo.HOLDOUT,
                                                  "fresh": zoo.FRESH}[which]}
    floors: dict[tuple[str, str, str, str], dict[int, list[dict]]] = {}
    for key, run in json.loads(path.read_text(encoding="utf-8"))["runs"].items():
        fields = json.loads(key)
        step, threads, real = fields[:3]
        replicas = step["devices"] if step["strategy"] == "mirrored" else 1
        batch = step["batch"] // replicas
        if (real or len(fields) > 3 or not run.get("completed") or batch not in model_plan.SMALL_BATCHES
                or threads not in model_plan.plan_threads(ModelStep(**step))):
            continue
        name = (step["model"].rsplit(":", 1)[1], step["optimizer"], step["strategy"], step["xla"])
        if name[0] not in names:
            continue
        floors.setdefault(name, {}).setdefault(batch, []).append(run)
    return sorted(name for name, runs in floors.items()
                  if len(runs) == len(model_plan.SMALL_BATCHES)
                  and model_plan.wide_reason([model_plan.floor_step(runs[b]) for b in model_plan.SMALL_BATCHES]) == why)


def holdout_before(path: Path = MODEL_PLANNER) -> str:
    """planned / measured over the held-out rows without the cheap run at
    :data:`snippets.lib.model_plan.WIDE_BATCH` (as their first measurement planned them), ``"lo-hi"``."""
    found = model_plan.published_accuracy(path)["holdout"]
    return f"{found['before_min']:.2f}-{found['before_max']:.2f}"


def before_cheap_runs(which: str = "rows", path: Path = MODEL_PLANNER) -> dict[str, str]:
    """By architecture, planned / measured of the configurations whose plan runs
    :data:`snippets.lib.model_plan.WIDE_BATCH` because that run is cheap, without it (through the small
    batches alone, as before :data:`snippets.lib.model_plan.WIDE_PEAK`), as ``"lo-hi"``; ``which`` as
    :func:`planner_rows`'."""
    found: dict[str, list[float]] = {}
    for row in planner_rows(path, which):
        if "ratio_without_cheap" in row:
            found.setdefault(row["architecture"], []).append(row["ratio_without_cheap"])
    return {name: f"{min(v):.2f}-{max(v):.2f}" for name, v in found.items()}


def largest_variable(architecture: str, path: Path = MODEL_PLANNER) -> float:
    """MiB of an architecture's largest trainable variable, as its measuring runs recorded it.

    Raises:
        ValueError: if no run of ``architecture`` recorded it.
    """
    for key, run in json.loads(path.read_text(encoding="utf-8"))["runs"].items():
        if json.loads(key)[0]["model"].endswith(f":{architecture}") and run.get("largest_variable"):
            return round(run["largest_variable"] / units.MiB, 2)
    raise ValueError(f"no run of {architecture!r} recorded its largest variable")


def margin_choice(path: Path = MODEL_PLANNER) -> dict[str, dict[str, float]]:
    """How the planner's margins were chosen (``benchmarks.model_planner.margin_choice``): for each
    fraction tried, the lowest planned / measured of the compiled rows (``"margin"``) and, at the
    planner's margin, of the rows without XLA (``"extrapolation"``), rounded to 0.001."""
    found = json.loads(path.read_text(encoding="utf-8"))["margins"]
    return {kind: {fraction: round(ratio, 3) for fraction, ratio in ratios.items()} for kind, ratios in found.items()}


def linearity(path: Path = MODEL_PLANNER) -> list[dict]:
    """The line through the planner's batches against steps of a few GiB (``benchmarks.model_planner.linearity``)."""
    return json.loads(path.read_text(encoding="utf-8")).get("linearity") or []


def later_steps(path: Path = MODEL_PLANNER) -> dict[str, dict[str, int | str]]:
    """Whether a run's second step peaks above its first, by XLA mode: over the benchmark's completed runs
    of two or more steps (not the real strategy's pool), ``{"runs", "second step higher", "largest second / first"}``
    ("higher": by more than 0.5%, a buffer's worth; the ratio as text). Why a slow model's run keeps its
    second step (docs/performance.md)."""
    found: dict[str, dict[str, int | str]] = {}
    for xla in ("off", "on"):
        ratios = [run["step_peaks"][1] / run["step_peaks"][0]
                  for key, run in json.loads(path.read_text(encoding="utf-8"))["runs"].items()
                  if run.get("completed") and len(run["step_peaks"]) > 1 and not json.loads(key)[2]
                  and json.loads(key)[0]["xla"] == xla]
        found[xla] = {"runs": len(ratios), "second step higher": sum(r > 1.005 for r in ratios),
                      "largest second / first": f"{max(ratios):.2f}"}
    return found


def plan_spread(path: Path = MODEL_PLANNER) -> str:
    """How far identical plans moved, as a table: for each configuration the benchmark planned again from
    fresh runs (``SPREAD`` in benchmarks/model_planner.py: Adam, without XLA), at each target batch per
    device, the number of plans, the highest over the lowest and the range of planned / the same "measured"."""
    from tabulate import tabulate

    lines = [[row["architecture"], row["strategy"], row["batch_per_device"], len(row["planned"]), f"{row['spread']:.2f}",
              f"{min(row['planned']) / row['measured']:.2f}-{max(row['planned']) / row['measured']:.2f}"]
             for row in json.loads(path.read_text(encoding="utf-8")).get("plan_spread", [])]
    # The ratio kept as text: tabulate would print 1.00 as "1".
    return tabulate(lines, headers=["architecture", "strategy", "per device", "plans", "highest/lowest",
                                    "planned/measured"], disable_numparse=[4],
                    colalign=("left", "left", "right", "right", "right", "left"))


def batch_spread(path: Path = MODEL_PLANNER, card: str = "V100-PCIE-16GB") -> str:
    """How far identical plans moved each card's largest global batch, as a table: for each configuration of
    :func:`plan_spread` (each plan's batches, ``largest``, are the same in its two rows), the number of plans, the
    lowest and highest largest batch for ``card`` (``batch_limits.BATCH_CARDS``), and the highest over the lowest,
    for ``card`` and the most for any card."""
    from tabulate import tabulate

    lines, seen = [], set()
    for row in json.loads(path.read_text(encoding="utf-8")).get("plan_spread", []):
        if (row["architecture"], row["strategy"]) in seen or not row.get("largest"):
            continue
        seen.add((row["architecture"], row["strategy"]))
        batches, moved = plan_accuracy.largest_batches(row), plan_accuracy.largest_moved(row)
        lines.append([row["architecture"], row["strategy"], len(row["largest"]),
                      f"{min(batches[card])}-{max(batches[card])}", f"{moved[card]:.2f}", f"{max(moved.values()):.2f}"])
    return tabulate(lines, headers=["architecture", "strategy", "plans", card, "highest/lowest", "any card"],
                    disable_numparse=True, colalign=("left", "left", "right", "right", "right", "right"))


def decide_resnet(path: Path = MODEL_PLANNER) -> dict | None:
    """The timed reader's command for a 224 px ResNet50 (``benchmarks.model_planner.DECIDE_RESNET``), or None."""
    return json.loads(path.read_text(encoding="utf-8")).get("decide_resnet50_224")


def decide_check(path: Path = MODEL_PLANNER) -> dict | None:
    """That command's plan against its own batch, measured (``benchmarks.model_planner.decide_check``:
    ``{"batch_per_device", "planned", "measured", "ratio", "peaks", "line", "line_ratio"}``, bytes), or None
    if not measured."""
    return json.loads(path.read_text(encoding="utf-8")).get("decide_check")


def measured_sets(path: Path = MODEL_PLANNER) -> str:
    """How far "measured" itself moved, as a table: for each row the benchmark measured again (``REDRAWN`` in
    benchmarks/model_planner.py, each time a whole set of its runs): its batch per device, its plan and
    "measured" of each set in whole MiB, the highest set over the lowest ("moved"), and the range of
    planned / measured over the sets ("ratio")."""
    from tabulate import tabulate

    lines = [[f"{row['architecture']}, {row['optimizer']}", row["strategy"], row["batch_per_device"],
              f"{row['planned'] / units.MiB:.0f}", ", ".join(f"{m / units.MiB:.0f}" for m in row["measured_sets"]),
              f"{max(row['measured_sets']) / min(row['measured_sets']):.2f}",
              f"{row['planned'] / max(row['measured_sets']):.2f}-{row['planned'] / min(row['measured_sets']):.2f}"]
             for row in planner_rows(path) if "measured_sets" in row]
    # Whole MiB, as numbers: the table stays as wide as the page's code blocks.
    return tabulate(lines, headers=["architecture, optimizer", "strategy", "batch", "planned", "each set", "moved",
                                    "ratio"],
                    disable_numparse=True, colalign=("left", "left", "right", "right", "left", "right", "left"))
