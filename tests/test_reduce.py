"""Smaller layers (snippets.smaller_layers) and field case F20.

TensorFlow runs in one kernel (harness.Kernel), 1 logical CPU with a
1024 MiB cap; each kernel-side function sits above the test that calls it. The
experiments run here at a smaller scale than in the chapter (which asserts
the chapter-scale figures itself) to keep the suite fast.
"""

import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from harness import Kernel
from snippets.lib import communication, devices, units
from snippets import smaller_layers

ROOT = Path(__file__).resolve().parents[1]

#: One logical CPU with a 1024 MiB cap, as the Smaller layers chapter uses.
CI = (1, "1024MiB")


@pytest.fixture(scope="module")
def ci():
    with Kernel() as kernel:
        yield kernel


def configure_ci() -> devices.DeviceSetup:
    """Kernel side: the :data:`CI` device (a no-op after the first call)."""
    return devices.configure(*CI)


# --- field case F20 ----------------------------------------------------------------


def f20_one_hot_vs_gather() -> dict:
    """F20: ids=[3,7,3], T=random[100,5]; one_hot(ids,100) @ T vs tf.gather(T, ids)."""
    import numpy as np

    configure_ci()
    product, lookup = smaller_layers.onehot_vs_gather([3, 7, 3], 100, 5)
    return {"shape": product.shape, "equal": bool(np.array_equal(product, lookup)),
            "rows_equal": bool(np.array_equal(lookup[0], lookup[2]))}


def test_F20_one_hot_times_table_equals_gather(ci):
    result = ci.call(f20_one_hot_vs_gather)
    assert result == {"shape": (3, 5), "equal": True, "rows_equal": True}


def test_F20_rank_512_factorisation_is_402653184_B_vs_34359738368_B():
    assert communication.low_rank_bytes(131072, 65536, 512) == (131072 + 65536) * 512 * 4 == 402653184
    assert units.tensor_bytes([131072, 65536]) == 34359738368


# --- one-hot x Dense vs Embedding ------------------------------------------------------


def one_hot_vs_embedding_bytes(vocab: int, dim: int, batch: int) -> list[dict]:
    """Kernel side: a step's weight, input and gradient bytes, one-hot x Dense then Embedding."""
    configure_ci()
    return [asdict(row) for row in smaller_layers.onehot_vs_embedding_bytes(vocab, dim, batch)]


def test_embedding_keeps_the_table_but_shrinks_input_and_gradient(ci):
    dense, embedding = ci.call(one_hot_vs_embedding_bytes, 4096, 64, 32)
    assert dense["weights"] == embedding["weights"] == 4096 * 64 * 4
    assert (dense["inputs"], embedding["inputs"]) == (32 * 4096 * 4, 32 * 4)
    assert (dense["gradient"], dense["gradient_type"]) == (4096 * 64 * 4, "Tensor")
    assert (embedding["gradient"], embedding["gradient_type"]) == (32 * 64 * 4 + 32 * 4, "IndexedSlices")


def one_hot_vs_embedding_training(**kwargs) -> float:
    """Kernel side: largest table difference after training both ways from the same start."""
    configure_ci()
    return smaller_layers.onehot_vs_embedding_training(**kwargs)


def test_embedding_and_one_hot_dense_train_to_the_same_table(ci):
    assert ci.call(one_hot_vs_embedding_training, vocab=128, dim=8, batch=32, steps=20) < 1e-6


def step_peaks(optimizer: str) -> dict:
    """Kernel side: each layer's step peak above what stays resident, and the table's bytes."""
    setup = configure_ci()
    return smaller_layers.step_peak_bytes(setup.devices[0], optimizer)


@pytest.mark.parametrize("optimizer, lookup_tables, dense_tables", [("sgd", 1, 1.5), ("rmsprop", 2, 2)])
def test_step_peak_keeps_full_size_temporaries_even_for_a_lookup(ci, optimizer, lookup_tables, dense_tables):
    peaks = ci.call(step_peaks, optimizer)
    table = peaks["table"]
    assert table == 16384 * 64 * 4
    # Exact peaks depend on the executor's op order (measured for the lookup: 1x-2x the table
    # with SGD, 2x-3x with RMSprop); the lower bounds hold.
    # The lookup's gradient is 32 rows (8 KiB), yet its step peaks at whole tables.
    assert peaks["Embedding"] >= lookup_tables * table
    # Dense with SGD: its [16384, 64] gradient plus the one-hot batch [32, 16384].
    assert peaks["one-hot x Dense"] >= dense_tables * table


