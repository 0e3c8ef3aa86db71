"""Sybil runs every Python example in docs/ and in snippets/ docstrings.

Each document runs in its own fresh process (see harness/), so each
chapter can configure TensorFlow's devices the way its first block says.
"""

from doctest import ELLIPSIS, NORMALIZE_WHITESPACE

from sybil import Sybil
from sybil.evaluators.doctest import NUMBER
from sybil.parsers.markdown import SkipParser

from harness import sybil_remote as remote

FLAGS = ELLIPSIS | NORMALIZE_WHITESPACE | NUMBER

chapters = Sybil(
    parsers=[remote.PythonBlockParser(FLAGS), SkipParser()],
    path="docs",
    patterns=["*.md"],
    setup=remote.setup,
    teardown=remote.teardown,
    name="chapters",
)
docstrings = Sybil(
    parsers=[remote.DocStringDocTestParser(FLAGS)],
    path="snippets",
    patterns=["*.py"],
    document_types={".py": remote.DocStringsInKernel},
    setup=remote.setup,
    teardown=remote.teardown,
    name="docstrings",
)

pytest_collect_file = (chapters + docstrings).pytest()
