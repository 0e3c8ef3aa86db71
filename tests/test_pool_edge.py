"""decide.md quotes benchmarks/results/pool_edge.json: held here to the check's configuration and to the allowance."""

import json

from snippets.lib import hardware, pool_edge


def test_the_published_pool_edge_check_is_of_the_configuration_and_the_allowance_decide_uses():
    data = pool_edge.results()
    assert data["step"] == json.loads(json.dumps(pool_edge.STEP.fields())) and data["pool"] == pool_edge.POOL
    assert data["usable"] == hardware.usable_bytes(pool_edge.POOL) == pool_edge.POOL - hardware.ALLOCATOR_SLACK
    # Each batch is the plan's largest for its room, and each was run at every thread count the planner uses.
    assert data["planned"]["pool"] <= data["pool"] and data["planned"]["usable"] <= data["usable"]
    assert data["batches"]["usable"] < data["batches"]["pool"]
    for batch in data["batches"].values():
        assert sorted(r["threads"] for r in data["runs"] if r["batch"] == batch) == list(pool_edge.THREADS)
    # What a run that ran out lost to chunks handed out whole came from the allocator's dump; its roomy peak fits.
    # Within the one chunk's allowance decide keeps: a result past it would need the allowance looked at again.
    assert all(0 < r["chunk_loss"] <= hardware.ALLOCATOR_SLACK for r in data["runs"] if not r["completed"])
    assert data["roomy"] < data["pool"] <= data["roomy_cap"]


def test_a_missing_result_names_the_command_that_writes_it(tmp_path):
    import pytest

    with pytest.raises(FileNotFoundError, match="python -m benchmarks.pool_edge"):
        pool_edge.results(tmp_path / "pool_edge.json")
