"""The Simplified-Chinese edition: how a ``docs-zh/`` page is held to the English page it translates.

``docs-zh/<page>.md`` translates ``docs/<page>.md`` (``/work``'s translate brief, restated in
README.md): YAML front matter naming the English page and the sha256 of the bytes translated,
every fenced block, include line and directive comment copied byte for byte, every heading
ending with the English heading's anchor as an explicit ``{#id}``.

* :mod:`i18n.pages` reads a page into what must match (its skeleton) and compares two;
* :mod:`i18n.glossary` is the glossary (the Chinese terms, the English ones, what each means here)
  and the jieba user dictionary made from it;
* ``python -m i18n`` (:mod:`i18n.__main__`) says which translations are stale or missing, shows
  the English diff since the translated version, and stamps a revisited translation.

Nothing here imports TensorFlow; ``hooks/editions.py`` (the build) and ``tests/test_translations.py``
use it.
"""
