"""A Chinese page and the English page it translates: what must be equal, read from the text alone.

What counts (the translators' format, README.md "The Chinese edition"):

* **the skeleton**, in order: every fenced block (opening fence to closing fence, info string
  and indentation included, byte for byte), every ``--8<--`` include line and every directive
  comment (a line that is only an HTML comment: ``<!-- kernel: jax -->``, Sybil's
  ``<!-- skip: ... -->``, ``<!-- decide:begin ... -->``); outside blocks, with their indentation;
* **the headings**: (level, id) of every heading, in order, as Python-Markdown's ``toc`` makes
  them (the English page's slugs; the Chinese page's explicit ``{#id}``);
* **inline code**: every code span of the Chinese page is one the English page has;
* **the links**: the Chinese prose links where the English prose does, to every target it does and
  to no other, except a page the Chinese edition has of its own (the glossary);
* **the figures**: every number the English prose states is in the Chinese prose, and every number
  the Chinese prose states is somewhere on the English page (its prose, blocks or outputs), so a
  translated figure is one the English page's code prints or asserts, not a retyped one;
* **the front matter**: ``translation_of`` (a page under ``docs/``), ``source_sha256`` (the
  sha256 of the English file's bytes translated) and an optional ``outdated: true``.

A notebook's translation (``docs-zh/notebooks/<name>.ipynb``) keeps the same keys in its
top-level ``metadata``, every code cell (source and outputs) of the English notebook and, in its
Markdown cells, the links and figures of the English ones.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import markdown
from mkdocs.utils.meta import get_data

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DOCS_ZH = ROOT / "docs-zh"
#: The extensions that decide heading ids (a subset of mkdocs.yml's, as the translators' brief runs).
TOC_EXTENSIONS = ["toc", "attr_list", "md_in_html", "admonition", "tables",
                  "pymdownx.superfences", "pymdownx.details", "pymdownx.tabbed"]
# CommonMark: a backtick fence's info string holds no backtick (a line that starts with ````x````
# is inline code, not a fence).
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}(?=[^`]*$)|~{3,})(?P<info>.*)$")
_DIRECTIVE = re.compile(r"^[ \t]*<!--.*-->[ \t]*$")
_INCLUDE = re.compile(r"^[ \t]*-{1,}8<-{1,}")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
# A number not inside a name (V100, float16, sha256, 2.21.0's parts stay whole): ASCII boundaries
# only, since Chinese sets digits against its characters, which Python's \w counts as letters.
_FIGURE = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:[.,]\d+)*(?![A-Za-z0-9_])")
# What prose holds that is not stated: link targets and attribute lists (a heading's {#id}).
_NOT_STATED = re.compile(r"\]\([^)]*\)|\{[:#][^}]*\}")
# An inline link's or image's target, without its title: [text](target "title").
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)[^)]*\)")


class PageError(ValueError):
    """A Chinese page whose front matter cannot be read or names no English page."""


@dataclass(frozen=True)
class Piece:
    """One element of a page's skeleton: its kind (``fence``, ``include``, ``directive``), its
    text (a fence's lines, joined) and the line it starts on (1-based)."""

    kind: str
    text: str
    line: int


def sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes (what ``sha256sum`` prints)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def split_front_matter(text: str) -> tuple[str, dict]:
    """``(body, meta)`` of a Markdown page, as MkDocs reads it (``mkdocs.utils.meta.get_data``)."""
    body, meta = get_data(text)
    return body, meta


def skeleton(text: str) -> list[Piece]:
    """The fenced blocks, include lines and directive comments of a Markdown text, in order.

    >>> [p.kind for p in skeleton("<!-- kernel: jax -->\\nx `y`\\n```py\\n1\\n```\\n--8<-- \\"a.py\\"\\n")]
    ['directive', 'fence', 'include']
    """
    lines = text.splitlines()
    pieces, i = [], 0
    while i < len(lines):
        line = lines[i]
        opening = _FENCE.match(line)
        if opening:
            fence = opening.group("fence")
            closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
            end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), len(lines) - 1)
            pieces.append(Piece("fence", "\n".join(lines[i:end + 1]), i + 1))
            i = end + 1
            continue
        if _INCLUDE.match(line):
            pieces.append(Piece("include", line, i + 1))
        elif _DIRECTIVE.match(line):
            pieces.append(Piece("directive", line, i + 1))
        i += 1
    return pieces


def prose(text: str) -> str:
    """The text outside fenced blocks."""
    lines = text.splitlines()
    for piece in reversed([p for p in skeleton(text) if p.kind == "fence"]):
        del lines[piece.line - 1:piece.line - 1 + piece.text.count("\n") + 1]
    return "\n".join(lines)


def code_spans(text: str) -> set[str]:
    """The inline code spans of a text's prose (outside fenced blocks).

    >>> sorted(code_spans("a `x.y` and ``a`b`` ```\\nno\\n```"))
    ['a`b', 'x.y']
    """
    return {match.group(2).strip() for match in _CODE_SPAN.finditer(prose(text))}


