"""Tensor parallelism by hand: Keras 3 Dense layers whose kernel is split over devices with ``tf.device``.

MirroredStrategy keeps a full copy of the [131072, 65536] float32 kernel
(32 GiB) on every GPU. The layers here keep one *shard* per device instead,
in the notation of the JAX scaling book:

* :class:`ColumnParallelDense`: ``W[D, F_model]``, device i holds columns
  ``F/N * i .. F/N * (i + 1)``; it computes its slice of the output,
  ``y[B, F_model]``, from the whole input.
* :class:`RowParallelDense`: ``W[D_model, F]``, device i holds rows of the
  kernel and reads only its slice of the input; the partial outputs are
  summed on the output device.
* Column then row (the Megatron-LM pairing, Shoeybi et al. 2019,
  arXiv:1909.08053): the column layer's output slices stay on their devices
  and are exactly the input slices the row layer needs, so the full hidden
  activation is never gathered.

Every shard is created and initialised on its own device (no full-size
temporary, not even during initialisation), and, because TensorFlow places
gradient ops it was not told about on device 0 (measured below with
:func:`placement`), each shard's backward pass is pinned to its device with
:func:`on_device`, and optimizer updates with :func:`colocate_updates`.

Run it::

    python -m snippets.tensor_parallel                  # CI scale: compare with Dense, train
    python -m snippets.tensor_parallel --full-shape     # reserve the seed kernel's 4 shards
    python -m snippets.tensor_parallel --seed-layer     # GPUs: build the seed layer for real
    python -m snippets.tensor_parallel --help

Sources: ``tf.device`` and ``tf.custom_gradient`` API pages (TensorFlow 2.21);
Keras 3 "Making new layers and models via subclassing" guide; Shoeybi et al.,
"Megatron-LM", arXiv:1909.08053, section 3.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from snippets.lib import devices, placements, planner, splits, units

#: The seed layer: kernel W[131072, 65536] float32 (see snippets.reproduce).
SEED_SHAPE = (131072, 65536)


# --- checks ------------------------------------------------------------------


# --- the command line, checked before Keras (and so TensorFlow) is imported -------------


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m snippets.tensor_parallel`` parser (no TensorFlow needed)."""
    parser = argparse.ArgumentParser(
        prog="python -m snippets.tensor_parallel",
        description="Column- and row-parallel Keras Dense layers built with tf.device.",
    )
    devices.add_arguments(parser)
    parser.add_argument("--full-shape", action="store_true",
                        help="reserve the seed kernel [131072, 65536] float32 as N shards "
                             "(pages untouched) and print per-device bytes")
    parser.add_argument("--seed-layer", action="store_true",
                        help="GPUs only: build the seed layer for real (Glorot initialisation), run one "
                             "forward and backward pass, and print each GPU's allocator peak")
    parser.add_argument("--in-dim", type=int, default=64, help="CI scale: input width D (default 64)")
    parser.add_argument("--units", type=int, default=32, help="CI scale: output width F (default 32)")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """Parse and check the command line; bad input exits 2 with one line (pure arithmetic)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        splits.check_count(args.devices)
        if args.full_shape:
            # --full-shape splits the seed kernel, so name its dimensions, not the CI-scale ones.
            seed = f"the seed kernel W{list(SEED_SHAPE)}"
            splits.check_split(f"the units of {seed}", SEED_SHAPE[1], args.devices)
            splits.check_split(f"the input width of {seed}", SEED_SHAPE[0], args.devices)
        else:
            units.check_shape([args.in_dim, args.units])
            splits.check_split("units", args.units, args.devices)
            splits.check_split("input width", args.in_dim, args.devices)
    except ValueError as error:
        parser.error(str(error))
    return parser, args


if __name__ == "__main__":
    # Run as a script: --help and bad input answer here, before the ~7 s Keras/TensorFlow import.
    _CLI = parse_args()

import keras  # noqa: E402  (after the command-line check above, on purpose)


def _device_list(devices_: Sequence[str]) -> tuple[str, ...]:
    names = tuple(devices_)
    if not names:
        raise ValueError("give at least one device, e.g. devices.configure(4).devices")
    if len(set(names)) != len(names):
        raise ValueError(f"devices must be distinct, got {list(names)}")
    return names


# --- initialisation without a full-size temporary -------------------------------------


@keras.saving.register_keras_serializable(package="snippets")
class Uninitialized(keras.initializers.Initializer):
    """Reserve a tensor without writing it: ``tf.raw_ops.Empty(init=False)``.

    The allocator hands out the bytes but no page is touched, so a 8 GiB
    shard costs no RAM on a CPU host until something writes it. For proving
    that shards *fit* at full size, never for training (the values are
    whatever the memory held). Source: ``tf.raw_ops.Empty`` API page.
    """

    def __call__(self, shape, dtype=None):
        import tensorflow as tf

        return tf.raw_ops.Empty(shape=tuple(shape), dtype=tf.as_dtype(dtype or "float32"), init=False)


#: Initializers whose elements are independent draws (or constants): a shard
#: can be drawn on its own. VarianceScaling (Glorot, He, LeCun) also reads the
#: fans of the *full* shape, which :func:`shard_initializer` corrects for.
_ELEMENTWISE = (
    keras.initializers.VarianceScaling,
    keras.initializers.RandomNormal,
    keras.initializers.RandomUniform,
    keras.initializers.TruncatedNormal,
    keras.initializers.Zeros,
    keras.initializers.Ones,
    keras.initializers.Constant,
    Uninitialized,
)


def _fan(shape: Sequence[int], mode: str) -> float:
    from keras.src.initializers.random_initializers import compute_fans

    fan_in, fan_out = compute_fans(tuple(shape))
    return {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]


def shard_initializer(initializer, full_shape: Sequence[int], shard_shape: Sequence[int], index: int):
    """An initializer that draws one shard with the statistics of the full tensor.

    ``keras.layers.Dense`` initialises W[D, F] with Glorot uniform, whose
    limit depends on D + F. Calling it on a shard [D, F/N] would use D + F/N
    and give the wrong spread, so for VarianceScaling initializers the
    scale is multiplied by fan(shard) / fan(full). Each shard gets its own
    seed (``seed + index`` if an int seed was given) so shards differ; the
    values are therefore not those Dense would draw, only their distribution
    is (Glorot & Bengio 2010 for the variance; Keras ``VarianceScaling`` page).

    Raises:
        ValueError: for an initializer that depends on the whole matrix
            (``Orthogonal``, ``Identity``...), naming the way out.
    """
    init = keras.initializers.get(initializer)
    if not isinstance(init, _ELEMENTWISE):
        raise ValueError(
            f"{type(init).__name__} depends on the whole matrix and cannot draw one shard; "
            "use an elementwise initializer (glorot_uniform, he_normal, zeros...) or load "
            "full weights with set_full_weights()"
        )
    config = init.get_config()
    if isinstance(config.get("seed"), int):
        config["seed"] = config["seed"] + index
    if isinstance(init, keras.initializers.VarianceScaling):
        # GlorotUniform etc. fix their scale; the base class takes it as an argument.
        scale = init.scale * _fan(shard_shape, init.mode) / _fan(full_shape, init.mode)
        return keras.initializers.VarianceScaling(
            scale=scale, mode=init.mode, distribution=init.distribution, seed=config.get("seed")
        )
    return type(init).from_config(config)


# --- forward and backward on one device ----------------------------------------------


def on_device(device: str, fn: Callable, *inputs):
    """Run ``fn(*inputs)`` on ``device``, and its gradient too.

    ``with tf.device(d)`` pins the forward ops only. The gradient ops that
    ``tf.GradientTape`` adds later have no device, and TensorFlow's placer
    puts ops without one on the function's default device, device 0: the
    gradient of every shard would be computed, and held, there (shown by
    :func:`placement`). Here ``fn`` runs under its own tape inside a
    ``tf.custom_gradient``, whose gradient function calls that tape again
    under ``tf.device(device)``, so backward ops land where forward ops are.
    Sources: ``tf.custom_gradient`` and ``tf.GradientTape.gradient``
    (``output_gradients``) API pages.

    Args:
        device: device name, e.g. ``"/device:GPU:1"``.
        fn: function of tensors returning a tensor or a list of tensors.
        inputs: tensors (not variables: read them first, under the device).
    """
    import tensorflow as tf

    @tf.custom_gradient
    def run(*xs):
        with tf.device(device), tf.GradientTape() as tape:
            tape.watch(xs)
            y = fn(*xs)

        def grad(*dy):
            with tf.device(device):
                dys = dy[0] if len(dy) == 1 and not isinstance(y, (list, tuple)) else list(dy)
                grads = tape.gradient(y, xs, output_gradients=dys)
                return [tf.zeros_like(x) if g is None else g for x, g in zip(xs, grads)]

        return y, grad

    # custom_gradient wraps inputs and outputs in an IdentityN op, created
    # here: outside tf.device it would land on device 0 and pull the shard
    # and its output there every step.
    with tf.device(device):
        return run(*inputs)


def _read(variable, device: str, dtype):
    import tensorflow as tf

    with tf.device(device):
        return tf.cast(tf.convert_to_tensor(variable), dtype)


# --- the layers ------------------------------------------------------------------------


class _ShardedDense(keras.layers.Layer):
    """Common parts: devices, activation, initializers, the shard table."""

    split_axis = 1  # axis of the kernel that is split (1 = columns, 0 = rows)

    def __init__(
        self,
        units: int,
        devices: Sequence[str],
        activation=None,
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        pin_backward: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.pin_backward = pin_backward
        if isinstance(units, bool) or not isinstance(units, int) or units < 1:
            raise ValueError(f"units must be a positive integer, not {units!r}")
        self.units = units
        self.shard_devices = _device_list(devices)
        self.activation = keras.activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_shards: list = []
        self.bias_shards: list = []

    @property
    def count(self) -> int:
        return len(self.shard_devices)

    def _run(self, device: str, fn: Callable, *inputs):
        """``fn`` on ``device``: forward and backward (:func:`on_device`), or forward only."""
        if self.pin_backward:
            return on_device(device, fn, *inputs)
        import tensorflow as tf

        with tf.device(device):  # the naive way: gradients land on device 0
            return fn(*inputs)

    def _add_kernel_shard(self, index: int, full_shape, shard_shape):
        import tensorflow as tf

        with tf.device(self.shard_devices[index]):
            return self.add_weight(
                name=f"kernel_{index}",
                shape=shard_shape,
                initializer=shard_initializer(self.kernel_initializer, full_shape, shard_shape, index),
            )

    def _add_bias(self, index: int, device: str, full_shape, shard_shape):
        import tensorflow as tf

        with tf.device(device):
            return self.add_weight(
                name=f"bias_{index}",
                shape=shard_shape,
                initializer=shard_initializer(self.bias_initializer, full_shape, shard_shape, index),
            )

    def set_full_weights(self, kernel, bias=None) -> None:
        """Load a full ``kernel[D, F]`` (and ``bias[F]``) as a Dense layer holds them, shard by shard.

        Each shard is sliced from the array on the host and assigned to its
        own device. CI-scale helper for comparing with ``keras.layers.Dense``.
        """
        import numpy as np

        kernel = np.asarray(kernel)
        pieces = np.split(kernel, self.count, axis=self.split_axis)
        for variable, piece in zip(self.kernel_shards, pieces):
            variable.assign(piece)
        if self.use_bias and bias is not None:
            bias = np.asarray(bias)
            parts = np.split(bias, len(self.bias_shards))
            for variable, part in zip(self.bias_shards, parts):
                variable.assign(part)

    def full_weights(self) -> list:
        """The kernel (and bias) reassembled on the host as numpy arrays. CI scale only."""
        import numpy as np

        kernel = np.concatenate([v.numpy() for v in self.kernel_shards], axis=self.split_axis)
        if not self.use_bias:
            return [kernel]
        return [kernel, np.concatenate([v.numpy() for v in self.bias_shards])]

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "devices": list(self.shard_devices),
            "activation": keras.activations.serialize(self.activation),
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "pin_backward": self.pin_backward,
        }


@keras.saving.register_keras_serializable(package="snippets")
class ColumnParallelDense(_ShardedDense):
    """``Dense(units)`` with its kernel split by columns: W[D, F_model] over N devices.

    Device i holds ``kernel_i`` [D, F/N] and ``bias_i`` [F/N] and computes
    ``activation(x @ kernel_i + bias_i)``, its slice y[B, F_model] of the
    output. ``gather_output=True`` (default) concatenates the slices on
    ``devices[0]`` into y[B, F] so the layer is a drop-in Dense;
    ``gather_output=False`` returns the list of N slices, each left on its
    device, for a following :class:`RowParallelDense` with
    ``input_is_parallel=True``.

    Args:
        units: F, output width; must be divisible by ``len(devices)``.
        devices: one device name per shard, e.g. ``setup.devices``.
        activation, use_bias, kernel_initializer, bias_initializer: as for
            ``keras.layers.Dense`` (initializers must be elementwise, see
            :func:`shard_initializer`).
        gather_output: concatenate the slices (True) or return them (False).

    Raises:
        ValueError: at build time, if ``len(devices)`` does not divide
            ``units`` (naming ``units``, its size and the count).
    """

    split_axis = 1

    def __init__(self, units, devices, *, gather_output: bool = True, **kwargs):
        super().__init__(units, devices, **kwargs)
        self.gather_output = gather_output

    def build(self, input_shape):
        in_dim = int(input_shape[-1])
        width = splits.check_split("units", self.units, self.count)
        full = (in_dim, self.units)
        for i in range(self.count):
            self.kernel_shards.append(self._add_kernel_shard(i, full, (in_dim, width)))
            if self.use_bias:
                self.bias_shards.append(self._add_bias(i, self.shard_devices[i], (self.units,), (width,)))

    def call(self, inputs):
        dtype = self.compute_dtype
        slices = []
        for i, device in enumerate(self.shard_devices):
            weights = [_read(self.kernel_shards[i], device, dtype)]
            if self.use_bias:
                weights.append(_read(self.bias_shards[i], device, dtype))
            slices.append(self._run(device, self._shard_forward, inputs, *weights))
        if not self.gather_output:
            return slices
        # The all-gather (here a gather onto devices[0]): y[B, F] exists only now.
        return self._run(self.shard_devices[0], lambda *ys: _concat(ys), *slices)

    def _shard_forward(self, x, kernel, bias=None):
        y = keras.ops.matmul(x, kernel)
        if bias is not None:
            y = y + bias
        return self.activation(y) if self.activation is not None else y

    def compute_output_shape(self, input_shape):
        if self.gather_output:
            return tuple(input_shape[:-1]) + (self.units,)
        width = self.units // self.count
        return [tuple(input_shape[:-1]) + (width,) for _ in range(self.count)]

    def get_config(self):
        return {**super().get_config(), "gather_output": self.gather_output}


def _concat(ys):
    import tensorflow as tf

    return tf.concat(list(ys), axis=-1)


@keras.saving.register_keras_serializable(package="snippets")
class RowParallelDense(_ShardedDense):
    """``Dense(units)`` with its kernel split by rows: W[D_model, F] over N devices.

    Device i holds ``kernel_i`` [D/N, F] and multiplies it by its slice of
    the input, x[B, D_model]; the N partial products [B, F] are summed on
    ``devices[0]`` (a reduce: the first half of an all-reduce), where the
    bias [F] lives and the activation is applied. The input is split on
    ``devices[0]`` unless ``input_is_parallel=True``, in which case the
    layer takes the list of N slices a :class:`ColumnParallelDense` with
    ``gather_output=False`` returns, each already on its device.

    Raises:
        ValueError: at build time, if ``len(devices)`` does not divide the
            input width (naming ``input width``, its size and the count), or
            if parallel input slices do not match the devices.
    """

    split_axis = 0

    def __init__(self, units, devices, *, input_is_parallel: bool = False, **kwargs):
        super().__init__(units, devices, **kwargs)
        self.input_is_parallel = input_is_parallel

    def build(self, input_shape):
        if self.input_is_parallel:
            shapes = list(input_shape)
            if len(shapes) != self.count or not all(isinstance(s, (tuple, list)) for s in shapes):
                raise ValueError(
                    f"input_is_parallel=True needs a list of {self.count} input slices (one per "
                    f"device), got {input_shape}; put ColumnParallelDense(gather_output=False) "
                    "before this layer"
                )
            in_dim = sum(int(s[-1]) for s in shapes)
        else:
            in_dim = int(input_shape[-1])
        height = splits.check_split("input width", in_dim, self.count)
        full = (in_dim, self.units)
        for i in range(self.count):
            self.kernel_shards.append(self._add_kernel_shard(i, full, (height, self.units)))
        if self.use_bias:
            self.bias_shards.append(self._add_bias(0, self.shard_devices[0], (self.units,), (self.units,)))

    def call(self, inputs):
        dtype = self.compute_dtype
        out_device = self.shard_devices[0]
        if self.input_is_parallel:
            pieces = list(inputs)
        else:
            pieces = self._run(out_device, lambda x: _split(x, self.count), inputs)
        partials = [
            self._run(device, keras.ops.matmul, piece, _read(self.kernel_shards[i], device, dtype))
            for i, (device, piece) in enumerate(zip(self.shard_devices, pieces))
        ]
        weights = [_read(self.bias_shards[0], out_device, dtype)] if self.use_bias else []
        return self._run(out_device, self._reduce, *partials, *weights)

    def _reduce(self, *tensors):
        partials = tensors[: self.count]
        y = keras.ops.sum(keras.ops.stack(partials), axis=0) if self.count > 1 else partials[0]
        if self.use_bias:
            y = y + tensors[self.count]
        return self.activation(y) if self.activation is not None else y

    def compute_output_shape(self, input_shape):
        first = input_shape[0] if self.input_is_parallel else input_shape
        return tuple(first[:-1]) + (self.units,)

    def get_config(self):
        return {**super().get_config(), "input_is_parallel": self.input_is_parallel}


def _split(x, count):
    import tensorflow as tf

    return tf.split(x, count, axis=-1)


# --- optimizer updates on the shard's device -------------------------------------------


def colocate_updates(optimizer, jit_compile: bool | str = "auto"):
    """Make ``optimizer`` compute each variable's update on that variable's device, XLA-compiled there.

    Three things in Keras 3's TensorFlow optimizer path end up on device 0
    for variables placed with ``tf.device``:

    * the slots (RMSprop's velocity) when ``fit`` builds the optimizer: it
      colocates them with their variable through the strategy's
      ``colocate_vars_with``, which does not hold there (measured: every
      velocity on device 0 after ``fit``; on its variable's device after an
      eager ``optimizer.build``);
    * ``_all_reduce_sum_gradients`` passes *all* gradients through one
      ``IdentityN`` op (the default strategy's all-reduce over its single
      replica, a ``tf.custom_gradient``): every shard's gradient is copied to
      device 0, so device 0 would hold the full-size gradient;
    * the arithmetic of each update (``rho * v + (1 - rho) * g**2`` ...).

    This creates each slot under ``tf.device`` of its variable, skips the
    all-reduce when no ``tf.distribute`` strategy is active (a sum over one
    replica is the identity; under a real strategy it is kept) and runs each
    ``update_step`` under ``tf.device(variable.device)`` (:func:`placement`
    shows the result). All three patch this optimizer instance only
    (``_all_reduce_sum_gradients`` is private Keras API, checked against
    Keras 3.15).

    XLA: a model whose variables sit on several devices cannot be compiled
    whole (``InvalidArgumentError: Trying to access resource ... located in
    device CPU:2 from device CPU:1``), yet ``jit_compile="auto"`` turns XLA
    on for it on a GPU machine. So compile the model with
    ``jit_compile=False`` (:func:`compile_sharded` does) and let this patch
    compile each shard's update alone, on its device: with ``jit_compile``
    True (what ``"auto"`` means here, :func:`snippets.lib.planner.resolve_xla`)
    each ``update_step`` is a ``tf.function(jit_compile=True)`` per variable,
    which fuses RMSprop's temporaries away (the step's transient drops from
    4 to 1 variable, :mod:`snippets.lib.step_probe`).

    Returns:
        The same optimizer, for ``model.compile(optimizer=colocate_updates(...))``.
    """
    import tensorflow as tf

    jit = planner.resolve_xla(jit_compile, "column")
    update_step = optimizer.update_step
    all_reduce = optimizer._all_reduce_sum_gradients
    add_slot = optimizer.add_variable_from_reference
    compiled = {}

    def colocated_slot(reference_variable, *args, **kwargs):
        with tf.device(getattr(reference_variable, "value", reference_variable).device):
            return add_slot(reference_variable, *args, **kwargs)

    def colocated_update_step(gradient, variable, learning_rate):
        with tf.device(variable.device):
            if not jit:
                return update_step(gradient, variable, learning_rate)
            # One XLA cluster per variable, traced with that variable captured.
            step = compiled.get(id(variable))
            if step is None:
                step = compiled[id(variable)] = tf.function(
                    lambda g, lr: update_step(g, variable, lr), jit_compile=True, autograph=False)
            return step(tf.convert_to_tensor(gradient), tf.convert_to_tensor(learning_rate))

    def all_reduce_if_distributed(grads_and_vars):
        if tf.distribute.has_strategy():
            return all_reduce(grads_and_vars)
        return list(grads_and_vars)

    optimizer.update_step = colocated_update_step
    optimizer.add_variable_from_reference = colocated_slot
    optimizer._all_reduce_sum_gradients = all_reduce_if_distributed
    return optimizer


def compile_sharded(model, optimizer, loss, jit_compile: bool | str = "auto", **kwargs):
    """``model.compile`` for a model with ``tf.device``-sharded layers, safe on a GPU machine.

    Compiles the model without XLA (it cannot be compiled whole, see
    :func:`colocate_updates`) and the optimizer's updates per device, with
    XLA when ``jit_compile`` resolves to True (``"auto"``: as Keras would on a
    GPU host). Returns the model.
    """
    model.compile(optimizer=colocate_updates(optimizer, jit_compile), loss=loss, jit_compile=False, **kwargs)
    return model


# --- where things are --------------------------------------------------------------------


def short_device(name: str) -> str:
    """``/job:localhost/replica:0/task:0/device:CPU:3`` -> ``CPU:3``."""
    return name.rsplit("device:", 1)[-1] if name else "(default)"


@dataclass(frozen=True)
class Shard:
    """One variable of a sharded layer: name, device, shape, dtype and bytes."""

    name: str
    device: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


def shards(layer) -> list[Shard]:
    """The variables of ``layer`` (any Keras layer or model) with the device each lives on."""
    result = []
    for variable in layer.weights:
        shape = tuple(int(d) for d in variable.shape)
        dtype = str(variable.dtype)
        result.append(Shard(variable.path, short_device(variable.value.device), shape, dtype,
                            units.tensor_bytes(shape, dtype)))
    return result


def bytes_per_device(layer) -> dict[str, int]:
    """Bytes of ``layer``'s variables on each device, from where the variables are placed."""
    totals: dict[str, int] = {}
    for shard in shards(layer):
        totals[shard.device] = totals.get(shard.device, 0) + shard.nbytes
    return totals


