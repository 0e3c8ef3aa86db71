"""Field-case IDs resolve inside the repository, through docs/field-cases.md.

A field case (``F`` and two digits) is a failure reported in public that this project restates
and reproduces; docs/field-cases.md holds one entry per case, under a heading with a stable
anchor (``## F12: ... {#f12}``). These tests fail if

* an ID cited anywhere in docs/, snippets/, tests/, benchmarks/ or README.md has no entry;
* an entry links no existing chapter of the site, or links a page or anchor that does not exist;
* an entry names no test file under tests/ that holds a ``test_<ID>...`` test;
* a page of the site mentions an ID in prose (outside code blocks and code spans) without
  linking it to its entry.

They read files only: no TensorFlow, no kernel.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests import mkdocs_config
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGE = DOCS / "field-cases.md"
#: Where IDs are cited. This file is left out: its self-tests hold made-up IDs on purpose.
CITING = [ROOT / "docs", ROOT / "snippets", ROOT / "tests", ROOT / "benchmarks", ROOT / "README.md"]
SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache"}

CASE_ID = re.compile(r"\bF\d\d\b")
CASE_RANGE = re.compile(r"\bF(\d\d)\s*[-\u2013]\s*F(\d\d)\b")  # "F01-F03" cites F02 too
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
LINK = re.compile(r"\[([^\[\]]*)\]\(([^()\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
ATTR_ID = re.compile(r"\s*\{:?\s*#([\w-]+)[^}]*\}\s*$")
ENTRY = re.compile(r"^## (F\d\d)\b.*$", re.M)
TEST_FILE = re.compile(r"`(tests/test_\w+\.py)`")


# --- reading ----------------------------------------------------------------------------------


def cited_ids(text: str) -> set[str]:
    """The IDs a text cites, with ranges such as F01-F03 expanded."""
    ids = set(CASE_ID.findall(text))
    for first, last in CASE_RANGE.findall(text):
        ids.update(f"F{n:02d}" for n in range(int(first), int(last) + 1))
    return ids


def citing_files() -> list[Path]:
    files = []
    for place in CITING:
        candidates = [place] if place.is_file() else sorted(place.rglob("*"))
        for path in candidates:
            if path.is_file() and not SKIP_DIRS.intersection(path.parts) and path != Path(__file__).resolve():
                files.append(path)
    return files


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # images and other binaries cite nothing
        return None


def blank(match: re.Match) -> str:
    """The match replaced by spaces, newlines kept: positions and line numbers stay put."""
    return re.sub(r"[^\n]", " ", match.group(0))


def prose(markdown: str) -> str:
    """The markdown with fenced code blocks, HTML comments and code spans blanked out."""
    lines, fence = [], None
    for line in markdown.split("\n"):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            lines.append("")
        elif fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                    and not line.strip()[len(match.group(1)):].strip():
                fence = None
            lines.append("")
        else:
            lines.append(line)
    text = "\n".join(lines)
    text = HTML_COMMENT.sub(blank, text)
    return CODE_SPAN.sub(blank, text)


def markdown_of(path: Path) -> str:
    """A page's markdown: the file itself, or a notebook's markdown cells."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return path.read_text(encoding="utf-8")


def site_pages() -> list[Path]:
    return sorted([*DOCS.rglob("*.md"), *DOCS.rglob("*.ipynb")])


def nav_pages() -> set[Path]:
    config = mkdocs_config.load(ROOT / "mkdocs.yml")
    found: set[Path] = set()

    def walk(node):
        if isinstance(node, str):
            found.add((DOCS / node).resolve())
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config["nav"])
    return found


def anchors(path: Path) -> set[str]:
    """The heading ids the toc extension gives a markdown page ({#id} wins over the slug)."""
    ids: set[str] = set()
    for line in prose_keep_headings(path.read_text(encoding="utf-8")).split("\n"):
        match = HEADING.match(line)
        if not match:
            continue
        text = match.group(2)
        explicit = ATTR_ID.search(text)
        if explicit:
            ids.add(explicit.group(1))
            continue
        text = LINK.sub(lambda m: m.group(1), text).replace("`", "").replace("**", "")
        slug, n = slugify(text, "-"), 0
        candidate = slug
        while candidate in ids:
            n += 1
            candidate = f"{slug}_{n}"
        ids.add(candidate)
    ids.update(re.findall(r"""\bid=["']([\w-]+)["']""", path.read_text(encoding="utf-8")))
    return ids


def prose_keep_headings(markdown: str) -> str:
    """Fenced code blanked out (a `# comment` in a block is no heading); code spans kept."""
    lines, fence = [], None
    for line in markdown.split("\n"):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
        elif fence is not None and match and match.group(1)[0] == fence[0]:
            fence = None
        elif fence is None:
            lines.append(line)
            continue
        lines.append("")
    return "\n".join(lines)


def resolve(page: Path, target: str) -> tuple[Path, str] | None:
    """A relative link's page and anchor; None for links that leave the site."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return None
    path, _, anchor = target.partition("#")
    return ((page.parent / path).resolve() if path else page.resolve()), anchor


def entries() -> dict[str, str]:
    """ID -> that entry's text (its heading up to the next level-2 heading)."""
    text = PAGE.read_text(encoding="utf-8")
    heads = list(re.finditer(r"^## .*$", text, re.M))
    found = {}
    for i, head in enumerate(heads):
        match = ENTRY.match(head.group(0))
        if match:
            end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
            found[match.group(1)] = text[head.start():end]
    return found


