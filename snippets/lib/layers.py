"""Tensor-parallel Keras 3 Dense layers: each kernel shard created, used and updated on its own device.

The placement of the [Tensor parallelism](../../docs/tensor-parallel.md)
chapter, built for real with ``tf.device``, in the notation of the JAX
scaling book:

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

Every shard is created and initialised on its own device
(:mod:`snippets.lib.initializers`: no full-size temporary), and because
TensorFlow places gradient ops it was not told about on device 0, each
shard's backward pass is pinned to its device with :func:`on_device`;
optimizer updates are pinned by :func:`snippets.lib.optimizers.colocate_updates`.

Sources: ``tf.device`` and ``tf.custom_gradient`` API pages (TensorFlow 2.21);
Keras 3 "Making new layers and models via subclassing" guide; Shoeybi et al.,
"Megatron-LM", arXiv:1909.08053, section 3.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import keras

from snippets.lib import initializers, splits


def _device_list(devices_: Sequence[str]) -> tuple[str, ...]:
    names = tuple(devices_)
    if not names:
        raise ValueError("give at least one device, e.g. devices.configure(4).devices")
    if len(set(names)) != len(names):
        raise ValueError(f"devices must be distinct, got {list(names)}")
    return names


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
                initializer=initializers.shard_initializer(self.kernel_initializer, full_shape, shard_shape, index),
            )

    def _add_bias(self, index: int, device: str, full_shape, shard_shape):
        import tensorflow as tf

        with tf.device(device):
            return self.add_weight(
                name=f"bias_{index}",
                shape=shard_shape,
                initializer=initializers.shard_initializer(self.bias_initializer, full_shape, shard_shape, index),
            )

    def set_full_weights(self, kernel, bias=None) -> None:
        """Load a full ``kernel[D, F]`` (and ``bias[F]``) as a Dense layer holds them, shard by shard.

        Each shard is sliced from the array on the host and assigned to its
        own device. CI-scale helper for comparing with ``keras.layers.Dense``.
        """
        import numpy as np

        kernel = np.asarray(kernel)
        blocks = np.split(kernel, self.count, axis=self.split_axis)
        for variable, piece in zip(self.kernel_shards, blocks):
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


# --8<-- [start:column]
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
            :func:`initializers.shard_initializer`).
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
# --8<-- [end:column]


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
            parts = list(inputs)
        else:
            parts = self._run(out_device, lambda x: _split(x, self.count), inputs)
        partials = [
            self._run(device, keras.ops.matmul, piece, _read(self.kernel_shards[i], device, dtype))
            for i, (device, piece) in enumerate(zip(self.shard_devices, parts))
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


def make_layer(kind: str, units: int, devices_: Sequence[str], **kwargs):
    """``ColumnParallelDense`` for ``kind="column"``, ``RowParallelDense`` for ``"row"``."""
    if kind == "column":
        return ColumnParallelDense(units, devices_, **kwargs)
    if kind == "row":
        return RowParallelDense(units, devices_, **kwargs)
    raise ValueError(f"kind must be 'column' or 'row', not {kind!r}")
