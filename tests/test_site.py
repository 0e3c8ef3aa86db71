"""The published site, checked offline: both editions built as the README builds them.

Built once for this module, into a temporary directory, with ``SITE_URL`` set to a project-site
address (a path under a host, as GitHub Pages gives one), each build bounded in time. Checked:

* ``site_url`` comes from ``SITE_URL``: every page's canonical link is under it, the Chinese
  edition's under ``SITE_URL`` + ``zh/``; a page not translated yet points its canonical link at
  the English page;
* a sitemap per edition, listing that edition's own pages, each translated page with reciprocal
  ``hreflang`` alternates (en, zh-Hans, x-default); the home pages carry them in the head too;
* a 404 page per edition; the language selector of every page links to a page that exists;
* no page loads anything from another host (scripts, stylesheets, images, fonts; CSS included);
* the Chinese edition: every translated page has the header naming the English page that runs its
  code, every untranslated one the banner; the build-time hooks ran (pictures, console copy text,
  the notebook rendered as a page, not JSON); the search index is cut by jieba with the glossary
  kept whole;
* the Pages workflow runs the README's build command and publishes ``site/``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
import yaml

from i18n import pages

ROOT = Path(__file__).resolve().parents[1]
SITE_URL = "https://example.org/tensor/"
SITEMAP = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
XHTML = "{http://www.w3.org/1999/xhtml}"
BUILD_COMMAND = "make build"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """Both editions, English first (its build cleans the directory), as ``make build`` runs them."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "SITE_URL": SITE_URL, "SITE_URL_ZH": SITE_URL + "zh/"}
    for config, site_dir in (("mkdocs.yml", out), ("mkdocs.zh.yml", out / "zh")):
        build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", config,
                                "--site-dir", str(site_dir)], cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=300)
        assert build.returncode == 0, f"{config} failed:\n{build.stdout}\n{build.stderr}"
    return out


class Tags(HTMLParser):
    """Every start tag of a page, with its attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def tags(path: Path) -> list[tuple[str, dict]]:
    parser = Tags()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser.tags


def html_pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def url_of(site: Path, path: Path) -> str:
    """The published address of a built file."""
    rel = path.relative_to(site).as_posix()
    return SITE_URL + (rel[: -len("index.html")] if rel.endswith("index.html") else rel)


def test_canonical_links_are_under_site_url(site):
    for path in html_pages(site):
        if path.name == "404.html":
            continue
        (canonical,) = [a["href"] for t, a in tags(path) if t == "link" and a.get("rel") == "canonical"]
        rel = path.relative_to(site).as_posix()
        uri = rel.removeprefix("zh/").removesuffix("index.html")
        source = next((name for name in pages.english_pages()
                       if name.rsplit(".", 1)[0] + "/" == uri or (uri == "" and name == "index.md")), None)
        if rel.startswith("zh/") and source is not None and source in pages.missing():
            assert canonical == SITE_URL + uri, f"{rel}: untranslated, so canonical is the English page"
        else:
            assert canonical == url_of(site, path), f"{rel}: canonical {canonical}"


def _sitemap(site: Path) -> dict[str, dict[str, str]]:
    urls = {}
    for url in ET.parse(site / "sitemap.xml").getroot():
        loc = url.find(f"{SITEMAP}loc").text
        urls[loc] = {link.get("hreflang"): link.get("href") for link in url.findall(f"{XHTML}link")}
    return urls


def test_each_edition_has_a_sitemap_of_its_own_pages_with_reciprocal_hreflang(site):
    english, chinese = _sitemap(site), _sitemap(site / "zh")
    assert all(loc.startswith(SITE_URL) and not loc.startswith(SITE_URL + "zh/") for loc in english)
    assert all(loc.startswith(SITE_URL + "zh/") for loc in chinese)
    translated = {name for name in pages.english_pages() if name not in pages.missing()}
    expected_zh = {SITE_URL + "zh/" + ("" if n == "index.md" else n.rsplit(".", 1)[0] + "/") for n in translated}
    assert expected_zh | {SITE_URL + "zh/glossary/"} == set(chinese), "the Chinese sitemap lists the translations"
    assert len(english) == len(pages.english_pages())
    pairs = 0
    for loc, alternates in chinese.items():
        if not alternates:
            assert loc == SITE_URL + "zh/glossary/"  # a page of its own
            continue
        en = alternates["en"]
        assert alternates == {"en": en, "zh-Hans": loc, "x-default": en}
        assert english[en] == alternates, f"{en} and {loc} must name each other"
        pairs += 1
    assert pairs == len(translated) and pairs >= 1
    for edition in (site, site / "zh"):
        assert (edition / "sitemap.xml.gz").exists() and (edition / "404.html").exists()


def test_the_home_pages_carry_hreflang_in_the_head(site):
    expected = {"en": SITE_URL, "zh-Hans": SITE_URL + "zh/", "x-default": SITE_URL}
    for home in (site / "index.html", site / "zh" / "index.html"):
        found = {a["hreflang"]: a["href"] for t, a in tags(home) if t == "link" and a.get("rel") == "alternate"}
        assert found == expected, home
    # Elsewhere none: Material's script would fetch sitemap.xml beside each one (see hooks/editions.py).
    assert not [a for t, a in tags(site / "placement" / "index.html") if t == "link" and a.get("rel") == "alternate"]


def test_the_language_selector_links_pages_that_exist(site):
    checked = 0
    for path in html_pages(site):
        if path.name == "404.html":
            links = [a["href"] for t, a in tags(path) if t == "a" and "md-select__link" in a.get("class", "")]
            assert sorted(links) == [SITE_URL, SITE_URL + "zh/"], path
            continue
        base = url_of(site, path)
        for tag, attrs in tags(path):
            if tag == "a" and "md-select__link" in attrs.get("class", ""):
                target = urljoin(base, attrs["href"]).removeprefix(SITE_URL)
                assert (site / target / "index.html").exists(), f"{path.relative_to(site)} -> {attrs['href']}"
                checked += 1
    assert checked >= 4 * len(pages.english_pages())
    # The same page in the other edition, where there is one.
    links = {a["hreflang"]: a["href"] for t, a in tags(site / "placement" / "index.html")
             if t == "a" and "md-select__link" in a.get("class", "")}
    assert links == {"en": "./", "zh-Hans": "../zh/placement/"}


#: Attributes that make a browser load something by itself (not a link a reader follows).
LOADS = {"script": "src", "img": "src", "iframe": "src", "source": "src", "video": "src", "audio": "src",
         "embed": "src", "object": "data"}
LINK_LOADS = {"stylesheet", "icon", "preload", "modulepreload", "manifest", "prefetch", "apple-touch-icon"}
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")]+)|@import\s+['"]([^'"]+)""")


