"""The command line of snippets.tensor_parallel: bad input and --help.

Each run is a fresh ``python -m snippets.tensor_parallel``; help and bad input
answer before TensorFlow is imported. The full-shape figures are docs/tensor-parallel.md's: its block
runs ``--full-shape`` in a fresh process and compares its exit code and every line it prints.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, "-m", "snippets.tensor_parallel", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_cli_uneven_split_is_one_line_and_exit_2():
    result = run_cli("--devices", "3")
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert "cannot split units (size 32) into 3 equal shards" in last
    assert "Traceback" not in result.stderr


def test_cli_full_shape_uneven_split_names_the_seed_dimension():
    result = run_cli("--full-shape", "--devices", "3")
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "python -m snippets.tensor_parallel: error: cannot split the units of the seed kernel "
        "W[131072, 65536] (size 65536) into 3 equal shards: 3 does not divide 65536; use a shard count "
        "that divides 65536, or pad it to 65538")


@pytest.mark.parametrize("args, code", [(("--help",), 0), (("--devices", "3"), 2),
                                        (("--full-shape", "--devices", "3"), 2), (("--units", "0"), 2)])
def test_cli_help_and_bad_input_answer_before_tensorflow_is_imported(args, code):
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "snippets.tensor_parallel", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == code and "Traceback" not in result.stderr
    # -X importtime lists every imported module on stderr.
    assert "tensorflow" not in result.stderr and "keras" not in result.stderr


def test_cli_seed_layer_refuses_cpu_mode_in_one_line():
    result = run_cli("--seed-layer", "--mode", "cpu")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(
        "needs GPUs (4 x 30976 MiB); without them use --full-shape, which reserves it untouched")
