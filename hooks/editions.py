"""MkDocs hook: the English and Chinese editions as one site (``site/`` and ``site/zh/``).

Registered in ``mkdocs.yml`` under ``hooks:`` (``mkdocs.zh.yml`` inherits it). In both editions:

* the language selector (``extra.alternate``) links each page to the same page in the other
  edition, or to the other edition's home page where that page does not exist (Material's own
  links go to the home page, and its script finds the same page only from a sitemap whose host
  and port match the reader's);
* the home page's head carries absolute ``hreflang`` alternates (``en``, ``zh-Hans``,
  ``x-default``) and every other page none: Material's script fetches ``sitemap.xml`` next to
  every ``<link rel="alternate">`` href, so a per-page link would request a sitemap that does not
  exist. The per-page alternates are in each edition's ``sitemap.xml`` instead
  (``xhtml:link``, the sitemap form of ``hreflang`` that search engines read like the head's);
* ``site_url`` is checked: the Chinese edition's must be the English one's followed by ``zh/``.

In the Chinese edition (``docs_dir: docs-zh``):

* every file of ``docs/`` that ``docs-zh/`` lacks is added from ``docs/``: the stylesheet, and each
  page not translated yet, which is shown in English under a banner (本页尚未翻译) with its
  canonical link on the English page and kept out of the Chinese sitemap;
* every translated page gets a header saying that its code and outputs are the English page's,
  executed there, with a link to it, and a banner if its front matter says ``outdated: true``;
* a page's front matter must name an English page that exists (:func:`i18n.pages.translation`),
  or the build fails. That code and headings match is tested (``tests/test_translations.py``).
"""

from __future__ import annotations

import gzip
import html
import logging
import os
import posixpath
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from i18n import pages as zh_pages  # noqa: E402  (MkDocs loads hooks by path)

ZH = "zh/"
LANG = {"en": "en", "zh": "zh-Hans"}
SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
XHTML_NS = "http://www.w3.org/1999/xhtml"
SELECTOR = re.compile(r'<a href="[^"]*" hreflang="(?P<lang>[^"]+)" class="md-select__link">')
HEAD_ALTERNATE = re.compile(r'\s*<link rel="alternate" href="[^"]*" hreflang="[^"]+">')

_state: dict = {"serving": False, "fallbacks": set(), "urls": {}}


def is_zh(config) -> bool:
    return Path(config["docs_dir"]).resolve() == zh_pages.DOCS_ZH


def bases(config) -> dict[str, str]:
    """Absolute base URL of each edition, from this edition's ``site_url``."""
    url = config["site_url"] or "http://127.0.0.1:8000/"
    url = url if url.endswith("/") else url + "/"
    english = url[: -len(ZH)] if is_zh(config) and url.endswith("/" + ZH) else url
    return {"en": english, "zh": english + ZH}


def relative(target: str, current: str) -> str:
    """A link from the page at site path ``current`` to site path ``target`` (both directory URLs,
    ``""`` for the root).

    >>> relative("zh/placement/", "placement/"), relative("", "zh/"), relative("zh/", "")
    ('../zh/placement/', '../', 'zh/')
    """
    link = posixpath.relpath("/" + target, "/" + (current or ""))
    return "./" if link == "." else link + "/"


# --- the build's events ---------------------------------------------------------------


def on_startup(command, dirty) -> None:
    _state["serving"] = command == "serve"


@event_priority(100)  # before the search plugin loads jieba's dictionaries, which logs at DEBUG
def on_config(config):
    logging.getLogger("jieba").setLevel(logging.WARNING)
    if is_zh(config) and not _state["serving"]:
        expected = os.environ.get("SITE_URL", "http://127.0.0.1:8000/").rstrip("/") + "/" + ZH
        if config["site_url"] != expected:
            raise PluginError(f"site_url of the Chinese edition is {config['site_url']}, not SITE_URL + zh/: "
                              f"set SITE_URL_ZH={expected} (the Makefile does)")
    _state["fallbacks"] = set()
    _state["urls"] = {}
    return config


