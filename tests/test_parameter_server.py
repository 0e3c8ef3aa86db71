"""ParameterServerStrategy (snippets.parameter_server) and field cases F15, F16.

The in-process cluster (1 worker + 2 ps on 127.0.0.1) lives in one kernel
shared by the module. The multi-process form runs from this (TensorFlow-free)
test process: launch_local starts ps, worker and chief processes and must
leave none behind, whether the chief succeeds or time runs out.
"""

import psutil
import pytest

from snippets import memory
from snippets import parameter_server as ps
from harness import Kernel

REMOTE = "tests.remote.ps_cases"

PS = "/job:ps/replica:0/task:{}/device:CPU:0"


@pytest.fixture(scope="module")
def cluster():
    with Kernel(deadline=300) as kernel:
        yield kernel


def test_F15_min_size_partitioner_shards_a_variable_and_a_keras_embedding(cluster):
    result = cluster.call(f"{REMOTE}:f15_partitioned_variables")
    kind, rows = result["variable"]
    assert kind == "ShardedVariable"
    assert rows == [(PS.format(0), (1024, 1024), 4194304), (PS.format(1), (1024, 1024), 4194304)]
    kind, shape, rows = result["embedding"]
    assert (kind, shape) == ("ShardedVariable", (8192, 64))
    assert rows == [(PS.format(0), (4096, 64), 1048576), (PS.format(1), (4096, 64), 1048576)]


def test_F16_keras_fit_refuses_a_plain_dataset(cluster):
    message, per_worker, has_dataset_creator, optimizer = cluster.call(f"{REMOTE}:f16_fit_refusal")
    assert message == ("To use this dataset, you need to pass this dataset to "
                       "ClusterCoordinator.create_per_worker_dataset.")
    assert has_dataset_creator is False
    # ... and what the message asks for is refused too: no input works, use a coordinator loop.
    assert per_worker.startswith("Unrecognized data type: x=<tensorflow.python.distribute."
                                 "coordinator.values.PerWorkerDatasetFromDatasetFunction")
    # And the Keras 3 optimizer cannot update sharded weights: the loop writes RMSprop out.
    assert optimizer == "NotImplementedError: ShardedVariable doesn't support being used as a reference."


@pytest.mark.parametrize("kind, value, max_shards, expected", [
    ("fixed", 2, None, [("task:0", (1024, 1024)), ("task:1", (1024, 1024))]),
    # 8 MiB at most 1 MiB a shard: 8 shards of 256 rows, round-robin over 2 ps tasks.
    ("max_size", 1 << 20, None, [(f"task:{i % 2}", (256, 1024)) for i in range(8)]),
    # TensorFlow accepts uneven shards; this site's CLI refuses them (below).
    ("fixed", 3, None, [("task:0", (683, 1024)), ("task:1", (683, 1024)), ("task:0", (682, 1024))]),
])
def test_partitioners(cluster, kind, value, max_shards, expected):
    assert cluster.call(f"{REMOTE}:partitioner_shards", kind, value, max_shards) == expected


def test_coordinator_training_matches_keras_rmsprop(cluster):
    result = cluster.call(f"{REMOTE}:train", 5)
    assert result["losses"] == pytest.approx(result["reference_losses"], rel=1e-5)
    assert result["max_weight_error"] < 1e-6 < result["moved"]
    assert result["embedding"] == [(PS.format(0), (4096, 64)), (PS.format(1), (4096, 64))]
    assert result["kernel"] == [(PS.format(0), (128, 1)), (PS.format(1), (128, 1))]
    # Each velocity sits on the same ps task as its shard: embedding, kernel, bias.
    assert result["velocity"] == [(PS.format(0), (4096, 64)), (PS.format(1), (4096, 64)),
                                  (PS.format(0), (128, 1)), (PS.format(1), (128, 1)),
                                  (PS.format(0), (1,))]


def test_dense_layer_concatenates_the_whole_kernel_on_the_worker(cluster):
    assert (1024, 512) in cluster.call(f"{REMOTE}:dense_concat", (1024, 512))


def test_shard_summary_for_the_overview(cluster):
    summary = cluster.call(f"{REMOTE}:summary", (1024, 512))
    assert summary["where"] == [PS.format(0), PS.format(1)]
    assert summary["local_shape"] == (512, 512)
    assert summary["kernel_bytes"] == [1048576, 1048576]
    assert summary["measured"] == [2 * 1048576] * 2   # shard + colocated velocity
    assert summary["ledger"] == [1048576] * 2         # planner: weight shards only
    assert summary["worker_kernel_bytes"] == memory.tensor_bytes((1024, 512))


