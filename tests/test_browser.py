"""The built site in a real browser: headless Chromium, served on localhost.

For the home page and the first chapter in ``nav``: the page renders with no
console error, no failed or 4xx/5xx request, and no request to any host but
localhost (the site must work offline: no CDN, no web fonts). On the home
page, Material's search returns a result for "MirroredStrategy". A PNG of
each page (and of the search results) is written to ``build/browser/`` for a
person to look at; CI keeps it as an artifact, git ignores it.

The browser is driven over the Chrome DevTools Protocol (CDP) with a small
websocket client (``websocket-client``), so no browser is downloaded: the test
uses Debian's ``chromium`` (``apt-get install chromium``), or the one named by
the ``CHROMIUM`` environment variable. Without one, the test is skipped
locally, saying so, and fails under CI (``CI`` set), where ``.ci/run``
installs it.

CDP domains used (https://chromedevtools.github.io/devtools-protocol/):
Page (navigate, loadEventFired, captureScreenshot), Runtime (evaluate,
consoleAPICalled, exceptionThrown), Log (entryAdded), Network
(requestWillBeSent, responseReceived, loadingFinished, loadingFailed) and
Input (insertText).
"""

from __future__ import annotations

import base64
import functools
import http.server
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "build" / "browser"
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
#: Schemes that never leave the machine.
LOCAL_SCHEMES = {"data", "blob", "about", "chrome", "devtools"}
#: Flags from the issue: no GPU, no sandbox (root in a container), and none of
#: the browser's own traffic (component updates, sync, first-run pings).
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--window-size=1280,900", "--hide-scrollbars", "--remote-debugging-port=0", "--no-proxy-server",
    # Belt and braces: any host but localhost fails to resolve, without a DNS query,
    # so a stray CDN link is recorded by the test (requestWillBeSent) yet never sent.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
)
TIMEOUT = 30.0


def find_browser() -> str | None:
    """Path of a Chromium-family browser: ``$CHROMIUM``, else the first on PATH."""
    named = os.environ.get("CHROMIUM")
    if named:
        return shutil.which(named)
    return next(filter(None, map(shutil.which, BROWSER_NAMES)), None)


BROWSER = find_browser()
if BROWSER is None:
    message = (
        f"no Chromium found (looked for $CHROMIUM and {', '.join(BROWSER_NAMES)} on PATH): "
        "the browser test needs one; on Debian: apt-get install chromium"
    )
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the browser test but {message}", pytrace=False)
    pytest.skip(message, allow_module_level=True)

import websocket  # noqa: E402  (websocket-client; only needed when a browser exists)


