"""A parameter-server cluster on loopback: in this process, or as separate processes.

One place for the cluster the chapters and probes share: free ports on
127.0.0.1 only, ``tf.distribute.Server`` per task, ``TF_CONFIG`` for the
multi-process form, and the partitioners ``ParameterServerStrategy`` splits
variables with.

Sources: the parameter-server training tutorial (tensorflow.org/tutorials/
distribute/parameter_server_training), ``tf.distribute.Server`` and
``tf.distribute.experimental.partitioners`` API pages.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from snippets.lib import devices, pieces, splits

ROOT = Path(__file__).resolve().parents[2]


#: Partitioners this module builds, by the name the CLI uses.
PARTITIONERS = ("fixed", "min_size", "max_size")


#: Only loopback: the in-process and --launch-local clusters never listen
#: on a routable address.
LOOPBACK = "127.0.0.1"


class ClusterError(RuntimeError):
    """A local cluster could not be started or did not finish; the message says which task.

    ``pids`` lists the processes :func:`launch_local` had started (all
    killed and reaped by the time this is raised).
    """

    pids: list[int] = []


#: What ``tf.distribute.Server`` says when its port was taken between :func:`free_port` choosing it and
#: the server binding it (another test process on the host may pick the same free port meanwhile): a
#: clash, not a fault, so a cluster is started again on new ports, at most :data:`PORT_ATTEMPTS` times.
PORT_TAKEN = "Could not start gRPC server"
PORT_ATTEMPTS = 3


def make_partitioner(kind: str, value: int, max_shards: int | None = None):
    """Build a ``tf.distribute.experimental.partitioners`` object.

    Args:
        kind: ``"fixed"`` (``value`` shards), ``"min_size"`` (shards of at
            least ``value`` bytes, at most ``max_shards``, default 1) or
            ``"max_size"`` (shards of at most ``value`` bytes, optionally at
            most ``max_shards``).
        value: shard count or bytes, a positive int.

    Raises:
        ValueError: for an unknown kind or a value that is not a positive int.
    """
    import tensorflow as tf

    if kind not in PARTITIONERS:
        raise ValueError(f"unknown partitioner {kind!r}; use one of {', '.join(PARTITIONERS)}")
    splits.check_count(value, f"the {kind} partitioner's value")
    if max_shards is not None:
        splits.check_count(max_shards, "max_shards")
    partitioners = tf.distribute.experimental.partitioners
    if kind == "fixed":
        return partitioners.FixedShardsPartitioner(num_shards=value)
    if kind == "min_size":
        return partitioners.MinSizePartitioner(min_shard_bytes=value, max_shards=max_shards or 1)
    return partitioners.MaxSizePartitioner(max_shard_bytes=value, max_shards=max_shards)


def free_port() -> int:
    """A TCP port free on the loopback interface right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def local_cluster(workers: int = 1, ps: int = 2, chief: bool = False) -> dict[str, list[str]]:
    """A cluster definition on free loopback ports: ``{"worker": [...], "ps": [...]}`` (+ ``"chief"``).

    Raises:
        ValueError: for a worker or ps count that is not a positive int.
    """
    splits.check_count(workers, "worker count")
    splits.check_count(ps, "ps count")
    cluster = {"worker": [f"{LOOPBACK}:{free_port()}" for _ in range(workers)],
               "ps": [f"{LOOPBACK}:{free_port()}" for _ in range(ps)]}
    if chief:
        cluster["chief"] = [f"{LOOPBACK}:{free_port()}"]
    return cluster


#: The in-process cluster: its (workers, ps) counts, resolver and servers. A
#: ``tf.distribute.Server`` cannot be stopped; it serves until the process
#: exits, so one cluster per process, kept here and shared by every caller.
_in_process: dict = {}