def shard_table(layer) -> str:
    """A table of ``layer``'s variables: name, device, shape, dtype, bytes."""
    from tabulate import tabulate

    rows = [(s.name, s.device, list(s.shape), s.dtype, s.nbytes) for s in shards(layer)]
    return tabulate(rows, headers=["variable", "device", "shape", "dtype", "bytes"], intfmt=",")


@dataclass(frozen=True)
class Transfer:
    """A tensor TensorFlow copied between devices: the op that made it, from, to, and its size.

    ``shape`` and ``nbytes`` come from the traced function graph (static
    shapes); they are None for a tensor Grappler created under a new name.
    """

    tensor: str
    source: str
    destination: str
    shape: tuple[int, ...] | None = None
    nbytes: int | None = None


@dataclass(frozen=True)
class Placement:
    """Where TensorFlow ran each op of one function, and what it copied between devices.

    Attributes:
        ops: ``(op type, op name, short device)`` for every op.
        transfers: one :class:`Transfer` per ``_Send`` op (control-only
            edges left out), sorted by source and destination.
    """

    ops: tuple[tuple[str, str, str], ...]
    transfers: tuple[Transfer, ...]

    def devices(self, op_type: str, name_part: str = "") -> list[str]:
        """Sorted devices of the ops of ``op_type`` whose name contains ``name_part``."""
        return sorted(d for t, n, d in self.ops if t == op_type and name_part in n)

    def bytes_moved(self, source: str | None = None, destination: str | None = None) -> int:
        """Bytes of the copies from ``source`` to ``destination`` (None: any device).

        Raises:
            ValueError: if a matching copy's size is unknown.
        """
        total = 0
        for t in self.transfers:
            if source not in (None, t.source) or destination not in (None, t.destination):
                continue
            if t.nbytes is None:
                raise ValueError(f"size of {t.tensor} ({t.source} -> {t.destination}) is unknown")
            total += t.nbytes
        return total


