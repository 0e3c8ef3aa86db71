"""Imported once by the fork server, before its first fork: TensorFlow and Keras.

The last of the server's preloaded modules (see :mod:`harness`), so that
:data:`THREADS_BEFORE_FORK` counts what all of them left running.

Importing TensorFlow and Keras takes 6-10 s of CPU, and the suite starts
dozens of kernels. Importing does not start TensorFlow's runtime: devices and
the CPU allocator's ``TF_CPU_*`` variables are read when the first op runs
(measured on TF 2.21, see ``snippets/lib/devices.py``). So the server imports both
once and every kernel, a fork of it, sets its own environment, configures its
own devices and is as fresh as a new process for everything the chapters do.

``fork`` copies only the calling thread: a thread running in the server
(holding a lock, say) would leave its children deadlocked. So the server must
be single-threaded when it forks; :data:`THREADS_BEFORE_FORK` records what it
was, and every kernel checks it before serving (:func:`harness.kernel.preload_problem`).

Never import this module in the test process: that would import TensorFlow there.
"""

import os
import threading

# NumPy's OpenBLAS starts a thread pool on import (one thread per extra core);
# with one thread it starts none. Kernels therefore run NumPy's BLAS on one
# thread; TensorFlow's own ops use thread pools created after the fork.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
# Set before the import, as the kernels' environment does: TensorFlow reads it once.
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"

# Before TensorFlow: importing the devices module sets what TensorFlow reads at import
# (snippets.lib.devices.ENVIRONMENT: oneDNN off, as on a GPU host).
import snippets.lib.devices  # noqa: E402,F401
import keras  # noqa: E402,F401  (the import is the point)
import tensorflow  # noqa: E402,F401

#: (Python threads, OS threads of this process) after the imports; both must be 1.
THREADS_BEFORE_FORK = (threading.active_count(), len(os.listdir("/proc/self/task")))
