"""Quality gates on the chapters, checked without running them.

* Every Python code block in ``docs/**/*.md`` is either collected by the
  test harness (Sybil, with the parsers ``conftest.py`` gives it) or skipped
  with a stated reason. A block Sybil does not see (```` ```python3 ````,
  ```` ```Python ````, ```` ```{.python} ````...) would sit on the site
  unexecuted and rot, which is the weakness of guides nothing runs.
* Every module in ``snippets/`` is imported or run by at least one chapter
  (an executed Markdown block, or a code cell of a notebook chapter), so no
  snippet is left without a page that exercises it.

These tests parse the documents with the same Sybil object pytest uses, so
they follow the harness if it changes, and they never import TensorFlow.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from sybil import Document
from sybil.evaluators.skip import Skipper
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

from conftest import chapters

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SNIPPETS = ROOT / "snippets"

#: Info strings a reader (or Pygments) takes for Python, in any spelling:
#: python, py, python3, pycon, ipython, {.python ...}, Python.
PYTHONISH = re.compile(r"^\{?\s*\.?(?:i?python[0-9]*|py[0-9]*|pycon|python-console)(?![\w-])", re.I)

#: The whole info line of any fenced block (``` or ~~~, indented or not).
_ANY_FENCE = RawFencedCodeBlockLexer(re.compile(r"(?P<info>[^\n]*)$\n", re.MULTILINE))


@dataclass(frozen=True)
class Block:
    """A fenced code block whose info string looks like Python."""

    line: int
    info: str
    start: int
    end: int


def python_blocks(document: Document) -> list[Block]:
    """Every fenced block of ``document`` that a reader would take for Python."""
    blocks = []
    for region in _ANY_FENCE(document):
        info = region.lexemes["info"].strip()
        if PYTHONISH.match(info):
            line = document.text.count("\n", 0, region.start) + 1
            blocks.append(Block(line, info, region.start, region.end))
    return blocks


def skip_reason_problem(arguments: str | None) -> str | None:
    """Why a skip's arguments give no reason, or None if they give one.

    Accepted: ``if(condition, reason="...")`` and a plain string literal
    (``<!-- skip: next "why" -->``), with a non-blank reason.
    """
    if not arguments or not arguments.strip():
        return "it gives no reason"
    text = arguments.strip()
    try:
        if text.startswith("if"):
            call = ast.parse("f" + text[2:], mode="eval").body
            if not isinstance(call, ast.Call):
                return f"cannot read {text!r}"
            reasons = [k.value for k in call.keywords if k.arg == "reason"] + call.args[1:2]
            if not reasons:
                return "its if(...) has no reason=..."
            node = reasons[0]
        else:
            node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return f"cannot read {text!r}"
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip()):
        return "its reason is not a non-empty string literal"
    return None


def _is_skip(region) -> bool:
    return isinstance(region.evaluator, Skipper)


def audit(path: Path) -> list[str]:
    """Problems with the Python blocks of one Markdown file (empty list: none).

    A block is fine if Sybil collects at least one example inside it and,
    when a ``skip`` directive covers it, that directive states a reason. A
    ``skip: next`` covers only the next *example*, so it may not precede a
    ``pycon`` block holding several ``>>>`` examples (use ``skip: start`` /
    ``skip: end`` there).
    """
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    try:
        document = chapters.parse(path)
    except ValueError as error:  # e.g. a malformed skip directive
        return [f"{name}: Sybil cannot parse it: {error}"]
    regions = [region for _, region in document.regions]

    # Which skip directive (if any) covers each example, following Sybil's rules.
    covering: dict[int, object] = {}
    pending_next = open_range = None
    for region in regions:
        if _is_skip(region):
            action, _ = region.parsed
            if action == "next":
                pending_next = region
            elif action == "start":
                open_range = region
            elif action == "end":
                open_range = None
            continue
        skip = pending_next or open_range
        if skip is not None:
            covering[id(region)] = skip
        pending_next = None

    problems = []
    for block in python_blocks(document):
        inside = [r for r in regions if block.start <= r.start < block.end and not _is_skip(r)]
        where = f"{name}:{block.line}: ```{block.info}"
        if not inside:
            problems.append(
                f"{where} is not collected by the tests (the harness reads ```python, ```py "
                "and ```pycon): spell the fence ```python or ```pycon, or mark it "
                '<!-- skip: next "why" -->'
            )
            continue
        skip = covering.get(id(inside[0]))
        if skip is None:
            continue
        action, arguments = skip.parsed
        problem = skip_reason_problem(arguments)
        if problem:
            problems.append(
                f"{where} is skipped but {problem}: write e.g. "
                '<!-- skip: next if(not GPU, reason="needs a GPU: ...") -->'
            )
        if action == "next" and len(inside) > 1:
            unskipped = sum(1 for r in inside if covering.get(id(r)) is not skip)
            problems.append(
                f"{where} holds {len(inside)} examples but 'skip: next' skips only the first, "
                f"so {unskipped} still run: wrap it in <!-- skip: start ... --> / <!-- skip: end -->"
            )
    return problems


def chapter_paths() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def snippet_modules() -> list[str]:
    """Dotted names of the modules under ``snippets/`` (packages' ``__init__`` excluded)."""
    names = []
    for path in sorted(SNIPPETS.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] != "__init__":
            names.append(".".join(parts))
    return names


_DOTTED = re.compile(r"\bsnippets(?:\.\w+)+")


def modules_used(source: str) -> set[str]:
    """Dotted ``snippets.*`` names that Python ``source`` imports or names in a string.

    Strings count so that runs count: ``subprocess.run([sys.executable, "-m",
    "snippets.reproduce"])``, ``runpy.run_module("snippets.x")`` and
    ``Kernel().call("snippets.x:f")`` all use ``snippets.x``.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set(_DOTTED.findall(source))
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            used.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            used.add(node.module)
            used.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.update(_DOTTED.findall(node.value))
        elif isinstance(node, ast.Attribute):
            used.update(_DOTTED.findall(ast.unparse(node)))
    return {name for name in used if name.startswith("snippets.")}


def chapter_sources(path: Path) -> list[str]:
    """The Python source of every example Sybil collects from one chapter.

    A notebook chapter (``.ipynb``, executed by ``tests/test_notebook.py``)
    contributes its code cells.
    """
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    sources = []
    for _, region in chapters.parse(path).regions:
        if _is_skip(region):
            continue
        parsed = region.parsed
        sources.append(getattr(parsed, "source", None) or str(parsed))
    return sources


# --- the gates ---------------------------------------------------------------


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_python_block_runs_or_says_why_not(path):
    problems = audit(path)
    assert not problems, "\n".join(problems)


def test_every_page_module_is_used_by_its_chapter():
    # The shared layer (snippets.lib) serves the modules; tests/test_layout.py checks it is used.
    used = {}
    notebooks = [p for p in sorted(DOCS.rglob("*.ipynb")) if ".ipynb_checkpoints" not in p.parts]
    for path in chapter_paths() + notebooks:
        for source in chapter_sources(path):
            for name in modules_used(source):
                used.setdefault(name, path.relative_to(ROOT))
    pages = [name for name in snippet_modules() if not name.startswith("snippets.lib.")]
    unused = [name for name in pages if name not in used]
    assert not unused, (
        "snippets modules no chapter imports or runs (add a chapter block that uses each): "
        + ", ".join(unused)
    )


# --- the gates catch what they should (a gate that cannot fail is no gate) ---


def _audit_text(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "chapter.md"
    path.write_text(text)
    return audit(path)


GOOD = '''
Executed:

```python title="x.py"
x = 1
```

=== "Tab"

    ```pycon
    >>> x + 1
    2
    ```

<!-- skip: next if(not GPU, reason="needs a GPU: real device memory") -->
```python
import tensorflow as tf
```

<!-- skip: start "needs 4 real GPUs" -->
```pycon
>>> 1
1
>>> 2
2
```
<!-- skip: end -->

```bash
python -m snippets.reproduce
```
'''


def test_audit_accepts_executed_and_reasoned_blocks(tmp_path):
    assert _audit_text(tmp_path, GOOD) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("```python3\nx = 1\n```\n", "not collected"),
        ("```Python\nx = 1\n```\n", "not collected"),
        ("```{.python}\nx = 1\n```\n", "not collected"),
        ("~~~ipython\nx = 1\n~~~\n", "not collected"),
        ("<!-- skip: next -->\n```python\nx = 1\n```\n", "gives no reason"),
        ("<!-- skip: next if(not GPU) -->\n```python\nx = 1\n```\n", "no reason="),
        ('<!-- skip: next if(True, reason="") -->\n```python\nx = 1\n```\n', "non-empty string"),
        ("<!-- skip: start -->\n```python\nx = 1\n```\n<!-- skip: end -->\n", "gives no reason"),
        (
            '<!-- skip: next "needs a GPU" -->\n```pycon\n>>> 1\n1\n>>> 2\n2\n```\n',
            "skips only the first, so 1 still run",
        ),
    ],
    ids=["python3", "Python", "brace-class", "tilde-ipython", "bare-skip", "if-without-reason",
         "empty-reason", "bare-range", "skip-next-over-doctests"],
)
def test_audit_flags_unrun_and_unexplained_blocks(tmp_path, text, expected):
    problems = _audit_text(tmp_path, text)
    assert len(problems) == 1 and expected in problems[0], problems


def test_modules_used_counts_imports_and_runs():
    source = (
        "import subprocess, sys\n"
        "from snippets.lib import devices, planner as p\n"
        "import snippets.placement\n"
        "from snippets.decide import main\n"
        'subprocess.run([sys.executable, "-m", "snippets.reproduce"])\n'
        'k.call("snippets.sharding:shard_bytes")\n'
    )
    assert {"snippets.lib.devices", "snippets.lib.planner", "snippets.placement", "snippets.decide",
            "snippets.reproduce", "snippets.sharding"} <= modules_used(source)
    assert modules_used("import numpy\nprint('snippet')\n") == set()


# --- every figure in a page's answer is one the page computes ------------------

#: A figure with its unit, as the "In short" answers state them (``24.08 GiB``, ``4.362 s``).
#: ASCII boundaries: Python's ``\w`` and ``\b`` count Chinese characters as letters, so ``是24 GiB的``
#: would not be read at all on a Chinese page.
FIGURE = re.compile(r"(?<![A-Za-z0-9_.-])(\d[\d,]*(?:\.\d+)?)\s?(GiB|MiB|KiB|GB|B|s)(?![A-Za-z0-9_])")
_ABSTRACT = re.compile(r'^!!! abstract "In short"\n((?:    .*\n|\n)+?)(?=\S)', re.M)
_FENCED = re.compile(r"^ *```[^\n]*\n(.*?)^ *```", re.S | re.M)


def answer_figures(text: str) -> list[str]:
    """The figures (number and unit) in a page's ``!!! abstract "In short"`` answer."""
    match = _ABSTRACT.search(text)
    return [f"{number} {unit}" for number, unit in FIGURE.findall(match.group(1))] if match else []


def computed_text(text: str) -> str:
    """What a page's executed blocks show (fenced blocks other than diffs), and its generated
    decide table, with the answer taken out."""
    text = _ABSTRACT.sub("", text)
    blocks = [body for body in _FENCED.findall(text) if not body.lstrip().startswith(("-", "+"))]
    generated = re.findall(r"<!-- decide:begin.*?<!-- decide:end -->", text, flags=re.S)
    return "\n".join(blocks + generated)


def shows(shown: str, figure: str) -> bool:
    """Whether ``shown`` has ``figure``: with its unit, or, for a number too specific to be a
    coincidence (a decimal point or four digits or more), as a bare token (``4.362``,
    ``17,179,869,184``)."""
    number, unit = figure.split(" ")
    if figure in shown or figure.replace(" ", "") in shown:
        return True
    specific = "." in number or len(number.replace(",", "")) >= 4
    return specific and re.search(rf"(?<![\w.,]){re.escape(number)}(?![\w,]|\.\d)", shown) is not None


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: str(p.relative_to(DOCS)))
def test_the_answer_quotes_only_computed_figures(path):
    text = path.read_text(encoding="utf-8")
    shown = computed_text(text).replace("\u202f", " ")
    missing = [figure for figure in answer_figures(text) if not shows(shown, figure)]
    assert not missing, f"{path.name}: the answer states {missing}, which no executed block on the page shows"


