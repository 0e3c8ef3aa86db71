"""MkDocs hook: code in a table cell breaks where a reader would break it, or not at all.

A narrow column breaks inline code wherever the browser likes: ``y[B,`` on one
line and ``F]`` on the next, or ``tf.distribute.MirroredStrategy`` every few
letters. In table cells this hook makes a short code span (a shape, a layout:
at most :data:`SHORT` characters) unbreakable, and lets a longer one (a class
path, a call, an error message) break only at its spaces and after its dots,
opening parentheses, ``=`` and commas, so a table can still narrow to a
phone's width.

Registered in ``mkdocs.yml`` under ``hooks:``.
"""

from __future__ import annotations

import re

#: Code spans this long or shorter never break (``W[D, F_model]``, ``y[B, F]``).
SHORT = 20
TABLE = re.compile(r"<table>.*?</table>", re.S)
CODE = re.compile(r"<code>(?P<text>[^<]*)</code>")


def breakable(text: str) -> str:
    """The HTML of a code span's text (already escaped) with its break points set.

    >>> breakable("y[B, F]")
    'y[B,&nbsp;F]'
    >>> breakable("tf.distribute.MirroredStrategy")
    'tf.<wbr>distribute.<wbr>MirroredStrategy'
    >>> breakable("ParameterServerStrategy(variable_partitioner=...)")
    'ParameterServerStrategy(<wbr>variable_partitioner=<wbr>...)'
    """
    if len(text) <= SHORT:
        return text.replace(" ", "&nbsp;")
    return re.sub(r"(\.(?=\w)|[(=,](?=\S))", r"\1<wbr>", text)


def _in_table(match: re.Match) -> str:
    return CODE.sub(lambda code: f"<code>{breakable(code.group('text'))}</code>", match.group(0))


def on_page_content(content: str, page, config, files) -> str:
    """Set the break points of every code span inside a table of the page."""
    return TABLE.sub(_in_table, content)