# --- the site, served on localhost ---------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A fresh build of the site (never a stale ``site/``)."""
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert build.returncode == 0, f"mkdocs build failed:\n{build.stdout}\n{build.stderr}"
    return out


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def server(site):
    """``http://127.0.0.1:PORT`` serving the built site; stopped after the module."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def first_chapter(site: Path) -> str:
    """Site path of the first page in ``nav`` after the home page that was built."""
    nav = re.findall(r"^\s*-\s*[^\n:]+:\s*([\w./-]+)\.md\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    for page in nav:
        if page != "index" and (site / page / "index.html").exists():
            return f"/{page}/"
    pytest.fail(f"no chapter of mkdocs.yml's nav was built into {site}")


# --- a minimal CDP client ------------------------------------------------------


class Page:
    """One browser tab, driven over CDP; records what the page logs and requests."""

    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=TIMEOUT, suppress_origin=True)
        self.ids = itertools.count(1)
        self.events: list[dict] = []
        self.pending: dict[str, str] = {}
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send("Target.setAutoAttach", autoAttach=True, waitForDebuggerOnStart=True, flatten=True)

    def _receive(self, deadline: float) -> dict | None:
        self.ws.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            message = json.loads(self.ws.recv())
        except websocket.WebSocketTimeoutException:
            return None
        if "method" in message:
            self.events.append(message)
            method, params = message["method"], message.get("params", {})
            if method == "Target.attachedToTarget":
                # A worker (Material's search runs in one): watch its console and requests too.
                session = params["sessionId"]
                for domain in ("Runtime", "Log", "Network"):
                    self._post(f"{domain}.enable", session)
                self._post("Runtime.runIfWaitingForDebugger", session)
            if method == "Network.requestWillBeSent":
                self.pending[params["requestId"]] = params["request"]["url"]
            elif method in ("Network.loadingFinished", "Network.loadingFailed"):
                self.pending.pop(params["requestId"], None)
        return message

    def _post(self, method: str, session: str | None = None, **params) -> int:
        ident = next(self.ids)
        message = {"id": ident, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        return ident

    def send(self, method: str, **params) -> dict:
        """Send a command to the page and return its result; raise on a CDP error."""
        ident = self._post(method, **params)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            message = self._receive(deadline)
            if message and message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"CDP {method}: {message['error']}")
                return message.get("result", {})
        raise TimeoutError(f"CDP {method}: no answer in {TIMEOUT} s")

    def wait_for(self, method: str, timeout: float = TIMEOUT) -> None:
        start = len(self.events)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e["method"] == method for e in self.events[start:]):
                return
            self._receive(deadline)
        raise TimeoutError(f"no {method} in {timeout} s")

    def settle(self, quiet: float = 0.5, timeout: float = TIMEOUT) -> None:
        """Wait until no request has been in flight for ``quiet`` seconds."""
        deadline = time.monotonic() + timeout
        calm_since = time.monotonic()
        while time.monotonic() < deadline:
            self._receive(min(deadline, time.monotonic() + 0.1))
            if self.pending:
                calm_since = time.monotonic()
            elif time.monotonic() - calm_since >= quiet:
                return
        raise TimeoutError(f"requests still in flight after {timeout} s: {sorted(self.pending.values())}")

    def open(self, url: str) -> None:
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        self.settle()

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions, failed and 4xx/5xx requests since the last open."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
                found.append(f"console.{params['type']}: {text}")
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append(f"uncaught: {details.get('exception', {}).get('description', details['text'])}")
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                entry = params["entry"]
                found.append(f"log: {entry['text']} {entry.get('url', '')}".strip())
            elif method == "Network.loadingFailed" and not params.get("canceled"):
                found.append(f"request failed: {params['errorText']} (request {params['requestId']})")
            elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
                found.append(f"HTTP {params['response']['status']}: {params['response']['url']}")
        return found

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def close(self) -> None:
        self.ws.close()


def leaves_localhost(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme in LOCAL_SCHEMES:
        return False
    return (parts.hostname or "") not in LOCAL_HOSTS


@pytest.fixture(scope="module")
def page():
    """A headless Chromium with a fresh profile, and its one tab."""
    with tempfile.TemporaryDirectory(prefix="chromium-", ignore_cleanup_errors=True) as scratch:
        profile, tmp = Path(scratch, "profile"), Path(scratch, "tmp")
        tmp.mkdir()
        log = open(Path(scratch, "chromium.log"), "w+")
        process = subprocess.Popen(
            [BROWSER, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "TMPDIR": str(tmp)},  # its shared-memory files go here, not /tmp
            start_new_session=True,  # its own process group: the renderers end with it
        )
        try:
            # Chromium writes the port it chose to DevToolsActivePort in the profile.
            port_file = profile / "DevToolsActivePort"
            deadline = time.monotonic() + TIMEOUT
            while not (port_file.exists() and port_file.read_text().strip()):
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    pytest.fail(f"{BROWSER} did not start (exit {process.poll()}):\n{log.read()[-3000:]}")
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
            with direct.open(f"http://127.0.0.1:{port}/json/list", timeout=TIMEOUT) as reply:
                targets = json.load(reply)
            tab = next(t for t in targets if t["type"] == "page")
            browser_page = Page(tab["webSocketDebuggerUrl"])
            yield browser_page
            browser_page.close()
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            log.close()


# --- the checks ----------------------------------------------------------------


def check_page(page: Page, url: str, screenshot: str) -> str:
    """Open ``url``; assert it rendered cleanly and stayed on localhost; return its title."""
    page.open(url)
    outside = [u for u in page.requested_urls() if leaves_localhost(u)]
    assert not outside, f"{url} requested hosts other than localhost: {outside}"
    assert not page.errors(), f"{url}: " + "\n".join(page.errors())
    heading = page.evaluate("document.querySelector('article h1')?.textContent ?? ''")
    assert heading.strip(), f"{url} rendered no article heading"
    shot = page.screenshot(SCREENSHOTS / screenshot)
    assert shot.stat().st_size > 0
    return heading


def test_home_page_renders_offline(page, server):
    check_page(page, server + "/", "home.png")


def test_a_chapter_renders_offline(page, server, site):
    check_page(page, server + first_chapter(site), "chapter.png")


def test_search_finds_mirroredstrategy(page, server):
    page.open(server + "/")
    page.evaluate("document.querySelector('[data-md-component=search-query]').focus()")
    page.send("Input.insertText", text="MirroredStrategy")
    # Material runs lunr in a web worker once search/search_index.json has loaded.
    deadline = time.monotonic() + TIMEOUT
    titles: list[str] = []
    while time.monotonic() < deadline and not titles:
        page.settle(quiet=0.2)
        titles = page.evaluate(
            "[...document.querySelectorAll('.md-search-result__item')].map(e => e.textContent.trim())"
        )
    page.screenshot(SCREENSHOTS / "search.png")
    assert titles, "search for 'MirroredStrategy' returned no result"
    assert any("mirroredstrategy" in t.lower() for t in titles), titles
    assert not page.errors(), "\n".join(page.errors())
    urls = page.requested_urls()
    # The worker's own fetch is seen, so its requests are checked too.
    assert any(u.endswith("/search/search_index.json") for u in urls), urls
    outside = [u for u in urls if leaves_localhost(u)]
    assert not outside, f"search requested hosts other than localhost: {outside}"


def test_leaves_localhost():
    assert not leaves_localhost("http://127.0.0.1:8000/assets/x.js")
    assert not leaves_localhost("http://localhost/search/search_index.json")
    assert not leaves_localhost("data:image/svg+xml,<svg/>")
    assert leaves_localhost("https://fonts.googleapis.com/css?family=Roboto")
    assert leaves_localhost("http://127.0.0.1.example.com/")


def test_checks_catch_a_bad_page(page, tmp_path):
    """A page with a CDN script and a console error fails both checks (nothing is sent)."""
    (tmp_path / "bad.html").write_text(
        "<!doctype html><title>bad</title><h1>bad</h1>"
        '<script src="https://cdn.example.com/lib.js"></script>'
        '<script>console.error("boom")</script>'
    )
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            page.open(f"http://127.0.0.1:{httpd.server_address[1]}/bad.html")
        finally:
            httpd.shutdown()
    assert [u for u in page.requested_urls() if leaves_localhost(u)] == ["https://cdn.example.com/lib.js"]
    errors = page.errors()
    assert any("console.error: boom" in e for e in errors), errors
    assert any("request failed" in e for e in errors), errors
