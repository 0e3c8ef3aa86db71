"""The troubleshooting index quotes messages that TensorFlow (or this site's code) really raises.

Every entry of docs/troubleshooting.md is a heading ``### `Type: message` {#anchor}``; ``...`` in
a quoted message stands for text that varies (device names, sizes). Each entry that a CPU can
raise is raised in a kernel by snippets.troubleshooting and compared with the quoted text, type
and message; each GPU-only entry must name its TensorFlow source, and the quoted text must still be
in that source. So a TensorFlow upgrade that rewords a message fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import Kernel, RemoteError
from snippets import troubleshooting as ts

PAGE = Path(__file__).resolve().parents[1] / "docs" / "troubleshooting.md"
#: ``### `Type: message` {#anchor}``, or with double backticks and spaces when the message has backticks.
HEADING = re.compile(r"^### (?P<ticks>`+) ?(?P<type>\w+): (?P<message>.+?) ?(?P=ticks) \{#(?P<anchor>[\w-]+)\}\s*$",
                     re.MULTILINE)

#: The messages issue 6 asks the index to cover, by anchor.
REQUIRED = {
    "oom", "physical-devices", "virtual-devices", "growth-differ", "growth-virtual-devices",
    "allocator-stats", "per-worker-dataset", "per-worker-fit", "sharded-keras-optimizer", "uneven-tf-split", "uneven-dtensor", "uneven-split",
}


def entries() -> dict[str, tuple[str, str, str]]:
    """anchor -> (type name, quoted message, the section's text) from the page."""
    text = PAGE.read_text(encoding="utf-8")
    matches = list(HEADING.finditer(text))
    found = {}
    for match, following in zip(matches, matches[1:] + [None]):
        body = text[match.end(): following.start() if following else len(text)]
        found[match["anchor"]] = (match["type"], match["message"], body)
    return found


def pattern(quoted: str) -> re.Pattern:
    """The quoted message as a regex: ``...`` matches any text, the rest literally."""
    return re.compile(".*?".join(re.escape(part) for part in quoted.split("...")), re.DOTALL)


ENTRIES = entries()
EMULATED = sorted(a for a, (kind, _) in ts.RAISERS.items() if kind == "emulated")
PLAIN = sorted(a for a, (kind, _) in ts.RAISERS.items() if kind == "plain")
OWN_PROCESS = sorted(a for a, (kind, _) in ts.RAISERS.items() if kind in ("jax", "uncapped"))


def test_index_covers_every_required_message_and_only_known_ones():
    assert REQUIRED <= set(ENTRIES), f"missing from the index: {sorted(REQUIRED - set(ENTRIES))}"
    assert set(ENTRIES) == set(ts.RAISERS) | set(ts.GPU_ONLY)
    assert not set(ts.RAISERS) & set(ts.GPU_ONLY)


def test_every_entry_links_the_page_that_fixes_it():
    for anchor, (_, _, body) in ENTRIES.items():
        assert re.search(r"\*\*Fix:\*\*.*?\]\([\w-]+\.md(#[\w-]+)?\)", body, re.DOTALL), f"{anchor}: no Fix link"


@pytest.fixture(scope="module")
def emulated():
    """4 logical CPUs sharing a 30976 MiB cap; the parameter-server entry runs last in it."""
    with Kernel() as kernel:
        yield kernel


@pytest.fixture(scope="module")
def plain():
    """TensorFlow with nothing configured."""
    with Kernel() as kernel:
        yield kernel


def check_raised(kernel: Kernel, anchor: str) -> None:
    type_name, quoted, _ = ENTRIES[anchor]
    with pytest.raises(RemoteError) as raised:
        kernel.call(ts.trigger, anchor)
    assert raised.value.type_name == type_name, raised.value.traceback
    assert pattern(quoted).search(raised.value.message), (
        f"{anchor}: TensorFlow now says\n{raised.value.message}\nbut the index quotes\n{quoted}"
    )


# The parameter-server entries start a cluster, which changes the process's context: keep them last.
@pytest.mark.parametrize("anchor", sorted(EMULATED, key=lambda a: a in ts.CLUSTER))
def test_cpu_message_matches_the_index_emulated(emulated, anchor):
    check_raised(emulated, anchor)


# configure-too-late starts the runtime, which the other plain entries must not see first.
@pytest.mark.parametrize("anchor", sorted(PLAIN, key=lambda a: a == "configure-too-late"))
def test_cpu_message_matches_the_index_plain(plain, anchor):
    check_raised(plain, anchor)


@pytest.mark.parametrize("anchor", OWN_PROCESS)
def test_cpu_message_matches_the_index_in_its_own_process(anchor):
    with Kernel(backend="jax") if ts.RAISERS[anchor][0] == "jax" else Kernel() as kernel:
        check_raised(kernel, anchor)


def test_every_process_kind_is_tested():
    assert {kind for kind, _ in ts.RAISERS.values()} == {"emulated", "plain", "jax", "uncapped"}


@pytest.mark.parametrize("anchor", sorted(ts.GPU_ONLY))
def test_gpu_only_message_is_in_its_tensorflow_source(plain, anchor):
    _, quoted, body = ENTRIES[anchor]
    target = ts.GPU_ONLY[anchor]
    assert "GPU-only" in body and target.split(":")[1] in body, f"{anchor}: say GPU-only and name {target}"
    source = plain.call(ts.tf_source, target)
    assert pattern(quoted).search(source), f"{anchor}: {quoted!r} is no longer in {target}"


def test_pattern_treats_dots_as_wildcards_only():
    assert pattern("shape[131072,65536] and type float on ... by allocator ...").search(
        "OOM when allocating tensor with shape[131072,65536] and type float on /device:CPU:1 by allocator x"
    )
    assert not pattern("shape[1,2] ...").search("shape[1,3] x")


def test_list_refuses_an_extra_argument(capsys):
    with pytest.raises(SystemExit) as exit_info:
        ts.main(["--list", "extra"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "python -m snippets.troubleshooting: error: argument anchor: not allowed with argument --list")


def test_every_uneven_split_of_this_site_raises_the_one_indexed_message():
    from snippets.lib import planner, splits

    quoted = pattern(ENTRIES["uneven-split"][1])
    raisers = (
        lambda: planner.per_device([131072, 65537], "float32", None, "column", 4),
        # parameter_server plans an uneven shape (its partitioner splits unevenly): the row split refuses it.
        lambda: planner.per_device([1001, 1024], "float32", None, "row", 4),
        lambda: splits.check_split("units", 30, 4),
        lambda: splits.layout_local_shape([1024, 510], [None, "model"], {"model": 4}),
    )
    for raiser in raisers:
        with pytest.raises(ValueError) as error:
            raiser()
        assert quoted.fullmatch(str(error.value)), str(error.value)
