"""MkDocs hook: Material's search answers a query that lunr's wildcard expansion breaks.

Registered in ``mkdocs.yml`` under ``hooks:`` (``mkdocs.zh.yml`` inherits it).

Material's search worker (``assets/javascripts/workers/search.*.min.js``) bundles lunr.js 2.3.9
and adds a trailing wildcard to each term a reader types. For some sets of index terms lunr's
``TokenSet.intersect`` returns a word that is not in the index: on this site, in December 2026,
``65536*`` expanded to ``6553622``, which no page contains. ``Index.query`` then reads
``this.invertedIndex[term]._index`` of ``undefined``, the worker's search throws, and the reader
sees "No matching documents" for any query holding that term: the whole OOM line this site
exists for among them (the symptom of lunr.js issue 279, open since 2017; skipping such terms is
the workaround its PR 327 describes). Which term breaks moves with the site's text, so the guard
is not specific to one term.

After each build, this hook makes ``Index.query`` skip an expanded term with no postings: for
optional terms (what Material sends for a typed query; the theme's ``search.suggest`` is off) the
same results as lunr with a correct ``TokenSet``, since such a term matches no document. If
Material's worker no longer contains lunr's loop as expected (another Material release), the build
fails naming this hook, rather than ship a search that may answer nothing.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.exceptions import PluginError

#: lunr's ``Index.query`` loop over the expanded terms, as Material 9.8's minified worker has it.
LOOP = "for(var b=0;b<v.length;b++)for(var E=v[b],w=this.invertedIndex[E],R=w._index,"
#: The same loop, skipping a term the index does not hold (lunr.js issue 279's check).
GUARDED = "for(var b=0;b<v.length;b++)if(this.invertedIndex[v[b]])for(var E=v[b],w=this.invertedIndex[E],R=w._index,"


def guard(worker: Path) -> bool:
    """Guard the loop in ``worker`` (a search worker's minified JS); True if it changed the file.

    Raises:
        PluginError: neither the loop nor its guarded form is in the file.
    """
    text = worker.read_text(encoding="utf-8")
    if GUARDED in text:
        return False
    if text.count(LOOP) != 1:
        raise PluginError(f"hooks/search_guard.py: lunr's Index.query loop is not in {worker.name} as expected "
                          "(another Material release?); update LOOP and GUARDED for it")
    worker.write_text(text.replace(LOOP, GUARDED), encoding="utf-8")
    return True


def on_post_build(config, **kwargs) -> None:
    workers = sorted((Path(config["site_dir"]) / "assets" / "javascripts" / "workers").glob("search.*.min.js"))
    if not workers:
        raise PluginError("hooks/search_guard.py: no search worker in the built site (is Material's search on?)")
    for worker in workers:
        guard(worker)
