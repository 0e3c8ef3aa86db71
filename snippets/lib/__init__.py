"""The shared layer: what every chapter's module builds on.

Nothing in ``snippets.lib`` imports a chapter's module (``snippets.<page>``);
``tests/test_layout.py`` enforces it. CONTRIBUTING.md says which module holds what.
"""