def placement(function, *args) -> Placement:
    """Run ``function(*args)`` once and read where TensorFlow really ran each op.

    ``function`` must be a ``tf.function`` that has not run yet: TensorFlow
    records the partitioned graphs (one per device: the placer's decision,
    not what the Python code asked for) with the run metadata of the call
    that instantiates the function
    (``tensorflow.python.eager.context.enable_run_metadata``, the mechanism
    behind TensorBoard's graph view). Cross-device copies are the
    ``_Send`` ops of those graphs.
    """
    from tensorflow.python.eager import context

    context.enable_run_metadata()
    try:
        function(*args)
        metadata = context.export_run_metadata()
    finally:
        context.disable_run_metadata()
    ops, moved = [], []
    for graph in metadata.function_graphs:
        for partition in graph.partition_graphs:
            for node in partition.node:
                ops.append((node.op, node.name, short_device(node.device)))
                if node.op == "_Send" and "GroupCrossDeviceControlEdges" not in node.input[0]:
                    moved.append(Transfer(
                        node.input[0],
                        short_device(node.attr["send_device"].s.decode()),
                        short_device(node.attr["recv_device"].s.decode()),
                    ))
    if not ops:
        raise ValueError("no graphs were recorded: pass a tf.function that has not run yet")
    graph = function.get_concrete_function(*args).graph  # the trace just run, not a new one
    moved = [_sized(t, graph) for t in moved]
    moved.sort(key=lambda t: (t.source, t.destination, t.tensor))
    return Placement(tuple(ops), tuple(moved))


