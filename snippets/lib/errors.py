"""TensorFlow's errors as a reader sees them: one line, and what an OOM message says.

>>> report = parse_oom("OOM when allocating tensor with shape[131072,65536] and type float on "
...                    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")
>>> report.shape, report.dtype, report.nbytes
((131072, 65536), 'float32', 34359738368)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from snippets.lib import units


class ModelError(ValueError):
    """The reader's model cannot be measured as given (one line says what to change)."""


#: TensorFlow's C++ start-up lines on a host without a CUDA driver: abseil writes everything logged
#: before ``absl::InitializeLog()`` to stderr whatever ``TF_CPP_MIN_LOG_LEVEL`` says (abseil-cpp
#: pull requests 1718 and 1957, "Don't log unwanted when not initialized"), so importing TensorFlow
#: prints its ``cudart_stub`` INFO line and a ``cuInit`` error a GPU host does not print.
STARTUP_LOG = re.compile(r"absl::InitializeLog|^[IWE]\d{4} \d\d:\d\d:.*(cudart_stub|cuInit|cuda_platform|cpu_feature_guard)"
                         r"|^To enable the following instructions")


def startup_noise(line: str) -> bool:
    """Whether ``line`` is one of TensorFlow's start-up lines (:data:`STARTUP_LOG`), not the reader's.

    >>> startup_noise("I0000 00:00:1796362183.983710    8979 cudart_stub.cc:31] Could not find cuda drivers")
    True
    >>> startup_noise("E0000 00:00:1796362183.983710    8979 bfc_allocator.cc:485] Allocator ran out of memory")
    False
    """
    return bool(STARTUP_LOG.search(line))


_TF_PREFIX = re.compile(r"^\{\{function_node [^}]*\}\}\s*")


def oom_line(error: Exception) -> str:
    """TensorFlow's ResourceExhaustedError as one line, as a user's log shows it.

    Drops the ``{{function_node ...}}`` prefix TF adds when the op ran inside
    a function and the trailing ``name:``.
    """
    message = _TF_PREFIX.sub("", str(error).strip().splitlines()[0])
    message = re.sub(r"\s*name:\s*$", "", message)
    return f"{type(error).__name__}: {message}"


def refusal_line(error: BaseException) -> str:
    r"""The line of ``error`` naming what the allocator could not allocate ("OOM when allocating tensor with shape[...]",
    which ``fit`` wraps in "Graph execution error:" and the node it was detected at; an XLA step's "Out of memory while
    trying to allocate 80.91MiB."), without TensorFlow's ``{{function_node ...}}`` prefix; else :func:`error_line`.

    >>> refusal_line(RuntimeError("Graph execution error:\n\nDetected at node x\n{{function_node f}} OOM when "
    ...                           "allocating tensor with shape[64,128] and type float on CPU:0 by allocator cpu_bfc"))
    'OOM when allocating tensor with shape[64,128] and type float on CPU:0 by allocator cpu_bfc'
    >>> refusal_line(RuntimeError("Detected at node x defined at: File memory_growth.py\nOut of memory while trying to "
    ...                           "allocate 80.91MiB."))
    'Out of memory while trying to allocate 80.91MiB.'
    >>> refusal_line(MemoryError("no room"))
    'no room'
    """
    lines = str(error).splitlines()
    # fit's "Detected at node" lists the Python frames that built the op: a file's name can say "memory" too.
    for marker in ("oom when allocating", "out of memory while trying to allocate"):
        for line in lines:
            if marker in line.lower():
                return _TF_PREFIX.sub("", line.strip())
    return error_line(error)


#: TensorFlow's names for dtypes in error messages (``DataTypeString`` in
#: ``tensorflow/core/framework/types.cc``) -> the names used on this site.
TF_MESSAGE_DTYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64"}
_OOM = re.compile(
    r"OOM when allocating tensor with shape\s*\[(?P<shape>[\d,\s]*)\] and type (?P<type>\w+) "
    r"on (?P<device>\S+) by allocator (?P<allocator>\S+)(?:.*\[Op:(?P<op>\w+)\])?"
)


@dataclass(frozen=True)
class OomReport:
    """The parts of an OOM message: what was asked for, where, and by which op."""

    shape: tuple[int, ...]
    dtype: str
    device: str
    allocator: str
    op: str | None

    @property
    def nbytes(self) -> int:
        """Bytes of the one tensor the allocator refused."""
        return units.tensor_bytes(self.shape, self.dtype)