def leaves(url: str) -> bool:
    parts = urlsplit(url)
    return bool(parts.netloc) and not url.startswith(SITE_URL)


def test_nothing_is_loaded_from_another_host(site):
    outside = []
    for path in html_pages(site):
        text = path.read_text(encoding="utf-8")
        for tag, attrs in tags(path):
            url = attrs.get(LOADS.get(tag, ""), "") or (
                attrs.get("href", "") if tag == "link" and set((attrs.get("rel") or "").split()) & LINK_LOADS else "")
            if url and leaves(url):
                outside.append(f"{path.relative_to(site)}: <{tag}> {url}")
        outside += [f"{path.relative_to(site)}: css {u}" for m in CSS_URL.finditer(text) for u in m.groups() if u and leaves(u)]
    for css in site.rglob("*.css"):
        outside += [f"{css.relative_to(site)}: {u}" for m in CSS_URL.finditer(css.read_text(encoding="utf-8"))
                    for u in m.groups() if u and leaves(u)]
    assert not outside, "\n".join(outside[:20])
    assert not leaves("../assets/x.js") and leaves("https://fonts.googleapis.com/css") and not leaves(SITE_URL + "x")


def test_every_chinese_page_says_where_its_code_runs(site):
    for name in pages.english_pages():
        uri = "" if name == "index.md" else name.rsplit(".", 1)[0] + "/"
        text = (site / "zh" / uri / "index.html").read_text(encoding="utf-8")
        english_link = re.search(r'zh-notice"><p class="admonition-title">([^<]+)</p><p>[^<]*<a href="([^"]+)" hreflang="en"',
                                 text)
        assert english_link, f"zh/{uri}: no header"
        title, href = english_link.groups()
        assert title == ("本页尚未翻译" if name in pages.missing() else "代码来自英文原版"), f"zh/{uri}: {title}"
        assert urljoin(SITE_URL + "zh/" + uri, href) == SITE_URL + uri
    glossary = (site / "zh" / "glossary" / "index.html").read_text(encoding="utf-8")
    assert "zh-notice" not in glossary and "镜像变量" in glossary


