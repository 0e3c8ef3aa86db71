"""The kernel every other test relies on (harness.Kernel): one namespace, its own
environment, errors carried back, a deadline, and a fork server fit to fork.

The kernel-side functions sit above the tests that call them.
"""

import os
import sys
from types import SimpleNamespace

import pytest

from harness import ROOT, Kernel, KernelDied, RemoteError
from harness import kernel as inside


def preloaded() -> dict:
    """Kernel side: what the fork server imported before forking this kernel."""
    from harness import preload

    return {"tensorflow": "tensorflow" in sys.modules, "keras": "keras" in sys.modules,
            "threads": preload.THREADS_BEFORE_FORK}


def test_a_kernel_is_forked_from_a_single_threaded_server_that_imported_tensorflow():
    with Kernel() as kernel:
        assert kernel.call(preloaded) == {"tensorflow": True, "keras": True, "threads": (1, 1)}
        assert kernel.pid != os.getpid() and kernel.alive()
    assert "tensorflow" not in sys.modules


def test_requests_share_one_namespace_and_prints_reach_the_test(capsys):
    with Kernel() as kernel:
        assert kernel.request("code", "x = 20\nprint('set x')", "block.py", 0) == ("ok", None, "set x\n")
        assert kernel.request("code", "print(x + 1)", "block.py", 2) == ("ok", None, "21\n")
        kernel.call(print, "from a call")
    assert capsys.readouterr().out == "from a call\n"


def test_env_is_the_kernels_own_and_the_working_directory_is_the_root():
    with Kernel(env={"TF_CPU_ALLOCATOR_USE_BFC": "true"}) as kernel:
        assert kernel.call(os.getenv, "TF_CPU_ALLOCATOR_USE_BFC") == "true"
        assert kernel.call(os.getenv, "TF_CPP_MIN_LOG_LEVEL") == "2"
        assert kernel.call(os.getcwd) == str(ROOT)
    assert "TF_CPU_ALLOCATOR_USE_BFC" not in os.environ


def fail(message: str) -> None:
    """Kernel side: raise a LookupError."""
    raise LookupError(message)


def test_remote_errors_carry_type_message_and_traceback():
    with Kernel() as kernel:
        with pytest.raises(RemoteError) as raised:
            kernel.call(fail, "no such thing")
        # A target that cannot be imported is an error reply too; the kernel lives on.
        with pytest.raises(RemoteError) as missing:
            kernel.call("snippets.no_such_module:f")
        assert kernel.call("os:getpid") == kernel.pid
    assert (raised.value.type_name, raised.value.message) == ("LookupError", "no such thing")
    assert "in fail" in raised.value.traceback
    assert missing.value.type_name == "ModuleNotFoundError"


def test_a_kernel_that_dies_shows_the_tail_of_its_output():
    with Kernel() as kernel, pytest.raises(KernelDied) as died:
        kernel.request("code", "import os\nos.write(2, b'C-level last words\\n')\nos._exit(3)", "x.py", 0)
    assert "exited (code 3)" in str(died.value) and "C-level last words" in str(died.value)


def test_a_hung_kernel_is_killed_at_its_deadline():
    with Kernel(deadline=10) as kernel, pytest.raises(KernelDied) as died:
        kernel.request("code", "import os, time\nos.write(1, b'about to hang\\n')\ntime.sleep(600)", "x.py", 0)
    assert not kernel.alive()
    assert "deadline" in str(died.value) and "about to hang" in str(died.value)


def test_a_server_with_threads_or_without_tensorflow_is_refused(monkeypatch):
    # preload_problem reads what the server left in sys.modules; faked here, in the test process.
    monkeypatch.setitem(sys.modules, inside.PRELOAD, SimpleNamespace(THREADS_BEFORE_FORK=(1, 1)))
    assert inside.preload_problem() is None
    monkeypatch.setitem(sys.modules, inside.PRELOAD, SimpleNamespace(THREADS_BEFORE_FORK=(1, 2)))
    assert "1 Python thread(s) and 2 OS thread(s)" in inside.preload_problem()
    monkeypatch.delitem(sys.modules, inside.PRELOAD)
    assert "did not import harness.preload" in inside.preload_problem()


def jax_side() -> dict:
    """Kernel side, in a JAX kernel: Keras's backend, JAX's devices, and whether TensorFlow came along."""
    import jax
    import keras

    return {"backend": keras.backend.backend(), "devices": jax.device_count(),
            "platform": jax.devices()[0].platform, "xla_flags": os.environ["XLA_FLAGS"]}


def test_a_jax_kernel_runs_keras_on_jax_over_4_cpu_devices():
    with Kernel(backend="jax", deadline=120) as kernel:
        assert kernel.call(jax_side) == {"backend": "jax", "devices": 4, "platform": "cpu",
                                         "xla_flags": "--xla_force_host_platform_device_count=4"}
        assert kernel.request("code", "y = 2\nprint(y * 3)", "block.py", 0) == ("ok", None, "6\n")
    assert "jax" not in sys.modules and "keras" not in sys.modules
    with pytest.raises(ValueError, match="unknown kernel backend"):
        Kernel(backend="torch")


def test_a_document_declares_its_kernel_on_its_first_lines():
    from harness.sybil_remote import declared_backend

    assert declared_backend("<!-- kernel: jax -->\n# Title\n") == "jax"
    assert declared_backend("# kernel: jax\n\"\"\"Docstring.\"\"\"\n") == "jax"
    assert declared_backend("# Title\n\nText.\n") == "tensorflow"
    # Too far down, or inside a sentence, it declares nothing.
    assert declared_backend("# Title\n\n\n\n<!-- kernel: jax -->\n") == "tensorflow"
    assert declared_backend("Run it in a <!-- kernel: jax --> kernel.\n") == "tensorflow"


def test_a_snippets_module_named_on_the_command_line_is_not_imported_by_pytest():
    # Named on the command line, pytest collects any .py file as a test module and imports it:
    # snippets.keep_fit would set KERAS_BACKEND=jax in the test process, and the TensorFlow kernels
    # started after it would run Keras on JAX (conftest.DocstringsOnly).
    import subprocess

    probe = ("import os, sys, pytest; "
             "code = pytest.main(['--collect-only', '-q', '-n', '0', '-p', 'no:randomly', 'snippets/keep_fit.py']); "
             "print(code, os.environ.get('KERAS_BACKEND'), 'keras' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    last = done.stdout.strip().splitlines()[-1]
    assert last == "0 None False", done.stdout + done.stderr
    assert "keep_fit.py::sybil:docstrings" in done.stdout  # its docstrings are still collected


def test_the_files_scheduled_first_exist_and_xdist_keeps_their_order():
    # A renamed file would silently drop out of conftest.LONG_FIRST and run wherever it falls.
    import configparser

    import conftest

    assert [path for path in conftest.LONG_FIRST if not (ROOT / path).is_file()] == []
    options = configparser.ConfigParser()
    options.read(ROOT / "pytest.ini")
    assert "--no-loadscope-reorder" in options["pytest"]["addopts"].split()
