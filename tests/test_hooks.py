"""The build hooks that shape what a reader sees and copies (hooks/*.py), on small HTML of the form they get."""

import doctest
import html
import json
from types import SimpleNamespace

import pytest
from mkdocs.exceptions import PluginError

from hooks import console, notebook, tables

#: A console block as pymdownx.highlight renders it (anchors per line, Pygments spans).
CONSOLE = (
    '<div class="highlight"><pre><span></span><code><a id="__codelineno-1-1"></a>'
    '<span class="gp">&gt;&gt;&gt; </span><span class="n">x</span> <span class="o">=</span> '
    '<span class="p">[</span><span class="mi">1</span><span class="p">,</span>\n'
    '<span class="gp">... </span>     <span class="mi">2</span><span class="p">]</span>\n'
    '<span class="gp">&gt;&gt;&gt; </span><span class="nb">print</span><span class="p">(</span>'
    '<span class="s2">&quot;a&lt;b&quot;</span><span class="p">)</span>\n'
    '<span class="go">a&lt;b</span>\n<span class="go">&lt;BLANKLINE&gt;</span>\n</code></pre></div>'
)
PLAIN = '<div class="highlight"><pre><span></span><code>pip install keras\n</code></pre></div>'


@pytest.mark.parametrize("module", [console, tables])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_console_block_copies_its_code_only():
    out = console.on_page_content(CONSOLE + PLAIN, None, None, None)
    copied = html.unescape(out.split('data-copy="', 1)[1].split('"><pre>', 1)[0])
    assert copied == 'x = [1,\n     2]\nprint("a<b")\n'
    assert "&lt;BLANKLINE&gt;" not in out  # shown as the blank line it stands for
    assert out.endswith(PLAIN)             # a shell block keeps Material's own copy


def test_notebook_plot_gets_its_alt_text_and_the_page_a_download_button(tmp_path):
    cells = [{"cell_type": "code", "metadata": {"alt": "a plot of x"}, "source": "",
              "outputs": [{"output_type": "display_data", "data": {"image/png": "...", "text/plain": ""}}]}]
    path = tmp_path / "plan.ipynb"
    path.write_text(json.dumps({"cells": cells}))
    page = SimpleNamespace(file=SimpleNamespace(src_path="plan.ipynb", abs_src_path=str(path)))
    out = notebook.on_page_content(f"<p><img {notebook.PLACEHOLDER} src='x'></p>", page, None, None)
    assert 'alt="a plot of x"' in out and notebook.PLACEHOLDER not in out
    assert out.startswith('<a href="plan.ipynb" download')
    del cells[0]["metadata"]["alt"]
    path.write_text(json.dumps({"cells": cells}))
    with pytest.raises(PluginError, match="cell 1 .* no 'alt'"):
        notebook.on_page_content(f"<img {notebook.PLACEHOLDER}>", page, None, None)


def test_only_code_in_tables_gets_break_points():
    page = "<p><code>y[B, F]</code></p><table><tr><td><code>y[B, F]</code></td></tr></table>"
    assert tables.on_page_content(page, None, None, None) == (
        "<p><code>y[B, F]</code></p><table><tr><td><code>y[B,&nbsp;F]</code></td></tr></table>")


def test_printed_table_rows_keep_their_columns():
    block = CONSOLE.replace('<span class="go">a&lt;b</span>', '<span class="go">shape    bytes</span>')
    out = console.on_page_content(block, None, None, None)
    assert '<span class="go tbl">shape    bytes</span>' in out
    cell = '<div class="jp-RenderedText jp-OutputArea-output"><pre>name   size\n----  ----\nDoes not fit.</pre>'
    assert notebook.mark_table_rows(cell) == (
        '<div class="jp-RenderedText jp-OutputArea-output"><pre><span class="tbl">name   size</span>\n'
        '<span class="tbl">----  ----</span>\nDoes not fit.</pre>')


def test_pictures_link_to_their_light_svg():
    from hooks import plots

    page = '<p><img alt="bars" src="../assets/pictures/step-peaks-dark.svg#only-dark" /></p>'
    assert plots.on_page_content(page, None, None, None) == (
        '<p><a href="../assets/pictures/step-peaks-light.svg" title="Open the picture full size">'
        '<img alt="bars" src="../assets/pictures/step-peaks-dark.svg#only-dark" /></a></p>')