def _sized(transfer: Transfer, graph) -> Transfer:
    name = transfer.tensor if ":" in transfer.tensor else transfer.tensor + ":0"
    try:
        tensor = graph.get_tensor_by_name(name)
    except (KeyError, ValueError):
        return transfer
    if not tensor.shape.is_fully_defined():
        return transfer
    shape = tuple(int(d) for d in tensor.shape)
    nbytes = units.tensor_bytes(shape, tensor.dtype.name) if shape else units.dtype_bytes(tensor.dtype.name)
    return Transfer(transfer.tensor, transfer.source, transfer.destination, shape, nbytes)


def train_step_function(model):
    """``model.train_step`` as a ``tf.function`` (the step ``fit`` runs), with the optimizer built."""
    import tensorflow as tf

    model.optimizer.build(model.trainable_variables)
    return tf.function(model.train_step)


# --- CI-scale demonstrations ----------------------------------------------------------


def column_by_hand(x, kernel, devices_: Sequence[str]):
    """``x @ kernel`` with the kernel split by columns over ``devices_``, no Keras.

    Device i gets ``kernel[:, F/N*i : F/N*(i+1)]`` as its own variable and
    computes that slice of the output; ``tf.concat`` gathers the slices.
    Returns ``(y, shards)``: the output (numpy) and the shard variables.

    Raises:
        ValueError: if the device count does not divide the kernel's columns.
    """
    import tensorflow as tf

    width = splits.check_split("kernel columns", int(kernel.shape[1]), len(devices_))
    pieces, outputs = [], []
    for i, device in enumerate(devices_):
        with tf.device(device):
            piece = tf.Variable(kernel[:, width * i : width * (i + 1)])
            outputs.append(tf.matmul(x, piece))
        pieces.append(piece)
    return tf.concat(outputs, axis=1).numpy(), pieces


