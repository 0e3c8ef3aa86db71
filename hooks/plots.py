"""MkDocs hook: draw the site's pictures at build time and add them to the site as generated files.

Each picture is drawn by :mod:`hooks.draw` from the shared layer's numbers
(:mod:`snippets.lib.pictures`: the planner, the placements, the card table),
never committed as an image. Every picture comes in two SVGs,
``assets/pictures/<name>-light.svg`` and ``-dark.svg``; a page shows both and
Material hides the one that does not match the palette::

    ![what it shows](assets/pictures/step-peaks-light.svg#only-light)
    ![what it shows](assets/pictures/step-peaks-dark.svg#only-dark)

Each picture on a page is also a link to its SVG, so that a reader on a phone,
where a picture is scaled to a third of its width, can open it full size.

Registered in ``mkdocs.yml`` under ``hooks:``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def on_files(files, config):
    """Add every rendered SVG to the site's files (MkDocs 1.6 ``File.generated``)."""
    from mkdocs.structure.files import File

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from hooks import draw

    for path, content in draw.render_all().items():
        files.append(File.generated(config, path, content=content))
    return files


#: A picture as Markdown renders it: ``<img alt=... src=".../assets/pictures/NAME-light.svg#only-light" />``.
PICTURE = re.compile(r'<img [^>]*src="(?P<src>[^"#]*assets/pictures/[^"#]+\.svg)#only-(?:light|dark)"[^>]*>')


def on_page_content(content: str, page, config, files) -> str:
    """Make each picture a link to its light SVG (opened full size, e.g. on a phone).

    The light one for both palettes: a browser shows a lone SVG on white, where the dark
    variant's light text would vanish.
    """
    def linked(match: re.Match) -> str:
        light = match.group("src").replace("-dark.svg", "-light.svg")
        return f'<a href="{light}" title="Open the picture full size">{match.group(0)}</a>'

    return PICTURE.sub(linked, content)
