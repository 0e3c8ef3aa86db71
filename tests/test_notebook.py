"""The notebook docs/notebooks/plan-your-model.ipynb runs, and the page shows what it computes.

mkdocs-jupyter renders the notebook's stored outputs (``execute: false`` in mkdocs.yml: executing
it imports TensorFlow and Keras and took about 26 s of every ``mkdocs build`` on 2 cores). So this
test executes it with nbclient, as Jupyter would, from ``docs/notebooks/``, and checks that:

* it runs without error and its visible outputs equal the stored ones, so the page is current;
* its numbers are the planner's, and its "fits"/"OOM" verdicts follow from them;
* the rendered page (mkdocs-jupyter's own converter, with the mkdocs.yml settings) has the plot and
  no TensorFlow start-up log, and loads nothing from a CDN.

After a deliberate change (a new planner, a new Keras), refresh the stored outputs with
``python -m tests.test_notebook --write`` and review the diff.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat
import pytest
from snippets.lib.plan_caveats import few_steps_caveat
from tests import mkdocs_config

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "notebooks" / "plan-your-model.ipynb"
HIDDEN_TAG = "remove_output"
#: Cells whose figures are measured (section 6 runs the model's step): their text is compared
#: with numbers masked, and the numbers within MEASURED_TOLERANCE of the stored ones. Without XLA
#: one run's peak can read one activation-sized buffer more or less than another (the executor's
#: order of independent ops): 264.6 to 295.7 MiB seen for the same CNN step at batch 16. A rare
#: order moves the plan much more: one of 20 runs of the notebook's CNN at 32 per device (1, 2
#: and 8 threads) held 312.4 MiB in a step where the others held at most 280.9, and its line went
#: from 6.64-6.86 MiB per sample in other plans to 8.82 (up to x1.33), every figure with it (CI
#: read 8.81 once); the cell says so on the page.
MEASURED_TAG = "measured"
MEASURED_TOLERANCE = 0.40
NUMBER = re.compile(r"\d+(?:\.\d+)?")
#: How many steps a measuring run took: two, and more while they are quick
#: (snippets.lib.model_step.QUICK_SECONDS), so it moves with the machine's speed and load, as a
#: time does; "the worst of 2 to 4 steps" on one run is "the worst of 3 steps" on the next.
STEPS = re.compile(r"\bof\s+\d+(?:\s+to\s+\d+)?\s+steps\b")
#: The caveat a plan adds when its racing runs took few steps (plan_caveats.few_steps_caveat): present or not as the
#: step counts are, so it moves with the machine's speed too. Masked, as compared: numbers "#", spaces single.
FEW_STEPS = re.sub(r"\s+", " ", NUMBER.sub("#", few_steps_caveat(2)))
#: The same caveat as printed, wrapped anywhere, with any count: its numbers are not measured ones, and it comes and goes.
FEW_STEPS_PRINTED = re.compile(r"\s*" + r"\s+".join(re.escape(word).replace(r"\#", r"\d+") for word in FEW_STEPS.split(" ")))
#: TensorFlow's C++ start-up lines (absl), which TF_CPP_MIN_LOG_LEVEL does not silence.
STARTUP_LOG = re.compile(r"absl::InitializeLog|^[IWE]\d{4} \d\d:\d\d:|cudart_stub|cuInit", re.MULTILINE)


def execute(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Run a copy of ``notebook`` in a fresh python3 kernel, from the notebook's folder."""
    from nbclient import NotebookClient

    ran = copy.deepcopy(notebook)
    NotebookClient(ran, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    return ran


def hidden(cell) -> bool:
    return HIDDEN_TAG in cell.get("metadata", {}).get("tags", [])


def measured(cell) -> bool:
    return MEASURED_TAG in cell.get("metadata", {}).get("tags", [])


def visible_outputs(notebook, mask_measured: bool = True) -> list[list[tuple[str, str]]]:
    """Per code cell not tagged remove_output: its outputs as (kind, text) pairs.

    Images are compared by kind only (PNG bytes vary with fonts and versions); stderr is kept,
    so a log line in a visible cell shows up as a difference.
    """
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code" or hidden(cell):
            continue
        outputs = []
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                # The kernel may split one print into several stream messages; compare the text.
                if outputs and outputs[-1][0] == out.name:
                    outputs[-1] = (out.name, outputs[-1][1] + out.text)
                else:
                    outputs.append((out.name, out.text))
            elif out.output_type in ("display_data", "execute_result"):
                data = out.get("data", {})
                outputs.append(("image/png", "") if "image/png" in data else ("text/plain", data.get("text/plain", "")))
            elif out.output_type == "error":
                outputs.append(("error", f"{out.ename}: {out.evalue}"))
        if mask_measured and measured(cell):
            # Numbers masked, and the spaces that align them and the line breaks that wrap them,
            # which move with their widths.
            outputs = [(kind, re.sub(r"\s+", " ", NUMBER.sub("#", STEPS.sub("of its steps", text))).replace(
                f" {FEW_STEPS}", "")) for kind, text in outputs]
        cells.append(outputs)
    return cells


def measured_numbers(notebook) -> list[float]:
    """Every number the measured cells print, in order."""
    return [float(n) for cell in notebook.cells if cell.cell_type == "code" and measured(cell)
            for out in cell.get("outputs", []) if out.output_type == "stream"
            for n in NUMBER.findall(FEW_STEPS_PRINTED.sub("", STEPS.sub("", out.text)))]


def cleaned(notebook) -> nbformat.NotebookNode:
    """``notebook`` as stored: no stderr outputs (start-up log), no execution timestamps."""
    result = copy.deepcopy(notebook)
    for cell in result.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
            cell.metadata.pop("execution", None)
    return result


def stdout_of(notebook, marker: str) -> str:
    """The stdout of the first code cell whose source contains ``marker``."""
    for cell in notebook.cells:
        if cell.cell_type == "code" and marker in cell.source:
            return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")
    raise AssertionError(f"no code cell contains {marker!r}")


def plugin_config() -> dict:
    """The mkdocs-jupyter settings in mkdocs.yml."""
    config = mkdocs_config.load(ROOT / "mkdocs.yml")
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocs-jupyter" in plugin:
            return plugin["mkdocs-jupyter"] or {}
    raise AssertionError("mkdocs-jupyter is not in mkdocs.yml's plugins")


@pytest.fixture(scope="module")
def stored():
    return nbformat.read(NOTEBOOK, as_version=4)


@pytest.fixture(scope="module")
def fresh(stored):
    return execute(stored)


def test_notebook_runs_and_the_page_shows_its_current_outputs(stored, fresh):
    assert visible_outputs(fresh) == visible_outputs(stored), (
        "the stored outputs are stale: run python -m tests.test_notebook --write and review the diff"
    )


def test_measured_figures_agree_with_the_stored_ones_within_a_bound(stored, fresh):
    before, now = measured_numbers(stored), measured_numbers(fresh)
    assert len(before) == len(now) and before
    for old, new in zip(before, now):
        assert abs(new - old) <= MEASURED_TOLERANCE * max(abs(old), 1), (old, new)


def test_startup_log_only_in_the_hidden_cell(fresh):
    for index, cell in enumerate(fresh.cells):
        if cell.cell_type != "code" or hidden(cell):
            continue
        for out in cell.outputs:
            text = out.get("text", "")
            assert not (out.output_type == "stream" and out.name == "stderr"), f"cell {index}: {text}"
            assert not STARTUP_LOG.search(text), f"cell {index} shows TensorFlow's log: {text}"


def test_numbers_are_the_planners_and_verdicts_follow(fresh):
    from harness import Kernel
    from snippets.lib import planner, units
    from snippets import decide
    from snippets.lib.seed import seed_model  # the notebook's default build_model

    table = stdout_of(fresh, "peak_per_gpu(strategy, dtype, n)")
    from snippets.lib import hardware

    # What each card's allocator gets, as the notebook holds the peaks against.
    gpus = {name: hardware.card(name).allocator_mib for name in ("V100-PCIE-16GB", "V100-SXM2-32GB", "A100-80GB", "H100-80GB")}
    with Kernel() as kernel:
        seed = kernel.call(decide.model_weights, seed_model)
        placements = (("MirroredStrategy", "mirrored", None), ("column split, XLA", "column", None),
                      ("column split, float16", "column", "float16"))
        for label, strategy, dtype in placements:
            weights = kernel.call(decide.with_precision, seed, dtype)
            for n in (1, 2, 4, 8):
                peak = max(b.total for b in kernel.call(planner.plan, weights, "rmsprop", strategy, n))
                fits = ["yes" if peak <= mib * units.MiB else "NO" for mib in gpus.values()]  # the seed's rule is exact
                row = rf"^{re.escape(label)}.*\s{n}\s+{re.escape(units.human_bytes(peak))}\s+" + r"\s+".join(fits) + r"\s*$"
                assert re.search(row, table, re.MULTILINE), f"no row {label} x {n}: {row}\n{table}"
    # The seed under MirroredStrategy needs more than any of these GPUs, however many.
    assert "yes" not in "".join(line for line in table.splitlines() if line.startswith("MirroredStrategy"))
    # Section 6, the measured model: a card holds the global batch exactly when the largest global
    # batch it holds is at least that, for every GPU count and each of the four cards.
    measured_tables = stdout_of(fresh, "plan.largest_batch(")
    verdicts, largest = measured_tables.split("The largest global batch each card holds:")
    global_batch = int(re.search(r"GLOBAL_BATCH = (\d+)", "".join(
        c.source for c in fresh.cells if c.cell_type == "code")).group(1))
    fit_rows = re.findall(r"^\s*(\d+)\s+[\d.]+ \w?i?B\s+((?:(?:fits|OOM)\s+){3}(?:fits|OOM))\s*$", verdicts, re.M)
    batch_rows = re.findall(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", largest, re.M)
    assert [int(n) for n, _ in fit_rows] == [int(row[0]) for row in batch_rows] == [1, 2, 4, 8], measured_tables
    for (_, fits), (_, *batches) in zip(fit_rows, batch_rows):
        assert [f == "fits" for f in fits.split()] == [int(b) >= global_batch for b in batches], measured_tables


def test_rendered_page_has_the_plot_and_no_log_or_cdn(stored):
    from mkdocs_jupyter.nbconvert2 import nb2html

    config = plugin_config()
    assert config.get("allow_errors") is False
    html = nb2html(
        str(NOTEBOOK), execute=False, allow_errors=False,
        remove_tag_config=config.get("remove_tag_config", {}),
        custom_mathjax_url=config.get("custom_mathjax_url", ""),
    )
    assert "data:image/png;base64," in html
    assert not STARTUP_LOG.search(html)
    assert "cdnjs.cloudflare.com/ajax/libs/mathjax" not in html and '<script src="">' not in html


def test_notebook_links_point_at_pages_that_exist(stored):
    # mkdocs --strict checks Markdown pages' links, not a notebook's: the notebook page is served at
    # notebooks/plan-your-model/, so ../../<page>/ is docs/<page>.md.
    links = [m for cell in stored.cells if cell.cell_type == "markdown"
             for m in re.findall(r"\]\(([^)]+)\)", cell.source)]
    assert links
    for link in links:
        match = re.fullmatch(r"\.\./\.\./([\w-]+)/(#[\w-]+)?", link)
        assert match, f"{link}: write links as ../../<page>/ (the notebook page is one level deeper)"
        assert (ROOT / "docs" / f"{match[1]}.md").exists(), f"{link}: docs/{match[1]}.md does not exist"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.test_notebook",
                                     description="Re-execute the notebook and store its outputs.")
    parser.add_argument("--write", action="store_true", help="write the executed notebook back")
    args = parser.parse_args(argv)
    ran = cleaned(execute(nbformat.read(NOTEBOOK, as_version=4)))
    if args.write:
        nbformat.write(ran, NOTEBOOK)
        print(f"stored fresh outputs in {NOTEBOOK.relative_to(ROOT)}")
    else:
        print("executed without error; pass --write to store the outputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

