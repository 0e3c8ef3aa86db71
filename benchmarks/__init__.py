"""Benchmarks: the figures the Performance page quotes, measured on this machine.

Run it (a few minutes; the test suite is the slow part)::

    python -m benchmarks                    # measure everything, 3 runs each
    python -m benchmarks --only mkdocs_build oom_reproduction --runs 5
    python -m benchmarks --publish          # also refresh the committed table
    python -m benchmarks --help

Each figure is the median of ``--runs`` runs (at least 3). Results go to
``build/benchmarks.json`` (every run, the machine, the commit) and
``build/performance-table.md``; ``--publish`` copies both to
``benchmarks/results/``, which the Performance page includes, so the site
builds offline from a clean checkout with the last published measurement.

Modules: :mod:`benchmarks.measure` (timing a child process, medians, the
machine), :mod:`benchmarks.figures` (one small function per measurement),
:mod:`benchmarks.remote` (the parts that run inside a TensorFlow kernel, a
:class:`harness.Kernel`) and :mod:`benchmarks.report` (JSON and the Markdown
table). ``benchmarks/test_tools.py``, collected by ``pytest``, checks the
measuring and reporting tools themselves.
"""
