"""snippets.lib.fork_server: one child imports TensorFlow and serves every set of runs, each run a fresh fork.

The tests share one child, as a planner's sets of runs do, forked by the suite's shared server (conftest.py) where the
test leaves the environment as it is. One starts a shared server of its own; the two that end a reader's own child
(another environment, :func:`fork_server.release`) come last and start their own, as a reader's command does: the file
imports TensorFlow four times, that server, those two children and the other environment's."""

from dataclasses import replace

import pytest

from snippets.lib import fork_server, model_step, units
from snippets.lib.model_step import ModelError, ModelStep, measure_many

STEP = ModelStep("tests.plan_builders:tiny", "adam", 16, "off", loss="mse")  # what is tested is the process, not the step


def test_a_set_left_midway_does_not_hand_its_results_to_the_next_call():
    # An audit: a progress callback that raised (or a Ctrl-C) left the child answering the old set, and the next
    # call read the old results as its own.
    import pytest

    def stop(line):
        raise RuntimeError("stopped by the reader")

    with pytest.raises(RuntimeError, match="stopped by the reader"):
        measure_many([(STEP, units.GiB, 1), (STEP.at_batch(24), units.GiB, 1)], progress=stop)
    again = measure_many([(STEP.at_batch(8), units.GiB, 1)])
    assert [r["step"]["batch"] for r in again] == [8] and again[0]["completed"]


def test_a_builders_output_does_not_swallow_a_progress_line():
    # An audit: a builder's flushed print without a newline ran into the next progress line on the child's
    # stdout, and that line was lost; the runs' own stdout now goes nowhere.
    step = ModelStep("tests.plan_builders:unfinished_line", "adam", 16, "off", loss="mse")
    lines = []
    results = measure_many([(step, units.GiB, 1), (step.at_batch(32), units.GiB, 1)], progress=lines.append)
    assert all(r["completed"] for r in results)
    assert [line.split(" done ")[0] for line in lines] == ["run 1 of 2", "run 2 of 2"], lines


def _sleeping(fields, cap, threads, steps):
    import time

    started = time.monotonic()
    time.sleep(fields["sleep"])
    return {"sleep": fields["sleep"], "started": started, "ended": time.monotonic()}


def test_the_next_run_starts_when_any_run_ends_and_results_keep_the_jobs_order():
    # Two at a time: the third job takes the place of the quick second one, not of the long first one
    # (a core would otherwise idle behind it). Six seconds: time for a loaded host to fork the third (an audit).
    payload = [[{"sleep": seconds}, "1GiB", None, 2] for seconds in (6.0, 0.2, 0.2)]
    results = fork_server.fork_jobs(payload, 2, _sleeping, lambda fields, threads: ("a run", "a run"))
    assert [r["sleep"] for r in results] == [6.0, 0.2, 0.2]
    assert results[2]["started"] < results[0]["ended"]


def test_a_run_that_goes_on_is_said_to_go_on(monkeypatch, capsys):
    # helper-74: a run of a ConvLSTM step compiled by XLA:CPU took 12 minutes, with no line after "measuring ...".
    monkeypatch.setattr(fork_server, "HEARTBEAT", 0.5)
    fork_server.fork_jobs([[{"sleep": 1.8}, "1GiB", None, 2]], 1, _sleeping, lambda fields, threads: ("a run", "16 per device"))
    lines = capsys.readouterr().out.splitlines()
    going = [line for line in lines if line.startswith(fork_server.PROGRESS + "still running (16 per device), ")]
    assert 2 <= len(going) <= 4 and lines[-1].startswith(fork_server.PROGRESS + "run 1 of 1 done"), lines


def _raising(fields, cap, threads, steps):
    raise KeyboardInterrupt("stopped while measuring")


def test_a_run_that_raises_is_reported_dead_and_its_process_ends_there():
    # An audit: a forked run whose function raised went on as a copy of the process that forked it (here: pytest).
    import os

    me = os.getpid()
    results = fork_server.fork_jobs([[{}, "1GiB", None, 2]], 1, _raising, lambda fields, threads: ("a run", "a run"))
    assert os.getpid() == me and results == [{"error": "the process measuring a run died"}]


def test_a_step_of_the_builders_own_optimizer_trains_with_its_settings():
    # helper-34: Adam(use_ema=True) and Adam(global_clipnorm=1.0) in a builder's compile were measured as a new
    # Adam() (0.72 and 0.85 of the step). With own_optimizer the run keeps the object: its EMA copy is there.
    step = ModelStep("tests.plan_builders:averaging", "adam", 16, "off")
    own, new = measure_many([(replace(step, own_optimizer=True), units.GiB, 1), (step, units.GiB, 1)])
    assert own["completed"] and new["completed"]
    trainable = own["weights_bytes"]  # tiny(): every weight trainable
    assert own["optimizer_bytes"] - new["optimizer_bytes"] == trainable  # the averages: one copy of each
    assert own["step"]["own_optimizer"] is True and "own_optimizer" not in new["step"]  # keys of older runs stand
    # A function that compiled an optimizer when read but not when run is refused, not trained with a new one (an audit).
    with pytest.raises(ModelError, match="compiled no optimizer this time.*pass --optimizer"):
        measure_many([(ModelStep("tests.plan_builders:tiny", "adam", 16, "off", loss="mse", own_optimizer=True), units.GiB, 1)])


