"""ParameterServerStrategy (snippets.parameter_server) and field cases F15, F16.

The in-process cluster (1 worker + 2 ps on 127.0.0.1) lives in one kernel
shared by the module; each kernel-side function sits above the test that calls
it. The multi-process form runs from this (TensorFlow-free)
test process: launch_local starts ps, worker and chief processes and must
leave none behind, whether the chief succeeds or time runs out.
"""

import socket

import psutil
import pytest

from harness import Kernel
from snippets.lib import devices, hardware, pieces, planner, units
from snippets.lib import cluster as loopback  # the fixture below is called cluster
from snippets import parameter_server as ps

PS = "/job:ps/replica:0/task:{}/device:CPU:0"

#: Kernel side: the kernel's cluster, started on first use and kept (tf.distribute.Server
#: cannot be stopped, and several strategies can share its resolver), and the port
#: definitions it was started on, one per attempt.
_resolver = None
_attempts: list[dict] = []


def clashing_on_first_call(held: socket.socket, task: str):
    """``local_cluster`` whose first cluster puts ``task``'s last address on ``held``'s port, which is taken."""
    real = loopback.local_cluster

    def local_cluster(*args, **kwargs):
        definition = real(*args, **kwargs)
        if not _attempts:
            definition[task][-1] = f"{loopback.LOOPBACK}:{held.getsockname()[1]}"
        _attempts.append(definition)
        return definition
    return local_cluster


def cluster_resolver():
    """Kernel side: the kernel's cluster; the in-process ps tasks share one allocator capped at 200 MiB.

    Its first ports put ps task 1 on a port this kernel holds, as another process on the host
    could take it between the choice and the bind: the cluster starts again on new ports.
    """
    global _resolver
    if _resolver is None:
        devices.configure(1, "200MiB", mode="cpu")
        _attempts.clear()  # this start's own attempts: an earlier start that raised clashes again
        with socket.socket() as held:
            held.bind((loopback.LOOPBACK, 0))
            real, loopback.local_cluster = loopback.local_cluster, clashing_on_first_call(held, "ps")
            try:
                _resolver = loopback.start_in_process_cluster(workers=1, ps=2)
            finally:
                loopback.local_cluster = real
    return _resolver


def ports_tried() -> list[dict]:
    """Kernel side: the port definitions the kernel's cluster was started on, and the one it serves on."""
    cluster_resolver()
    return [*_attempts, _resolver.cluster_spec().as_dict()]


@pytest.fixture(scope="module")
def cluster():
    with Kernel(deadline=300) as kernel:
        yield kernel


def shard_rows(variable) -> list[tuple]:
    """Kernel side: (device, shape, bytes) of each shard of ``variable``."""
    return [(s.device, s.shape, s.nbytes) for s in pieces.of_variable(variable)]


def f15_partitioned_variables():
    """Kernel side: MinSizePartitioner(256 KiB, max 2): a [2048, 1024] tf.Variable and a Keras 3 Embedding(8192, 64)."""
    import tensorflow as tf

    strategy = loopback.make_strategy(cluster_resolver(), loopback.make_partitioner("min_size", 256 << 10, max_shards=2))
    with strategy.scope():
        variable = tf.Variable(tf.zeros([2048, 1024]))
        embedding = ps.build_model().layers[0]
    table = embedding.embeddings.value
    return {
        "variable": (type(variable).__name__, shard_rows(variable)),
        "embedding": (type(table).__name__, tuple(table.shape), shard_rows(embedding.embeddings)),
    }


def test_F15_min_size_partitioner_shards_a_variable_and_a_keras_embedding(cluster):
    result = cluster.call(f15_partitioned_variables)
    kind, rows = result["variable"]
    assert kind == "ShardedVariable"
    assert rows == [(PS.format(0), (1024, 1024), 4194304), (PS.format(1), (1024, 1024), 4194304)]
    kind, shape, rows = result["embedding"]
    assert (kind, shape) == ("ShardedVariable", (8192, 64))
    assert rows == [(PS.format(0), (4096, 64), 1048576), (PS.format(1), (4096, 64), 1048576)]