@event_priority(100)  # before mkdocs-jupyter wraps notebooks: a fallback notebook must be one too
def on_files(files, config):
    """Chinese edition: check each page's front matter; add what ``docs-zh/`` lacks from ``docs/``."""
    if not is_zh(config):
        return files
    from mkdocs.structure.files import File

    for file in files.documentation_pages():
        try:
            zh_pages.translation(Path(file.abs_src_path))
        except zh_pages.PageError as error:
            raise PluginError(str(error)) from None
    present = {file.src_uri for file in files}
    for path in sorted(zh_pages.DOCS.rglob("*")):
        uri = path.relative_to(zh_pages.DOCS).as_posix()
        if path.is_dir() or uri in present or ".ipynb_checkpoints" in path.parts:
            continue
        # A File of docs/ (not File.generated: mkdocs-jupyter's wrapper reads a notebook's path
        # from its src_dir, which a generated file lacks).
        files.append(File(uri, src_dir=str(zh_pages.DOCS), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
        if path.suffix in (".md", ".ipynb"):
            _state["fallbacks"].add(uri)
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    """A fallback page's canonical link is the English page."""
    _state["urls"][page.url] = page.file.src_uri
    if is_zh(config) and page.file.src_uri in _state["fallbacks"]:
        page.canonical_url = bases(config)["en"] + page.url
    return markdown


def _notice(kind: str, title: str, text: str) -> str:
    return (f'<div class="admonition {kind} zh-notice"><p class="admonition-title">{title}</p>'
            f"<p>{text}</p></div>")


def on_page_content(content: str, page, config, files) -> str:
    """Chinese edition: the header of a translated page, or the banner of a page not translated yet."""
    if not is_zh(config):
        return content
    uri = page.file.src_uri
    english = zh_pages.DOCS / uri
    if not english.exists():  # a page of its own (the glossary)
        return content
    link = (f'<a href="{relative(page.url, ZH + page.url)}" hreflang="en" lang="en">'
            f"{html.escape(zh_pages.title(english.read_text(encoding='utf-8')) or 'English')}</a>")
    if uri in _state["fallbacks"]:
        notice = _notice("warning", "本页尚未翻译",
                         f"本页还没有中文译文，下面是英文原文（{link}）。")
    else:
        notice = _notice("info", "代码来自英文原版",
                         f"本页译自英文页面 {link}。页面上每个代码块及其输出都与英文页面逐字节相同"
                         "（测试逐一核对），并在 CI 中作为英文页面的一部分执行。")
        if page.meta.get("outdated") is True:
            notice = _notice("warning", "译文可能已过时",
                             f"英文页面在本译文之后有过修改，译文尚未跟进；请以英文页面为准：{link}。") + notice
    head, sep, rest = content.partition("</h1>")
    return head + sep + notice + rest if sep else notice + content


def _counterpart(page, config, lang: str) -> str | None:
    """Site path of ``page`` in edition ``lang`` (``"zh/placement/"``), or None if it has none."""
    if lang == "en":
        return page.url if (zh_pages.DOCS / page.file.src_uri).exists() else None
    return ZH + page.url  # every English page is in the Chinese edition, translated or not


def on_post_page(output: str, page, config) -> str:
    """The selector's links go to the same page in each edition; hreflang on the home page only."""
    base = bases(config)
    here = (ZH if is_zh(config) else "") + page.url

    def selector(match: re.Match) -> str:
        lang = "zh" if match.group("lang").startswith("zh") else "en"
        target = _counterpart(page, config, lang)
        href = relative(target if target is not None else (ZH if lang == "zh" else ""), here)
        return f'<a href="{href}" hreflang="{LANG[lang]}" class="md-select__link">'

    output = SELECTOR.sub(selector, output)
    head = ""
    if page.is_homepage:
        head = "".join(f'\n    <link rel="alternate" href="{base[lang]}" hreflang="{LANG[lang]}">' for lang in LANG)
        head += f'\n    <link rel="alternate" href="{base["en"]}" hreflang="x-default">'
    alternates = list(HEAD_ALTERNATE.finditer(output))
    if alternates:
        first, last = alternates[0], alternates[-1]
        output = output[: first.start()] + head + HEAD_ALTERNATE.sub("", output[first.start(): last.end()]) \
            + output[last.end():]
    return output


def translated(uri: str) -> bool:
    """Whether ``docs-zh/`` holds a translation of the English page ``uri``."""
    return (zh_pages.DOCS_ZH / uri).exists() and (zh_pages.DOCS / uri).exists()


def on_post_build(config) -> None:
    """Each edition's sitemap: its own pages only, each with its ``hreflang`` alternates."""
    ET.register_namespace("", SITEMAP_NS)
    ET.register_namespace("xhtml", XHTML_NS)
    site = Path(config["site_dir"])
    path = site / "sitemap.xml"
    if not path.exists():
        return
    base = bases(config)
    own = base["zh"] if is_zh(config) else base["en"]
    tree = ET.parse(path)
    urlset = tree.getroot()
    for url in list(urlset):
        loc = url.find(f"{{{SITEMAP_NS}}}loc").text or ""
        if not loc.startswith(own) or (not is_zh(config) and loc.startswith(base["zh"])):
            urlset.remove(url)  # a fallback page: its canonical is the English page
            continue
        uri = _state["urls"].get(loc[len(own):])
        if uri is None or not translated(uri):
            continue
        for lang, href in (("en", base["en"]), ("zh", base["zh"]), ("x-default", base["en"])):
            ET.SubElement(url, f"{{{XHTML_NS}}}link", rel="alternate", hreflang=LANG.get(lang, lang),
                          href=href + loc[len(own):])
    ET.indent(tree)
    data = ET.tostring(urlset, encoding="utf-8", xml_declaration=True)
    path.write_bytes(data)
    (site / "sitemap.xml.gz").write_bytes(gzip.compress(data, mtime=0))


def on_post_template(output: str, template_name: str, config) -> str:
    """The 404 page (served at any depth): absolute selector links, no hreflang."""
    if template_name != "404.html":
        return output
    base = bases(config)

    def selector(match: re.Match) -> str:
        lang = "zh" if match.group("lang").startswith("zh") else "en"
        return f'<a href="{base[lang]}" hreflang="{LANG[lang]}" class="md-select__link">'

    return HEAD_ALTERNATE.sub("", SELECTOR.sub(selector, output))