def row_by_hand(x, kernel, devices_: Sequence[str]):
    """``x @ kernel`` with the kernel split by rows over ``devices_``, no Keras.

    Device i gets ``kernel[D/N*i : D/N*(i+1)]`` and the matching columns of
    ``x``; the N partial products are summed. Returns ``(y, shards)``.

    Raises:
        ValueError: if the device count does not divide the kernel's rows.
    """
    import tensorflow as tf

    height = splits.check_split("kernel rows", int(kernel.shape[0]), len(devices_))
    pieces, partials = [], []
    for i, device in enumerate(devices_):
        rows = slice(height * i, height * (i + 1))
        with tf.device(device):
            piece = tf.Variable(kernel[rows])
            partials.append(tf.matmul(x[:, rows], piece))
        pieces.append(piece)
    return tf.add_n(partials).numpy(), pieces


def compare_with_dense(setup: devices.DeviceSetup, kind: str = "column", batch: int = 4,
                       in_dim: int = 64, units: int = 32, seed: int = 0) -> dict:
    """Build ``kind`` ("column" or "row") and ``keras.layers.Dense`` with the same weights; compare.

    Returns a dict with the largest absolute difference of the outputs
    (``max_abs_diff``) and of the kernel gradients (``max_grad_diff``, the
    sharded gradients reassembled on the host), and the layer's shards.
    """
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, in_dim)).astype("float32")
    dense = keras.layers.Dense(units)
    dense.build((None, in_dim))
    dense.bias.assign(rng.standard_normal(units).astype("float32"))
    layer = make_layer(kind, units, setup.devices)
    layer.build((None, in_dim))
    layer.set_full_weights(*[w.numpy() for w in dense.weights])

    def value_and_kernel_grad(model, kernels):
        with tf.GradientTape() as tape:
            y = model(x)
            loss = tf.reduce_sum(y * y)
        grads = tape.gradient(loss, kernels)
        return y.numpy(), grads

    y_ref, (g_ref,) = value_and_kernel_grad(dense, [dense.kernel])
    y, grads = value_and_kernel_grad(layer, layer.kernel_shards)
    g = np.concatenate([g.numpy() for g in grads], axis=layer.split_axis)
    return {
        "max_abs_diff": float(np.max(np.abs(y - y_ref))),
        "max_grad_diff": float(np.max(np.abs(g - g_ref.numpy()))),
        "grad_devices": [short_device(g.device) for g in grads],
        "shards": shards(layer),
    }


