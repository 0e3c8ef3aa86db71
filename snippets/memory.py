"""Memory arithmetic: the only module in the project that computes bytes.

Every figure the site states about memory (tensor sizes, per-device bytes,
capacities) is computed here, so GiB (2**30 bytes) and GB (10**9 bytes) are
kept apart in one place.

>>> tensor_bytes([131072, 65536], "float32")
34359738368
>>> format_bytes(34359738368)
'34359738368 B (32 GiB)'
>>> parse_size("30976MiB") // MiB
30976

Nothing here imports TensorFlow: sizes of dtypes are fixed by IEEE 754 and
the bfloat16 format, and do not need a runtime.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

from snippets import hardware

#: Binary units (IEC 80000-13): what allocators and ``nvidia-smi`` count in.
KiB = 2**10
MiB = 2**20
GiB = 2**30
#: Decimal units (SI): what GPU and RAM vendors print on the box.
KB = 10**3
MB = 10**6
GB = 10**9

_UNITS = {
    "b": 1,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": 2**40,
    "kb": KB,
    "mb": MB,
    "gb": GB,
    "tb": 10**12,
}

#: Bytes per element of the dtypes this site discusses. bfloat16 keeps
#: float32's 8 exponent bits in 16 bits (Kalamkar et al., 2019,
#: arXiv:1905.12322); float16 is IEEE 754 binary16.
DTYPE_BYTES = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int8": 1,
    "uint8": 1,
}

#: What TensorFlow's allocator really gets on one V100-SXM2-32GB: 30976 MiB
#: (snippets.hardware), the capacity every verdict on this site is held to.
V100_CAPACITY = hardware.allocator_bytes("V100-SXM2-32GB")

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Parse a memory size such as ``"30976MiB"``, ``"32GiB"`` or ``"32GB"``.

    Units are case-insensitive: B, KiB, MiB, GiB, TiB (powers of 2) and
    KB, MB, GB, TB (powers of 10). A bare number is taken as MiB, the unit
    of ``TF_CPU_BFC_MEM_LIMIT_IN_MB`` and of a logical device's
    ``memory_limit``.

    Returns:
        The size in bytes (int), rounded down to a whole byte.

    Raises:
        ValueError: for text that is not a positive size with a known unit;
            the message names the accepted units.

    >>> parse_size("32GiB") == 32 * GiB, parse_size("32GB") == 32 * GB
    (True, True)
    >>> parse_size("12 parsecs")
    Traceback (most recent call last):
    ...
    ValueError: '12 parsecs' is not a memory size; write e.g. 30976MiB, 32GiB or 32GB (units: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value, unit = float(text), "mib"
    else:
        match = _SIZE.match(str(text))
        unit = match.group(2).lower() if match else ""
        if not match or (unit and unit not in _UNITS):
            raise ValueError(
                f"{text!r} is not a memory size; write e.g. 30976MiB, 32GiB or 32GB "
                "(units: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            )
        value, unit = float(match.group(1)), unit or "mib"
    size = int(value * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"{text!r} is not a positive memory size")
    return size


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype`` (a name such as ``"float16"``).

    Raises:
        ValueError: for a dtype name not in :data:`DTYPE_BYTES`.
    """
    name = getattr(dtype, "name", dtype)
    try:
        return DTYPE_BYTES[str(name)]
    except KeyError:
        known = ", ".join(DTYPE_BYTES)
        raise ValueError(f"unknown dtype {dtype!r}; use one of {known}") from None


def check_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """Return ``shape`` as a tuple of positive ints, or raise ValueError naming the bad dim."""
    dims = tuple(shape)
    for axis, dim in enumerate(dims):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise ValueError(
                f"dimension {axis} of shape {list(dims)} is {dim!r}; "
                "every dimension must be a positive integer"
            )
    return dims


def tensor_bytes(shape: Sequence[int], dtype: str = "float32") -> int:
    """Bytes of one dense tensor of ``shape`` and ``dtype``, without padding.

    TensorFlow's BFC allocator rounds each request up to a multiple of
    256 bytes (``kMinAllocationSize`` in ``bfc_allocator.h``); for the shapes on
    this site that rounding is zero.

    >>> tensor_bytes([16384, 1024]) // MiB
    64
    """
    return math.prod(check_shape(shape)) * dtype_bytes(dtype)


def format_bytes(nbytes: int) -> str:
    """Exact byte count followed by the largest binary unit that keeps it >= 1.

    >>> format_bytes(30976 * MiB)
    '32480690176 B (30.25 GiB)'
    >>> format_bytes(536870912)
    '536870912 B (512 MiB)'
    """
    return f"{nbytes} B ({human_bytes(nbytes)})"


