"""Sybil parsers and evaluators that run every example in a per-document kernel.

Sybil parses the chapters and docstrings in the pytest process, as usual; the
evaluators here send each example to the document's :class:`~harness.Kernel`
instead of ``exec``-ing it locally, so each chapter gets a fresh process and can
configure its devices the way it says it does.

A document runs in the TensorFlow kernel unless one of its first lines
declares another backend (:func:`declared_backend`): ``<!-- kernel: jax -->``
in a chapter, ``# kernel: jax`` in a module whose docstrings hold examples.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable

from sybil import Document, Example, Region
from sybil.document import PythonDocStringDocument
from sybil.example import NotEvaluated
from sybil.parsers.abstract.doctest import DocTestStringParser
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

from harness import Kernel, RemoteError

KERNEL_KEY = "__kernel__"

#: Info strings of fenced blocks that hold Python: ```python, ```py and
#: ```pycon, with or without Material's attributes (title="x.py", hl_lines=...).
PYTHON_FENCE = r"(?:python|py|pycon)(?:[ \t]+[^\n]*)?"


#: A backend declaration: a line of its own, alone (an HTML comment in Markdown, a comment in Python).
KERNEL_DECLARATION = re.compile(r"^[ \t]*(?:<!--[ \t]*kernel:[ \t]*(?P<html>[\w-]+)[ \t]*-->"
                                r"|#[ \t]*kernel:[ \t]*(?P<comment>[\w-]+))[ \t]*$")
#: How many lines from the top a declaration may sit.
DECLARATION_LINES = 3


def declared_backend(text: str) -> str:
    """The kernel backend a document declares in its first :data:`DECLARATION_LINES` lines.

    Returns:
        ``"tensorflow"`` when nothing is declared, else the declared name
        (``"jax"``; :class:`harness.Kernel` refuses an unknown one with ``ValueError``).
    """
    for line in text.splitlines()[:DECLARATION_LINES]:
        match = KERNEL_DECLARATION.match(line)
        if match:
            return match.group("html") or match.group("comment")
    return "tensorflow"


def kernel_for(example: Example) -> Kernel:
    namespace = example.document.namespace
    if KERNEL_KEY not in namespace:
        namespace[KERNEL_KEY] = Kernel(backend=declared_backend(example.document.text))
    return namespace[KERNEL_KEY]


def _report(status: str, value, printed: str) -> str | None:
    if printed:
        print(printed, end="")
    if status == "error":
        type_name, message, traceback = value
        return traceback or f"{type_name}: {message}"
    return value or None


def evaluate_code(example: Example) -> str | None:
    source = example.parsed
    line = example.line + getattr(source, "line_offset", 0)
    return _report(*kernel_for(example).request("code", str(source), example.path, line))


class DocTestInKernel:
    def __init__(self, optionflags: int) -> None:
        self.optionflags = optionflags

    def __call__(self, example: Example) -> str | None:
        request = ("doctest", example.parsed, example.path, example.line, self.optionflags)
        return _report(*kernel_for(example).request(*request))


class PythonBlockParser:
    """Python fenced blocks in Markdown; a block starting with ``>>>`` is a doctest."""

    def __init__(self, doctest_optionflags: int = 0) -> None:
        self.lexer = FencedCodeBlockLexer(PYTHON_FENCE)
        self.doctests = DocTestStringParser(DocTestInKernel(doctest_optionflags))

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in self.lexer(document):
            source = region.lexemes["source"]
            if source.startswith(">>>"):
                for doctest_region in self.doctests(source, document.path):
                    doctest_region.adjust(region, source)
                    yield doctest_region
            else:
                region.parsed = source
                region.evaluator = evaluate_code
                yield region


class DocStringsInKernel(PythonDocStringDocument):
    """A module's docstrings, run in a kernel that has imported the module."""

    def import_document(self, example: Example) -> None:
        status, value, printed = kernel_for(example).request("import", self.path)
        if status == "error":
            raise RemoteError(*value)
        self.pop_evaluator(self.import_document)
        raise NotEvaluated()


def gpu_present() -> bool:
    """True if ``nvidia-smi -L`` lists a GPU; asked without importing TensorFlow."""
    if shutil.which("nvidia-smi") is None:
        return False
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return bool(re.search(r"^GPU \d+:", listing.stdout, re.MULTILINE))


def setup(namespace: dict) -> None:
    # Names used by skip conditions, e.g. <!-- skip: next if(not GPU, reason="needs a GPU") -->
    namespace["GPU"] = gpu_present()


def teardown(namespace: dict) -> None:
    kernel = namespace.pop(KERNEL_KEY, None)
    if kernel is not None:
        kernel.close()


class DocStringDocTestParser:
    """``>>>`` examples in a module's docstrings, run in the module's kernel."""

    def __init__(self, optionflags: int = 0) -> None:
        self.string_parser = DocTestStringParser(DocTestInKernel(optionflags))

    def __call__(self, document: Document) -> Iterable[Region]:
        return self.string_parser(document.text, document.path)
