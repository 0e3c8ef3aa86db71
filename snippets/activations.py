"""When the batch is the tensor too big: activation-bound steps and their remedies, measured.

The chapter ``docs/activations.md``. A training step is *weight-bound* when
weights, gradients, slots and the update's temporaries set its peak (the
seed's ``W[131072, 65536]``), *activation-bound* when the tensors the forward
pass keeps for the backward pass do (a CNN at high resolution, attention at a
long sequence). This module builds small activation-bound models, measures the
per-device allocator peak of a real ``fit`` step of each, in a fresh capped
process per figure, with and without each remedy (a smaller batch with
``gradient_accumulation_steps``, ``keras.RematScope``, a mixed dtype policy),
and checks what accumulation does to the losses.

Run ``python -m snippets.activations --help``.

Sources: ``gradient_accumulation_steps`` (``keras.optimizers.Optimizer``, Keras 3.15:
"model & optimizer variables will not be updated at every step; instead they will be
updated every ``gradient_accumulation_steps`` steps, using the average value of the
gradients since the last update"); ``keras.RematScope`` and ``keras.remat``
(keras/src/backend/common/remat.py; on TensorFlow ``remat`` is ``tf.recompute_grad``,
keras/src/backend/tensorflow/core.py); the mixed policies (Keras mixed-precision guide).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from snippets.lib import hardware, model_step, planner, units
from snippets.lib.devices import CPU_INTER_OP_THREADS
from snippets.lib.model_step import ModelStep
from snippets.lib.seed import SEED_SHAPE

#: The seed of every random draw here (Keras, NumPy, TensorFlow).
SEED = 7


# --- the models ---------------------------------------------------------------------------


def conv_model(size: int = 128, filters: int = 64, classes: int = 10, batchnorm: bool = False):
    """Field case F25's model: two ``Conv2D(filters, 3, padding="same", activation="relu")`` on
    ``x[B, size, size, 3]``, global average pooling, ``Dense(classes)``.

    Weights: ``3*3*3*filters + 3*3*filters*filters`` kernel elements plus biases and the
    ``Dense`` (39,370 float32 parameters at the defaults, :func:`parameters`). Each
    convolution's output is ``[B, size, size, filters]`` float32: 4 MiB per sample at the
    defaults. ``batchnorm``
    puts a ``BatchNormalization`` after each convolution (per-batch statistics: see
    :func:`accumulation_losses`).
    """
    import keras

    layers = [keras.Input((size, size, 3))]
    for _ in range(2):
        layers.append(keras.layers.Conv2D(filters, 3, padding="same", activation="relu"))
        if batchnorm:
            layers.append(keras.layers.BatchNormalization())
    layers += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(classes)]
    return keras.Sequential(layers)


def attention_model(length: int = 256, width: int = 64, heads: int = 4, depth: int = 4, classes: int = 10,
                    remat: bool = False):
    """A small Transformer encoder at a long sequence: ``x[B, length, width]``, ``depth``
    :func:`encoder_block` layers (``encoder_block_0`` ...), mean over the sequence,
    ``Dense(classes)``. ``remat`` wraps each block's body in ``keras.remat``, so that the
    backward pass keeps each block's input only and recomputes the rest, one block at a time.

    Each block's attention scores are ``[B, heads, length, length]`` float32, 1 MiB per
    sample at the defaults; the weights are a few hundred KiB (:func:`parameters`).
    """
    import keras

    x = inputs = keras.Input((length, width))
    for i in range(depth):
        x = encoder_block(width, heads, name=f"encoder_block_{i}", remat=remat)(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, keras.layers.Dense(classes)(x))


def encoder_block(width: int, heads: int, name: str = "encoder_block", remat: bool = False):
    """One Transformer encoder block as one Keras layer, ``x[B, L, width] -> [B, L, width]``:
    self-attention (``heads`` heads of ``width / heads``), residual + LayerNorm, a
    ``4 * width`` ReLU MLP, residual + LayerNorm (keras-io's ``TransformerBlock`` without
    dropout).

    Its ``call`` takes the input alone, no keyword: on TensorFlow ``keras.remat`` is
    ``tf.recompute_grad``, whose ``custom_gradient`` refuses keyword arguments in graph mode
    ("supports keywords arguments only when eager execution is enabled", measured on TF 2.21),
    and ``Layer.__call__`` passes ``training=`` to any ``call`` that declares it (``Dense``'s
    does, ``Conv2D``'s does not). So
    ``keras.RematScope`` modes that reach a layer called with keywords (``"full"`` reaches the
    model itself; ``"larger_than"`` reaches ``MultiHeadAttention``) fail in ``fit`` there, and
    ``remat=True`` wraps the block's own positional body in ``keras.remat`` instead.
    """
    import keras

    class EncoderBlock(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.attention = keras.layers.MultiHeadAttention(heads, width // heads)
            self.norm1 = keras.layers.LayerNormalization()
            self.hidden = keras.layers.Dense(4 * width, activation="relu")
            self.out = keras.layers.Dense(width)
            self.norm2 = keras.layers.LayerNormalization()

        def body(self, x):
            x = self.norm1(x + self.attention(x, x))
            return self.norm2(x + self.out(self.hidden(x)))

        def call(self, x):
            return keras.remat(self.body)(x) if remat else self.body(x)

    return EncoderBlock(name=name)


def mlp_model(width: int = 256, hidden: int = 4096, depth: int = 2, classes: int = 10):
    """A wide MLP: ``depth`` ``Dense(hidden, relu)`` layers on ``x[B, width]``, then ``Dense(classes)``."""
    import keras

    layers = [keras.Input((width,))]
    layers += [keras.layers.Dense(hidden, activation="relu") for _ in range(depth)]
    return keras.Sequential(layers + [keras.layers.Dense(classes)])


def seed_model(k: int = 64, remat: bool = False):
    """The seed layer at 1/k of its elements: ``Dense(65536 / sqrt(k))`` on ``x[B, 131072 / sqrt(k)]``.

    At ``k = 64`` its kernel is ``[16384, 8192]`` float32, 512 MiB, against 1/64 of a
    V100-SXM2-32GB's allocator (484 MiB): a kernel that does not fit, as the seed's 32 GiB does
    not fit 30976 MiB. ``remat`` wraps the ``Dense`` layer's computation in ``keras.remat``
    (positionally: ``Dense.call`` declares ``training``, so ``keras.RematScope`` cannot wrap it
    in ``fit`` on TensorFlow, see :func:`encoder_block`).

    Raises:
        ValueError: if ``k`` is not a perfect square.
    """
    import keras

    root = int(round(k ** 0.5))
    if root * root != k:
        raise ValueError(f"k must be a perfect square (4, 16, 64, ...), not {k}")
    d, f = SEED_SHAPE
    class RematDense(keras.layers.Dense):
        def call(self, inputs):  # positional only: see encoder_block
            return keras.remat(lambda x: keras.layers.Dense.call(self, x))(inputs)

    layer = RematDense if remat else keras.layers.Dense
    return keras.Sequential([keras.Input((d // root,)), layer(f // root)])


# --- fresh processes ------------------------------------------------------------------------


#: The inter-op thread counts each configuration is measured at: one, the emulation's default
#: (:data:`snippets.lib.devices.CPU_INTER_OP_THREADS`, two) and eight (more of the orders a race can draw; a GPU's
#: kernels run inline in one order no CPU run makes: :data:`snippets.lib.plan_caveats.THREADS_CAVEAT`). Without XLA
#: the executor's order is a race, and for this chapter's Transformer under
#: ``keras.remat`` it decides the saving: 18-22 MiB at two and eight threads, 31-34 MiB at one,
#: against 57-60 MiB without remat (four steps, three runs at each count, and this benchmark). A
#: compiled step is measured at all three too, so the page shows rather than assumes that its
#: buffer assignment does not move with them.
THREADS = (1, CPU_INTER_OP_THREADS, 8)


def measure_fresh(jobs: Sequence[tuple[ModelStep, str]]) -> list[dict]:
    """:func:`snippets.lib.model_step.measure` of each ``(step, cap)`` at each of :data:`THREADS`,
    each run in its own fresh process (:func:`snippets.lib.model_step.measure_many`: one TensorFlow
    import, a fork per run). With accumulation each run goes through the optimizer's update
    (``model_step.measure`` does).

    Returns:
        One result per job: the run with the highest ``step_peak`` (the first run if none completed),
        with ``"thread_peaks"``, ``{threads: step_peak or None}`` (bytes) for every run of the job, and
        ``"seconds_per_step"`` from the run at the default count, so that rows compare at one count.

    Raises:
        RuntimeError: if a child fails for another reason than an OOM (its one line).
    """
    runs = [(step, cap, threads) for step, cap in jobs for threads in THREADS]
    results = iter(model_step.measure_many(runs))
    figures = []
    for _ in jobs:
        by_threads = {threads: next(results) for threads in THREADS}
        done = [r for r in by_threads.values() if r["completed"]]
        worst = max(done, key=lambda r: r["step_peak"]) if done else by_threads[THREADS[0]]
        figures.append({**worst, "thread_peaks": {str(t): r["step_peak"] for t, r in by_threads.items()},
                        "seconds_per_step": by_threads[CPU_INTER_OP_THREADS]["seconds_per_step"]})
    return figures


def parameters(builder: str, **kwargs) -> int:
    """Number of weights (elements) of the model ``builder`` (``"module:function"``) makes."""
    model = _builder(builder)(**kwargs)
    return sum(int(v.numpy().size) for v in model.weights)


def _builder(target: str):
    import importlib

    module, _, function = target.partition(":")
    if not function:
        raise ValueError(f"--model must be package.module:function, not {target!r}")
    return getattr(importlib.import_module(module), function)


# --- what each remedy keeps: variables, dtypes, losses --------------------------------------


def optimizer_state(name: str, shape: Sequence[int] = (1000, 10), **options) -> dict:
    """The Keras optimizer ``name`` (a ``keras.optimizers`` class) built on one float32 variable
    of ``shape``: ``{"same_shape": [names of its variables of that shape], "other_bytes": bytes
    of the rest}`` (the iteration counter, a loss scale...).

    Raises:
        ValueError: for an argument Keras does not recognise (Keras's own message).
    """
    import keras

    optimizer = getattr(keras.optimizers, name)(**options)
    variable = keras.Variable(keras.ops.zeros(tuple(shape)), name="w")
    optimizer.build([variable])
    same = [v.path.split("/")[-1] for v in optimizer.variables if tuple(v.shape) == tuple(shape)]
    other = sum(units.tensor_bytes(v.shape, v.dtype) for v in optimizer.variables if tuple(v.shape) != tuple(shape))
    return {"same_shape": same, "other_bytes": other}


def loss_scale_state(shape: Sequence[int] = (1000, 10)) -> dict:
    """What ``LossScaleOptimizer(Adam())`` adds to Adam on one variable of ``shape``: its own
    variables' ``{name: (shape, dtype)}``."""
    import keras

    inner = keras.optimizers.Adam()
    outer = keras.optimizers.LossScaleOptimizer(inner)
    variable = keras.Variable(keras.ops.zeros(tuple(shape)), name="w")
    outer.build([variable])
    inner_ids = {id(v) for v in inner.variables}
    return {v.path.split("/")[-1]: (tuple(v.shape), str(v.dtype)) for v in outer.variables
            if id(v) not in inner_ids}


def mixed_dense(policy: str = "mixed_float16", units_out: int = 1024, x_shape=(256, 4096)) -> dict:
    """Field case F21: ``Dense(units_out)`` called on ``x[x_shape]`` under ``policy``: the dtypes
    and bytes of its kernel, its output (what the backward pass keeps), and the kernel's gradient."""
    import keras
    import tensorflow as tf

    keras.config.set_dtype_policy(policy)
    try:
        layer = keras.layers.Dense(units_out)
        x = tf.random.normal(x_shape)
        with tf.GradientTape() as tape:
            y = layer(x)
            loss = tf.reduce_sum(tf.cast(y, "float32"))
        gradient = tape.gradient(loss, layer.kernel.value)
    finally:
        keras.config.set_dtype_policy("float32")
    return {"kernel": (str(layer.kernel.dtype), units.tensor_bytes(layer.kernel.shape, layer.kernel.dtype)),
            "output": (y.dtype.name, units.tensor_bytes(y.shape, y.dtype.name)),
            "kernel gradient": (gradient.dtype.name, units.tensor_bytes(gradient.shape, gradient.dtype.name))}


def accumulation_losses(batchnorm: bool = False, batch: int = 32, accumulation: int = 4,
                        updates: int = 5) -> tuple[float, float]:
    """Train two copies of one small :func:`conv_model` (16 px, 8 filters, SGD 0.1) from the same
    weights: one at ``batch``, one at ``batch / accumulation`` with
    ``gradient_accumulation_steps=accumulation``, for the same ``updates`` optimizer steps on the
    same samples in the same order. Returns both models' loss on all the samples afterwards.

    Without BatchNorm the two follow one trajectory (the average of the micro-batches' mean
    gradients is the large batch's mean gradient); with BatchNorm each micro-batch is normalised
    with its own statistics, and the moving averages move once per micro-batch.
    """
    import keras
    import numpy as np

    keras.utils.set_random_seed(SEED)
    models = [conv_model(16, 8, batchnorm=batchnorm) for _ in range(2)]
    models[1].set_weights(models[0].get_weights())
    models[0].compile(keras.optimizers.SGD(0.1), "mean_squared_error")
    models[1].compile(keras.optimizers.SGD(0.1, gradient_accumulation_steps=accumulation), "mean_squared_error")
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((batch * updates, 16, 16, 3)).astype("float32")
    y = rng.standard_normal((batch * updates, 10)).astype("float32")
    models[0].fit(x, y, batch_size=batch, shuffle=False, verbose=0)
    models[1].fit(x, y, batch_size=batch // accumulation, shuffle=False, verbose=0)
    return tuple(float(m.evaluate(x, y, batch_size=batch, verbose=0)) for m in models)


# --- the chapter's figures ------------------------------------------------------------------

CONV = "snippets.activations:conv_model"
ATTENTION = "snippets.activations:attention_model"
#: The chapter's cap for the activation-bound models: far above any of their peaks.
CAP = "512MiB"
#: The scale of the seed the chapter runs (its kernel: 512 MiB).
SEED_SCALE = 64


def chapter_jobs() -> dict[str, tuple[ModelStep, str]]:
    """The chapter's configurations, by the name its table prints, with each one's cap.

    The CNN is :func:`conv_model` at 64 px (F25's model at a quarter of its pixels), Adam,
    no XLA; the Transformer is :func:`attention_model` (4 blocks, ``L = 256``), Adam, batch
    4; the seed at 1/64 gets every remedy at once under 1/64 of a V100-SXM2-32GB's allocator.
    """
    conv = {"model": CONV, "optimizer": "adam", "xla": "off", "loss": "mse", "kwargs": (("size", 64),)}
    attention = {"model": ATTENTION, "optimizer": "adam", "batch": 4, "loss": "mse"}
    remat = (("remat", True),)
    seed_cap = f"{hardware.allocator_bytes() // SEED_SCALE}B"
    return {
        "CNN, batch 8": (ModelStep(**conv, batch=8), CAP),
        "CNN, batch 2 x 4 accumulated": (ModelStep(**conv, batch=2, accumulation=4), CAP),
        "CNN, batch 8, RematScope larger_than": (ModelStep(**conv, batch=8, remat="larger_than"), CAP),
        "Transformer": (ModelStep(**attention, xla="off"), CAP),
        "Transformer, keras.remat per block": (ModelStep(**attention, xla="off", kwargs=remat), CAP),
        "Transformer, XLA": (ModelStep(**attention, xla="on"), CAP),
        "Transformer, XLA, keras.remat per block": (ModelStep(**attention, xla="on", kwargs=remat), CAP),
        "seed 1/64, batch 1 x 4, remat, mixed_float16": (
            ModelStep("snippets.activations:seed_model", "rmsprop", 1, "off", policy="mixed_float16", loss="mse",
                      accumulation=4, kwargs=(("k", SEED_SCALE), ("remat", True))), seed_cap),
    }


def chapter_figures() -> dict[str, dict]:
    """:func:`snippets.lib.model_step.measure` of every :func:`chapter_jobs` configuration,
    each in its own fresh process (:func:`measure_fresh`). About two and a half minutes on two CPU
    cores: ``python -m benchmarks.activations`` runs it and publishes the result (:data:`RESULTS`)."""
    jobs = chapter_jobs()
    return dict(zip(jobs, measure_fresh(list(jobs.values()))))


#: Where ``python -m benchmarks.activations`` publishes :func:`chapter_figures` (committed).
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "activations.json"


def jobs_as_json() -> dict[str, dict]:
    """:func:`chapter_jobs` as plain JSON values: each configuration's step fields, cap and the
    inter-op thread counts it is measured at (:data:`THREADS`)."""
    return json.loads(json.dumps({name: {"step": step.fields(), "cap": cap, "threads": THREADS}
                                  for name, (step, cap) in chapter_jobs().items()}))


def published_figures(path: Path = RESULTS) -> dict[str, dict]:
    """The chapter's figures as ``python -m benchmarks.activations`` last measured them, in the
    chapter's order: each configuration's :func:`snippets.lib.model_step.measure` result.

    Raises:
        RuntimeError: the file is missing, or was measured for other configurations than
            :func:`chapter_jobs` (one line naming the command that measures them again).
    """
    again = "run python -m benchmarks.activations (about three minutes)"
    if not path.exists():
        raise RuntimeError(f"{path.name} has not been measured here: {again}")
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("jobs") != jobs_as_json():
        raise RuntimeError(f"{path.name} was measured for other configurations than the chapter's: {again}")
    return {name: data["figures"][name] for name in chapter_jobs()}


def figures_table(figures: dict[str, dict]) -> str:
    """The chapter's figures as a text table: the step peak (the worst run), the lowest run's peak
    (:func:`measure_fresh`'s ``thread_peaks``), the weights, wall seconds of the last ``fit`` step
    at the default thread count."""
    width = max([len("configuration"), *map(len, figures)])
    rows = [f"{'configuration':{width}} {'step peak':>10} {'lowest':>10} {'weights':>10} {'s/step':>7}"]
    for name, r in figures.items():
        peaks = [p for p in r["thread_peaks"].values() if p is not None]
        peak = units.human_bytes(r["step_peak"]) if r["completed"] else f"OOM ({r['failed_phase']})"
        lowest = units.human_bytes(min(peaks)) if peaks else "-"
        weights = units.human_bytes(r["weights_bytes"]) if r["weights_bytes"] is not None else "-"
        seconds = f"{r['seconds_per_step']:.2f}" if r["seconds_per_step"] is not None else "-"
        rows.append(f"{name:{width}} {peak:>10} {lowest:>10} {weights:>10} {seconds:>7}")
    return "\n".join(rows)


def seed_phases(batch: int, policy: str | None = None) -> dict[str, int]:
    """The planner's phases (bytes) of the seed's mirrored RMSprop step on 4 devices at ``batch``."""
    return planner.per_device(SEED_SHAPE, "float32", "rmsprop", "mirrored", 4, policy, batch=batch)[0].phases


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m snippets.activations",
                                     description="Measure the chapter's fit steps, one fresh capped process "
                                     "each, and print their allocator peaks (python -m benchmarks.activations "
                                     "also publishes them for the chapter).")
    parser.parse_args(argv)
    try:
        print(figures_table(chapter_figures()), flush=True)
    except (RuntimeError, ValueError) as error:
        print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
