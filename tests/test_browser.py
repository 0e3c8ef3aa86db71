"""The built site in a real browser: every page, on a desktop and a phone, light and dark.

The site is built fresh and served on 127.0.0.1; Playwright (its Python
package, https://playwright.dev/python/) drives Debian's Chromium
(``apt-get install chromium``, or the browser named by ``$CHROMIUM``), so no
browser is downloaded. Every page in ``nav`` is opened at 1440 x 900, then narrowed
to 390 x 844 (a phone), in the light palette and, where the page has images (and on
the home pages), with the page's own palette button in the dark one, and must have:

* no console error, no uncaught exception, no failed or 4xx/5xx request, and
  no request to any host but localhost (each one is answered here, never sent:
  the site must work offline, no CDN, no web fonts);
* every image loaded, with alt text of its own, in each palette;
* no code block clipped (a long line wraps; its end was usually the verdict), except on a phone
  the rows of a printed table and a diff's lines, which scroll;
* on the desktop, no table wider than the page, a nav label equal to its page's title, a
  back-to-top button, and every console block's copy text parsing as Python; on a phone, each
  table's verdict column starting on the screen.

Both editions are built (English, then Chinese into ``zh/``) for the server's own address. The
Chinese edition's translated pages, its glossary and one page it shows in English under a banner
go through the same checks at both widths and in both palettes (Debian's ``fonts-noto-cjk`` gives
Chromium real glyph boxes); a typed search for 镜像变量 and 显存 finds its chapter, and the
language selector keeps the reader on the same page.

Material's search worker builds its edition's whole index on every page load: it gets the real
index on the home pages (in the every-page checks) and in the search tests, and elsewhere the same index
without documents.

A reader whose system is set to dark gets the dark palette without a click.
Then, as a reader would: the copy button of a console example copies code
that runs (no prompts, no outputs) on every page; search finds an error
message and a chapter; and the OOM line pasted into search reaches the code
change that fixes it in two clicks.

With ``BROWSER_SCREENSHOTS`` set, every page is also photographed into
``build/browser/`` for a person to look at (git ignores it; it costs about a
second a page). Without a browser the module is skipped locally, saying so, and fails under CI
(``CI`` set), where ``.ci/run`` installs one.
"""

from __future__ import annotations

import ast
import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import urlopen

import pytest
from playwright.sync_api import sync_playwright

from tests import mkdocs_config

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "build" / "browser"
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
#: Schemes that never leave the machine.
LOCAL_SCHEMES = {"data", "blob", "about", "chrome", "devtools"}
#: Root in a container needs --no-sandbox; the rest keep the browser's own traffic (component
#: updates, sync, first-run pings) off a machine with no network.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic"]
VIEWPORTS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}
#: Each edition's home page: where the real search index and both palettes are checked at both widths.
HOMES = ("/", "/zh/")
SCHEMES_OTHER = {"light": "dark", "dark": "light"}
SCHEMES = {"light": "default", "dark": "slate"}  # the system setting -> Material's palette
#: The palette button of each scheme: it offers the other one (mkdocs.yml, theme.palette; mkdocs.zh.yml's).
TOGGLE = {"light": "Dark mode", "dark": "Light mode"}
TOGGLE_ZH = {"light": "切换到深色模式", "dark": "切换到浅色模式"}
SCREENSHOTS_ON = bool(os.environ.get("BROWSER_SCREENSHOTS"))
#: What a reader pastes: the report's error line, as TensorFlow prints it.
OOM_LINE = ("ResourceExhaustedError: OOM when allocating tensor with shape[131072,65536] and type float "
            "on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")


def find_browser() -> str | None:
    """Path of a Chromium-family browser: ``$CHROMIUM``, else the first on PATH."""
    named = os.environ.get("CHROMIUM")
    if named:
        return shutil.which(named)
    return next(filter(None, map(shutil.which, BROWSER_NAMES)), None)