def parse_oom(message: str) -> OomReport:
    """Read a ``ResourceExhaustedError`` message: shape, dtype, device, allocator, op.

    Raises:
        ValueError: if ``message`` has no "OOM when allocating tensor" part.
    """
    match = _OOM.search(message)
    if match is None:
        raise ValueError("not a TensorFlow OOM message: no 'OOM when allocating tensor with shape[...]'")
    shape = tuple(int(d) for d in match["shape"].replace(" ", "").split(",") if d)
    dtype = TF_MESSAGE_DTYPES.get(match["type"], match["type"])
    return OomReport(shape, dtype, match["device"], match["allocator"], match["op"])


#: How an allocation failure can surface besides ``ResourceExhaustedError``:
#: TensorFlow also allocates while it builds a step (constant folding, the
#: slots' initial values), and reports a failure there as a ValueError or an
#: InvalidArgumentError (seen with TF 2.21 under a tight cap).
OOM_MARKERS = ("OOM when allocating", "ran out of memory", "Unable to evaluate a constant node",
               "Cannot parse tensor from proto")


def is_oom(error: Exception) -> bool:
    import tensorflow as tf

    return isinstance(error, tf.errors.ResourceExhaustedError) or any(m in str(error) for m in OOM_MARKERS)


#: What TensorFlow says when XLA cannot compile a step (an op without an XLA kernel, a Python loop over a tensor).
XLA_FAILURES = ("tf2xla conversion failed", "Detected unsupported operations when trying to compile graph")


def xla_refusal(model: str, error: BaseException) -> str | None:
    """The refusal for a step XLA could not compile (:data:`XLA_FAILURES`), or None. helper-51: keras-io's graph
    attention network failed to compile under ``--xla auto`` and was then tried on x alone, whose error hid the cause.

    >>> print(xla_refusal("m:f", ValueError("tf2xla conversion failed while converting f. Run with TF_DUMP_GRAPH_PREFIX")))
    XLA could not compile m:f's train step (ValueError: tf2xla conversion failed while converting f), as Keras would try on a GPU host under jit_compile="auto" or True: if your model compiles with jit_compile=False, plan it with --xla off
    """
    if not any(marker in str(error) for marker in XLA_FAILURES):
        return None
    return (f"XLA could not compile {model}'s train step ({type(error).__name__}: {error_line(error).split('. ')[0]}), "
            "as Keras would try on a GPU host under jit_compile=\"auto\" or True: if your model compiles with "
            "jit_compile=False, plan it with --xla off")


def phase_of(error: Exception) -> str:
    """The training phase an OOM's op belongs to, from the op's name in the message.

    Creating the optimizer's slots (their ``Initializer``) happens in the first
    step before the forward pass ends: the planner counts slots from the
    forward phase on.
    """
    text = str(error)
    if "/Initializer/" in text:
        return "forward"
    if "gradient_tape" in text or "MatMul_1" in text:
        return "backward"
    if any(word in text.lower() for word in ("rmsprop", "adam", "sgd", "update", "assign", "apply", "optimizer")):
        return "update"
    return "forward"


#: The source location MLIR-based passes (DTensor's) put before a message: "<file>:<line>:<col>: error: ".
_LOCATION = re.compile(r"^.+?:\d+:\d+: error: ")


def summary(error: BaseException) -> str:
    r"""``Type: first line of the message`` (TensorFlow's messages can run to pages), without the
    source location DTensor's passes put first, which names whatever Python frame traced the op.

    >>> summary(ValueError("<frozen runpy>:198:1: error: 'tf.IteratorGetNext' op failed\nmore"))
    "ValueError: 'tf.IteratorGetNext' op failed"
    """
    return f"{type(error).__name__}: {_LOCATION.sub('', str(error).strip().splitlines()[0])}"


#: Keras's errors for a class or function a saved config names and the loading process does not know
#: (keras/src/saving/serialization_lib.py, ``_retrieve_class_or_fn`` and ``deserialize_keras_object``, Keras 3.15): the
#: second where an object of the model's config names it (an ``activity_regularizer``), under a wrapper of its own.
UNREGISTERED = (re.compile(r"Could not (?:locate|deserialize) (\w+) '([^']+)'"),
                re.compile(r"Cannot deserialize (object) of type `([^`]+)`"))


def unregistered(error: BaseException) -> tuple[str, str] | None:
    """``(kind, name)`` of the class or function Keras could not find rebuilding a saved model, searched through
    ``error`` and its causes (``kind`` "class", "function" or "object"); None if it was no such error. A regularizer
    defined in a notebook's cell is named only in a cause, under the model's "could not be deserialized properly"
    (Keras 3.15).

    >>> inner = TypeError("Cannot deserialize object of type `OrthogonalRegularizer`. If ...")
    >>> outer = TypeError("<class 'Functional'> could not be deserialized properly.")
    >>> outer.__cause__ = inner
    >>> unregistered(outer), unregistered(TypeError("Could not locate class 'SmallNet'. Make sure ...")), unregistered(outer.__class__())
    (('object', 'OrthogonalRegularizer'), ('class', 'SmallNet'), None)
    """
    while error is not None:
        for pattern in UNREGISTERED:
            if found := pattern.search(str(error)):
                return found[1], found[2]
        error = error.__cause__ or error.__context__
    return None