def test_the_hooks_ran_for_the_chinese_edition(site):
    zh = site / "zh"
    assert sorted(p.name for p in (zh / "assets" / "pictures").glob("*.svg")) == \
        sorted(p.name for p in (site / "assets" / "pictures").glob("*.svg")) != []
    assert (zh / "stylesheets" / "extra.css").read_bytes() == (site / "stylesheets" / "extra.css").read_bytes()
    home = (zh / "index.html").read_text(encoding="utf-8")
    assert home.count("data-copy=") == (site / "index.html").read_text(encoding="utf-8").count("data-copy=") >= 2
    notebook = (zh / "notebooks" / "plan-your-model" / "index.html").read_text(encoding="utf-8")
    assert "jupyter-wrapper" in notebook and '"nbformat"' not in notebook, "the notebook is not rendered as a page"
    assert 'title="Download the notebook"' in notebook


def test_the_chinese_search_index_is_cut_by_jieba_with_the_glossary_whole(site):
    index = json.loads((site / "zh" / "search" / "search_index.json").read_text(encoding="utf-8"))
    assert index["config"]["lang"] == ["en", "zh"]
    words = set()
    for doc in index["docs"]:
        words.update(re.split(r"[\s\u200b]+", doc["title"] + " " + doc["text"]))
    assert {"镜像变量", "显存", "显存不足", "副本"} <= words
    glossary_words = {w for doc in index["docs"] if doc["location"].startswith("glossary/")
                      for w in re.split(r"[\s\u200b]+", doc["text"])}
    assert "优化器状态" in glossary_words and "镜像" not in glossary_words


def test_the_pages_workflow_runs_the_readme_build_and_publishes_site():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"SITE_URL=https://" in readme and BUILD_COMMAND in readme
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "pages.yml").read_text(encoding="utf-8"))
    permissions = workflow["permissions"]
    assert permissions["pages"] == "write" and permissions["id-token"] == "write"
    build = workflow["jobs"]["build"]["steps"]
    uses = [step.get("uses", "").split("@")[0] for step in build]
    runs = [step for step in build if "run" in step]
    assert [step["run"].strip() for step in runs] == [BUILD_COMMAND]
    assert runs[0]["env"]["SITE_URL"].startswith("${{ steps.pages.outputs.base_url }}")
    assert uses.index("actions/configure-pages") < build.index(runs[0]) < uses.index("actions/upload-pages-artifact")
    upload = build[uses.index("actions/upload-pages-artifact")]
    assert upload["with"]["path"].rstrip("/") == "site"
    deploy = workflow["jobs"]["deploy"]
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert "main" in on["push"]["branches"]


def test_an_outdated_translation_shows_a_banner_above_the_header():
    from hooks import editions

    class File:
        src_uri = "index.md"

    class Page:
        url, file, meta = "", File(), {"outdated": True}

    config = {"docs_dir": str(pages.DOCS_ZH)}
    shown = editions.on_page_content("<h1>标题</h1><p>正文</p>", Page(), config, None)
    assert shown.index("</h1>") < shown.index("译文可能已过时") < shown.index("代码来自英文原版") < shown.index("正文")
    Page.meta = {}
    assert "译文可能已过时" not in editions.on_page_content("<h1>标题</h1>", Page(), config, None)


def test_both_editions_search_workers_skip_terms_lunr_invents(site):
    """hooks/search_guard.py ran on each edition's worker (the whole OOM line found nothing without it)."""
    from hooks import search_guard

    for edition in (site, site / "zh"):
        (worker,) = (edition / "assets" / "javascripts" / "workers").glob("search.*.min.js")
        text = worker.read_text(encoding="utf-8")
        assert search_guard.GUARDED in text and search_guard.LOOP not in text, worker


def test_the_search_guard_patches_once_and_refuses_an_unknown_worker(tmp_path):
    from mkdocs.exceptions import PluginError

    from hooks import search_guard

    worker = tmp_path / "search.0.min.js"
    worker.write_text("a;" + search_guard.LOOP + "b", encoding="utf-8")
    assert search_guard.guard(worker) and worker.read_text() == "a;" + search_guard.GUARDED + "b"
    assert not search_guard.guard(worker)  # a second build of the same site changes nothing
    worker.write_text("another release's worker", encoding="utf-8")
    with pytest.raises(PluginError, match="lunr's Index.query loop is not in search.0.min.js"):
        search_guard.guard(worker)
