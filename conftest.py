"""Sybil runs every Python example in docs/ and in snippets/ docstrings.

Each document runs in its own fresh process (see harness/), so each
chapter can configure TensorFlow's devices the way its first block says.
"""

from doctest import ELLIPSIS, NORMALIZE_WHITESPACE
from pathlib import Path

import pytest
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

#: The files that cost most, run first (CPU seconds in one serial run on 2 cores: 10 to 133; the
#: suite is CPU-bound, 90% busy). pytest-xdist's ``--dist loadfile`` hands files to workers in
#: collection order only with ``--no-loadscope-reorder`` (pytest.ini): by default it re-sorts
#: files by their number of tests, which sent the 2-test scale models (100 s under load) out last.
LONG_FIRST = ("tests/test_scale_models.py", "tests/test_browser.py", "tests/test_model_plan.py",
              "tests/test_parameter_server.py", "tests/test_plan.py", "tests/test_activations.py",
              "tests/test_notebook.py", "docs/tensor-parallel.md", "tests/test_tensor_parallel.py",
              "tests/test_site.py", "tests/test_tf_keras.py", "docs/decide.md", "tests/test_reproduce_oom.py",
              "tests/test_tensor_parallel_cli.py", "tests/test_diffs.py", "docs/keep-fit.md",
              "tests/test_step_probe.py", "docs/memory-budget.md", "tests/test_keep_fit.py",
              "tests/test_step_ledger.py", "tests/test_api_matrix.py")


def pytest_collection_modifyitems(session, config, items):
    """Long files first (:data:`LONG_FIRST`); within a file, the collected order (a chapter's blocks
    run in sequence)."""
    rank = {path: index for index, path in enumerate(LONG_FIRST)}
    position = {id(item): index for index, item in enumerate(items)}

    def key(item):
        path = item.nodeid.split("::", 1)[0]
        return rank.get(path, len(rank)), position[id(item)]

    items.sort(key=key)


class DocstringsOnly(pytest.Module):
    """A module of ``snippets/`` named on the command line: Sybil runs its docstrings (above) in a
    kernel, and pytest, which collects a named file whatever its name, does not import it here.
    Imported here, ``snippets.keep_fit`` sets ``KERAS_BACKEND=jax`` in this process (it must, to
    import Keras on JAX), and every kernel started afterwards inherited it: TensorFlow kernels ran
    Keras on JAX ('ArrayImpl' object has no attribute 'numpy' in tests/test_api_matrix.py)."""

    def collect(self):
        return []


def pytest_pycollect_makemodule(module_path, parent):
    snippets = Path(__file__).resolve().parent / "snippets"
    if snippets in module_path.resolve().parents and not module_path.name.startswith("test_"):
        return DocstringsOnly.from_parent(parent, path=module_path)
    return None