def figures(text: str) -> set[str]:
    """The numbers a Markdown text's prose states: outside fenced blocks, code spans, link targets
    and attribute lists, as written (``1.33``, ``30976``, ``2,048``).

    >>> sorted(figures("峰值是24.08 GiB，V100 有 30976 MiB；[见](x/1.md) `0.5` {#id-80}\\n```\\n7\\n```"))
    ['24.08', '30976']
    """
    return set(_FIGURE.findall(_NOT_STATED.sub(" ", _CODE_SPAN.sub(" ", prose(text)))))


def links(text: str) -> set[str]:
    """The targets of a Markdown text's inline links and images, outside fenced blocks and code spans.

    >>> sorted(links('见 [放置](placement.md#why) 和 ![图](a.svg#only-light "t")，`[x](y)`'))
    ['a.svg#only-light', 'placement.md#why']
    """
    return {match.group("target") for match in _LINK.finditer(_CODE_SPAN.sub(" ", prose(text)))}


def link_problems(page: Translation, zh_markdown: str, en_markdown: str) -> list[str]:
    """The links check (module docstring) of one translation, Markdown against Markdown. A target
    only the Chinese edition has (a page of ``docs-zh/`` whose name ``docs/`` lacks) is its own."""
    def own(target: str) -> bool:
        path = target.split("#", 1)[0]
        return bool(path) and "://" not in path and (page.path.parent / path).exists() \
            and not (page.english.parent / path).exists()

    ours, theirs = links(zh_markdown), links(en_markdown)
    found = []
    dropped = sorted(theirs - ours)
    if dropped:
        found.append(f"{page.name}: the English prose links to {', '.join(dropped[:6])}, the Chinese prose does not")
    other = sorted(target for target in ours - theirs if not own(target))
    if other:
        found.append(f"{page.name}: the Chinese prose links to {', '.join(other[:6])}, which the English prose "
                     "does not (link where the English page links)")
    return found


def figure_problems(name: str, zh_markdown: str, en_markdown: str, en_shown: str) -> list[str]:
    """The figures check (module docstring) of one translation: the prose of ``zh_markdown`` against
    that of ``en_markdown``, and against ``en_shown``, everything the English page shows."""
    found = []
    dropped = sorted(figures(en_markdown) - figures(zh_markdown))
    if dropped:
        found.append(f"{name}: the English prose states {', '.join(dropped[:8])}, the Chinese prose does not "
                     "(keep each figure as the English page writes it)")
    invented = sorted(figures(zh_markdown) - set(_FIGURE.findall(en_shown)))
    if invented:
        found.append(f"{name}: the Chinese prose states {', '.join(invented[:8])}, which the English page "
                     "does not (a figure is the English page's, printed or asserted by its code)")
    return found


def headings(text: str) -> list[tuple[int, str]]:
    """``(level, id)`` of every heading of a Markdown text, in order."""
    md = markdown.Markdown(extensions=TOC_EXTENSIONS)
    md.convert(text)
    found: list[tuple[int, str]] = []

    def walk(tokens):
        for token in tokens:
            found.append((token["level"], token["id"]))
            walk(token["children"])

    walk(md.toc_tokens)
    return found


def title(text: str) -> str:
    """A Markdown page's first ``#`` heading, without an explicit ``{#id}``."""
    for line in text.splitlines():
        if line.startswith("# "):
            return re.sub(r"\s*\{[^}]*\}\s*$", "", line[2:]).strip()
    return ""


@dataclass(frozen=True)
class Translation:
    """A page of ``docs-zh/`` and what its front matter says."""

    name: str
    path: Path
    english: Path
    recorded_sha256: str | None
    outdated: bool

    @property
    def stale(self) -> bool:
        """Whether the English file's bytes are no longer the ones translated."""
        return self.recorded_sha256 != sha256(self.english)


def read_meta(path: Path) -> dict:
    """The front matter of a Chinese page (a notebook: its top-level ``metadata``)."""
    if path.suffix == ".ipynb":
        return json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    return split_front_matter(path.read_text(encoding="utf-8"))[1]


def translation(path: Path, docs: Path | None = None, docs_zh: Path | None = None) -> Translation | None:
    """What ``path`` (a file under ``docs_zh``) translates, or None for a page of its own (no
    ``translation_of``: the glossary, whose name ``docs/`` does not have).

    Raises:
        PageError: the front matter names an English page that does not exist, or the page has
            the name of an English page but no ``translation_of``.
    """
    docs, docs_zh = docs or DOCS, docs_zh or DOCS_ZH
    meta = read_meta(path)
    name = path.relative_to(docs_zh).as_posix()
    source = meta.get("translation_of")
    if source is None:
        if (docs / name).exists():
            raise PageError(f"docs-zh/{name}: no 'translation_of: {name}' in its front matter "
                            "(a Chinese page of an English page names it; see README.md)")
        return None
    english = docs / str(source)
    if not english.is_file():
        raise PageError(f"docs-zh/{name}: translation_of names docs/{source}, which does not exist")
    if str(source) != name:
        raise PageError(f"docs-zh/{name}: translates docs/{source}; it must sit at docs-zh/{source}")
    recorded = meta.get("source_sha256")
    return Translation(name, path, english, str(recorded) if recorded else None, meta.get("outdated") is True)