def test_an_op_without_a_cpu_kernel_in_its_dtype_is_refused_with_the_ways_to_plan_it():
    # helper-34: MaxPool3D in float16 runs on a GPU, not on TensorFlow's CPU build. Leaving out --policy plans float32
    # only when the policy came from --policy; a function's own policy wins over any option (an audit).
    given = ModelStep("tests.plan_builders:volume", "adam", 16, "off", policy="mixed_float16", loss="mse")
    with pytest.raises(ModelError, match="no MaxPool3D kernel for half.* or without --policy"):
        measure_many([(given, units.GiB, 1)])
    with pytest.raises(ModelError, match="no MaxPool3D kernel for half.* or with the function setting a float32 policy"):
        measure_many([(replace(given, model="tests.plan_builders:volume_mixed", policy=None), units.GiB, 1)])


def test_a_shared_server_forks_each_process_its_child_in_the_same_environment_only(monkeypatch):
    import os
    import tempfile

    monkeypatch.delenv(fork_server.SHARED, raising=False)  # its own, ended below, not the suite's
    fork_server.close()
    shared = fork_server.start_shared(model_step.SERVER)
    path = os.environ[fork_server.SHARED]
    try:
        first = measure_many([(STEP, units.GiB, 1), (STEP.at_batch(32), units.GiB, 1)])
        child = fork_server.server(model_step.SERVER).child
        fork_server.close()  # the next asker, as another process would: another child of the same server
        again = measure_many([(STEP, units.GiB, 1)])
        other = fork_server.server(model_step.SERVER).child
        assert isinstance(child, fork_server.Forked) and isinstance(other, fork_server.Forked)
        assert child.pid != other.pid and child.poll() is not None and other.poll() is None
        with open(f"/proc/{other.pid}/stat") as stat:
            assert int(stat.read().rsplit(")", 1)[1].split()[1]) == shared.pid  # its parent
        # Each run's pool held nothing before its model: forked twice over, a process nothing else has used.
        assert all(r["completed"] and r["baseline"] < units.MiB for r in (*first, *again))
        fork_server.close()
        # Another environment a run reads, or another module: no child from it (the asker starts its own).
        with tempfile.TemporaryFile("w+") as errors:
            assert fork_server._attach(path, "snippets.lib.jax_step", errors) is None
            monkeypatch.setenv("TF_FORK_SERVER_TEST", "1")
            assert fork_server._attach(path, model_step.SERVER, errors) is None
        # When the process that started it ends, so does it (its input closes): an audit found one a killed pytest left.
        shared.stdin.close()
        assert shared.wait(timeout=60) == 0
    finally:
        fork_server.stop_shared(shared)
    assert not os.path.exists(path) and fork_server.SHARED not in os.environ


def test_no_shared_server_where_its_socket_cannot_be_made(monkeypatch, tmp_path):
    # An audit: under a TMPDIR of 90 characters the socket's path was too long, and every pytest run stopped at start.
    import os
    import tempfile

    deep = tmp_path / ("x" * 100)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    monkeypatch.delenv(fork_server.SHARED, raising=False)
    assert fork_server.start_shared(model_step.SERVER) is None
    assert fork_server.SHARED not in os.environ and not list(deep.iterdir())
    fork_server.stop_shared(None)


def test_a_later_set_of_runs_reuses_the_child_and_each_run_is_still_a_fresh_process(monkeypatch):
    monkeypatch.delenv(fork_server.SHARED, raising=False)  # a reader's own child
    fork_server.close()
    fork_server.prestart(model_step.SERVER)  # the tests above left theirs: reused, as a planner's next set does
    child = fork_server.server(model_step.SERVER).child.pid
    first = measure_many([(STEP, units.GiB, 1)])
    second = measure_many([(STEP, units.GiB, 1), (STEP.at_batch(32), units.GiB, 1)])
    assert fork_server.server(model_step.SERVER).child.pid == child  # no second TensorFlow import
    # Each run's pool held nothing before its model: a process and an allocator nothing else has used.
    assert all(r["completed"] and r["baseline"] < units.MiB for r in (*first, *second))
    # Another environment a run reads: another child, the old one ended.
    old = fork_server.server(model_step.SERVER)
    monkeypatch.setenv("TF_FORK_SERVER_TEST", "1")
    assert measure_many([(STEP, units.GiB, 1)])[0]["completed"]
    assert fork_server.server(model_step.SERVER).child.pid != child and old.child.poll() is not None
    fork_server.close()
    assert fork_server._warm is None


def test_a_released_child_serves_a_plan_that_comes_soon_and_ends_when_none_does(monkeypatch):
    import time

    monkeypatch.delenv(fork_server.SHARED, raising=False)  # a reader's own child

    assert fork_server._warm is None  # the test above closed its child
    fork_server.release()  # no child: nothing to end
    fork_server.prestart(model_step.SERVER)
    child = fork_server._warm
    fork_server.release(after=3.0)  # room for a loaded host between the release and the next claim
    assert measure_many([(STEP, units.GiB, 1)])[0]["completed"]
    time.sleep(4.0)  # handed out again before its time: kept
    assert fork_server._warm is child and child.child.poll() is None
    fork_server.release(after=0.2)
    for _ in range(100):
        if child.child.poll() is not None:
            break
        time.sleep(0.1)
    assert fork_server._warm is None and child.child.poll() is not None