def make_layer(kind: str, units: int, devices_: Sequence[str], **kwargs):
    """``ColumnParallelDense`` for ``kind="column"``, ``RowParallelDense`` for ``"row"``."""
    if kind == "column":
        return ColumnParallelDense(units, devices_, **kwargs)
    if kind == "row":
        return RowParallelDense(units, devices_, **kwargs)
    raise ValueError(f"kind must be 'column' or 'row', not {kind!r}")


def megatron_model(setup: devices.DeviceSetup, in_dim: int = 64, hidden: int = 128, out: int = 32):
    """Input -> ColumnParallelDense(hidden, relu, no gather) -> RowParallelDense(out), uncompiled.

    The hidden activation h[B, hidden] exists only as N slices h[B, hidden_model],
    each on its own device.
    """
    return keras.Sequential([
        keras.Input((in_dim,)),
        ColumnParallelDense(hidden, setup.devices, activation="relu", gather_output=False, name="column"),
        RowParallelDense(out, setup.devices, input_is_parallel=True, name="row"),
    ])


def train(model, steps: int = 20, batch: int = 16, seed: int = 0, learning_rate: float = 1e-2) -> list[float]:
    """Compile ``model`` with colocated RMSprop and MSE, ``fit`` a random linear target; return losses per epoch."""
    import numpy as np

    rng = np.random.default_rng(seed)
    in_dim = model.inputs[0].shape[-1]
    out_dim = model.outputs[0].shape[-1]
    x = rng.standard_normal((batch * steps, in_dim)).astype("float32")
    y = (x @ rng.standard_normal((in_dim, out_dim)).astype("float32")) / np.sqrt(in_dim)
    compile_sharded(model, keras.optimizers.RMSprop(learning_rate), "mse")
    history = model.fit(x, y, batch_size=batch, epochs=3, verbose=0, shuffle=False)
    return [float(v) for v in history.history["loss"]]