def test_reserve_ps_state_goes_through_the_capped_allocator(cluster):
    # [8192, 1024] in 2 shards + 2 velocities: 4 pieces of 16 MiB under the 200 MiB cap.
    status, rows = cluster.call(f"{REMOTE}:reserve", (8192, 1024))
    piece = memory.tensor_bytes((4096, 1024))
    assert status == "ok"
    assert [(r["device"], r["velocity_device"], r["shape"], r["kernel"], r["velocity"]) for r in rows] == [
        (PS.format(i), PS.format(i), (4096, 1024), piece, piece) for i in range(2)]
    # [32768, 2048]: 4 pieces of 128 MiB do not fit; the ps task's allocator refuses.
    status, message = cluster.call(f"{REMOTE}:reserve", (32768, 2048))
    assert status == "ResourceExhaustedError"
    assert "OOM when allocating tensor with shape[16384,2048]" in message


def test_seed_figures_per_ps_task_and_per_worker():
    # What --full-shape --ps 4 reserves and prints, checked as arithmetic here.
    shard = ps.check_even_shards((131072, 65536), 4)
    assert shard == (32768, 65536) and memory.tensor_bytes(shard) == 8589934592
    # The planner's parameter_server budget is the worker's GPU: the whole kernel and its gradient.
    worker = memory.per_device((131072, 65536), "float32", "rmsprop", "parameter_server", 4)[0]
    assert (worker.weights, worker.gradients, worker.slots) == (32 * memory.GiB, 32 * memory.GiB, 0)
    assert 2 * memory.tensor_bytes((131072, 65536)) == 64 * memory.GiB > memory.V100_CAPACITY
    assert [name for name, peak in worker.phases.items() if peak > memory.V100_CAPACITY][0] == "forward"


@pytest.mark.parametrize("argv, expected", [
    (["--full-shape", "--ps", "3"], "cannot split dimension 0 of shape [131072, 65536] (size 131072) evenly over 3 devices"),
    (["--full-shape", "--ps", "1"], "68719476736 B (64 GiB) per ps task does not fit 30976MiB; use more ps tasks (--ps)"),
])
def test_full_shape_bad_input_is_one_clear_line(capsys, argv, expected):
    with pytest.raises(SystemExit) as exit_info:
        ps.main(argv)
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", [
    (["--workers", "0"], "--workers must be a positive integer, not 0"),
    (["--ps", "0"], "--ps must be a positive integer, not 0"),
    (["--steps", "0"], "--steps must be a positive integer, not 0"),
    (["--steps", "-1"], "--steps must be a positive integer, not -1"),
    (["--shards", "0"], "--shards must be a positive integer, not 0"),
    (["--partitioner", "min_size", "--shard-bytes", "0"], "--shard-bytes must be a positive integer, not 0"),
    (["--partitioner", "max_size", "--shard-bytes", "-5"], "--shard-bytes must be a positive integer, not -5"),
    (["--launch-local", "--timeout", "0"], "--timeout must be a positive number of seconds, not 0"),
    (["--launch-local", "--timeout", "-1"], "--timeout must be a positive number of seconds, not -1"),
])
def test_bad_counts_name_their_option(capsys, argv, expected):
    with pytest.raises(SystemExit) as exit_info:
        ps.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"python -m snippets.parameter_server: error: {expected}"


def test_uneven_shards_are_one_clear_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        ps.main(["--shards", "3", "--shape", "2048", "1024"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith("cannot split dimension 0 of shape [2048, 1024] (size 2048) evenly over 3 "
                        "devices; choose a device count that divides 2048, or pad the dimension")


def test_task_without_tf_config_is_one_clear_line(capsys, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        ps.main(["--task"])
    assert exit_info.value.code == 2
    assert "--task needs TF_CONFIG set" in capsys.readouterr().err


def _alive(pids):
    return [pid for pid in pids if psutil.pid_exists(pid)
            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_multi_process_cluster_from_tf_config():
    result = ps.launch_local(workers=1, ps=2, steps=3, timeout=240)
    assert len(result["pids"]) == 4 and not _alive(result["pids"])
    chief = result["chief"]
    assert len(chief["losses"]) == 3
    assert [(s["device"], tuple(s["shape"]), s["nbytes"]) for s in chief["embedding"]] == [
        (PS.format(0), (4096, 64), 1048576), (PS.format(1), (4096, 64), 1048576)]


def test_multi_process_cluster_is_cleaned_up_on_timeout():
    with pytest.raises(ps.ClusterError, match="the chief did not finish within 1 s") as info:
        ps.launch_local(workers=1, ps=1, steps=1, timeout=1)
    assert len(info.value.pids) == 3 and not _alive(info.value.pids)