def test_answer_figures_are_read_from_the_abstract():
    page = '# T\n\n!!! abstract "In short"\n    peaks at 24.08 GiB, of 30976 MiB, in 4.362 s.\n\nBody 1 GiB.\n'
    assert answer_figures(page) == ["24.08 GiB", "30976 MiB", "4.362 s"]
    assert shows("4.362\n", "4.362 s") and shows("'24.08 GiB'", "24.08 GiB")
    assert not shows("12", "12 GiB") and not shows("24.081", "24.08 GiB")
    # Chinese sets figures against its characters; a name's digits (V100, A100-80GB) are no figure.
    assert prose_figures("峰值是24.08 GiB的一半，V100 有 30976 MiB，A100-80GB 另说") == ["24.08 GiB", "30976 MiB"]


# --- every figure in a page's prose is computed somewhere ------------------------

def _stated_figures() -> dict[str, tuple[str, str]]:
    """Figures the prose states without a block on the same page printing them.

    Each is ``figure -> (the same figure computed from snippets.lib, what it is)``; the
    test recomputes every one, so a change in the planner or the card table that
    leaves prose behind fails here. Figures that are names or inputs, not results,
    are in :data:`GIVEN_FIGURES`.
    """
    from snippets.lib import hardware, plan_runs, planner
    from snippets.lib.seed import SEED_SHAPE as S
    from snippets.lib.step_ledger import StepCase, planned
    from snippets.lib.units import MiB, dtype_bytes
    from snippets.lib.units import human_bytes as h
    from snippets.lib.units import tensor_bytes as t

    v100 = hardware.CARDS[hardware.DEFAULT_CARD]
    allocator = hardware.allocator_bytes()
    mixed = planned(StepCase("column", "rmsprop", "mixed_float16", "auto", S, 4, 64, "zeros"))
    column_no_xla = planner.per_device(list(S), "float32", "rmsprop", "column", 4, xla="off")[0]
    return {
        "30976 MiB": (f"{v100.allocator_mib} MiB", "what a V100-SXM2-32GB gives TensorFlow's allocator"),
        "30.25 GiB": (h(allocator), "the same, in GiB"),
        "32510 MiB": (f"{v100.total_mib} MiB", "a V100-SXM2-32GB's nvidia-smi total"),
        "1050 MiB": (f"{hardware.min_system_memory_mib(v100.compute_capability)} MiB",
                     "TensorFlow's MinSystemMemory for compute capability 7.x"),
        "1.5 GiB": (h((v100.total_mib - v100.allocator_mib) * MiB), "a V100's total minus its allocator"),
        "1936 MiB": (f"{v100.allocator_mib // 16} MiB",
                     "1/16 of a V100's allocator: the scale models' cap"),
        "32 GiB": (h(t(S)), "the seed kernel, float32"),
        "34359738368 B": (f"{t(S)} B", "the seed kernel, float32, in bytes"),
        "16 GiB": (h(t(S, "float16")), "the seed kernel stored float16"),
        "17179869184 B": (f"{t(S, 'float16')} B", "the same, in bytes"),
        "48 GiB": (h(3 * t(S, "float16")), "float16 weight, gradient and RMSprop slot"),
        "8 GiB": (h(t(S) // 4), "a quarter of the seed kernel: one of 4 shards"),
        "96 GiB": (h(3 * t(S)), "float32 weight, gradient and RMSprop slot; or Glorot's 3x at initialisation"),
        "128 GiB": (h(4 * t(S)), "4 mirrored copies of the seed kernel"),
        "137438953472 B": (f"{4 * t(S)} B", "the same, in bytes"),
        "256 GiB": (h(8 * t(S)), "8 mirrored copies of the seed kernel"),
        "56.08 GiB": (h(column_no_xla.total), "a 4-way column shard's step peak without XLA"),
        "512 MiB": (h(t(S) // 16 // 4), "a shard of the 1/16 scale model; also [131072, 1024] float32"),
        "139 MiB": (h((allocator - mixed.total) // 16), "the planner's headroom for mixed_float16 column, at 1/16"),
        "64 MiB": (h(t((16384, 1024))), "a [16384, 1024] float32 variable"),
        "256 MiB": (h(4 * t((16384, 1024))), "four copies of it"),
        "2 MiB": (h(t((1024, 512))), "the CI-scale kernel [1024, 512] float32"),
        "4 MiB": (h(2 * t((1024, 512))), "twice the CI-scale kernel"),
        "8 MiB": (h(t((2048, 1024))), "a [2048, 1024] float32 kernel"),
        "3072 B": (f"{2 * 3 * 16 * 32 * dtype_bytes('float32') // 4} B",
                   "what each of 4 devices sends in a ring all-reduce of y[16, 32] float32: 2 (N-1)/N of 2048 B"),
        "4 B": (f"{dtype_bytes('float32')} B", "one float32"),
        "8 KiB": (h(t((32, 64))), "the lookup's SGD gradient: 32 rows of 64 float32 (step_peak_bytes' batch, dim)"),
        "150 GB": (f"{hardware.V100_NVLINK_BYTES_PER_S / 1e9:.0f} GB", "NVLink 2.0 on a V100-SXM2: 6 links"),
        "25 GB": (f"{hardware.V100_NVLINK_BYTES_PER_S / 6 / 1e9:.0f} GB", "one NVLink 2.0 link, per direction"),
        "1 GiB": (h(int(hardware_pool_slack())), "the full-shape run's slack above its shards"),
        "4 GiB": (h(plan_runs.FAR_PEAK), "where the lines put a reader's batch twice past the runs or more, it is run"),
        "64 GiB": (h(2 * t(S)), "two seed-sized tensors: kernel and velocity, or kernel and gradient"),
        "80 GiB": (h(2 * t(S) + 2 * t(S) // 4), "trap 1: gathered kernel and gradient plus the two shards"),
        "48 MiB": (h(t((64, S[0])) + t((64, S[1]))), "the batch x[64, 131072] and y[64, 65536]"),
        "80 MiB": (h(t((64, S[0])) + 3 * t((64, S[1]))), "the planner's activations: x and three [64, 65536]"),
        "1.59 GiB": (h(v100.total_mib * MiB - hardware.jax_pool_bytes(v100.name, 0.95)),
                     "what a 95% JAX pool leaves of a V100-SXM2-32GB"),
    }


def hardware_pool_slack() -> int:
    """Bytes the full-shape tensor-parallel run's pool adds to the seed kernel."""
    from snippets.lib import full_size, units
    from snippets.lib.seed import SEED_SHAPE

    return units.parse_size(full_size.full_shape_pool()) - units.tensor_bytes(SEED_SHAPE)


#: Figures in the prose that are names or inputs, not results: product names, caps a page
#: chooses, the report's own words, constants quoted from TensorFlow's source, run-time guides.
GIVEN_FIGURES = {
    "32 GB": "the V100-32GB's name (and NVIDIA's PCIe '32 GB/s')",
    "80 GB": "the A100/H100-80GB's name",
    "141 GB": "the H200's name",
    "128 GB": "the report's 'the four GPUs hold 128 GB': 4 x 32 GB as sold",
    "200 MiB": "the cap a page chooses for its emulated devices",
    "384 MiB": "a field case's cap, as chosen by its test",
    "1 MiB": "the MaxSizePartitioner example's max_shard_bytes, an input",
    "2 GiB": "a bound performance.md asserts in code (rss < 2 * units.GiB)",
    "128 MiB": "the BFC allocator's split threshold, a constant in bfc_allocator.cc",
    "20 s": "a page's approximate run time (a guide, not a measured figure)",
    "30 s": "a page's approximate run time (a guide, not a measured figure)",
}


def prose_figures(text: str) -> list[str]:
    """Figures in a page's prose: outside fenced blocks, inline code and the generated decide table."""
    prose = re.sub(r"^ *```[^\n]*\n.*?^ *```", "", text, flags=re.S | re.M)
    prose = re.sub(r"<!-- decide:begin.*?<!-- decide:end -->", "", prose, flags=re.S)
    prose = re.sub(r"`[^`]*`", "", prose)
    return [f"{number} {unit}" for number, unit in FIGURE.findall(prose)]


def test_stated_figures_are_what_the_code_computes():
    wrong = {figure: computed for figure, (computed, _) in _stated_figures().items() if computed != figure}
    assert not wrong, f"prose figures that the code no longer gives (stated: computed): {wrong}"


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_prose_figure_is_computed(path):
    text = path.read_text(encoding="utf-8")
    shown = computed_text(text)
    known = set(_stated_figures()) | set(GIVEN_FIGURES)
    unknown = sorted({f for f in prose_figures(text) if not shows(shown, f) and f not in known})
    assert not unknown, (f"{path.name} states {unknown}: print them from a block on the page, or add them "
                         "to _stated_figures() with the code that computes them")


# --- the Chinese pages' figures are the English page's ---------------------------------

DOCS_ZH = ROOT / "docs-zh"


def chinese_paths() -> list[Path]:
    return sorted(DOCS_ZH.rglob("*.md")) if DOCS_ZH.is_dir() else []


@pytest.mark.parametrize("path", chinese_paths(), ids=lambda p: f"zh/{p.relative_to(DOCS_ZH)}")
def test_every_prose_figure_of_a_chinese_page_is_computed(path):
    # Its blocks are the English page's (tests/test_translations.py), so what they show justifies a
    # figure in the Chinese prose as it does in the English; a page of its own (the glossary) has its own.
    text = path.read_text(encoding="utf-8")
    english = DOCS / path.relative_to(DOCS_ZH)
    shown = computed_text(english.read_text(encoding="utf-8") if english.exists() else text)
    known = set(_stated_figures()) | set(GIVEN_FIGURES)
    unknown = sorted({f for f in prose_figures(text) if not shows(shown, f) and f not in known})
    assert not unknown, (f"docs-zh/{path.name} states {unknown}, which neither its English page's blocks nor "
                         "snippets.lib (_stated_figures) give: keep the English figure and unit")