BROWSER = find_browser()
if BROWSER is None:
    message = (f"no Chromium found (looked for $CHROMIUM and {', '.join(BROWSER_NAMES)} on PATH): "
               "the browser test needs one; on Debian: apt-get install chromium")
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the browser test but {message}", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def nav_pages(config_file: str = "mkdocs.yml", prefix: str = "/") -> list[tuple[str, str]]:
    """``(site path, source file)`` of every page in a configuration's nav, in order.

    The YAML alone, not MkDocs's ``load_config``: this runs when pytest collects the module, in
    every xdist worker, and loading the plugins took 2.4 s of each. MkDocs replaces lists whole, so
    a nav is the configuration's own or, if it has none, the one it ``INHERIT``s."""
    config = mkdocs_config.load(ROOT / config_file)
    while "nav" not in config and "INHERIT" in config:
        config = mkdocs_config.load(ROOT / config["INHERIT"])

    def walk(items):
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            if isinstance(value, list):
                yield from walk(value)
            else:
                yield value

    pages = []
    for source in walk(config["nav"]):
        stem = source.rsplit(".", 1)[0]
        pages.append((prefix if stem == "index" else f"{prefix}{stem}/", source))
    return pages


PAGES = nav_pages()
#: The Chinese edition's translated pages (and the glossary), and one page it shows in English
#: under a banner, if any: those are the English page with a header (checked in tests/test_site.py).
_ZH_NAV = nav_pages("mkdocs.zh.yml", "/zh/")
ZH_PAGES = [(path, source) for path, source in _ZH_NAV if (ROOT / "docs-zh" / source).exists()]
ZH_PAGES += [(path, source) for path, source in _ZH_NAV if (path, source) not in ZH_PAGES][:1]