# --- low rank and hashing: bytes exact, costs ordered ------------------------------


def low_rank_variants(**kwargs) -> list[dict]:
    """Kernel side: weight bytes and loss of a Dense layer and its low-rank factorisations."""
    configure_ci()
    return [asdict(v) for v in smaller_layers.low_rank_experiment(**kwargs)]


def test_low_rank_bytes_are_exact_and_loss_grows_as_rank_falls(ci):
    variants = ci.call(low_rank_variants, ranks=(None, 16, 1), n=2048, epochs=4, batch=128)
    # Dense(64) on width 128: kernel + bias; rank r: U[128, r] + V[r, 64] + bias.
    assert [v["weight_bytes"] for v in variants] == [
        (128 * 64 + 64) * 4, (128 * 16 + 16 * 64 + 64) * 4, (128 + 64 + 64) * 4]
    scores = [v["score"] for v in variants]
    assert scores == sorted(scores)
    assert scores[-1] > 0.3 and scores[0] < 0.2


def hashing_variants(**kwargs) -> list[dict]:
    """Kernel side: weight bytes and accuracy of an id model with fewer hash buckets."""
    configure_ci()
    return [asdict(v) for v in smaller_layers.hashing_experiment(**kwargs)]


def test_hashing_bytes_are_exact_accuracy_falls_with_buckets_and_runs_repeat(ci):
    kwargs = dict(buckets=(None, 256, 16), vocab=1024, n=4096, epochs=2, batch=512)
    first = ci.call(hashing_variants, **kwargs)
    # Embedding(rows, 16) + Dense(10): rows*16 + 16*10 + 10 float32 numbers.
    assert [v["weight_bytes"] for v in first] == [(r * 16 + 170) * 4 for r in (1024, 256, 16)]
    accuracy = [v["score"] for v in first]
    assert accuracy == sorted(accuracy, reverse=True) and accuracy[0] - accuracy[-1] > 0.1
    # Seeded and op-deterministic: the same figures again.
    assert ci.call(hashing_variants, **kwargs) == first


def bad_input_error(case: str) -> str:
    """Kernel side: the ValueError message for a bad id, rank or bucket count."""
    configure_ci()
    calls = {
        "id": lambda: smaller_layers.onehot_vs_gather([3, 100], 100, 5),
        "rank": lambda: smaller_layers.factorised_dense(8, 0),
        "buckets": lambda: smaller_layers.id_model(100, 0),
    }
    try:
        calls[case]()
    except ValueError as error:
        return str(error)
    return "no error"


@pytest.mark.parametrize("case, message", [
    ("id", "outside [0, 100)"),
    ("rank", "rank must be a positive integer"),
    ("buckets", "buckets must be a positive integer"),
])
def test_bad_input_raises_one_clear_value_error(ci, case, message):
    assert message in ci.call(bad_input_error, case)


def test_cli_sizes_needs_no_tensorflow_and_prints_the_seed_figures():
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "snippets.smaller_layers", "sizes"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0
    assert "402653184 B (384 MiB)" in run.stdout and "34359738368 B (32 GiB)" in run.stdout
    assert "tensorflow" not in run.stderr  # -X importtime lists every module imported


def test_cli_bad_rank_exits_2_with_one_line():
    run = subprocess.run([sys.executable, "-m", "snippets.smaller_layers", "sizes", "--rank", "0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].endswith("--rank must be a positive integer, not 0")


def test_cli_rank_above_min_d_f_exits_2_with_one_line():
    run = subprocess.run([sys.executable, "-m", "snippets.smaller_layers", "sizes", "--rank", "100000"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stdout == "" and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        "python -m snippets.smaller_layers: error: --rank 100000 exceeds min(D, F) = 65536 of W[131072, 65536]; "
        "use a rank from 1 to 65536")


@pytest.mark.parametrize("rank, larger", [(43690, False), (43691, True), (65536, True)])
def test_cli_says_when_the_factors_outgrow_the_full_table(rank, larger):
    # (131072 + 65536) * r * 4 B passes 131072 * 65536 * 4 B between rank 43690 and 43691.
    run = subprocess.run([sys.executable, "-m", "snippets.smaller_layers", "sizes", "--rank", str(rank)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0
    note = (f"note: the rank-{rank} factors ({(131072 + 65536) * rank * 4} B")
    assert (note in run.stdout) is larger
    if larger:
        assert run.stdout.strip().splitlines()[-1].endswith(
            "are not smaller than W itself (34359738368 B (32 GiB)); only a rank below 43691 saves memory")
