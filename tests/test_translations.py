"""The Chinese edition is held to the English one: same code, same anchors, never silently stale.

For every page of ``docs-zh/`` (read by :mod:`i18n.pages`, no TensorFlow, no build):

* its front matter names an English page that exists, at the same path;
* every fenced block, ``--8<--`` include line and directive comment (Sybil's skips, the kernel
  line, generated-table markers) is the English page's, byte for byte and in order, so the English
  page's run is its execution; its inline code is code the English page has;
* its headings carry the English page's anchors, in order and level (the language selector and
  every link land on the same section);
* its prose links where the English prose does (a page of its own, the glossary, aside) and states
  the English prose's figures, and none the English page does not show (a notebook's Markdown cells
  too), so no figure is retyped and no link lands elsewhere;
* ``source_sha256`` is the English file's current sha256; a page marked ``outdated: true`` shows a
  banner instead of failing, and is reported here as an expected failure.

English pages without a translation are reported too (expected failures, one per page): the
Chinese edition shows them in English under a banner (``hooks/editions.py``). The Chinese nav
follows the English one; the glossary page and the search's jieba dictionary follow
``i18n/glossary.py``.
"""

from __future__ import annotations

import doctest
import json
import shutil
from pathlib import Path

import pytest
from mkdocs.config import load_config

from i18n import __main__ as cli
from i18n import glossary, pages

ROOT = Path(__file__).resolve().parents[1]
TRANSLATIONS = pages.translations()
IDS = [page.name for page in TRANSLATIONS]


@pytest.mark.parametrize("page", TRANSLATIONS, ids=IDS)
def test_the_code_anchors_and_figures_are_the_english_pages(page):
    problems = pages.problems(page)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", TRANSLATIONS, ids=IDS)
def test_the_translation_is_of_the_current_english_page(page):
    if page.stale and page.outdated:
        pytest.xfail(f"docs-zh/{page.name} is marked outdated (its banner shows): docs/{page.name} changed "
                     f"since it was translated; python -m i18n diff {page.name}")
    assert not page.stale, (
        f"docs/{page.name} changed since docs-zh/{page.name} was translated: see what changed with "
        f"`python -m i18n diff {page.name}`, revisit the translation, then `python -m i18n stamp {page.name}` "
        "(or mark it `outdated: true` to publish it under a banner)")


@pytest.mark.parametrize("name", pages.english_pages())
def test_every_english_page_is_translated(name):
    if not (pages.DOCS_ZH / name).exists():
        pytest.xfail(f"docs/{name} has no translation yet: the Chinese edition shows it in English "
                     "under a banner (本页尚未翻译)")


def _nav(config_file: str) -> list[str]:
    config = load_config(str(ROOT / config_file))

    def walk(items):
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            yield from walk(value) if isinstance(value, list) else [value]

    return list(walk(config["nav"]))


def test_the_chinese_nav_is_the_english_one_plus_the_glossary():
    english, chinese = _nav("mkdocs.yml"), _nav("mkdocs.zh.yml")
    assert [name for name in chinese if name != "glossary.md"] == english, (
        "mkdocs.zh.yml's nav must list mkdocs.yml's pages in the same order (add a new chapter to both)")
    assert "glossary.md" in chinese


def test_the_chinese_config_inherits_and_overrides_what_it_must():
    english, chinese = load_config(str(ROOT / "mkdocs.yml")), load_config(str(ROOT / "mkdocs.zh.yml"))
    assert Path(chinese["docs_dir"]) == pages.DOCS_ZH
    assert Path(chinese["site_dir"]) == Path(english["site_dir"]) / "zh"
    assert chinese["theme"]["language"] == "zh" and english["theme"]["language"] == "en"
    search = chinese["plugins"]["material/search"].config
    assert search.lang == ["en", "zh"] and search.jieba_dict_user == "i18n/jieba_user_dict.txt"
    assert "\\u200b" in search.separator  # jieba's word boundaries in the index
    assert list(chinese["hooks"]) == list(english["hooks"])  # pictures, console, notebook, tables, editions
    assert chinese["markdown_extensions"] == english["markdown_extensions"]
    assert set(chinese["plugins"]) == set(english["plugins"])
    for config, own in ((english, "en"), (chinese, "zh-Hans")):
        langs = [alt["lang"] for alt in config["extra"]["alternate"]]
        assert langs == ["en", "zh-Hans"], langs


def test_the_glossary_page_shows_every_term_and_the_home_page_links_it():
    text = (pages.DOCS_ZH / "glossary.md").read_text(encoding="utf-8")
    rows = {line for line in text.splitlines() if line.startswith("| ")}
    missing = [term.english for term in glossary.TERMS
               if f"| {term.chinese} | {term.english} | {term.meaning} |" not in rows]
    assert not missing, f"docs-zh/glossary.md lacks the rows of {missing} (i18n/glossary.py)"
    assert "(glossary.md)" in (pages.DOCS_ZH / "index.md").read_text(encoding="utf-8")


