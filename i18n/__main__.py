"""``python -m i18n``: keep the Chinese edition in step with the English one.

    python -m i18n status            which translations are stale, outdated or missing (exit 1 if any is stale)
    python -m i18n diff PAGE         the English page's changes since the version PAGE translates
    python -m i18n stamp PAGE        record the English page's current sha256 in PAGE (after revisiting it)
    python -m i18n dict [--write]    check (or write) the search's jieba user dictionary from i18n/glossary.py

PAGE is a name under ``docs-zh/`` (``placement.md``). The version a translation was made from is
found by its recorded sha256 among the English file's versions in git history (``git log`` of
``docs/PAGE``: every blob is hashed until one matches). Bad input: one line naming the fix, exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
from pathlib import Path

from i18n import glossary, pages

ROOT = pages.ROOT


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout


def translated_commit(page: pages.Translation) -> str | None:
    """The newest commit whose ``docs/<page>`` has the bytes the translation recorded, or None."""
    path = page.english.relative_to(ROOT).as_posix()
    for commit in _git("log", "--format=%H", "--", path).decode().split():
        try:
            blob = _git("show", f"{commit}:{path}")
        except subprocess.CalledProcessError:  # the file did not exist there (a rename)
            continue
        if hashlib.sha256(blob).hexdigest() == page.recorded_sha256:
            return commit
    return None


def status() -> int:
    """Print each translation's state and the English pages without one; 1 if any is stale."""
    stale = 0
    for page in pages.translations(docs_zh=pages.DOCS_ZH):
        if not page.stale:
            state = "up to date"
        elif page.outdated:
            state = "outdated (marked: the page shows a banner)"
        else:
            stale += 1
            state = f"STALE: docs/{page.name} changed (python -m i18n diff {page.name})"
        print(f"{page.name:32} {state}")
    for name in pages.missing(docs_zh=pages.DOCS_ZH):
        print(f"{name:32} not translated (the Chinese edition shows the English page under a banner)")
    return 1 if stale else 0


def _page(name: str) -> pages.Translation:
    path = pages.DOCS_ZH / name
    if not path.is_file():
        raise SystemExit(f"no docs-zh/{name}: give a page name under docs-zh/, e.g. placement.md")
    page = pages.translation(path, docs_zh=pages.DOCS_ZH)
    if page is None:
        raise SystemExit(f"docs-zh/{name} translates no English page (no translation_of)")
    return page


def diff(name: str) -> int:
    """Print ``git diff`` of the English page from the translated version to the working tree."""
    page = _page(name)
    if not page.stale:
        print(f"docs/{page.name} is unchanged since docs-zh/{page.name} was translated")
        return 0
    commit = translated_commit(page)
    if commit is None:
        raise SystemExit(f"no version of docs/{page.name} in git history has the recorded sha256 "
                         f"{page.recorded_sha256}: compare by hand, then python -m i18n stamp {page.name}")
    print(f"# docs/{page.name}: translated at {commit[:12]}; changes since then:", flush=True)
    sys.stdout.buffer.write(_git("diff", commit, "--", page.english.relative_to(ROOT).as_posix()))
    return 0


def stamp(name: str) -> int:
    """Write the English page's current sha256 into the translation and drop an ``outdated`` mark."""
    page = _page(name)
    digest = pages.sha256(page.english)
    if page.path.suffix == ".ipynb":
        raise SystemExit(f"docs-zh/{name}: edit source_sha256 in the notebook's metadata to {digest}")
    text = page.path.read_text(encoding="utf-8")
    head, sep, body = text.partition("\n---\n")
    head = re.sub(r"(?m)^source_sha256:.*$", f"source_sha256: {digest}", head)
    if "source_sha256:" not in head:
        head += f"\nsource_sha256: {digest}"
    head = re.sub(r"(?m)^outdated:.*\n?", "", head).rstrip("\n")
    page.path.write_text(head + sep + body, encoding="utf-8")
    problems = pages.problems(pages.translation(page.path, docs_zh=pages.DOCS_ZH))
    print(f"docs-zh/{name}: source_sha256 {digest}")
    for problem in problems:
        print(f"  still to fix: {problem}")
    return 1 if problems else 0


def dictionary(write: bool) -> int:
    """Check (or write) ``i18n/jieba_user_dict.txt`` against the glossary."""
    wanted = glossary.user_dict()
    if write:
        glossary.USER_DICT.write_text(wanted, encoding="utf-8")
        return 0
    current = glossary.USER_DICT.read_text(encoding="utf-8") if glossary.USER_DICT.exists() else ""
    if current != wanted:
        print("i18n/jieba_user_dict.txt is not the glossary's: python -m i18n dict --write")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m i18n", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("status", help="stale, outdated and missing translations")
    for name, text in (("diff", "the English changes since the translated version"),
                       ("stamp", "record the English page's current sha256")):
        commands.add_parser(name, help=text).add_argument("page", help="a page under docs-zh/, e.g. placement.md")
    commands.add_parser("dict", help="the jieba user dictionary").add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "status":
            return status()
        if args.command == "dict":
            return dictionary(args.write)
        return {"diff": diff, "stamp": stamp}[args.command](args.page)
    except (SystemExit, pages.PageError) as error:
        if isinstance(error, SystemExit) and not isinstance(error.code, str):
            raise
        print(str(error), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
