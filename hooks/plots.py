"""MkDocs hook: draw the site's pictures at build time and add them to the site as generated files.

Each picture is drawn by :mod:`hooks.draw` from the shared layer's numbers
(:mod:`snippets.lib.pictures`: the planner, the placements, the card table),
never committed as an image. Every picture comes in two SVGs,
``assets/pictures/<name>-light.svg`` and ``-dark.svg``; a page shows both and
Material hides the one that does not match the palette::

    ![what it shows](assets/pictures/step-peaks-light.svg#only-light)
    ![what it shows](assets/pictures/step-peaks-dark.svg#only-dark)

Registered in ``mkdocs.yml`` under ``hooks:``.
"""

from __future__ import annotations

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