def unlinked_mentions(markdown: str, page: Path) -> list[tuple[int, str]]:
    """(line, ID) for each prose mention that is not a link to the ID's entry.

    On docs/field-cases.md itself, the entry headings (``## F12: ...``) are the definitions.
    """
    text = prose(markdown)
    links = [(m.start(1), m.end(1), m.group(2)) for m in LINK.finditer(text)]
    bad = []
    for mention in CASE_ID.finditer(text):
        line_start = text.rfind("\n", 0, mention.start()) + 1
        line_no = text.count("\n", 0, mention.start()) + 1
        if page.resolve() == PAGE.resolve() and ENTRY.match(text, line_start):
            continue
        ok = False
        for start, end, target in links:
            if start <= mention.start() < end:
                where = resolve(page, target)
                ok = where is not None and where == (PAGE.resolve(), mention.group(0).lower())
                break
        if not ok:
            bad.append((line_no, mention.group(0)))
    return bad


# --- the repository ---------------------------------------------------------------------------


def test_the_page_is_in_the_nav():
    assert PAGE.resolve() in nav_pages(), "docs/field-cases.md is missing from mkdocs.yml's nav"


def test_every_entry_has_its_stable_anchor():
    text = PAGE.read_text(encoding="utf-8")
    problems = []
    ids = [m.group(1) for m in ENTRY.finditer(text)]
    if len(ids) != len(set(ids)):
        problems.append(f"duplicate entries: {sorted(i for i in ids if ids.count(i) > 1)}")
    for heading in ENTRY.finditer(text):
        explicit = ATTR_ID.search(heading.group(0))
        want = heading.group(1).lower()
        if not explicit or explicit.group(1) != want:
            problems.append(f"{heading.group(0)!r} needs the anchor {{#{want}}}")
    assert not problems, "\n".join(problems)


def test_every_cited_case_has_an_entry():
    defined = set(entries())
    missing = []
    for path in citing_files():
        text = read_text(path)
        if text is None:
            continue
        for case in sorted(cited_ids(text) - defined):
            line = next((n for n, l in enumerate(text.split("\n"), 1) if case in l), 0)
            missing.append(f"{path.relative_to(ROOT)}:{line}: {case} has no entry on docs/field-cases.md")
    assert not missing, "\n".join(missing)


def test_every_entry_links_an_existing_chapter():
    nav = nav_pages()
    problems = []
    for case, text in entries().items():
        chapters = []
        for match in LINK.finditer(prose(text)):
            where = resolve(PAGE, match.group(2))
            if where and where[0] != PAGE.resolve() and where[0].suffix == ".md":
                chapters.append(where[0])
        if not chapters:
            problems.append(f"{case}: links no chapter")
        for chapter in chapters:
            if chapter not in nav:
                problems.append(f"{case}: {chapter.relative_to(ROOT)} is not a chapter in mkdocs.yml's nav")
    assert not problems, "\n".join(problems)


def test_every_link_on_the_page_resolves():
    problems = []
    for match in LINK.finditer(prose(PAGE.read_text(encoding="utf-8"))):
        where = resolve(PAGE, match.group(2))
        if where is None:
            continue
        path, anchor = where
        if not path.is_file() or DOCS.resolve() not in path.parents:
            problems.append(f"{match.group(2)}: no such page in docs/")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            problems.append(f"{match.group(2)}: {path.name} has no heading #{anchor}")
    assert not problems, "\n".join(problems)


def test_every_entry_names_its_test():
    problems = []
    for case, text in entries().items():
        files = TEST_FILE.findall(text)
        if not files:
            problems.append(f"{case}: names no test file (`tests/test_....py`)")
            continue
        for name in files:
            if not (ROOT / name).is_file():
                problems.append(f"{case}: {name} does not exist")
        test = re.compile(rf"^\s*def test_{case}(_|\()", re.M)
        if not any((ROOT / n).is_file() and test.search((ROOT / n).read_text(encoding="utf-8")) for n in files):
            problems.append(f"{case}: none of {files} defines a test_{case}_... test")
    assert not problems, "\n".join(problems)


def test_every_mention_on_a_page_links_to_its_entry():
    problems = []
    for page in site_pages():
        for line, case in unlinked_mentions(markdown_of(page), page):
            cell = " (a markdown cell)" if page.suffix == ".ipynb" else f":{line}"
            problems.append(
                f"{page.relative_to(ROOT)}{cell}: {case} should be a link, "
                f"[field case {case}](field-cases.md#{case.lower()}) (the path relative to the page)"
            )
    assert not problems, "\n".join(problems)


# --- the checks themselves --------------------------------------------------------------------


def test_prose_scanner_flags_bare_and_misdirected_mentions_and_skips_code():
    page = DOCS / "chapter.md"
    text = "\n".join([
        "Linked: [field case F12](field-cases.md#f12), and",
        "a link that wraps: [field",
        "case F13](field-cases.md#f13).",
        "Bare: field case F14.",
        "Wrong anchor: [F15](field-cases.md#f16).",
        "Elsewhere: [F16](placement.md#f16).",
        "In a span: `F17`.",
        "```python",
        "# F18 in a block",
        "```",
        "    ```pycon",
        "    >>> 'F19'",
        "    ```",
        "<!-- F20 in a comment -->",
    ])
    assert unlinked_mentions(text, page) == [(4, "F14"), (5, "F15"), (6, "F16")]
    notebook = DOCS / "notebooks" / "nb.ipynb"
    assert unlinked_mentions("[F12](../field-cases.md#f12)", notebook) == []
    assert unlinked_mentions("[F12](field-cases.md#f12)", notebook) == [(1, "F12")]


def test_ranges_cite_every_case_in_them():
    assert cited_ids("cases F01-F03, F06") == {"F01", "F02", "F03", "F06"}


def test_anchors_follow_the_toc_slugs():
    ids = anchors(DOCS / "placement.md")
    assert "trap-tfdevice-inside-strategyscope" in ids
    assert "oom" in anchors(DOCS / "troubleshooting.md")