def error_line(error: BaseException) -> str:
    r"""The line of ``error``'s message that says what went wrong: its first, unless Keras wrapped the
    cause ("Exception encountered when calling X.call()."), then the innermost cause's, without terminal
    colours. Keras nests wrappers: a functional model's layer whose output spec it infers by calling it
    adds "Could not automatically infer the output shape ... Error encountered:" around its inner layer's,
    and puts it first where the model itself is the layer (helper-51: keras-io's graph attention network's
    refusal ended at "Error encountered:").

    >>> error_line(ValueError("Could not automatically infer the output shape / dtype of 'gat'. Error encountered:"
    ...                       "\n\nException encountered when calling GAT.call().\n\nindices[3] = 9 is not in [0, 8)"))
    'indices[3] = 9 is not in [0, 8)'
    """
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(error).splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return _raised_at(error)

    def wrapper(line: str) -> bool:
        return line.startswith("Exception encountered when calling") or line.endswith("Error encountered:")

    if len(lines) > 1 and wrapper(lines[0]):
        said = [line for line in lines[1:] if not wrapper(line)]
        return said[0] if said else lines[1]
    if len(lines) > 1 and lines[0] == "Graph execution error:":
        # TensorFlow puts the op's own message last, before the node's name ("[[{{node Cast}}]]").
        said = [line for line in lines[1:] if not line.startswith(("[[", "Detected at node", "File "))]
        return said[-1] if said else lines[0]
    return lines[0] if lines else ""


_NO_KERNEL = re.compile(r"No OpKernel was registered to support Op '(\w+)'")
_KERNEL_TYPE = re.compile(r"\bT=DT_(\w+)")


def missing_cpu_kernel(message: str, policy_option: bool = True) -> str | None:
    """The refusal for a step TensorFlow's CPU build has no kernel for (an op in a dtype a GPU's build
    runs: ``MaxPool3D`` in float16, helper-34's trial under ``--policy mixed_float16``), or None.
    ``policy_option``: the step has the 16-bit policy, from ``--policy`` or from the function (decide gives the runs
    either), so both ways to float32 are named; else the function set it alone, and its policy wins over any option.

    >>> missing_cpu_kernel("No OpKernel was registered to support Op 'MaxPool3D' used by {{node m}} with "
    ...                    "these attrs: [data_format=NDHWC, T=DT_HALF, padding=VALID]")[:74]
    "TensorFlow's CPU build has no MaxPool3D kernel for half, which a GPU's has"
    >>> missing_cpu_kernel("No OpKernel was registered to support Op 'MaxPool3D' [T=DT_HALF]", False)[-90:]
    'or with the function setting a float32 policy (its activations in float32: an upper bound)'
    >>> missing_cpu_kernel("ResourceExhaustedError: OOM when allocating tensor") is None
    True
    """
    op = _NO_KERNEL.search(message)
    if op is None:
        return None
    dtype = _KERNEL_TYPE.search(message)
    what = f"{op.group(1)} kernel for {dtype.group(1).lower()}" if dtype else f"{op.group(1)} kernel for these types"
    return (f"TensorFlow's CPU build has no {what}, which a GPU's has, so this step cannot run on this "
            "host: plan it with --backend jax or, on one device, --xla on (XLA compiles it), or "
            # --policy is also the function's own policy as the runs get it (helper-60 passed none): both ways are named.
            f"{'without --policy (or, where the function sets the 16-bit policy, with it setting float32)' if policy_option else 'with the function setting a float32 policy'} "
            "(its activations in float32: an upper bound)")


def _raised_at(error: BaseException) -> str:
    """For an error without a message (a bare ``NotImplementedError``): where the reader's code raised it,
    the innermost frame outside the installed packages, the standard library and this package's own tools, which
    only call the reader's code or Keras (helper-34's trial printed "NotImplementedError: " and nothing after it)."""
    import os
    import sysconfig
    import traceback

    libraries = (*{sysconfig.get_paths()[key] for key in ("stdlib", "purelib", "platlib")}, os.path.dirname(__file__))
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if not frame.filename.startswith(libraries)]
    if not frames:
        return "(no message)"
    return f"(no message), raised from {frames[-1].name} at {frames[-1].filename}:{frames[-1].lineno}"