def init_peak(setup: devices.DeviceSetup, build: Callable[[], object], device: str | None = None) -> dict:
    """Allocator peak and current bytes while ``build()`` runs, from ``tf.config.experimental.get_memory_info``.

    In CPU mode all logical CPUs share one allocator, so the first device's
    figures count every device (the host too); on GPUs pass the device to read. Returns
    ``{"peak": B, "current": B, "result": build()}`` relative to the start.
    """
    import tensorflow as tf

    import gc

    name = device or short_device(setup.devices[0])
    gc.collect()  # free what earlier layers left, so it is not counted against this build
    tf.config.experimental.reset_memory_stats(name)
    start = tf.config.experimental.get_memory_info(name)["current"]
    result = build()
    info = tf.config.experimental.get_memory_info(name)
    return {"peak": info["peak"] - start, "current": info["current"] - start, "result": result}


def shard_summary(setup: devices.DeviceSetup, shape: Sequence[int] = (1024, 512)) -> dict:
    """For the overview's comparison table: where this module puts a kernel's shards, and their bytes.

    Builds ``ColumnParallelDense`` with kernel ``W[shape]`` (no bias) over
    ``setup.devices``, runs one training step with a colocated RMSprop, and
    reads per device the kernel shard, its gradient and its RMSprop velocity
    with :mod:`snippets.lib.ledger` (the same reader the DTensor and parameter
    server summaries use).

    Returns:
        ``{"method": "tf.device layers", "where": [device per shard],
        "local_shape": (D, F/N), "kernel_bytes": [per device], "measured":
        [weights + gradients + slots per device, read], "ledger": [the same
        from snippets.lib.planner.per_device for strategy "column", no reserve]}``.
    """
    import numpy as np
    import tensorflow as tf

    from snippets.lib import ledger

    d, f = units.check_shape(shape)
    layer = ColumnParallelDense(f, setup.devices, use_bias=False)
    layer.build((None, d))
    optimizer = colocate_updates(keras.optimizers.RMSprop())
    optimizer.build(layer.trainable_variables)
    x = np.ones((2, d), "float32")
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(layer(x)))
    gradients = tape.gradient(loss, [v.value for v in layer.trainable_variables])
    optimizer.apply(gradients, layer.trainable_variables)
    held = (ledger.holdings(layer.trainable_variables, "weights")
            + ledger.holdings(gradients, "gradients")
            + ledger.holdings(ledger.slot_variables(optimizer), "slots"))
    measured = ledger.by_device(held, setup.devices)
    planned = planner.per_device((d, f), "float32", "rmsprop", "column", len(setup.devices),
                                initializer="glorot_uniform", reserve=0)
    built = shards(layer)
    return ledger.comparison_row("tf.device layers", built, measured, planned)


# --- full shape without the memory -----------------------------------------------------


@dataclass(frozen=True)
class FullShapeReport:
    """Per-device bytes of the seed kernel split over N devices, reserved and planned.

    Attributes:
        strategy: "column" or "row".
        shards: the reserved kernel shards (device, shape, bytes), read from
            the layer's variables after building it with :class:`Uninitialized`.
        budgets: ``snippets.lib.planner.per_device`` for the same split, RMSprop,
            batch 64, each shard's update XLA-compiled on its device (what
            :func:`colocate_updates` does under ``jit_compile="auto"``).
        unfused: the same without XLA (the update's temporaries not fused).
        mirrored: the same budget under MirroredStrategy (XLA off, as Keras decides).
        device_bytes: capacity of one device's allocator.
        allocated: bytes the allocator handed out while building the layer
            (``get_memory_info`` of the pool).
        rss: the process's resident memory afterwards (psutil), bytes.
    """

    strategy: str
    shards: tuple[Shard, ...]
    budgets: tuple
    unfused: object
    mirrored: object
    device_bytes: int
    allocated: int = 0
    rss: int = 0

    def verdict(self, nbytes: int) -> str:
        """"fits in 30976 MiB, 6.17 GiB to spare" or "does NOT fit in 30976 MiB, short by ..."."""
        cap = f"{self.device_bytes // units.MiB} MiB"
        spare = self.device_bytes - nbytes
        if spare >= 0:
            return f"fits in {cap}, {units.human_bytes(spare)} to spare"
        return f"does NOT fit in {cap}, short by {units.human_bytes(-spare)}"

    def lines(self) -> list[str]:
        out = [f"{self.strategy}-parallel kernel {list(SEED_SHAPE)} float32 over {len(self.shards)} devices, "
               "RMSprop, batch 64:"]
        for shard, budget in zip(self.shards, self.budgets):
            out.append(f"  {short_device(shard.device)}: shard {list(shard.shape)}, step peak "
                       f"{units.human_bytes(budget.total)} with XLA updates: {self.verdict(budget.total)}")
        out.append(f"  without XLA: step peak {units.human_bytes(self.unfused.total)} "
                   f"({self.unfused.peak_phase}): {self.verdict(self.unfused.total)}")
        out.append(f"  reserved {units.human_bytes(self.allocated)} for the shards, pages untouched: "
                   f"process RSS {units.human_bytes(self.rss)}")
        out.append(f"  MirroredStrategy instead: step peak {units.human_bytes(self.mirrored.total)} per device "
                   f"({self.mirrored.peak_phase}): {self.verdict(self.mirrored.total)}")
        return out


