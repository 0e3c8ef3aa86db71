"""The house rules of snippets/ (CONTRIBUTING.md): a shared layer, one module per page.

Read from the source alone (no import, no TensorFlow): every ``import`` statement
counts, the ones inside functions included, and so does a module run by name
(``python -m snippets.x``, ``"snippets.x:function"``) from code.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNIPPETS = ROOT / "snippets"
DOCS = ROOT / "docs"
MAX_LINES = 600
_RUN = re.compile(r"^(?:-m\s+)?(snippets(?:\.\w+)+)(?::\w+)?$")


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts) if path.is_relative_to(ROOT) else path.stem


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SNIPPETS.rglob("*.py")) if p.stem != "__init__"}


def is_lib(name: str) -> bool:
    return name.startswith("snippets.lib.")


def imports(path: Path, known: set[str]) -> set[str]:
    """The snippets modules ``path`` imports anywhere in it, or runs by name from a string in code."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            match = _RUN.match(node.value.strip())
            if match:
                found.add(match.group(1))
    return {name for name in found if name in known} - {module_name(path)}


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(path, set(found)) for name, path in found.items()}


def pages_with_code() -> dict[str, Path]:
    """Page stem -> page, for pages with a Python block (``pycon`` or ``python``)."""
    return {p.stem: p for p in sorted(DOCS.glob("*.md"))
            if re.search(r"^\s*```(pycon|python)", p.read_text(encoding="utf-8"), re.M)}


def test_the_shared_layer_never_imports_a_page_module():
    bad = {name: sorted(n for n in deps if not is_lib(n)) for name, deps in graph().items() if is_lib(name)}
    assert not {k: v for k, v in bad.items() if v}


def test_no_page_module_imports_another():
    bad = {name: sorted(n for n in deps if not is_lib(n)) for name, deps in graph().items() if not is_lib(name)}
    assert not {k: v for k, v in bad.items() if v}


def test_no_import_cycle():
    edges = graph()
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(edges[node]):
            assert state.get(nxt) != 1, " -> ".join(path + [nxt])
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


def test_no_module_over_600_lines():
    paths = [*SNIPPETS.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "hooks").rglob("*.py"),
             *(ROOT / "i18n").rglob("*.py"),
             *(p for p in (ROOT / "tests").rglob("*.py") if not p.name.startswith("test_"))]
    long = {str(p.relative_to(ROOT)): n for p in paths if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long


def test_every_page_with_code_has_a_module_of_its_name_and_every_page_module_a_page():
    pages = {stem.replace("-", "_") for stem in pages_with_code()}
    page_modules = {name.removeprefix("snippets.") for name in modules() if not is_lib(name)}
    assert pages - page_modules == set(), "pages with code but no snippets/<page>.py"
    all_pages = {p.stem.replace("-", "_") for p in DOCS.glob("*.md")}
    assert page_modules - all_pages == set(), "page modules without a page"


def test_every_shared_module_is_used():
    edges = graph()
    used = set().union(*edges.values())
    named = {name for name in used if name.startswith("snippets.lib.")}
    for path in [*DOCS.rglob("*.md"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]:
        # "snippets.lib.x" anywhere (from snippets.lib.x import y; python -m snippets.lib.x), or "from snippets.lib import x, y".
        for found in re.finditer(r"snippets\.lib\.(\w+)|snippets\.lib import ([\w, ]+)", path.read_text(encoding="utf-8")):
            named.update(f"snippets.lib.{n.strip()}" for n in (found[1] or found[2]).split(","))
    unused = [name for name in modules() if is_lib(name) and name not in named]
    assert not unused


def test_the_checks_see_what_they_should(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""python -m snippets.decide in a docstring does not count."""\n'
                      "def f():\n    from snippets import decide\n"
                      "    return ['-m snippets.reproduce', 'snippets.lib.units:parse_size']\n")
    assert imports(module, {"snippets.decide", "snippets.reproduce", "snippets.lib.units"}) == {
        "snippets.decide", "snippets.reproduce", "snippets.lib.units"}
