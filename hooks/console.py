"""MkDocs hook: the copy button of a console example copies code that runs.

The site's examples are doctests (``>>>`` prompts, output under the code),
because Sybil runs them. Material's copy button copies a block's text, unless
an element around it carries ``data-copy``: then it copies that attribute
(``extract`` in Material's ``components/content/code``, mkdocs-material 9.x).
This hook gives every console block a ``data-copy`` with its code alone, as
:class:`doctest.DocTestParser` reads it (the parser Sybil's doctest blocks
use), so what a reader pastes is what the suite ran, with no prompts and no
outputs. It also shows doctest's ``<BLANKLINE>`` marker as the blank line
it stands for.

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
BLANKLINE = '<span class="go">&lt;BLANKLINE&gt;</span>'


def code_of(console: str) -> str:
    """The code of a console example: each example's source, in order, without prompts or outputs.

    >>> code_of(">>> x = [1,\\n...      2]\\n>>> x\\n[1, 2]\\n")
    'x = [1,\\n     2]\\nx\\n'
    """
    return "".join(example.source for example in doctest.DocTestParser().get_examples(console))


def _with_copy(match: re.Match) -> str:
    body = match.group("body")
    if PROMPT not in body:
        return match.group(0)
    code = code_of(html.unescape(TAG.sub("", body)))
    body = body.replace(BLANKLINE, '<span class="go"></span>')
    return (f'<div class="highlight" data-copy="{html.escape(code, quote=True)}"><pre><span></span>'
            f"<code>{body}</code></pre></div>")


def on_page_content(content: str, page, config, files) -> str:
    """Give each console block of the page a ``data-copy`` attribute with its code."""
    return BLOCK.sub(_with_copy, content)