def translations(docs: Path | None = None, docs_zh: Path | None = None) -> list[Translation]:
    """Every translation under ``docs_zh`` (Markdown pages and notebooks), by name."""
    docs, docs_zh = docs or DOCS, docs_zh or DOCS_ZH
    found = []
    for path in sorted([*docs_zh.rglob("*.md"), *docs_zh.rglob("*.ipynb")]):
        if ".ipynb_checkpoints" in path.parts:
            continue
        page = translation(path, docs, docs_zh)
        if page is not None:
            found.append(page)
    return found


def english_pages(docs: Path | None = None) -> list[str]:
    """Every English page (Markdown and notebooks), relative to ``docs``."""
    docs = docs or DOCS
    return sorted(p.relative_to(docs).as_posix() for p in [*docs.rglob("*.md"), *docs.rglob("*.ipynb")]
                  if ".ipynb_checkpoints" not in p.parts)


def missing(docs: Path | None = None, docs_zh: Path | None = None) -> list[str]:
    """English pages with no translation (the Chinese edition shows them in English, under a banner)."""
    docs, docs_zh = docs or DOCS, docs_zh or DOCS_ZH
    return [name for name in english_pages(docs) if not (docs_zh / name).exists()]


def _first_difference(ours: list, theirs: list, show) -> str | None:
    for index, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"#{index + 1}: the Chinese page has {show(a)}, the English page {show(b)}"
    if len(ours) != len(theirs):
        return f"the Chinese page has {len(ours)}, the English page {len(theirs)}"
    return None


def problems(page: Translation) -> list[str]:
    """What keeps a translation from matching its English page (empty: it matches).

    Staleness is not among them (:attr:`Translation.stale`); a missing ``source_sha256`` is.
    """
    found = []
    if not page.recorded_sha256 or not re.fullmatch(r"[0-9a-f]{64}", page.recorded_sha256):
        found.append(f"{page.name}: source_sha256 is missing or not a sha256 (sha256sum docs/{page.name})")
    if page.path.suffix == ".ipynb":
        return found + notebook_problems(page)
    zh_body = split_front_matter(page.path.read_text(encoding="utf-8"))[0]
    en_text = page.english.read_text(encoding="utf-8")
    ours, theirs = skeleton(zh_body), skeleton(en_text)

    def show(piece: Piece) -> str:
        first = piece.text.splitlines()[0] if piece.text else ""
        return f"{piece.kind} at line {piece.line} ({first.strip()[:60]!r})"

    difference = _first_difference([(p.kind, p.text) for p in ours], [(p.kind, p.text) for p in theirs],
                                   lambda kt: kt[0])
    if difference:
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if (a.kind, a.text) != (b.kind, b.text)),
                  min(len(ours), len(theirs)))
        where = (f"{show(ours[at])} differs from the English {show(theirs[at])}"
                 if at < min(len(ours), len(theirs)) else difference)
        found.append(f"{page.name}: code blocks, includes and directives must be the English page's, "
                     f"byte for byte and in order: {where}")
    heads = _first_difference(headings(zh_body), headings(en_text), lambda h: f"h{h[0]} #{h[1]}")
    if heads:
        found.append(f"{page.name}: headings must carry the English anchors in order and level: {heads} "
                     "(end each heading with {#english-id})")
    invented = sorted(code_spans(zh_body) - code_spans(en_text))
    if invented:
        found.append(f"{page.name}: inline code the English page does not have (code is never translated): "
                     + ", ".join(f"`{span}`" for span in invented[:8]))
    return found + link_problems(page, zh_body, en_text) + figure_problems(page.name, zh_body, en_text, en_text)


def notebook_problems(page: Translation) -> list[str]:
    """A notebook translation's code cells (source and outputs) against the English notebook's, and
    its Markdown cells' links and figures against the English ones'."""
    def cells(path: Path) -> tuple[list, str]:
        """``([(source, outputs JSON) of each code cell], the Markdown cells joined)``."""
        found = json.loads(path.read_text(encoding="utf-8"))["cells"]
        code = [("".join(c["source"]), json.dumps(c.get("outputs", []), sort_keys=True))
                for c in found if c["cell_type"] == "code"]
        return code, "\n\n".join("".join(c["source"]) for c in found if c["cell_type"] == "markdown")

    (zh_code, chinese), (en_code, english) = cells(page.path), cells(page.english)
    difference = _first_difference(zh_code, en_code, lambda c: repr(c[0][:60]))
    found = [f"{page.name}: code cells must be the English notebook's: {difference}"] if difference else []
    shown = english + "\n" + "\n".join(source + outputs for source, outputs in en_code)
    return found + link_problems(page, chinese, english) + figure_problems(page.name, chinese, english, shown)