def start_in_process_cluster(workers: int = 1, ps: int = 2):
    """Start one ``tf.distribute.Server`` per worker and ps task in this process (once).

    This process is the coordinator. A second call with the same counts
    returns the same resolver: servers cannot be shut down, and the strategy
    connects this process to one cluster.

    Returns:
        A ``SimpleClusterResolver`` for ``ParameterServerStrategy``.

    Raises:
        ValueError: for counts that are not positive ints.
        ClusterError: if a cluster of other counts already runs in this process.
    """
    import tensorflow as tf

    if _in_process:
        if _in_process["counts"] != (workers, ps):
            raise ClusterError(
                f"an in-process cluster of {_in_process['counts'][0]} worker(s) and {_in_process['counts'][1]} "
                f"ps task(s) already runs in this process; servers cannot be stopped: reuse it, or start a new process")
        return _in_process["resolver"]
    for attempt in range(1, PORT_ATTEMPTS + 1):
        spec = tf.train.ClusterSpec(local_cluster(workers, ps))
        try:
            # A server that started before a later one failed serves on until exit: unused, it costs a port.
            servers = [tf.distribute.Server(spec, job_name=job, task_index=index, protocol="grpc", start=True)
                       for job in ("worker", "ps") for index in range(spec.num_tasks(job))]
            break
        except tf.errors.UnknownError as error:
            if PORT_TAKEN not in str(error) or attempt == PORT_ATTEMPTS:
                raise
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
    _in_process.update(counts=(workers, ps), resolver=resolver, servers=servers)
    return resolver


def ps_devices(count: int) -> tuple[str, ...]:
    """Names of the ``count`` parameter-server devices of the in-process cluster."""
    return tuple(f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(count))


def make_strategy(resolver, partitioner=None):
    """``ParameterServerStrategy(resolver, variable_partitioner=partitioner)``.

    Creating it connects this process to the cluster; several strategies
    (e.g. with different partitioners) can share one resolver.
    """
    import tensorflow as tf

    devices.leave_default_device()  # joining the cluster renames this process's devices
    return tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int = 0) -> str:
    """The ``TF_CONFIG`` JSON for one task of ``cluster``.

    >>> tf_config({"chief": ["host0:2222"], "worker": ["host1:2222"], "ps": ["host2:2222"]}, "worker")
    '{"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222"], "ps": ["host2:2222"]}, "task": {"type": "worker", "index": 0}}'
    """
    if task_type not in cluster or not 0 <= index < len(cluster[task_type]):
        raise ValueError(f"task {task_type}:{index} is not in the cluster {cluster}")
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def _tail(path: Path, chars: int = 1500) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-chars:]


def launch_local(task: Sequence[str], workers: int = 1, ps: int = 2, timeout: float = 120.0,
                 log_dir: str | None = None) -> dict:
    """Run a program as ps, worker and chief processes on localhost, then clean up.

    Starts ``ps`` ps and ``workers`` worker processes of ``python *task``,
    each with its own ``TF_CONFIG``, then the chief. The program reads its
    role from ``TF_CONFIG``; the chief prints one JSON line last. Waits for
    the chief at most ``timeout`` seconds, failing early if any task exits.
    Always kills the ps and worker processes (and the chief, if still
    running) before returning. A task whose port was taken before it bound it
    (:data:`PORT_TAKEN` in its log) starts the whole cluster again on new ports,
    at most :data:`PORT_ATTEMPTS` times in all, each with its own ``timeout``.

    Args:
        task: the arguments after ``python``, e.g. ``["-m", "snippets.parameter_server", "--task"]``.

    Returns:
        ``{"chief": <the chief's JSON>, "pids": [int]}``.

    Raises:
        ClusterError: if a task exits early, the chief fails, or time runs
            out; the message names the task and ends with its log's tail
            (``pids``: the last attempt's processes).
    """
    import tempfile

    logs = Path(log_dir or tempfile.mkdtemp(prefix="ps-cluster-"))
    for attempt in range(1, PORT_ATTEMPTS + 1):
        cluster = local_cluster(workers, ps, chief=True)
        try:
            return _launch_once(task, cluster, logs, timeout)
        except ClusterError:
            # This cluster's own logs only: a reused log_dir may hold other tasks' from an earlier call.
            names = [f"{kind}{index}" for kind, addresses in cluster.items() for index in range(len(addresses))]
            if attempt == PORT_ATTEMPTS or not any(PORT_TAKEN in _tail(logs / f"{name}.err", 100_000) for name in names):
                raise