def leaves_localhost(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme not in LOCAL_SCHEMES and (parts.hostname or "") not in LOCAL_HOSTS


# --- the site, served on localhost, and the browser ------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``http://127.0.0.1:PORT`` serving a fresh build of both editions (never a stale ``site/``),
    built for that address (``SITE_URL``), as ``make serve`` builds them for its own."""
    out = tmp_path_factory.mktemp("site")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(out)))
    address = f"http://127.0.0.1:{httpd.server_address[1]}"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "SITE_URL": address + "/", "SITE_URL_ZH": address + "/zh/"}
    for config, site_dir in (("mkdocs.yml", out), ("mkdocs.zh.yml", out / "zh")):  # English first: it cleans
        build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "-f", config,
                                "--site-dir", str(site_dir)], cwd=ROOT, capture_output=True, text=True,
                               timeout=300, env=env)
        assert build.returncode == 0, f"mkdocs build -f {config} failed:\n{build.stdout}\n{build.stderr}"
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield address
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=BROWSER, args=FLAGS)
        yield launched
        launched.close()


class Reader:
    """One browser context (a viewport and a system palette) and what its pages did wrong."""

    def __init__(self, browser, viewport: str, scheme: str) -> None:
        self.context = browser.new_context(viewport=VIEWPORTS[viewport], color_scheme=scheme)
        self.context.grant_permissions(["clipboard-read", "clipboard-write"])
        self.outside: list[str] = []
        self.problems: list[str] = []
        self.inflight: set = set()
        # Every request off this host is recorded and answered here: nothing is ever sent.
        self.context.route(lambda url: leaves_localhost(url), self._refuse)
        # On (the default), each page's search worker gets its edition's index with no documents (its own
        # config); off, the real index, as on the home pages and in the search tests: see test_page_reads_cleanly.
        self.empty_index = True
        self.context.route("**/search/search_index.json", self._index)
        self.page = self.context.new_page()
        self.page.on("request", lambda r: self.inflight.add(r))
        self.page.on("requestfinished", lambda r: self.inflight.discard(r))
        self.page.on("requestfailed", lambda r: self.inflight.discard(r))
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.problems.append(f"uncaught: {e}"))
        # net::ERR_ABORTED is a request the next navigation cut off (the search worker still loading
        # lunr's language files when a test moves on), not a page fault: a missing file is an HTTP 404.
        self.page.on("requestfailed", lambda r: r.url not in self.outside and r.failure != "net::ERR_ABORTED"
                     and self.problems.append(f"request failed: {r.url} ({r.failure})"))
        self.page.on("response", lambda r: r.status >= 400 and self.problems.append(f"HTTP {r.status}: {r.url}"))

    def _refuse(self, route) -> None:
        self.outside.append(route.request.url)
        route.abort()

    def _index(self, route) -> None:
        if not self.empty_index:
            route.continue_()
            return
        index = route.fetch().json()
        route.fulfill(json={**index, "docs": []})

    def open(self, url: str):
        self.outside.clear()
        self.problems.clear()
        self.page.goto(url, wait_until="load")  # every stylesheet, script and image has arrived
        self.settle()
        return self.page

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until no request is in flight (the search worker and its index come after load)."""
        for _ in range(int(timeout / 0.02)):
            if not self.inflight:
                return
            self.page.wait_for_timeout(20)
        raise TimeoutError(f"requests still in flight: {sorted(r.url for r in self.inflight)}")

    def toggle_palette(self, current: str, zh: bool = False) -> None:
        """Click the palette button the ``current`` scheme shows, as a reader does; wait for the other."""
        self.page.locator(f"label[title='{(TOGGLE_ZH if zh else TOGGLE)[current]}']:visible").click()
        self.page.wait_for_function(f"document.body.dataset.mdColorScheme === '{SCHEMES[SCHEMES_OTHER[current]]}'")
        self.settle()

    def close(self) -> None:
        self.context.close()


@pytest.fixture(scope="module")
def reader(browser):
    opened = Reader(browser, "desktop", "light")
    yield opened
    opened.close()


# --- every page ------------------------------------------------------------------

#: Code blocks wider than their box (their longest line). On a phone (``all`` false), a block that
#: prints a table (rows marked .tbl by the hooks) or shows a diff may scroll: its other lines wrap.
#: The box that scrolls is Material's ``pre > code`` (``overflow: auto``), or a bare ``pre``.
CLIPPED = """(all) => [...document.querySelectorAll('article pre')]
  .filter(pre => all || !pre.querySelector('.tbl, .gi, .gd'))
  .map(pre => pre.querySelector(':scope > code') || pre)
  .filter(box => box.scrollWidth > box.clientWidth + 1)
  .map(pre => pre.innerText.split('\\n').reduce((a, b) => b.length > a.length ? b : a, '').slice(0, 100))"""
#: Images that did not load, or have no description of their own.
BROKEN_IMAGES = """() => [...document.querySelectorAll('article img')]
  .filter(img => !(img.complete && img.naturalWidth > 0) || !img.alt.trim()
                 || img.alt.startsWith('No description has been provided'))
  .map(img => img.getAttribute('src').slice(0, 60))"""
#: What each console block's copy button gives (``data-copy``, set by hooks/console.py).
COPIED = """() => [...document.querySelectorAll('article .highlight')]
  .filter(block => block.querySelector('.gp'))
  .map(block => block.closest('[data-copy]')?.getAttribute('data-copy') ?? null)"""
#: Headers of a table's verdict column (whether it fits, whether it shards).
VERDICT = r"^(verdict|Fix|shards W\?|on a [\w-]+)$"
#: Per table: wider than the page's text column? and the left edge of its verdict column, if any.
TABLES = """(verdict) => [...document.querySelectorAll('article table')].map(table => {
  const box = (table.closest('.md-typeset__scrollwrap') || table.parentElement).clientWidth;
  const head = [...table.querySelectorAll('thead th')].find(th => new RegExp(verdict).test(th.innerText.trim()));
  return {first: table.querySelector('th')?.innerText.trim(), wide: table.scrollWidth > box + 1,
          verdict: head ? Math.round(head.getBoundingClientRect().left) : null};
})"""


@pytest.mark.parametrize("path, source", PAGES + ZH_PAGES,
                         ids=[p for _, p in PAGES] + [f"zh/{p}" for _, p in ZH_PAGES])
def test_page_reads_cleanly(reader, server, path, source):
    # One load, then the same page narrowed to a phone: Material's layout follows the width through
    # CSS media queries and its scripts' media-query observers, both of which a resize triggers, so a
    # second load would add only its cost (half of this module's time on two cores). The search
    # worker builds its edition's whole index on every page it loads (a quarter of a page's CPU):
    # the real index is built, and must raise nothing, on the home pages and in the search tests
    # below; elsewhere the worker gets that index without its documents.
    reader.empty_index = path not in HOMES
    page = reader.open(server + path)
    for viewport in VIEWPORTS:  # desktop first: the page was loaded at its width
        page.set_viewport_size(VIEWPORTS[viewport])
        check_width(reader, page, path, viewport)
    assert not reader.outside, f"{path} requested hosts other than localhost: {reader.outside}"
    assert not reader.problems, f"{path}: " + "\n".join(reader.problems)


def check_width(reader, page, path: str, viewport: str) -> None:
    """The module docstring's checks for ``path`` as ``page`` shows it at ``viewport``'s width."""
    phone = viewport == "phone"
    zh = path.startswith("/zh/")
    assert page.evaluate("document.body.dataset.mdColorScheme") == SCHEMES["light"]
    assert page.locator("article h1").first.inner_text().strip(), f"{path} rendered no title"
    assert page.evaluate(CLIPPED, not phone) == [], f"{path} at {viewport}: code blocks clipped"
    tables = page.evaluate(TABLES, VERDICT)
    # The width took: on a phone the nav is a drawer behind the header's menu button, on a desktop a sidebar.
    assert page.locator("label.md-header__button[for='__drawer']").is_visible() == phone, f"{path} at {viewport}"
    if phone:  # a wide table scrolls, but its verdict column starts on the screen, beside the row's name
        hidden = [t["first"] for t in tables if t["verdict"] is not None
                  and t["verdict"] + 48 > VIEWPORTS["phone"]["width"]]
        assert not hidden, f"{path}: verdict columns off a phone's screen in tables headed {hidden}"
    else:
        assert not [t["first"] for t in tables if t["wide"]], f"{path}: tables wider than the page"
        title = page.locator("article h1").first.inner_text().replace("¶", "").strip()
        active = page.locator(".md-nav__link--active").first.inner_text().strip()
        assert active == title, f"{path}: nav says {active!r}, the page {title!r}"
        assert page.locator(".md-top").count() == 1, f"{path}: no back-to-top button"
        for copied in page.evaluate(COPIED):
            assert copied is not None, f"{path}: a console block without data-copy"
            assert ">>>" not in copied, f"{path}: the copy keeps prompts:\n{copied}"
            ast.parse(copied)  # a SyntaxError shows the block's code
    name = path.strip("/").replace("/", "-") or "home"
    # Which images load does not depend on the width: the dark palette's are checked on the desktop
    # where the page has images (the palette swaps them), on the home pages at both widths (the
    # toggle is the same header on every page), or everywhere when screenshots are asked for.
    home = path in HOMES
    images = page.locator("article img").count() > 0
    schemes = ("light", "dark") if SCREENSHOTS_ON or home or (images and not phone) else ("light",)
    for scheme in schemes:
        if scheme == "dark":
            reader.toggle_palette("light", zh)
            assert page.evaluate("document.body.dataset.mdColorScheme") == SCHEMES["dark"]
        assert page.evaluate(BROKEN_IMAGES) == [], f"{path} ({scheme}): images that did not load"
        if SCREENSHOTS_ON:
            page.screenshot(path=SCREENSHOTS / f"{name}-{viewport}-{scheme}.png")
    if "dark" in schemes:
        reader.toggle_palette("dark", zh)  # back to light: Material keeps the choice for the next page


def test_a_dark_system_gets_the_dark_palette_without_a_click(browser, server):
    reader = Reader(browser, "desktop", "dark")
    try:
        page = reader.open(server + "/")
        assert page.evaluate("document.body.dataset.mdColorScheme") == SCHEMES["dark"]
        assert page.evaluate(BROKEN_IMAGES) == [] and not reader.problems and not reader.outside
    finally:
        reader.close()


def test_the_site_has_its_console_blocks(server):
    # If this falls, the copy hook (or Pygments' prompt class) stopped finding the doctests.
    text = "".join(urlopen(server + path).read().decode() for path, _ in PAGES)
    assert text.count("data-copy=") > 150


def test_the_copy_button_puts_runnable_code_on_the_clipboard(browser, server):
    reader = Reader(browser, "desktop", "light")
    try:
        page = reader.open(server + "/reproduce/")
        block = page.locator("article .highlight:visible").filter(has=page.locator(".gp")).first
        block.hover()
        block.locator("button[title='Copy to clipboard']").click()
        pasted = page.evaluate("navigator.clipboard.readText()")
        shown = block.inner_text()
        assert ">>> " in shown and ">>> " not in pasted
        assert pasted.strip() and all(line in shown for line in pasted.splitlines() if line.strip())
        ast.parse(pasted)
    finally:
        reader.close()


def test_the_notebook_page_downloads_and_shows_no_authoring_marks(browser, server):
    reader = Reader(browser, "desktop", "dark")
    try:
        (path,) = [p for p, source in PAGES if source.endswith(".ipynb")]
        page = reader.open(server + path)
        link = page.locator("a[download][title='Download the notebook']")
        assert link.count() == 1
        notebook = page.request.get(server + path + link.get_attribute("href"))
        assert notebook.ok and "cells" in notebook.json()
        assert page.locator(".celltoolbar:visible, .cell-tag:visible").count() == 0  # no tag badges
        assert page.locator(".jp-RenderedImage img").count() >= 1
        backdrop = page.evaluate("getComputedStyle(document.querySelector('.jp-RenderedImage img')).backgroundColor")
        assert backdrop == "rgba(0, 0, 0, 0)", "the plot sits on a painted box in dark mode"
    finally:
        reader.close()


# --- search, as a reader uses it ---------------------------------------------------


#: True once Material's search has answered: a result is listed, or its meta says none matched.
RESULTS_OR_NONE = """() => document.querySelector('.md-search-result__item a') !== null
  || /^(No matching documents|没有找到符合条件的结果)/.test(
       (document.querySelector('.md-search-result__meta')?.innerText || '').trim())"""


def search(page, text: str) -> list[tuple[str, str]]:
    """Type ``text`` into Material's search; return ``(title, href)`` of its results, best first.

    ``/`` opens search on any width, as Material's keyboard handler does for a reader.
    """
    box = page.locator("input.md-search__input")
    if not box.evaluate("input => input === document.activeElement"):
        page.keyboard.press("/")
    for attempt in range(2):
        if text[-1].isascii():
            box.fill(text[:-1])
            page.keyboard.type(text[-1])  # a key typed, as Material's search reads key events
        else:  # typed through an input method: the text arrives, then a key event (End) as a reader's would
            box.fill(text)
            page.keyboard.press("End")
        # The search worker builds its index after the page loads: on a loaded 2-core machine that
        # took longer than the 15 s once waited here, and a query typed before it was ready came back
        # empty. So wait for an answer (results, or "No matching documents"), and ask once more.
        page.wait_for_function(RESULTS_OR_NONE, timeout=60000)
        if page.locator(".md-search-result__item a").count():
            break
    else:
        raise AssertionError(f"search for {text!r} found nothing: "
                             f"{page.locator('.md-search-result__meta').inner_text()!r}")
    read = """() => [...document.querySelectorAll('.md-search-result__item a')]
                 .map(a => [a.innerText.trim(), a.getAttribute('href')])"""
    found, previous = page.evaluate(read), None
    while found != previous:  # Material renders the results in batches: read them once they settle
        page.wait_for_timeout(200)
        previous, found = found, page.evaluate(read)
    return [tuple(item) for item in found]


def result_pages(page) -> list[tuple[str, str]]:
    """``(title, href)`` of each page among the results :func:`search` read, best first: the first link of each
    result item, as a reader sees them. Material groups a page's sections under one item, and folds those
    scoring under its best into "N more on this page" (its bundle's search result renderer); counted as
    links, one page with many matching sections could push the next page out of any first five."""
    read = """() => [...document.querySelectorAll('.md-search-result__item')].map(item => item.querySelector('a'))
                 .map(a => [a.innerText.trim(), a.getAttribute('href')])"""
    return [tuple(item) for item in page.evaluate(read)]


def test_search_finds_an_error_message_and_a_chapter(browser, server):
    reader = Reader(browser, "desktop", "light")
    reader.empty_index = False  # the search below reads it
    try:
        page = reader.open(server + "/")
        found = search(page, "Allocator stats not available")
        assert any("troubleshooting/" in href for _, href in found), found
        found = search(page, "DTensor")
        assert any(href.rstrip("/").endswith("dtensor") or "/dtensor/" in href for _, href in found), found
        assert not reader.outside and not reader.problems, reader.outside + reader.problems
        page.screenshot(path=SCREENSHOTS / "search.png")
    finally:
        reader.close()


def _zh_chapter(preferred: str, otherwise: str) -> str:
    """The chapter a Chinese search should find: ``preferred`` once it is translated."""
    return preferred if (ROOT / "docs-zh" / f"{preferred}.md").exists() else otherwise


@pytest.mark.parametrize(("term", "chapter"), [
    ("镜像变量", _zh_chapter("placement", "glossary")),       # mirrored variable: how MirroredStrategy places them
    ("显存", _zh_chapter("memory-growth", "glossary")),       # GPU memory: the chapter named for it
])
def test_a_chinese_search_finds_its_chapter(browser, server, term, chapter):
    reader = Reader(browser, "desktop", "light")
    reader.empty_index = False  # the search below reads it
    try:
        page = reader.open(server + "/zh/")
        found = search(page, term)
        pages = result_pages(page)
        hrefs = [urlsplit(href).path.rstrip("/").rsplit("/", 1)[-1] for _, href in pages[:5]]
        assert chapter in hrefs, f"{term}: the first pages found are {pages[:5]}"
        assert all(not href.startswith(("http", "/")) or "/zh/" in href for _, href in found), found
        assert not reader.outside and not reader.problems, reader.outside + reader.problems
    finally:
        reader.close()


def test_the_language_selector_stays_on_the_page(browser, server):
    reader = Reader(browser, "desktop", "light")
    try:
        page = reader.open(server + "/placement/")
        page.locator(".md-header__option .md-select").hover()
        page.locator("a.md-select__link[hreflang='zh-Hans']").click()
        page.wait_for_load_state("load")
        reader.settle()  # the search worker's scripts, before the next click
        assert urlsplit(page.url).path == "/zh/placement/", page.url
        page.locator(".md-header__option .md-select").hover()
        page.locator("a.md-select__link[hreflang='en']").click()
        page.wait_for_load_state("load")
        reader.settle()
        assert urlsplit(page.url).path == "/placement/", page.url
        assert not reader.outside and not reader.problems, reader.outside + reader.problems
    finally:
        reader.close()


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_the_oom_line_reaches_its_fix_in_two_clicks(browser, server, viewport):
    reader = Reader(browser, viewport, "light")
    reader.empty_index = False  # the search below reads it
    try:
        page = reader.open(server + "/")
        found = search(page, OOM_LINE)
        # The reader clicks the first result that shows the message: a section of a page.
        shown = [i for i, (title, href) in enumerate(found) if "OOM when allocating" in title and "#" in href]
        assert shown and shown[0] < 3, found
        assert "troubleshooting/" in found[shown[0]][1], found
        page.locator(".md-search-result__item a").nth(shown[0]).click()  # click 1: the entry
        page.wait_for_load_state("networkidle")
        entry = page.locator(f"[id='{urlsplit(page.url).fragment}']")
        assert entry.count() == 1, page.url
        fix = page.locator(f"[id='{urlsplit(page.url).fragment}'] ~ p a[href*='the-change-to-your-script']").first
        fix.click()                                                    # click 2: the change
        page.wait_for_load_state("networkidle")
        assert urlsplit(page.url).fragment == "the-change-to-your-script", page.url
        diff = page.locator(f"[id='{urlsplit(page.url).fragment}'] + .highlight, "
                            f"[id='{urlsplit(page.url).fragment}'] ~ .highlight").first
        box = diff.bounding_box()
        assert diff.locator(".gi").count() > 0, "the change is not a diff"   # lines it adds
        assert box and box["y"] < VIEWPORTS[viewport]["height"], "the diff is not on the screen"
        page.screenshot(path=SCREENSHOTS / f"oom-fix-{viewport}.png")
    finally:
        reader.close()


def test_leaves_localhost():
    assert not leaves_localhost("http://127.0.0.1:8000/assets/x.js")
    assert not leaves_localhost("http://localhost/search/search_index.json")
    assert not leaves_localhost("data:image/svg+xml,<svg/>")
    assert leaves_localhost("https://fonts.googleapis.com/css?family=Roboto")
    assert leaves_localhost("http://127.0.0.1.example.com/")


def test_checks_catch_a_bad_page(browser, tmp_path):
    """A page with a CDN script, a console error and a broken image fails each check (nothing is sent)."""
    (tmp_path / "bad.html").write_text(
        "<!doctype html><title>bad</title><article><h1>bad</h1><img src='missing.png'>"
        "<pre>" + "x" * 400 + "</pre><pre><code style='display: block; overflow: auto'>" + "y" * 400
        + "</code></pre></article>"
        '<script src="https://cdn.example.com/lib.js"></script><script>console.error("boom")</script>')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        reader = Reader(browser, "phone", "light")
        try:
            page = reader.open(f"http://127.0.0.1:{httpd.server_address[1]}/bad.html")
            assert reader.outside == ["https://cdn.example.com/lib.js"]
            assert any("console: boom" in p for p in reader.problems), reader.problems
            assert any("HTTP 404" in p for p in reader.problems), reader.problems
            assert page.evaluate(BROKEN_IMAGES) == ["missing.png"]
            assert page.evaluate(CLIPPED, True) == ["x" * 100, "y" * 100]
        finally:
            reader.close()
            httpd.shutdown()