def test_the_search_dictionary_keeps_the_glossary_terms_whole():
    assert glossary.USER_DICT.read_text(encoding="utf-8") == glossary.user_dict(), "python -m i18n dict --write"
    import jieba

    jieba.setLogLevel(60)
    sentence = "镜像变量和优化器状态都占显存"
    plain = jieba.Tokenizer()
    assert "镜像变量" not in plain.lcut(sentence)  # why the dictionary is needed
    tuned = jieba.Tokenizer()
    tuned.load_userdict(str(glossary.USER_DICT))
    words = tuned.lcut(sentence)
    assert {"镜像变量", "优化器状态", "显存"} <= set(words), words


# --- the checks fail when they should -----------------------------------------------------


ENGLISH = """# Title

Text with `tf.distribute.MirroredStrategy` on 4 GPUs: planned / measured 0.97-1.33.
See [placement](placement.md#why).

<!-- skip: next "needs a GPU" -->
```pycon
>>> 1 + 1
2
```

## Second part

    --8<-- "snippets/lib/layers.py:column"
"""


def _pair(tmp_path: Path, chinese: str, english: str = ENGLISH) -> pages.Translation:
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "docs-zh").mkdir(exist_ok=True)
    (tmp_path / "docs" / "x.md").write_text(english, encoding="utf-8")
    digest = pages.sha256(tmp_path / "docs" / "x.md")
    (tmp_path / "docs-zh" / "x.md").write_text(
        f"---\ntranslation_of: x.md\nsource_sha256: {digest}\n---\n\n{chinese}", encoding="utf-8")
    return pages.translation(tmp_path / "docs-zh" / "x.md", tmp_path / "docs", tmp_path / "docs-zh")


GOOD = """# 标题 {#title}

文字，`tf.distribute.MirroredStrategy`，4 块 GPU：规划 / 实测为0.97-1.33。
见[放置](placement.md#why)。

<!-- skip: next "needs a GPU" -->
```pycon
>>> 1 + 1
2
```

## 第二部分 {#second-part}

    --8<-- "snippets/lib/layers.py:column"
"""


def test_a_faithful_translation_passes(tmp_path):
    page = _pair(tmp_path, GOOD)
    assert pages.problems(page) == [] and not page.stale


@pytest.mark.parametrize(("change", "expected"), [
    ((">>> 1 + 1\n2", ">>> 1 + 1\n3"), "byte for byte"),
    (("```pycon", "```python"), "byte for byte"),
    (('<!-- skip: next "needs a GPU" -->\n', ""), "byte for byte"),
    (('    --8<-- "snippets/lib/layers.py:column"', '--8<-- "snippets/lib/layers.py:column"'), "byte for byte"),
    (("{#second-part}", "{#zweiter-teil}"), "anchors"),
    (("## 第二部分", "### 第二部分"), "anchors"),
    (("`tf.distribute.MirroredStrategy`", "`tf.distribute.MirrorStrategy`"), "inline code"),
], ids=["output", "info-string", "skip-directive", "include-indent", "anchor", "level", "inline-code"])
def test_a_changed_code_block_or_anchor_fails(tmp_path, change, expected):
    problems = pages.problems(_pair(tmp_path, GOOD.replace(*change)))
    assert len(problems) == 1 and expected in problems[0], problems


@pytest.mark.parametrize(("change", "expected"), [
    (("0.97-1.33", "0.97-1.23"), ["the English prose states 1.33, the Chinese prose does not",
                                  "the Chinese prose states 1.23, which the English page does not"]),
    (("4 块", "四块"), ["the English prose states 4, the Chinese prose does not"]),
    (("0.97-1.33。", "0.97-1.33，约 3 倍。"), ["the Chinese prose states 3, which the English page does not"]),
    # A figure the English page prints (the block's output 2) may be quoted.
    (("0.97-1.33。", "0.97-1.33，输出 2。"), []),
], ids=["changed", "spelled-out", "invented", "from-an-output"])
def test_a_figure_not_the_english_pages_fails(tmp_path, change, expected):
    problems = pages.problems(_pair(tmp_path, GOOD.replace(*change)))
    assert [problem.split(": ", 1)[1].split(" (")[0] for problem in problems] == expected, problems


@pytest.mark.parametrize(("change", "own", "expected"), [
    (("placement.md#why", "placement.md#how"), False,
     ["the English prose links to placement.md#why, the Chinese prose does not",
      "the Chinese prose links to placement.md#how, which the English prose does not"]),
    (("见[放置](placement.md#why)。", "见放置。"), False,
     ["the English prose links to placement.md#why, the Chinese prose does not"]),
    # A page only the Chinese edition has (the glossary) may be linked; a missing one may not.
    (("。\n\n<!-- skip", "，[术语表](glossary.md)。\n\n<!-- skip"), True, []),
    (("。\n\n<!-- skip", "，[术语表](glossary.md)。\n\n<!-- skip"), False,
     ["the Chinese prose links to glossary.md, which the English prose does not"]),
], ids=["changed", "dropped", "own-page", "not-its-own"])
def test_a_link_not_the_english_pages_fails(tmp_path, change, own, expected):
    page = _pair(tmp_path, GOOD.replace(*change))
    if own:
        (tmp_path / "docs-zh" / "glossary.md").write_text("# 术语表\n", encoding="utf-8")
    problems = pages.problems(page)
    assert [problem.split(": ", 1)[1].split(" (")[0] for problem in problems] == expected, problems