def full_shape(setup: devices.DeviceSetup, strategy: str = "column",
               shape: Sequence[int] = SEED_SHAPE) -> FullShapeReport:
    """Build the seed-shaped sharded layer with :class:`Uninitialized` weights and report per device.

    The N kernel shards go through the allocator (in CPU mode, the capped
    BFC pool, which must hold N shards: ``devices.configure(N, cpu_pool=...)``)
    but no page is written. Each device's step peak comes from
    ``snippets.lib.planner.per_device`` with the same split, checked against the
    shards actually built (their shapes must match its local shape).

    Raises:
        ValueError: for an uneven split.
        tf.errors.ResourceExhaustedError: if the pool cannot hold the shards.
    """
    d, f = units.check_shape(shape)
    kind = "column" if strategy == "column" else "row"
    layer = make_layer(kind, f, setup.devices, use_bias=False, kernel_initializer=Uninitialized())
    measured = init_peak(setup, lambda: layer.build((None, d)))
    built = tuple(shards(layer))
    n = len(setup.devices)
    budgets = planner.per_device((d, f), "float32", "rmsprop", kind, n, initializer="glorot_uniform")
    expected = placements.local_shape((d, f), kind, n)
    if any(s.shape != expected for s in built):
        raise AssertionError(f"built shards {[s.shape for s in built]} differ from the plan {expected}")
    unfused = planner.per_device((d, f), "float32", "rmsprop", kind, n, xla="off")[0]
    mirrored = planner.per_device((d, f), "float32", "rmsprop", "mirrored", n)[0]
    return FullShapeReport(kind, built, tuple(budgets), unfused, mirrored, setup.device_bytes,
                           measured["current"], _rss())


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def seed_layer(setup: devices.DeviceSetup, batch: int = 8) -> list[str]:
    """On GPUs: the seed ``ColumnParallelDense(65536)`` on inputs of width 131072, for real.

    Builds it (Glorot uniform, each shard drawn on its own GPU), then runs one
    forward and backward pass on a batch of ``batch`` and reads each GPU's
    allocator (``tf.config.experimental.get_memory_info``): resident bytes
    and the peak since the build started. Each GPU holds its 8 GiB shard and,
    after the backward pass, its 8 GiB gradient; no GPU ever holds the
    32 GiB kernel. Returns one line per GPU.

    Raises:
        tf.errors.ResourceExhaustedError: if a GPU cannot hold its shard.
    """
    import numpy as np
    import tensorflow as tf

    names = [short_device(d) for d in setup.devices]
    for name in names:
        tf.config.experimental.reset_memory_stats(name)
    layer = ColumnParallelDense(SEED_SHAPE[1], setup.devices)
    layer.build((None, SEED_SHAPE[0]))
    x = tf.constant(np.ones((batch, SEED_SHAPE[0]), "float32"))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(layer(x)))
    gradients = tape.gradient(loss, layer.kernel_shards)
    lines = []
    kernels = [s for s in shards(layer) if "/kernel_" in s.name]
    for name, shard, gradient in zip(names, kernels, gradients):
        info = tf.config.experimental.get_memory_info(name)
        lines.append(f"{name}: {shard.name} {list(shard.shape)} = {shard.nbytes} B, gradient on "
                     f"{short_device(gradient.device)}; allocator now {units.format_bytes(info['current'])}, "
                     f"peak {units.format_bytes(info['peak'])}")
    return lines


def full_shape_pool(shape: Sequence[int] = SEED_SHAPE) -> str:
    """CPU pool (``devices.configure(cpu_pool=...)``) that holds all shards of ``shape`` float32.

    The shards add up to the full tensor, whatever their number; 1 GiB more
    covers the allocator's rounding and small tensors.

    >>> full_shape_pool()
    '35433480192B'
    """
    return f"{units.tensor_bytes(shape, 'float32') + units.GiB}B"


# --- command line ------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None, parsed=None) -> int:
    """The command line; ``parsed`` is :func:`parse_args`' result when the module runs as a script."""
    parser, args = parsed or parse_args(argv)
    if args.full_shape:
        setup = devices.configure_from_args(args, parser, cpu_pool=full_shape_pool())
        print(setup.describe())
        for strategy in ("column", "row"):
            # The first layout's shards are freed before the second is built (init_peak collects).
            print("\n".join(full_shape(setup, strategy).lines()))
        return 0
    setup = devices.configure_from_args(args, parser)
    if args.seed_layer:
        if setup.mode == "cpu":
            parser.error("--seed-layer initialises the 32 GiB seed kernel for real and needs GPUs "
                         "(4 x 30976 MiB); without them use --full-shape, which reserves it untouched")
        print(setup.describe())
        for line in seed_layer(setup):
            print(line)
        return 0
    print(setup.describe())
    for kind in ("column", "row"):
        result = compare_with_dense(setup, kind, in_dim=args.in_dim, units=args.units)
        print(f"\n{kind}-parallel Dense({args.units}) on x[4, {args.in_dim}]: max |y - y_dense| = "
              f"{result['max_abs_diff']:.2e}, max |dW - dW_dense| = {result['max_grad_diff']:.2e}")
        from tabulate import tabulate

        print(tabulate([(s.name, s.device, list(s.shape), s.nbytes) for s in result["shards"]],
                       headers=["variable", "device", "shape", "bytes"]))
    model = megatron_model(setup, args.in_dim, 4 * args.units, args.units)
    losses = train(model)
    print(f"\ncolumn -> row (Megatron pairing) trained with fit: loss per epoch {[round(v, 4) for v in losses]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(parsed=_CLI))