def test_a_taken_port_starts_the_in_process_cluster_again_on_new_ports(cluster):
    # The first attempt clashed and the last one serves (a real clash meanwhile could add one between).
    *attempts, serving = cluster.call(ports_tried)
    assert len(attempts) >= 2 and serving == attempts[-1] and attempts[0]["ps"][1] != serving["ps"][1]


def f16_fit_refusal():
    """Kernel side: Keras 3 Model.fit(numpy) under the strategy, and whether Keras 3 has a DatasetCreator."""
    import keras

    strategy = loopback.make_strategy(cluster_resolver(), loopback.make_partitioner("fixed", 2))
    message = ps.fit_refusal(strategy)
    per_worker = ps.fit_per_worker_refusal(strategy)
    has_creator = hasattr(keras.utils, "experimental") or hasattr(keras.utils, "DatasetCreator")
    return message, per_worker, has_creator, ps.keras_optimizer_refusal(strategy)


def test_F16_keras_fit_refuses_a_plain_dataset(cluster):
    message, per_worker, has_dataset_creator, optimizer = cluster.call(f16_fit_refusal)
    assert message == ("To use this dataset, you need to pass this dataset to "
                       "ClusterCoordinator.create_per_worker_dataset.")
    assert has_dataset_creator is False
    # ... and what the message asks for is refused too: no input works, use a coordinator loop.
    assert per_worker.startswith("Unrecognized data type: x=<tensorflow.python.distribute."
                                 "coordinator.values.PerWorkerDatasetFromDatasetFunction")
    # And the Keras 3 optimizer cannot update sharded weights: the loop writes RMSprop out.
    assert optimizer == "NotImplementedError: ShardedVariable doesn't support being used as a reference."


def partitioner_shards(kind, value, max_shards=None, shape=(2048, 1024)):
    """Kernel side: Shard shapes and ps tasks of ``tf.Variable(zeros(shape))`` under one partitioner."""
    import tensorflow as tf

    strategy = loopback.make_strategy(cluster_resolver(), loopback.make_partitioner(kind, value, max_shards))
    with strategy.scope():
        variable = tf.Variable(tf.zeros(shape))
    return [(s.device.split("/")[3], s.shape) for s in pieces.of_variable(variable)]


@pytest.mark.parametrize("kind, value, max_shards, expected", [
    ("fixed", 2, None, [("task:0", (1024, 1024)), ("task:1", (1024, 1024))]),
    # 8 MiB at most 1 MiB a shard: 8 shards of 256 rows, round-robin over 2 ps tasks.
    ("max_size", 1 << 20, None, [(f"task:{i % 2}", (256, 1024)) for i in range(8)]),
    # TensorFlow accepts uneven shards; this site's CLI refuses them (below).
    ("fixed", 3, None, [("task:0", (683, 1024)), ("task:1", (683, 1024)), ("task:0", (682, 1024))]),
])
def test_partitioners(cluster, kind, value, max_shards, expected):
    assert cluster.call(partitioner_shards, kind, value, max_shards) == expected


def train_with_reference(steps=5):
    """Kernel side: Coordinator training vs the unsharded Keras RMSprop replay of the same batches."""
    import numpy as np

    strategy = loopback.make_strategy(cluster_resolver(), loopback.make_partitioner("fixed", 2))
    result = ps.train(strategy, steps=steps)
    x, y = ps.example_data(8 * 32)
    reference = ps.keras_reference(result["initial"], x, y, steps)
    return {
        "losses": result["losses"],
        "reference_losses": reference["losses"],
        "max_weight_error": max(float(np.abs(a - b).max()) for a, b in zip(result["final"], reference["weights"])),
        "moved": max(float(np.abs(a - b).max()) for a, b in zip(result["final"], result["initial"])),
        "embedding": [(s.device, s.shape) for s in result["embedding"]],
        "kernel": [(s.device, s.shape) for s in result["kernel"]],
        "velocity": [(s.device, s.shape) for s in result["velocity"]],
    }


