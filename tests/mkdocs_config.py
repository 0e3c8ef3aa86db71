"""mkdocs.yml as the tests read it: a safe YAML load that understands MkDocs's ``!ENV`` tag."""

from pathlib import Path

import yaml


class _Loader(yaml.SafeLoader):
    """SafeLoader plus ``!ENV [NAME, default]`` read as its default (``site_url``)."""


def _env(loader, node):
    values = loader.construct_sequence(node) if isinstance(node, yaml.SequenceNode) else [loader.construct_scalar(node)]
    return values[-1]


_Loader.add_constructor("!ENV", _env)


def load(path: Path) -> dict:
    """The MkDocs configuration at ``path``, with each ``!ENV`` value at its default."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