def human_bytes(nbytes: int) -> str:
    """Short binary-unit form: ``32 GiB``, ``30.25 GiB``, ``512 MiB``, ``100 B``."""
    for unit, name in ((2**40, "TiB"), (GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if abs(nbytes) >= unit:
            value = nbytes / unit
            text = f"{value:.2f}".rstrip("0").rstrip(".")
            return f"{text} {name}"
    return f"{nbytes} B"


def host_available_bytes() -> int:
    """Bytes of RAM the host can give without swapping (``MemAvailable``, via psutil)."""
    return psutil.virtual_memory().available


class HostMemoryError(MemoryError):
    """A run would need more real RAM than this host can spare."""


def check_host_can_hold(nbytes: int, what: str, available: int | None = None) -> None:
    """Refuse, before allocating, anything that would page the host.

    Raises:
        HostMemoryError: if ``nbytes`` exceeds 80% of the available RAM; the
            message names ``what``, both figures and the way out.
    """
    available = host_available_bytes() if available is None else available
    if nbytes > 0.8 * available:
        raise HostMemoryError(
            f"{what} needs {format_bytes(nbytes)} of real memory but this host has "
            f"{format_bytes(available)} available; refusing so as not to page the host. "
            "Use a smaller shape, or a device cap below the tensor's size so the "
            "allocator refuses it instead."
        )


# --- per-device budgets of a training step -----------------------------------

#: Placements the planner knows. ``single``: everything on device 0;
#: ``mirrored``: MirroredStrategy, a full copy per replica; ``column``: each
#: weight split along its last axis, ``W[D, F_N]`` (DTensor layout
#: ``[UNSHARDED, "model"]``); ``row``: split along its first axis, ``W[D_N, F]``,
#: rank-1 weights replicated; ``parameter_server``: ParameterServerStrategy with
#: ``FixedShardsPartitioner(N)``: the plan is the worker's device, which
#: concatenates the shards to run the layer and computes the whole gradient
#: (the shards and, with Keras 3.15, the full-size slots live elsewhere, see
#: :func:`host_bytes`); ``offload``: variables and slots in host RAM, each
#: device reading a copy of the variables and, since on a GPU host the
#: update's arithmetic runs on the default device, of the slots.
STRATEGIES = ("single", "mirrored", "column", "row", "parameter_server", "offload")

#: Optimizer names the planner accepts -> (Keras class, constructor kwargs).
#: Their slots are counted by building the real optimizer (snippets.slots).
OPTIMIZERS = {
    "sgd": ("SGD", {}),
    "sgd_momentum": ("SGD", {"momentum": 0.9}),
    "rmsprop": ("RMSprop", {}),
    "rmsprop_momentum": ("RMSprop", {"momentum": 0.9}),
    "rmsprop_centered": ("RMSprop", {"centered": True}),
    "adam": ("Adam", {}),
    "adam_amsgrad": ("Adam", {"amsgrad": True}),
    "adamw": ("AdamW", {}),
    "adagrad": ("Adagrad", {}),
    "adafactor": ("Adafactor", {}),
    "lion": ("Lion", {}),
}

#: Mixed-precision policies: (variable dtype, compute dtype). Keras keeps the
#: variables in float32 and casts a float16 copy for each layer call
#: (Keras API page "Mixed precision"; field case F10).
POLICIES = {"mixed_float16": ("float32", "float16"), "mixed_bfloat16": ("float32", "bfloat16")}

#: Peak bytes while initialising one variable, as a multiple of the variable,
#: measured under the capped CPU allocator (field case F18): a constant fill
#: hands its buffer to the variable (1x); a random initializer draws a
#: uniform or normal sample, then scales and shifts it, each step a new
#: full-size tensor, before the variable takes the result (3x).
INIT_PEAK = {
    "zeros": 1,
    "ones": 1,
    "constant": 1,
    "glorot_uniform": 3,
    "glorot_normal": 3,
    "he_uniform": 3,
    "he_normal": 3,
    "lecun_uniform": 3,
    "lecun_normal": 3,
    "random_uniform": 3,
    "random_normal": 3,
    "truncated_normal": 3,
}


def check_optimizer(name: str | None) -> str | None:
    """Return ``name`` if the planner knows it (None means inference), else raise ValueError."""
    if name is not None and name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; use one of {', '.join(OPTIMIZERS)}")
    return name


def check_count(devices: int, what: str = "device count") -> int:
    """Return ``devices`` if it is a positive int, else raise ValueError naming ``what``."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ValueError(f"{what} must be a positive integer, not {devices!r}")
    return devices


def check_strategy(strategy: str) -> str:
    """Return ``strategy`` if it is one of :data:`STRATEGIES`, else raise ValueError."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    return strategy


def _initializer_name(initializer) -> str:
    name = getattr(initializer, "__name__", None) or type(initializer).__name__
    if isinstance(initializer, str):
        name = initializer
    # "GlorotUniform" -> "glorot_uniform"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower() if not name.islower() else name


def init_peak(initializer) -> int:
    """Peak while initialising one variable, as a multiple of it (see :data:`INIT_PEAK`).

    Accepts a Keras initializer name (``"glorot_uniform"``), class name
    (``"GlorotUniform"``) or instance; unknown initializers count as 3x, the
    worst measured.
    """
    if initializer is None:
        return 1
    return INIT_PEAK.get(_initializer_name(initializer), 3)


def shard_axis(shape: Sequence[int], strategy: str) -> int | None:
    """Axis of ``shape`` that ``strategy`` splits across devices, or None if replicated."""
    if strategy == "column" and len(shape) >= 1:
        return len(shape) - 1
    if strategy == "row" and len(shape) >= 2:
        return 0
    if strategy == "parameter_server" and len(shape) >= 1:
        return 0
    return None


def local_shape(shape: Sequence[int], strategy: str = "mirrored", devices: int = 4) -> tuple[int, ...]:
    """Shape of the piece of a weight that one device holds under ``strategy``.

    >>> local_shape([131072, 65536], "column", 4)
    (131072, 16384)
    >>> local_shape([131072, 65536], "row", 3)
    Traceback (most recent call last):
    ...
    ValueError: cannot split dimension 0 of shape [131072, 65536] (size 131072) evenly over 3 devices; choose a device count that divides 131072, or pad the dimension

    Raises:
        ValueError: for a bad shape, strategy or count, or a split that does
            not divide the dimension evenly (the message names the dimension,
            its size and the count).
    """
    dims = check_shape(shape)
    check_strategy(strategy)
    check_count(devices)
    axis = shard_axis(dims, strategy)
    if axis is None or devices == 1:
        return dims
    if dims[axis] % devices:
        raise ValueError(
            f"cannot split dimension {axis} of shape {list(dims)} (size {dims[axis]}) evenly "
            f"over {devices} devices; choose a device count that divides {dims[axis]}, "
            "or pad the dimension"
        )
    return dims[:axis] + (dims[axis] // devices,) + dims[axis + 1 :]


@dataclass(frozen=True)
class Weight:
    """A model variable as the planner sees it (shape, dtype, initializer, trainable).

    Anything with ``.shape`` and ``.dtype`` works as a weight (for example
    ``snippets.reproduce_oom.VariableSpec``); ``initializer`` and
    ``trainable`` are read if present.
    """

    shape: tuple[int, ...]
    dtype: str = "float32"
    initializer: str | None = "glorot_uniform"
    trainable: bool = True


@dataclass(frozen=True)
class DeviceBudget:
    """Bytes one device needs during a training step, by kind and by phase. All fields are ints in bytes.

    Attributes:
        device: device index (0 .. N-1).
        weights: the variables (or their shards) the device holds or reads.
        gradients: one gradient per trainable weight, in the variable dtype.
        slots: optimizer slots (per weight; the optimizer's own scalars,
            e.g. ``iteration``, are a few bytes and left out).
        transient: what the peak adds to weights + gradients + slots: the
            step's extra (activations + update temporaries, or the gradient
            aggregation's buffer), or the initialisation scratch where that
            is larger. ``weights + gradients + slots + transient == peak``.
        reserve: what TensorFlow keeps back from the allocator on this card
            (``MinSystemMemory``), already outside the capacity the budget is
            held against (:mod:`snippets.hardware`); 0 under emulation.
        init_transient: initialiser temporaries alone.
        step_transient: activations + the larger of the update temporaries
            and the aggregation buffer.
        activations: the batch's activations on this device.
        update_temporaries: what the optimizer update allocates beyond the
            gradient (measured by :mod:`snippets.step_probe`; with a mixed
            policy it includes the compute copy and loss scaling).
        aggregation: the all-reduced gradient buffer (MirroredStrategy over
            more than one replica), held while the gradient still exists.
        hosted: the variables live elsewhere (parameter servers, host RAM):
            the device holds ``weights`` only as the copies a step reads,
            so nothing is on it while they are initialised.
    """

    device: int
    weights: int
    gradients: int
    slots: int
    transient: int
    reserve: int
    init_transient: int = 0
    step_transient: int = 0
    activations: int = 0
    update_temporaries: int = 0
    aggregation: int = 0
    hosted: bool = False

    @property
    def init_peak(self) -> int:
        """Allocator peak while initialising (weights + initialiser temporaries; 0 if ``hosted``)."""
        return 0 if self.hosted else self.weights + self.init_transient

    @property
    def step_peak(self) -> int:
        """Allocator peak during a training step: resident state + gradients + the step's transients.

        The phases of a step, in order: forward (weights + slots +
        activations), backward (+ gradients), aggregation (+ the reduced
        gradient, MirroredStrategy), update (+ the update's temporaries);
        the peak is the largest.
        """
        return self.weights + self.gradients + self.slots + self.step_transient

    @property
    def phases(self) -> dict[str, int]:
        """Peak bytes of each phase: init, forward, backward, aggregation, update."""
        resident = self.weights + self.slots + self.activations
        return {
            "init": self.init_peak,
            "forward": resident,
            "backward": resident + self.gradients,
            "aggregation": resident + self.gradients + self.aggregation,
            "update": resident + self.gradients + self.update_temporaries,
        }

    @property
    def peak_phase(self) -> str:
        """The phase that peaks (the first of equals, in step order)."""
        phases = self.phases
        return max(phases, key=lambda name: phases[name])

    @property
    def total(self) -> int:
        """Peak bytes the device's allocator must give: the larger of the init and step peaks."""
        return max(self.init_peak, self.step_peak)


def _as_weight(item) -> Weight:
    if isinstance(item, Weight):
        return item
    if isinstance(item, (tuple, list)):
        return Weight(check_shape(item))
    return Weight(
        check_shape(tuple(int(d) for d in item.shape)),
        str(getattr(item.dtype, "name", item.dtype)),
        getattr(item, "initializer", "glorot_uniform"),
        bool(getattr(item, "trainable", True)),
    )


#: Values of ``xla``: ``"auto"`` resolves as Keras would on a GPU host (:func:`resolve_xla`).
XLA_CHOICES = ("auto", "on", "off")


def resolve_xla(xla: str | bool, strategy: str) -> bool:
    """Whether the step's update is XLA-compiled, as Keras decides on a machine with a GPU.

    ``jit_compile="auto"`` (``Model.compile``'s default) resolves in
    ``_resolve_auto_jit_compile`` (keras/src/trainers/trainer.py, Keras 3.15):
    False under any ``tf.distribute`` strategy and on CPU-only machines,
    True on a GPU machine otherwise. So on a GPU host: ``single`` -> True;
    ``mirrored``, ``parameter_server`` -> False (a strategy is active);
    ``offload`` -> False (a model whose variables sit on another device
    cannot be compiled whole; its ``compile`` must say ``jit_compile=False``);
    ``column`` / ``row`` -> True: the site's ``tf.device`` layers
    (:mod:`snippets.tensor_parallel`) compile the model without XLA and each
    shard's update with XLA on its own device. The CPU emulation uses this
    function, not Keras's CPU answer.

    >>> resolve_xla("auto", "mirrored"), resolve_xla("auto", "column"), resolve_xla("off", "single")
    (False, True, False)

    Raises:
        ValueError: for an ``xla`` not in :data:`XLA_CHOICES` (or a bool) or an unknown strategy.
    """
    check_strategy(strategy)
    if isinstance(xla, bool):
        return xla
    if xla not in XLA_CHOICES:
        raise ValueError(f"xla must be one of {', '.join(XLA_CHOICES)}, not {xla!r}")
    if xla != "auto":
        return xla == "on"
    return strategy in ("single", "column", "row")


def xla_mode(jit: bool, strategy: str) -> str:
    """How XLA applies to a step of ``strategy``: ``"no-xla"``, ``"xla"`` (the whole step) or
    ``"xla-update"`` (each variable's update alone, on its device: the ``tf.device`` layers,
    whose model cannot be compiled whole)."""
    if not jit:
        return "no-xla"
    return "xla-update" if strategy in ("column", "row") else "xla"


def dense_activations(shape: Sequence[int], strategy: str, devices: int, batch: int,
                      training: bool = True) -> int:
    """Activation bytes one device holds for a Dense kernel ``W[D, F]`` at global batch ``batch``.

    The layer's input ``x[b, D_in]`` plus three ``[b, F]`` tensors when
    ``training`` (output, target, output gradient), one otherwise (the
    output), float32, where ``b`` is the device's part of
    the batch (``batch / N`` for ``mirrored``, the whole batch otherwise:
    a ``column`` layout broadcasts the whole ``x[B, D]`` to every device)
    and ``D_in`` is ``D / N`` for ``row`` (each device reads its slice of x).
    An estimate for one Dense layer feeding the loss; 0 for weights of
    other ranks.
    """
    if len(shape) != 2:
        return 0
    d, f = shape
    local_batch = batch // devices if strategy == "mirrored" else batch
    d_in = d // devices if strategy == "row" else d
    outputs = 3 if training else 1
    return (tensor_bytes((max(local_batch, 1), d_in), "float32")
            + outputs * tensor_bytes((max(local_batch, 1), f), "float32"))


def plan(
    weights,
    optimizer: str | None = None,
    strategy: str = "mirrored",
    devices: int = 4,
    policy: str | None = None,
    reserve: int = 0,
    *,
    batch: int = 64,
    xla: str | bool = "auto",
) -> list[DeviceBudget]:
    """Per-device budgets of one training step for a whole model: one :class:`DeviceBudget` per device.

    Args:
        weights: the model's variables: :class:`Weight` objects, plain shapes
            (float32, Glorot-initialised, trainable), or anything with
            ``.shape`` and ``.dtype`` such as
            :func:`snippets.reproduce_oom.variable_specs`' results.
        optimizer: None (inference: no gradients, no slots) or a name in
            :data:`OPTIMIZERS`; slots are counted by Keras (snippets.slots),
            the update's temporaries were measured on the installed Keras
            (snippets.step_probe).
        strategy: one of :data:`STRATEGIES`. ``parameter_server`` plans the
            worker's device: it reads the whole of each variable (the shards
            concatenated) and computes the whole gradient; the update runs on
            the parameter servers.
        devices: number of devices N.
        policy: None or a name in :data:`POLICIES`; float variables are then
            stored in float32 and each device also holds compute copies.
        reserve: what the card keeps outside its allocator, for the record
            (not added: capacities are the allocator's, see snippets.hardware).
        batch: global batch size (activations).
        xla: ``"auto"``, ``"on"``, ``"off"`` or a bool (:func:`resolve_xla`).

    Raises:
        ValueError: for a bad shape, dtype, optimizer, strategy, policy,
            batch, xla or device count, or a split that does not divide a dimension.
    """
    check_optimizer(optimizer)
    check_strategy(strategy)
    check_count(devices)
    check_count(batch, "batch size")
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; use None or one of {', '.join(POLICIES)}")
    jit = resolve_xla(xla, strategy)
    items = [_as_weight(w) for w in weights]
    if not items:
        raise ValueError("the model has no weights to plan")

    budgets = []
    for device in range(devices):
        resident = grads = slot_total = update_tmp = init_tmp = activations = aggregation = 0
        for w in items:
            var_dtype = w.dtype
            dtype_bytes(var_dtype)
            compute = var_dtype
            if policy is not None and var_dtype.startswith(("float", "bfloat")):
                var_dtype, compute = POLICIES[policy]
            if strategy == "single" and device:
                continue
            shape = local_shape(w.shape, strategy, devices)
            if strategy in ("parameter_server", "offload"):
                # The device that runs the layer reads the whole variable.
                shape = tuple(w.shape)
            nbytes = tensor_bytes(shape, var_dtype)
            trains = optimizer is not None and w.trainable
            activations += dense_activations(w.shape, strategy, devices, batch, trains)
            resident += nbytes
            if trains:
                grads += nbytes
            if trains and strategy != "parameter_server":
                from snippets import slots as _slots  # reads the probe cache; imports Keras only on a miss
                from snippets import step_probe

                slot_total += _slots.slot_bytes(optimizer, shape, var_dtype)
                precision = policy if policy is not None and compute != var_dtype else var_dtype
                if precision in step_probe.PRECISIONS:
                    units = step_probe.transient_units(optimizer, precision, xla_mode(jit, strategy))
                    update_tmp += round((units - 1) * nbytes)
            elif compute != var_dtype:
                update_tmp += tensor_bytes(shape, compute)
            if trains and strategy == "mirrored" and devices > 1:
                aggregation += nbytes
            # MirroredStrategy runs the initializer on replica 0 only; the
            # other replicas start from tf.identity of replica 0's value
            # (_get_variable_creator_initial_value in
            # tensorflow/python/distribute/mirrored_strategy.py, TF 2.21).
            hosted = strategy in ("parameter_server", "offload")
            if not hosted and (strategy not in ("single", "mirrored") or device == 0):
                init_tmp = max(init_tmp, (init_peak(w.initializer) - 1) * nbytes)
        step_tmp = activations + max(update_tmp, aggregation)
        transient = max(step_tmp, init_tmp - grads - slot_total, 0)
        budgets.append(DeviceBudget(device, resident, grads, slot_total, transient, reserve, init_tmp,
                                    step_tmp, activations, update_tmp, aggregation,
                                    strategy in ("parameter_server", "offload")))
    return budgets


def host_bytes(
    weights,
    optimizer: str | None = None,
    strategy: str = "mirrored",
    devices: int = 4,
    policy: str | None = None,
) -> int:
    """Bytes that live in host RAM (or on the coordinator) rather than on the devices.

    ``offload``: all variables and their optimizer slots. ``parameter_server``:
    the optimizer slots, full-size, which Keras 3.15 creates on the
    coordinator (measured by :mod:`snippets.ledger`). Other strategies: 0.
    Accepts ``weights`` as :func:`plan` does.
    """
    check_strategy(strategy)
    if strategy not in ("offload", "parameter_server"):
        return 0
    total = 0
    for w in (_as_weight(item) for item in weights):
        var_dtype = POLICIES[policy][0] if policy and w.dtype.startswith(("float", "bfloat")) else w.dtype
        if strategy == "offload":
            total += tensor_bytes(w.shape, var_dtype)
        if optimizer is not None and w.trainable:
            from snippets import slots as _slots

            total += _slots.slot_bytes(optimizer, w.shape, var_dtype)
    return total


def per_device(
    shape: Sequence[int],
    dtype: str = "float32",
    optimizer: str | None = None,
    strategy: str = "mirrored",
    devices: int = 4,
    policy: str | None = None,
    *,
    initializer: str | None = "glorot_uniform",
    reserve: int = 0,
    batch: int = 64,
    xla: str | bool = "auto",
) -> list[DeviceBudget]:
    """Per-device budgets for one weight of ``shape`` and ``dtype``: one :class:`DeviceBudget` per device.

    The seed: a float32 [131072, 65536] kernel trained with RMSprop under
    MirroredStrategy over 4 devices needs, on every replica, 32 GiB of
    weights, 32 GiB of gradients and a 32 GiB RMSprop velocity; split
    column-wise over 4 devices, a quarter of each.

    A step needs more than that state: the RMSprop update without XLA
    (MirroredStrategy turns XLA off) makes three more full-size temporaries.

    >>> b = per_device([131072, 65536], "float32", "rmsprop", "mirrored", 4)
    >>> len(b), b[0].weights // GiB, b[0].gradients // GiB, b[0].slots // GiB
    (4, 32, 32, 32)
    >>> b[0].update_temporaries // GiB, b[0].step_peak // GiB, b[0].peak_phase
    (96, 192, 'update')
    >>> [(x.weights + x.gradients + x.slots) // GiB for x in per_device(
    ...     [131072, 65536], "float32", "rmsprop", "column", 4)]
    [24, 24, 24, 24]

    Args:
        shape: the weight's shape, positive ints.
        dtype: variable dtype: ``float32``, ``float16``, ``bfloat16`` (or any
            of :data:`DTYPE_BYTES`).
        optimizer: None (inference) or a name in :data:`OPTIMIZERS`.
        strategy: one of :data:`STRATEGIES`.
        devices: number of devices N.
        policy: None or ``"mixed_float16"`` (float32 variable + float16 compute copy).
        initializer: the weight's initializer (default Keras Dense's
            ``glorot_uniform``, peaking at 3x the variable; ``"zeros"``: 1x).
        reserve: what the card keeps outside its allocator, for the record
            (see :func:`plan`).
        batch: global batch size (activations).
        xla: ``"auto"``, ``"on"`` or ``"off"`` (:func:`resolve_xla`).

    Raises:
        ValueError: for a bad shape, dtype, optimizer, strategy, policy or
            count, and for an uneven split (naming the dimension, its size and
            the count).
    """
    check_shape(shape)
    dtype_bytes(dtype)
    if policy is not None and dtype != POLICIES.get(policy, (dtype,))[0]:
        raise ValueError(
            f"policy {policy!r} stores {POLICIES[policy][0]} variables, not {dtype}; "
            "drop the dtype or the policy"
        )
    weight = Weight(tuple(shape), dtype, initializer)
    return plan([weight], optimizer, strategy, devices, policy, reserve, batch=batch, xla=xla)


# --- sharding/precision helpers (other helpers append functions below) ------

# CPU offload and smaller layers (snippets.offload, snippets.reduce): pure
# arithmetic on shapes and dtypes, no TensorFlow.

#: PCIe 3.0 x16, one direction, in bytes per second: 8 GT/s per lane
#: (PCI Express Base Specification 3.0, PCI-SIG 2010), 128b/130b line code,
#: 16 lanes, 8 bits per byte: 15753846153.8 B/s, about 15.75 GB/s. The
#: "PCIe 32 GB/s" of NVIDIA's Tesla V100 datasheet is both directions
#: rounded. A theoretical peak: real copies reach less, so times computed
#: with it are lower bounds.
PCIE3_X16_BYTES_PER_S = 8e9 * 16 * (128 / 130) / 8

#: Peak float32 throughput of a V100-SXM2 in FLOP/s (NVIDIA Tesla V100
#: datasheet: 15.7 TFLOPS single precision, SXM2 form factor).
V100_FP32_FLOPS = 15.7e12


def transfer_seconds(nbytes: int, bytes_per_s: float = PCIE3_X16_BYTES_PER_S) -> float:
    """Least time (s) to move ``nbytes`` over a link of ``bytes_per_s`` (default PCIe 3.0 x16).

    >>> round(transfer_seconds(34359738368), 3)
    2.181

    Raises:
        ValueError: for a negative size or a bandwidth that is not positive.
    """
    if nbytes < 0 or bytes_per_s <= 0:
        raise ValueError(f"need nbytes >= 0 and bandwidth > 0, got {nbytes} B at {bytes_per_s} B/s")
    return nbytes / bytes_per_s


def offload_step_bytes(kernel_shape: Sequence[int], dtype: str = "float32",
                       batch: int = 1, compute: str = "device") -> dict[str, int]:
    """Bytes one training step moves over each GPU's host link when a Dense kernel lives on the host.

    ``kernel_shape`` is ``W[D, F]``. ``compute="device"``: the layer runs on
    the GPU (a host variable read on a GPU, or ``CentralStorageStrategy``), so
    each replica copies all of W in to read it and sends its gradient dW
    (same shape) out for the update on the host. ``compute="host"``: the layer
    also runs on the host, so only activations cross: y[B, F] in, dy[B, F]
    out (the input x[B, D] is assumed to come from the host input pipeline).

    Returns:
        ``{"host_to_device": bytes, "device_to_host": bytes}`` per replica per step.

    >>> offload_step_bytes([131072, 65536])
    {'host_to_device': 34359738368, 'device_to_host': 34359738368}
    >>> offload_step_bytes([131072, 65536], batch=64, compute="host")
    {'host_to_device': 16777216, 'device_to_host': 16777216}

    Raises:
        ValueError: for a bad shape or dtype, or ``compute`` not "device"/"host".
    """
    d, f = check_shape(kernel_shape)
    if compute == "device":
        w = tensor_bytes((d, f), dtype)
        return {"host_to_device": w, "device_to_host": w}
    if compute == "host":
        y = tensor_bytes((batch, f), dtype)
        return {"host_to_device": y, "device_to_host": y}
    raise ValueError(f"compute must be 'device' or 'host', not {compute!r}")


def dense_train_flops(batch: int, d: int, f: int, input_grad: bool = False) -> int:
    """FLOPs of one training step of ``x[B, D] @ W[D, F]``: 2BDF forward, 2BDF for dW, 2BDF for dx.

    ``dx`` is computed only when something before the layer trains
    (``input_grad``); the seed's Dense reads the model's input, so its step is 4BDF.

    >>> dense_train_flops(64, 131072, 65536) / 1e12, dense_train_flops(64, 131072, 65536, True) / 1e12
    (2.199023255552, 3.298534883328)
    """
    return (6 if input_grad else 4) * batch * d * f


def low_rank_bytes(d: int, f: int, rank: int, dtype: str = "float32") -> int:
    """Bytes of ``U[D, r] @ V[r, F]``, the rank-``r`` factorisation of ``W[D, F]``.

    >>> low_rank_bytes(131072, 65536, 512)
    402653184
    """
    return tensor_bytes((d, rank), dtype) + tensor_bytes((rank, f), dtype)


# DTensor layouts (snippets.dtensor_sharding): which piece of a tensor each
# device of a mesh holds. Pure arithmetic on shapes, no TensorFlow.

#: The spelling of "not split along this dimension" in a DTensor layout
#: (``tf.experimental.dtensor.UNSHARDED``); ``None`` is accepted as well.
UNSHARDED = "unsharded"


def layout_local_shape(shape: Sequence[int], sharding: Sequence[str | None],
                       mesh: dict[str, int]) -> tuple[int, ...]:
    """Shape of the piece of a tensor one device holds under a DTensor layout.

    ``sharding`` has one entry per dimension: a mesh axis name (that
    dimension is split into as many pieces as the axis has devices) or
    ``"unsharded"``/``None``. ``mesh`` maps axis names to sizes. This is the
    rule of ``tf.experimental.dtensor.Layout`` (DTensor concepts guide,
    "Layout"): ``W[D, F]`` with layout ``[UNSHARDED, "model"]`` on a mesh
    ``model=4`` is ``W[D, F_model]``, a ``[D, F/4]`` piece per device.

    >>> layout_local_shape([131072, 65536], [UNSHARDED, "model"], {"model": 4})
    (131072, 16384)
    >>> layout_local_shape([64, 1024], ["batch", None], {"batch": 2, "model": 2})
    (32, 1024)
    >>> layout_local_shape([1024, 510], [None, "model"], {"model": 4})
    Traceback (most recent call last):
    ...
    ValueError: cannot split dimension 1 of shape [1024, 510] (size 510) evenly over mesh axis 'model' of 4 devices; choose sizes that 4 divides, or another mesh

    Raises:
        ValueError: for a bad shape, a sharding whose length is not the
            rank, an axis the mesh does not have or used twice, or a
            dimension the axis size does not divide.
    """
    dims = check_shape(shape)
    specs = [UNSHARDED if s is None else str(s) for s in sharding]
    if len(specs) != len(dims):
        raise ValueError(f"layout {specs} has {len(specs)} entries but shape {list(dims)} has rank {len(dims)}")
    used = [s for s in specs if s != UNSHARDED]
    for axis_name in used:
        if axis_name not in mesh:
            raise ValueError(f"layout {specs} names mesh axis {axis_name!r}, but the mesh has only {list(mesh)}")
        if used.count(axis_name) > 1:
            raise ValueError(f"layout {specs} uses mesh axis {axis_name!r} twice; a mesh axis can split one dimension only")
    local = []
    for axis, (dim, spec) in enumerate(zip(dims, specs)):
        pieces = 1 if spec == UNSHARDED else check_count(mesh[spec], f"mesh axis {spec!r} size")
        if dim % pieces:
            raise ValueError(
                f"cannot split dimension {axis} of shape {list(dims)} (size {dim}) evenly over "
                f"mesh axis {spec!r} of {pieces} devices; choose sizes that {pieces} divides, or another mesh"
            )
        local.append(dim // pieces)
    return tuple(local)


def layout_copies(sharding: Sequence[str | None], mesh: dict[str, int]) -> int:
    """How many devices hold each piece: the product of the mesh axes the layout does not use.

    A kernel ``[UNSHARDED, "model"]`` on a ``batch=2 x model=2`` mesh is
    stored twice (once per batch row of the mesh), as in data parallelism.

    >>> layout_copies([UNSHARDED, "model"], {"batch": 2, "model": 2})
    2
    """
    used = {str(s) for s in sharding if s is not None and s != UNSHARDED}
    return math.prod(size for name, size in mesh.items() if name not in used)


# Tensor parallelism (snippets.tensor_parallel, docs/sharding.md): bytes each
# device sends per training step, and the least time that takes on NVLink.
# Pure arithmetic on shapes, no TensorFlow.

#: NVLink 2.0 on a V100-SXM2, one direction, bytes per second: the sum of its
#: 6 links x 25 GB/s (NVIDIA Tesla V100 datasheet: "NVLink 300 GB/s", both
#: directions added). Reaching it assumes a topology where a collective can
#: use all six links at once, as NCCL does with several rings on a DGX-1's
#: hybrid cube-mesh; one ring over single links gets 25 GB/s. A peak: NCCL
#: reaches less, so times computed with it are lower bounds.
V100_NVLINK_BYTES_PER_S = 6 * 25e9

#: Collectives a training step of a split Dense layer uses.
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def ring_bytes(collective: str, nbytes: int, devices: int) -> int:
    """Bytes each device sends in a ring ``collective`` over ``devices`` devices.

    ``nbytes`` is the size of the full result (the reduced tensor for
    all-reduce, the gathered tensor for all-gather, the input for
    reduce-scatter). A ring all-reduce sends ``2 (N - 1) / N`` of it from
    every device, all-gather and reduce-scatter ``(N - 1) / N`` (NCCL's
    "bus bandwidth" factors, nccl-tests doc/PERFORMANCE.md; Patarasuk & Yuan
    2009 for the ring all-reduce's optimality).

    >>> ring_bytes("all_reduce", 34359738368, 4)
    51539607552
    >>> ring_bytes("all_gather", 16777216, 4)
    12582912

    Raises:
        ValueError: for an unknown collective, a negative size or a bad count.
    """
    check_count(devices)
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; use one of {', '.join(COLLECTIVES)}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, not {nbytes}")
    factor = 2 if collective == "all_reduce" else 1
    return factor * (devices - 1) * nbytes // devices


#: Placements whose per-step communication :func:`step_communication` knows:
#: ``mirrored`` (data parallel, the batch split, W replicated), ``column``
#: (W[D, F_N], output gathered), ``row`` (W[D_N, F], partial outputs
#: summed) and ``column_row`` (the Megatron pair W1[D, H_N], W2[H_N, F]).
COMM_STRATEGIES = ("mirrored", "column", "row", "column_row")


def step_communication(kernel_shape: Sequence[int], batch: int, strategy: str,
                       devices: int = 4, dtype: str = "float32", input_grad: bool = False,
                       out_width: int | None = None) -> dict[str, int]:
    """Bytes each device sends in one training step of ``x[B, D] @ W[D, F]``, by collective.

    * ``mirrored``: each replica computes a full gradient dW[D, F] on its
      part of the batch; one all-reduce of dW per step, whatever the batch.
    * ``column``: W[D, F_N]; every device needs the whole input x[B, D]:
      with an input pipeline that gives each device B/N rows, an all-gather
      of x (forward). The output slices y[B, F_N] are all-gathered into
      y[B, F] (forward). Backward needs no collective for dW; dx[B, D] is a
      sum of N partial products, one all-reduce, only if ``input_grad`` (a
      layer before this one trains).
    * ``row``: W[D_N, F]; the partial outputs y_i[B, F] are all-reduced
      (forward); dx[B, D_N] stays split, all-gathered only if ``input_grad``.
    * ``column_row``: W1[D, H_N] then W2[H_N, F] with ``kernel_shape`` =
      [D, H] and ``out_width`` = F: one all-reduce of y[B, F] forward, and of
      dx[B, D] backward if ``input_grad`` (Shoeybi et al. 2019,
      arXiv:1909.08053, section 3: "two all-reduce operations in the forward
      path and two in the backward path" per transformer layer, i.e. one per
      MLP block each way).

    Returns:
        ``{collective: bytes sent per device}``, with a ``"total"`` entry.

    >>> step_communication([131072, 65536], 64, "mirrored")
    {'all_reduce': 51539607552, 'total': 51539607552}
    >>> step_communication([131072, 65536], 64, "column")
    {'all_gather': 37748736, 'total': 37748736}

    Raises:
        ValueError: for a bad shape, batch, strategy, dtype or device count.
    """
    d, f = check_shape(kernel_shape)
    check_shape([batch])
    check_count(devices)
    if strategy not in COMM_STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; use one of {', '.join(COMM_STRATEGIES)}")
    x = tensor_bytes((batch, d), dtype)
    sent: dict[str, int] = {}

    def add(collective: str, nbytes: int) -> None:
        sent[collective] = sent.get(collective, 0) + ring_bytes(collective, nbytes, devices)

    if strategy == "mirrored":
        add("all_reduce", tensor_bytes((d, f), dtype))
    elif strategy == "column":
        add("all_gather", x)
        add("all_gather", tensor_bytes((batch, f), dtype))
        if input_grad:
            add("all_reduce", x)
    elif strategy == "row":
        add("all_reduce", tensor_bytes((batch, f), dtype))
        if input_grad:
            add("all_gather", x)
    else:
        add("all_reduce", tensor_bytes((batch, out_width or d), dtype))
        if input_grad:
            add("all_reduce", x)
    sent["total"] = sum(sent.values())
    return sent


def step_seconds(nbytes_sent: int, bytes_per_s: float = V100_NVLINK_BYTES_PER_S) -> float:
    """Least time (s) for a device to send ``nbytes_sent`` at ``bytes_per_s`` (default V100 NVLink).

    >>> round(step_seconds(51539607552) * 1e3, 1)  # the mirrored all-reduce of dW, in ms
    343.6
    """
    return transfer_seconds(nbytes_sent, bytes_per_s)


def training_state(budget: DeviceBudget) -> int:
    """Bytes one device keeps from step to step: weights + gradients + optimizer slots.

    Leaves out the transient peak and the CUDA reserve of :class:`DeviceBudget`
    (its ``total`` has them): the figure to hold against a device's capacity
    when asking "does the sharded state fit at all".

    >>> training_state(per_device([131072, 65536], "float32", "rmsprop", "column", 4, reserve=0)[0])
    25769803776
    """
    return budget.weights + budget.gradients + budget.slots