def test_coordinator_training_matches_keras_rmsprop(cluster):
    result = cluster.call(train_with_reference, 5)
    assert result["losses"] == pytest.approx(result["reference_losses"], rel=1e-5)
    assert result["max_weight_error"] < 1e-6 < result["moved"]
    assert result["embedding"] == [(PS.format(0), (4096, 64)), (PS.format(1), (4096, 64))]
    assert result["kernel"] == [(PS.format(0), (128, 1)), (PS.format(1), (128, 1))]
    # Each velocity sits on the same ps task as its shard: embedding, kernel, bias.
    assert result["velocity"] == [(PS.format(0), (4096, 64)), (PS.format(1), (4096, 64)),
                                  (PS.format(0), (128, 1)), (PS.format(1), (128, 1)),
                                  (PS.format(0), (1,))]


def dense_concat(shape=(1024, 512)):
    """Kernel side: shapes a Dense layer concatenates on the worker from a 2-way sharded kernel."""
    strategy = loopback.make_strategy(cluster_resolver(), loopback.make_partitioner("fixed", 2))
    return ps.dense_reads_full_kernel(strategy, shape)


def test_dense_layer_concatenates_the_whole_kernel_on_the_worker(cluster):
    assert (1024, 512) in cluster.call(dense_concat, (1024, 512))


def shard_summary(shape=(1024, 512)):
    """Kernel side: :func:`snippets.parameter_server.shard_summary` over the 2 ps tasks."""
    return ps.shard_summary(cluster_resolver(), shape, ps=2)


def test_shard_summary_for_the_overview(cluster):
    summary = cluster.call(shard_summary, (1024, 512))
    assert summary["where"] == [PS.format(0), PS.format(1)]
    assert summary["local_shape"] == (512, 512)
    assert summary["kernel_bytes"] == [1048576, 1048576]
    assert summary["measured"] == [2 * 1048576] * 2   # shard + colocated velocity
    assert summary["planned"] == [1048576] * 2         # planner: weight shards only
    assert summary["worker_kernel_bytes"] == units.tensor_bytes((1024, 512))


def reserve_ps_state(shape):
    """Kernel side: :func:`snippets.parameter_server.reserve_ps_state` on the 2 ps tasks under the 200 MiB cap."""
    import tensorflow as tf

    try:
        return "ok", ps.reserve_ps_state(cluster_resolver(), shape, 2)
    except tf.errors.ResourceExhaustedError as error:
        return type(error).__name__, error.message.splitlines()[0]


def test_reserve_ps_state_goes_through_the_capped_allocator(cluster):
    # [8192, 1024] in 2 shards + 2 velocities: 4 pieces of 16 MiB under the 200 MiB cap.
    status, rows = cluster.call(reserve_ps_state, (8192, 1024))
    piece = units.tensor_bytes((4096, 1024))
    assert status == "ok"
    assert [(r["device"], r["velocity_device"], r["shape"], r["kernel"], r["velocity"]) for r in rows] == [
        (PS.format(i), PS.format(i), (4096, 1024), piece, piece) for i in range(2)]
    # [32768, 2048]: 4 pieces of 128 MiB do not fit; the ps task's allocator refuses.
    status, message = cluster.call(reserve_ps_state, (32768, 2048))
    assert status == "ResourceExhaustedError"
    assert "OOM when allocating tensor with shape[16384,2048]" in message


def test_seed_figures_per_ps_task_and_per_worker():
    # What --full-shape --ps 4 reserves and prints, checked as arithmetic here.
    shard = ps.check_even_shards((131072, 65536), 4)
    assert shard == (32768, 65536) and units.tensor_bytes(shard) == 8589934592
    # The planner's parameter_server budget is the worker's GPU: the whole kernel and its gradient.
    worker = planner.per_device((131072, 65536), "float32", "rmsprop", "parameter_server", 4)[0]
    assert (worker.weights, worker.gradients, worker.slots) == (32 * units.GiB, 32 * units.GiB, 0)
    assert 2 * units.tensor_bytes((131072, 65536)) == 64 * units.GiB > hardware.V100_CAPACITY
    assert [name for name, peak in worker.phases.items() if peak > hardware.V100_CAPACITY][0] == "forward"