def _launch_once(task: Sequence[str], cluster: dict[str, list[str]], logs: Path, timeout: float) -> dict:
    """One :func:`launch_local` on ``cluster``'s ports, its logs in ``logs`` (overwritten)."""
    environ = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "GRPC_FAIL_FAST": "use_caller",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, *task]
    processes: dict[str, subprocess.Popen] = {}
    files = []

    def start(task_type: str, index: int) -> None:
        name = f"{task_type}{index}"
        out = open(logs / f"{name}.out", "w")
        err = open(logs / f"{name}.err", "w")
        files.extend([out, err])
        processes[name] = subprocess.Popen(
            command, cwd=ROOT, env={**environ, "TF_CONFIG": tf_config(cluster, task_type, index)},
            stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    error = None
    try:
        for task_type in ("ps", "worker", "chief"):
            for index in range(len(cluster[task_type])):
                start(task_type, index)
        deadline = time.monotonic() + timeout
        chief = processes["chief0"]
        while chief.poll() is None:
            for name, process in processes.items():
                if name != "chief0" and process.poll() is not None:
                    raise ClusterError(f"task {name} exited with code {process.returncode} before the "
                                       f"chief finished; its log:\n{_tail(logs / f'{name}.err')}")
            if time.monotonic() > deadline:
                raise ClusterError(f"the chief did not finish within {timeout:.0f} s; its log:\n"
                                   f"{_tail(logs / 'chief0.err')}")
            time.sleep(0.2)
        if chief.returncode != 0:
            raise ClusterError(f"the chief exited with code {chief.returncode}; its log:\n"
                               f"{_tail(logs / 'chief0.err')}")
        lines = (logs / "chief0.out").read_text().strip().splitlines()
        return {"chief": json.loads(lines[-1]), "pids": [p.pid for p in processes.values()]}
    except ClusterError as raised:
        error = raised
        raise
    finally:
        # ps and worker tasks serve forever: kill every process we started,
        # by its own pid, and reap it so none is left behind.
        for process in processes.values():
            if process.poll() is None:
                process.kill()
        for process in processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for f in files:
            f.close()
        if error is not None:
            error.pids = [p.pid for p in processes.values()]


def gradients_by_shard(tape, loss, variables) -> list:
    """Gradients of ``loss`` for ``variables``, taken shard by shard and joined back per variable.

    A ``GradientTape`` cannot watch a ShardedVariable, only its shards; each
    variable's shard gradients are concatenated along axis 0 (the axis the
    partitioners split), so the result has the variables' full shapes.
    """
    import tensorflow as tf

    parts = [pieces.tensors_of(w) for w in variables]
    flat = tape.gradient(loss, [p for group in parts for p in group])
    grads, start = [], 0
    for group in parts:
        part = [tf.convert_to_tensor(g) for g in flat[start:start + len(group)]]
        start += len(group)
        grads.append(tf.concat(part, axis=0) if len(part) > 1 else part[0])
    return grads


def ps_strategy(max_shards: int = 2):
    """``ParameterServerStrategy`` on :func:`snippets.lib.cluster.start_in_process_cluster` with a ``MinSizePartitioner``.

    ``min_shard_bytes=256 KiB`` and ``max_shards`` shards: a 2 MiB variable
    gets ``max_shards`` shards, split along axis 0.
    """
    partitioner = make_partitioner("min_size", 256 * 2**10, max_shards)
    return make_strategy(start_in_process_cluster(1, 2), partitioner)


def ps_model(strategy, shape: Sequence[int] = (1024, 512), compile: bool = False):
    """``Sequential([Input((D,)), Dense(F, use_bias=False)])`` for ``shape`` ``[D, F]``, built in ``strategy.scope()``.

    ``compile=True`` also compiles it there, with SGD and a squared-error loss.
    """
    import keras

    with strategy.scope():
        model = keras.Sequential([
            keras.Input((shape[0],)),
            keras.layers.Dense(shape[1], use_bias=False, name="probe_dense"),
        ])
        if compile:
            model.compile(optimizer="sgd", loss="mean_squared_error")
    return model


def ones_batch(shape: Sequence[int] = (1024, 512), examples: int = 8):
    """NumPy ``(x[examples, D], y[examples, F])`` of ones, float32, for a model of ``shape`` ``[D, F]``."""
    import numpy as np

    return np.ones((examples, shape[0]), "float32"), np.ones((examples, shape[1]), "float32")
