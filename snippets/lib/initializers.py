"""Initialise one shard of a weight with no full-size temporary, or reserve it without writing.

A Keras ``Dense`` draws its whole kernel before anything can split it: three
full-size tensors at once for Glorot uniform (field case F18). The sharded
layers of this site draw each shard on its own device instead, with the
statistics of the full tensor (:func:`shard_initializer`), or only reserve
it (:class:`Uninitialized`) to prove that shards fit at full size.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras

from snippets.lib import allocator


@keras.saving.register_keras_serializable(package="snippets")
class Uninitialized(keras.initializers.Initializer):
    """Reserve a tensor without writing it: ``tf.raw_ops.Empty(init=False)``.

    The allocator hands out the bytes but no page is touched, so a 8 GiB
    shard costs no RAM on a CPU host until something writes it. For proving
    that shards *fit* at full size, never for training (the values are
    whatever the memory held). Source: ``tf.raw_ops.Empty`` API page.
    """

    def __call__(self, shape, dtype=None):
        return allocator.reserve(shape, dtype or "float32")


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
    # A Dense kernel W[D, F]: fan_in is D, fan_out is F (the Keras VarianceScaling
    # page; a convolution kernel would multiply both by its receptive field).
    if len(shape) != 2:
        raise ValueError(f"shard_initializer splits Dense kernels W[D, F]; got a weight of rank {len(shape)}")
    fan_in, fan_out = shape
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
