"""Sybil runs every Python example in docs/ and in snippets/ docstrings.

Each document runs in its own fresh process (see harness/), so each
chapter can configure TensorFlow's devices the way its first block says.
"""

import os
from doctest import ELLIPSIS, NORMALIZE_WHITESPACE
from pathlib import Path

import pytest
from sybil import Sybil
from sybil.evaluators.doctest import NUMBER
from sybil.parsers.markdown import SkipParser

from harness import sybil_remote as remote
from snippets.lib import fork_server, model_step

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

#: The files that keep a worker longest, run first (seconds in one serial run on 2 cores, 8 to 87; in the suite's
#: own run, tests/test_plan.py reached 344 s before its measured plans moved to tests/test_plan_measured.py):
#: longest-first leaves short files for the end, where a long one would run alone. Some are long
#: because they compute (the scale models: 133 CPU seconds), others because they wait (an OOM
#: costs the BFC allocator's 10 s of retries: docs/memory-growth.md, 20 s for 0.3 CPU seconds);
#: run early, the waits overlap the computing. pytest-xdist's ``--dist loadfile`` hands files to
#: workers in collection order only with ``--no-loadscope-reorder`` (pytest.ini): by default it
#: re-sorts files by their number of tests, which sent the 2-test scale models out last.
LONG_FIRST = ("tests/test_plan_measured.py", "tests/test_plan_check.py", "tests/test_scale_models.py",
              "tests/test_browser.py", "tests/test_model_plan.py", "tests/test_parameter_server.py", "tests/test_plan.py",
              "tests/test_fork_server.py", "tests/test_activations.py",
              "tests/test_reproduce_oom.py", "docs/precision.md", "docs/memory-growth.md",
              "tests/test_notebook.py", "docs/tensor-parallel.md", "tests/test_troubleshooting.py",
              "tests/test_site.py", "tests/test_tensor_parallel.py", "docs/parameter-server.md",
              "tests/test_dtensor.py", "tests/test_tensor_parallel_cli.py", "docs/dtensor.md",
              "tests/test_precision.py", "docs/advice.md", "tests/test_tf_keras.py",
              "tests/test_placement_cases.py", "docs/placement.md", "tests/test_memory_growth.py",
              "docs/reproduce.md", "tests/test_diffs.py", "docs/decide.md", "tests/test_step_probe.py",
              "docs/memory-budget.md", "docs/keep-fit.md")


def pytest_configure(config):
    """One measuring server for the run, started before the workers (:func:`snippets.lib.fork_server.start_shared`):
    each worker, kernel or command that plans a model forks its child from it rather than importing TensorFlow
    again, where its environment is the run's (:data:`snippets.lib.fork_server.SHARED`)."""
    if not hasattr(config, "workerinput") and fork_server.SHARED not in os.environ:  # not in a run a test starts
        config.shared_fork_server = fork_server.start_shared(model_step.SERVER)


def pytest_unconfigure(config):
    if hasattr(config, "shared_fork_server"):
        fork_server.stop_shared(config.shared_fork_server)


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
