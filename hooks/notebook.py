"""MkDocs hook: a notebook page gets real alt text and a download button.

mkdocs-jupyter renders a notebook's stored outputs with nbconvert's lab
template, which has no alt text for a plot: nbconvert writes "No description
has been provided for this image" on every image without one
(``nbconvert/exporters/html.py``). The alt text of a plot lives in its code
cell's metadata, ``"alt"`` (Jupyter keeps metadata it does not know), and this
hook puts it on the image; a plot without one fails the build. mkdocs-jupyter's
``include_source`` copies the ``.ipynb`` next to the page, but Material has no
button for it, so this hook adds one, beside the page title as Material's own
page actions are. Its text outputs wrap like the site's code, but the rows of
a printed table keep their columns (:func:`hooks.console.is_table_row`).

Registered in ``mkdocs.yml`` under ``hooks:``.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from hooks.console import is_table_row  # noqa: E402  (MkDocs loads hooks by path)

PLACEHOLDER = 'alt="No description has been provided for this image"'
TEXT_OUTPUT = re.compile(r'(?P<open><div class="jp-RenderedText[^>]*>\s*<pre>)(?P<text>.*?)(?P<close></pre>)', re.S)
#: Material's own "download" icon (material/download.svg), inline like its page actions.
ICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24">'
        '<path d="M5 20h14v-2H5m14-9h-4V3H9v6H5l7 7z"/></svg>')


def alt_texts(notebook: dict) -> list[str]:
    """The ``alt`` metadata of each code cell with an image output, in order.

    Raises:
        PluginError: a cell with an image output has no ``alt`` in its metadata.
    """
    texts = []
    for number, cell in enumerate(notebook["cells"], 1):
        images = [o for o in cell.get("outputs", []) if any(k.startswith("image/") for k in o.get("data", {}))]
        if not images:
            continue
        alt = cell.get("metadata", {}).get("alt")
        if not alt:
            raise PluginError(f"cell {number} of the notebook shows an image but has no 'alt' in its metadata")
        texts.extend([alt] * len(images))
    return texts


def mark_table_rows(content: str) -> str:
    """Each text output's table rows wrapped in ``<span class="tbl">``, which keeps them on one line."""
    def rows(match: re.Match) -> str:
        lines = [f'<span class="tbl">{line}</span>' if is_table_row(html.unescape(line)) else line
                 for line in match.group("text").split("\n")]
        return match.group("open") + "\n".join(lines) + match.group("close")

    return TEXT_OUTPUT.sub(rows, content)


def on_page_content(content: str, page, config, files) -> str:
    """On a notebook's page: each plot's alt text, and a button that downloads the notebook."""
    if not page.file.src_path.endswith(".ipynb"):
        return content
    source = Path(page.file.abs_src_path)
    for alt in alt_texts(json.loads(source.read_text(encoding="utf-8"))):
        if PLACEHOLDER not in content:
            raise PluginError(f"{source.name}: the page has fewer images than the notebook's outputs")
        content = content.replace(PLACEHOLDER, f'alt="{html.escape(alt, quote=True)}"', 1)
    if PLACEHOLDER in content:
        raise PluginError(f"{source.name}: an image on the page has no alt text")
    button = (f'<a href="{source.name}" download class="md-content__button md-icon" '
              f'title="Download the notebook">{ICON}</a>')
    return button + mark_table_rows(content)