@pytest.mark.parametrize("argv, expected", [
    (["--full-shape", "--ps", "3"], "cannot split dimension 0 of shape [131072, 65536] (size 131072) into 3 equal shards"),
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
    assert err.endswith("cannot split dimension 0 of shape [2048, 1024] (size 2048) into 3 equal shards: "
                        "3 does not divide 2048; use a shard count that divides 2048, or pad it to 2049")


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
    result = ps.launch_local(workers=1, ps=2, steps=3, timeout=600)
    assert len(result["pids"]) == 4 and not _alive(result["pids"])
    chief = result["chief"]
    assert len(chief["losses"]) == 3
    assert [(s["device"], tuple(s["shape"]), s["nbytes"]) for s in chief["embedding"]] == [
        (PS.format(0), (4096, 64), 1048576), (PS.format(1), (4096, 64), 1048576)]


def test_multi_process_cluster_is_cleaned_up_on_timeout():
    # Stand-ins that serve forever, as ps and worker tasks do, and a chief that never finishes: the cleanup kills
    # by pid whatever the task runs (SIGKILL), so three TensorFlow imports would only cost the suite time.
    with pytest.raises(loopback.ClusterError, match="the chief did not finish within 1 s") as info:
        loopback.launch_local(["-c", "import time; time.sleep(600)"], workers=1, ps=1, timeout=1)
    assert len(info.value.pids) == 3 and not _alive(info.value.pids)


#: A stand-in for a cluster task, without TensorFlow: it binds its own TF_CONFIG address as a
#: tf.distribute.Server does, and fails with the same line when the port is taken; the chief
#: waits until every other task listens, then prints its JSON line.
FAKE_TASK = """
import json, os, socket, sys, time
config = json.loads(os.environ["TF_CONFIG"])
me = config["task"]
host, port = config["cluster"][me["type"]][me["index"]].split(":")
server = socket.socket()
try:
    server.bind((host, int(port)))
except OSError:
    sys.exit(print("UNKNOWN: Could not start gRPC server", file=sys.stderr) or 1)
server.listen()
if me["type"] != "chief":
    time.sleep(600)
for kind, addresses in config["cluster"].items():
    for address in addresses if kind != "chief" else []:
        for _ in range(200):
            try:
                socket.create_connection((address.split(":")[0], int(address.split(":")[1])), 1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            sys.exit(f"{address} never listened")
print(json.dumps({"served": config["cluster"]}))
"""


def test_a_taken_port_starts_the_local_cluster_again_on_new_ports(monkeypatch):
    with socket.socket() as held:
        held.bind((loopback.LOOPBACK, 0))
        _attempts.clear()
        monkeypatch.setattr(loopback, "local_cluster", clashing_on_first_call(held, "ps"))
        result = loopback.launch_local(["-c", FAKE_TASK], workers=1, ps=2, timeout=60)
        taken = f"{loopback.LOOPBACK}:{held.getsockname()[1]}"
    assert len(_attempts) >= 2 and _attempts[0]["ps"][1] == taken and result["chief"]["served"] == _attempts[-1]
    assert len(result["pids"]) == 4 and not _alive(result["pids"])


def test_a_task_that_fails_otherwise_is_not_started_again(monkeypatch):
    _attempts.clear()
    with socket.socket() as held:  # bound, not taken by any task: only counts the attempts
        held.bind((loopback.LOOPBACK, 0))
        monkeypatch.setattr(loopback, "local_cluster", clashing_on_first_call(held, "chief"))
        with pytest.raises(loopback.ClusterError, match="exited with code 3"):
            loopback.launch_local(["-c", "import sys; sys.exit(3)"], workers=1, ps=2, timeout=60)
    assert len(_attempts) == 1
