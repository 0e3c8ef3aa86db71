"""`python -m snippets.reproduce`: the seed OOM at full shape, on this CPU-only machine."""

import subprocess
import sys
import textwrap

import pytest

from harness import ROOT
from snippets.lib import units
from snippets.lib.errors import parse_oom

SEED_LINE = (
    "ResourceExhaustedError: OOM when allocating tensor with shape[131072,65536] and type float on "
    "/job:localhost/replica:0/task:0/device:CPU:1 by allocator bfc_cpu_allocator_for_gpu "
    "[Op:StatelessRandomUniformV2]"
)

# Runs the snippet as a child of a small parent that reports the child's peak RSS (KiB on Linux).
MEASURE = textwrap.dedent("""
    import resource, subprocess, sys
    done = subprocess.run([sys.executable, "-m", "snippets.reproduce", *sys.argv[1:]],
                          capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    print("EXIT", done.returncode, "MAXRSS_KIB", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
""")


def run(*args):
    done = subprocess.run([sys.executable, "-c", MEASURE, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    *output, status = done.stdout.rstrip("\n").split("\n")
    _, code, _, rss_kib = status.split()
    return int(code), "\n".join(output), done.stderr, int(rss_kib) * 1024


def test_full_shape_oom_reproduces_on_cpu_within_2_gib():
    # "32GB" (10^9 B units) is parsed by snippets.lib.units.parse_size, tested in its docstring.
    code, out, _, rss = run("--device-memory", "30976MiB")
    assert code == 0
    assert SEED_LINE in out.splitlines()
    assert "largest variable: sequential/dense/kernel [131072, 65536] float32 = 34359738368 B (32 GiB)" in out
    assert "replicas: 4" in out
    assert rss < 2 * units.GiB


@pytest.mark.parametrize("args, message", [
    (["--devices", "0"], "device count must be a positive integer"),
    (["--device-memory", "lots"], "is not a memory size"),
    (["--shape", "0", "65536"], "dimension 0 of shape [0, 65536] is 0"),
    (["--device-memory", "0.5"], "device memory must be at least 1 MiB"),
    (["--devices", "100000", "--device-memory", "1MiB"], "device count 100000 is more than 64"),
])
def test_bad_input_exits_2_with_one_line(args, message):
    code, _, err, _ = run(*args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_a_run_that_would_page_the_host_refuses():
    # A 64 GiB cap would accept the 32 GiB kernel and really allocate it.
    code, out, err, _ = run("--device-memory", "64GiB", "--mode", "cpu")
    assert code == 2
    assert "refusing so as not to page the host" in err
    assert "Traceback" not in err and "OOM" not in out


def test_parse_the_reported_gpu_message():
    oom = parse_oom(
        "ResourceExhaustedError: OOM when allocating tensor with shape[131072,65536] and type float "
        "on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [Op:RandomUniform]"
    )
    assert (oom.shape, oom.dtype, oom.allocator, oom.op) == ((131072, 65536), "float32", "GPU_0_bfc", "RandomUniform")
    assert oom.nbytes == 34359738368
    with pytest.raises(ValueError, match="not a TensorFlow OOM message"):
        parse_oom("Segmentation fault")
