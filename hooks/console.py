"""MkDocs hook: console examples copy as code that runs, and print tables that keep their columns.

The site's examples are doctests (``>>>`` prompts, output under the code),
because Sybil runs them. Material's copy button copies a block's text, unless
an element around it carries ``data-copy``: then it copies that attribute
(``extract`` in Material's ``components/content/code``, mkdocs-material 9.x).
This hook gives every console block a ``data-copy`` with its code alone, as
:class:`doctest.DocTestParser` reads it (the parser Sybil's doctest blocks
use), so what a reader pastes is what the suite ran, with no prompts and no
outputs. It shows doctest's ``<BLANKLINE>`` marker as the blank line it
stands for.

Code blocks wrap their long lines (``docs/stylesheets/extra.css``), so that
an error message or a verdict is never cut off. A row of a printed table
must not wrap, or its columns fall apart on a phone: the hook marks each
output line that looks like one (:func:`is_table_row`) with the class
``tbl``, which keeps it on one line, and the block scrolls sideways instead.

Registered in ``mkdocs.yml`` under ``hooks:``.
"""

from __future__ import annotations

import doctest
import html
import re

#: A highlighted block as pymdownx.highlight writes it (no line numbers, anchors per line).
BLOCK = re.compile(r'<div class="highlight"><pre><span></span><code>(?P<body>.*?)</code></pre></div>', re.S)
PROMPT = '<span class="gp">&gt;&gt;&gt; </span>'
TAG = re.compile(r"<[^>]+>")
OUTPUT_LINE = re.compile(r'<span class="go">(?P<text>[^<]*)</span>')
#: Columns: two spaces or more between words, or a ruler of dashes (tabulate's "simple" format).
_COLUMNS = re.compile(r"\S {2,}\S|^\s*-{3,}(?:\s+-{3,})+\s*$")


def is_table_row(line: str) -> bool:
    """Whether a printed line is a row of a table: words in columns, or a ruler of dashes.

    >>> is_table_row("  device    weights    grads"), is_table_row("-----  --------")
    (True, True)
    >>> is_table_row("Does not fit: device 0 peaks at 224.02 GiB in the update phase")
    False
    """
    return bool(_COLUMNS.search(line))


def code_of(console: str) -> str:
    """The code of a console example: each example's source, in order, without prompts or outputs.

    >>> code_of(">>> x = [1,\\n...      2]\\n>>> x\\n[1, 2]\\n")
    'x = [1,\\n     2]\\nx\\n'
    """
    return "".join(example.source for example in doctest.DocTestParser().get_examples(console))


def _output_line(match: re.Match) -> str:
    text = match.group("text")
    if text == "&lt;BLANKLINE&gt;":
        return '<span class="go"></span>'
    if is_table_row(html.unescape(text)):
        return f'<span class="go tbl">{text}</span>'
    return match.group(0)


def _console(match: re.Match) -> str:
    body = match.group("body")
    if PROMPT not in body:
        return match.group(0)
    code = code_of(html.unescape(TAG.sub("", body)))
    body = OUTPUT_LINE.sub(_output_line, body)
    return (f'<div class="highlight" data-copy="{html.escape(code, quote=True)}"><pre><span></span>'
            f"<code>{body}</code></pre></div>")


def on_page_content(content: str, page, config, files) -> str:
    """Give each console block of the page its ``data-copy``, and mark its table rows."""
    return BLOCK.sub(_console, content)