def test_a_notebooks_markdown_keeps_the_english_figures(tmp_path):
    def notebook(markdown: str) -> dict:
        return {"cells": [{"cell_type": "markdown", "metadata": {}, "source": [markdown]},
                          {"cell_type": "code", "metadata": {}, "source": ["1 + 1"], "execution_count": 1,
                           "outputs": [{"output_type": "execute_result", "data": {"text/plain": ["2"]},
                                        "metadata": {}, "execution_count": 1}]}],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs-zh").mkdir()
    english = tmp_path / "docs" / "n.ipynb"
    english.write_text(json.dumps(notebook("Peaks 0.97-1.33 of the measured.")), encoding="utf-8")
    chinese = notebook("峰值为实测的0.97-1.23，输出 2。")
    chinese["metadata"] = {"translation_of": "n.ipynb", "source_sha256": pages.sha256(english)}
    (tmp_path / "docs-zh" / "n.ipynb").write_text(json.dumps(chinese, ensure_ascii=False), encoding="utf-8")
    page = pages.translation(tmp_path / "docs-zh" / "n.ipynb", tmp_path / "docs", tmp_path / "docs-zh")
    assert [problem.split(": ", 1)[1].split(" (")[0] for problem in pages.problems(page)] == [
        "the English prose states 1.33, the Chinese prose does not",
        "the Chinese prose states 1.23, which the English page does not"]


def test_the_checks_docstring_examples():
    result = doctest.testmod(pages)
    assert result.attempted > 0 and result.failed == 0


def test_a_changed_english_page_makes_the_translation_stale(tmp_path):
    page = _pair(tmp_path, GOOD)
    (tmp_path / "docs" / "x.md").write_text(ENGLISH + "\nMore.\n", encoding="utf-8")
    assert page.stale


def test_a_bad_front_matter_is_refused(tmp_path):
    _pair(tmp_path, GOOD)
    path = tmp_path / "docs-zh" / "x.md"
    path.write_text(path.read_text(encoding="utf-8").replace("translation_of: x.md", "translation_of: y.md"))
    with pytest.raises(pages.PageError, match="docs/y.md, which does not exist"):
        pages.translation(path, tmp_path / "docs", tmp_path / "docs-zh")
    path.write_text(GOOD, encoding="utf-8")
    with pytest.raises(pages.PageError, match="no 'translation_of: x.md'"):
        pages.translation(path, tmp_path / "docs", tmp_path / "docs-zh")


# --- the update command -------------------------------------------------------------------


def test_status_lists_every_translation_and_every_missing_page(capsys):
    code = cli.main(["status"])
    out = capsys.readouterr().out
    for page in TRANSLATIONS:
        assert page.name in out
    for name in pages.missing():
        assert f"{name}" in out and "not translated" in out
    assert code == (1 if any(p.stale and not p.outdated for p in TRANSLATIONS) else 0)


def test_the_translated_version_is_found_in_git_history():
    if not shutil.which("git") or not (ROOT / ".git").exists():
        pytest.skip("no git checkout: the translated version is looked up in git history")
    page = next(p for p in TRANSLATIONS if p.name == "index.md")
    commit = cli.translated_commit(page)
    if page.stale:
        pytest.skip("docs/index.md changed since its translation (reported by the staleness test)")
    assert commit is not None, "the recorded sha256 of docs/index.md is in no commit"
    assert pages.hashlib.sha256(cli._git("show", f"{commit}:docs/index.md")).hexdigest() == page.recorded_sha256


def test_stamp_records_the_current_hash_and_drops_the_outdated_mark(tmp_path, monkeypatch, capsys):
    _pair(tmp_path, GOOD)
    path = tmp_path / "docs-zh" / "x.md"
    path.write_text(path.read_text(encoding="utf-8").replace("source_sha256:", "outdated: true\nsource_sha256:"))
    (tmp_path / "docs" / "x.md").write_text(ENGLISH + "\nMore.\n", encoding="utf-8")
    monkeypatch.setattr(pages, "DOCS", tmp_path / "docs")
    monkeypatch.setattr(pages, "DOCS_ZH", tmp_path / "docs-zh")
    assert cli.main(["stamp", "x.md"]) == 0
    page = pages.translation(path, tmp_path / "docs", tmp_path / "docs-zh")
    assert not page.stale and not page.outdated
    assert cli.main(["stamp", "nope.md"]) == 2
    assert "give a page name under docs-zh/" in capsys.readouterr().err
