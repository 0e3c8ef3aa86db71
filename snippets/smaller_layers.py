"""Smaller layers: shrink the tensor instead of finding room for it.

Three ways to make ``W[131072, 65536]`` (32 GiB float32) smaller, each with
its bytes and, on a small seeded synthetic task, what it costs in loss or
accuracy:

* **an embedding lookup instead of one-hot x Dense**: when the 131072 inputs
  are one-hot ids, ``one_hot(ids, V) @ T == tf.gather(T, ids)`` (field case
  F20). The table keeps its size; what shrinks is the input (ids instead of
  ``[B, V]`` floats) and the gradient (rows touched instead of all of T).
* **low-rank factorisation**: ``W ~ U[D, r] @ V[r, F]``, ``(D + F) * r``
  numbers instead of ``D * F``.
* **the hashing trick**: hash ids into ``m`` buckets, so the table has ``m``
  rows whatever the vocabulary; colliding ids share a row.

Run it: ``python -m snippets.smaller_layers --help``; ``python -m snippets.smaller_layers all``
trains every variant at CI scale (about ten seconds on two cores) and prints
the tables the Smaller layers chapter shows.

Sources: ``tf.one_hot``, ``tf.gather``, ``keras.layers.Embedding`` and
``keras.layers.Hashing`` (FarmHash64 fingerprint of the input, then modulo
``num_bins``) API pages; Weinberger et al., "Feature Hashing for Large Scale
Multitask Learning", ICML 2009; Eckart and Young (1936) for the best rank-r
approximation; Sainath et al., "Low-rank matrix factorization for deep
neural network training with high-dimensional output targets", ICASSP 2013.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from snippets.lib import cli, communication, units
from snippets.lib.seed import SEED_SHAPE

#: Seed the chapter and the tests use; every experiment is deterministic for a given seed.
SEED = 0


def seed_everything(seed: int = SEED) -> None:
    """Seed Python, NumPy and TensorFlow and make TF ops deterministic.

    ``keras.utils.set_random_seed`` seeds all three;
    ``tf.config.experimental.enable_op_determinism`` makes reductions run in
    a fixed order (TF API page), so a run gives the same floats each time on
    the same machine.
    """
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()


# --- 1. one-hot x Dense is an embedding lookup (field case F20) ------------


def onehot_vs_gather(ids: Sequence[int], vocab: int, dim: int, seed: int = SEED):
    """``one_hot(ids, vocab) @ T`` and ``tf.gather(T, ids)`` for a random ``T[vocab, dim]``.

    Returns:
        ``(product, lookup)`` as NumPy float32 arrays of shape ``[len(ids), dim]``.
        Multiplying by a one-hot row adds exact zeros to one row of T, so the
        two are bit-for-bit equal.

    Raises:
        ValueError: for an id outside ``[0, vocab)`` (``tf.one_hot`` would
            silently give a zero row, ``tf.gather`` an error).
    """
    import tensorflow as tf

    units.check_shape((vocab, dim))
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise ValueError(f"ids {bad} are outside [0, {vocab}); use ids below the vocabulary size")
    table = tf.random.stateless_normal((vocab, dim), seed=(seed, 0))
    ids = tf.constant(list(ids), tf.int32)
    return (tf.one_hot(ids, vocab) @ table).numpy(), tf.gather(table, ids).numpy()


@dataclass(frozen=True)
class StepBytes:
    """Bytes one training step handles for one way of reading ids.

    Attributes:
        name: ``"one-hot x Dense"`` or ``"Embedding"``.
        weights: bytes of the table (identical for both).
        inputs: bytes of the batch fed to the layer.
        gradient: bytes of the table's gradient (dense, or IndexedSlices
            values plus indices).
        gradient_type: ``"Tensor"`` or ``"IndexedSlices"``.
    """

    name: str
    weights: int
    inputs: int
    gradient: int
    gradient_type: str


def _nbytes(value) -> int:
    import tensorflow as tf

    if isinstance(value, tf.IndexedSlices):
        return _nbytes(value.values) + _nbytes(value.indices)
    return units.tensor_bytes(tuple(int(d) for d in value.shape), getattr(value.dtype, "name", value.dtype))


def onehot_vs_embedding_bytes(vocab: int = 4096, dim: int = 64, batch: int = 32,
                              seed: int = SEED) -> list[StepBytes]:
    """Measure inputs and gradient of a one-hot Dense layer and an Embedding with the same table.

    Builds ``Dense(dim, use_bias=False)`` on ``one_hot(ids, vocab)`` and
    ``Embedding(vocab, dim)``, takes the gradient of the same loss with
    ``tf.GradientTape`` and sizes what it returns: a dense ``[vocab, dim]``
    Tensor for the Dense kernel, ``tf.IndexedSlices`` of ``batch`` rows for the
    Embedding (``tf.gather``'s gradient; TF API page "tf.IndexedSlices").
    """
    import keras
    import tensorflow as tf

    ids = tf.random.stateless_uniform((batch,), (seed, 1), 0, vocab, tf.int32)
    onehot = tf.one_hot(ids, vocab)
    dense = keras.layers.Dense(dim, use_bias=False)
    embedding = keras.layers.Embedding(vocab, dim)
    rows = []
    for name, layer, x in (("one-hot x Dense", dense, onehot), ("Embedding", embedding, ids)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x) ** 2)
        (grad,) = tape.gradient(loss, layer.trainable_variables)
        rows.append(StepBytes(name, _nbytes(layer.trainable_variables[0]), _nbytes(x),
                              _nbytes(grad), "IndexedSlices" if isinstance(grad, tf.IndexedSlices) else "Tensor"))
    return rows


def step_peak_bytes(device: str, optimizer: str = "rmsprop", vocab: int = 16384, dim: int = 64,
                    batch: int = 32) -> dict[str, int]:
    """Allocator peak of one training step above what stays resident, one-hot Dense vs Embedding.

    Runs one compiled step (loss, gradient, ``optimizer.apply_gradients``)
    once to create everything, then resets the allocator's statistics,
    runs it again and reads the peak (``tf.config.experimental.
    get_memory_info(device)["peak"]`` minus ``["current"]`` before the step).
    Needs an allocator that keeps statistics: a GPU, or the capped CPU
    allocator of :mod:`snippets.lib.devices`.

    Why it matters: a sparse gradient saves its own bytes, but an
    optimizer whose update is written as dense arithmetic on full-size slots
    (Keras 3 RMSprop: ``rho * velocity + (1 - rho) * square(g)``) still makes
    full-size temporaries every step.

    The peak depends on the order in which TensorFlow's executor runs
    independent ops, so it varies between runs and processes (measured: the
    lookup with SGD at 1x or 2x the table); compare lower bounds, not exact
    figures.

    Returns:
        ``{"one-hot x Dense": bytes, "Embedding": bytes}``, plus
        ``"table"``: the bytes of the ``[vocab, dim]`` float32 table.
    """
    import keras
    import tensorflow as tf

    ids = tf.random.stateless_uniform((batch,), (SEED, 3), 0, vocab, tf.int32)
    result = {"table": units.tensor_bytes((vocab, dim))}
    for name in ("one-hot x Dense", "Embedding"):
        dense = name == "one-hot x Dense"
        layer = keras.layers.Dense(dim, use_bias=False) if dense else keras.layers.Embedding(vocab, dim)
        layer.build((None, vocab) if dense else (None,))
        opt = keras.optimizers.get(optimizer)
        opt.build(layer.trainable_variables)

        @tf.function
        def step():
            x = tf.one_hot(ids, vocab) if dense else ids
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(layer(x) ** 2)
            grads = tape.gradient(loss, layer.trainable_variables)
            opt.apply_gradients(zip(grads, layer.trainable_variables))

        step()
        resident = tf.config.experimental.get_memory_info(device)["current"]
        tf.config.experimental.reset_memory_stats(device)
        step()
        result[name] = tf.config.experimental.get_memory_info(device)["peak"] - resident
    return result


def onehot_vs_embedding_training(vocab: int = 512, dim: int = 16, batch: int = 64,
                                 steps: int = 50, seed: int = SEED) -> float:
    """Train one-hot x Dense and an Embedding from the same table with SGD; largest table difference.

    Both start from one table; each step feeds the same ids and targets to
    both and applies plain SGD (learning rate 0.1). Returns the largest
    absolute difference between the two tables after ``steps`` steps: zero
    up to float32 rounding (summation order of repeated ids), i.e. the
    lookup costs no accuracy at all.
    """
    import keras
    import tensorflow as tf

    seed_everything(seed)
    dense = keras.layers.Dense(dim, use_bias=False)
    embedding = keras.layers.Embedding(vocab, dim)
    dense.build((None, vocab))
    embedding.build((None,))
    embedding.embeddings.assign(dense.kernel)
    target = tf.random.stateless_normal((vocab, dim), (seed, 2))
    sgd = keras.optimizers.SGD(0.1)

    @tf.function
    def step(ids):
        with tf.GradientTape() as tape:
            y = tf.gather(target, ids)
            loss_d = tf.reduce_mean((dense(tf.one_hot(ids, vocab)) - y) ** 2)
            loss_e = tf.reduce_mean((embedding(ids) - y) ** 2)
            # One loss per layer, summed inside the tape: each gradient is its own layer's.
            loss = loss_d + loss_e
        variables = dense.trainable_variables + embedding.trainable_variables
        sgd.apply_gradients(zip(tape.gradient(loss, variables), variables))

    for i in range(steps):
        step(tf.random.stateless_uniform((batch,), (seed, 100 + i), 0, vocab, tf.int32))
    return float(tf.reduce_max(tf.abs(dense.kernel - embedding.embeddings)))


# --- 2. low-rank factorisation --------------------------------------------


def factorised_dense(units: int, rank: int | None):
    """``Dense(units)`` as ``Dense(rank, use_bias=False)`` then ``Dense(units)``; ``rank=None``: one Dense.

    For inputs of width D the kernels are ``U[D, rank]`` and ``V[rank, units]``:
    ``(D + units) * rank`` numbers instead of ``D * units`` (plus ``units``
    bias). No non-linearity between them, so ``x @ U @ V`` is a linear layer of
    rank at most ``rank``.
    """
    import keras

    if rank is None:
        return keras.Sequential([keras.layers.Dense(units)])
    if rank < 1:
        raise ValueError(f"rank must be a positive integer, not {rank!r}")
    return keras.Sequential([keras.layers.Dense(rank, use_bias=False), keras.layers.Dense(units)])


def teacher_data(d: int = 128, f: int = 64, n: int = 4096, decay: float = 4.0, seed: int = SEED):
    """Synthetic regression data ``y = x @ W_true + noise`` whose W_true has a decaying spectrum.

    ``W_true[d, f]`` has singular values ``exp(-i / decay)`` (i = 0..f-1),
    like trained layers whose spectrum falls off; noise has standard
    deviation 0.01 and targets are scaled to unit variance.

    Returns:
        ``(x_train, y_train, x_test, y_test)``, float32 NumPy arrays with
        ``n`` rows each.
    """
    import numpy as np

    if f > d:
        raise ValueError(f"need f <= d for this teacher, got d={d}, f={f}")
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.normal(size=(d, d)))
    v, _ = np.linalg.qr(rng.normal(size=(f, f)))
    w = (u[:, :f] * np.exp(-np.arange(f) / decay)) @ v.T
    x = rng.normal(size=(2 * n, d)).astype("float32")
    y = x @ w + 0.01 * rng.normal(size=(2 * n, f))
    y = (y / y.std()).astype("float32")
    return x[:n], y[:n], x[n:], y[n:]


@dataclass(frozen=True)
class Variant:
    """One trained variant: its name, weight bytes (measured from its variables) and test score."""

    name: str
    weight_bytes: int
    score: float


def _weight_bytes(model) -> int:
    return sum(_nbytes(w) for w in model.weights)


def _train_side_by_side(models, loss_fn, batches, learning_rate: float) -> None:
    """Train several models in one traced step: one loss each, summed; Adam keeps per-variable state.

    Tracing one ``tf.function`` for all variants instead of one ``fit`` each
    keeps the experiment to seconds on two CPU cores.
    """
    import keras
    import tensorflow as tf

    variables = [v for m in models for v in m.trainable_variables]
    adam = keras.optimizers.Adam(learning_rate)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.add_n([loss_fn(y, m(x, training=True)) for m in models])
        adam.apply_gradients(zip(tape.gradient(loss, variables), variables))

    for x, y in batches:
        step(x, y)


def low_rank_experiment(ranks: Sequence[int | None] = (None, 16, 4, 1), d: int = 128, f: int = 64,
                        n: int = 4096, epochs: int = 8, batch: int = 256,
                        seed: int = SEED) -> list[Variant]:
    """Train ``Dense(f)`` and its rank-r factorisations on :func:`teacher_data`; test MSE of each.

    Returns:
        One :class:`Variant` per rank (``None`` = the full Dense), in order;
        ``score`` is the mean squared error on held-out data (targets have
        unit variance, so 1.0 means "learned nothing").
    """
    import keras
    import numpy as np

    seed_everything(seed)
    x, y, x_test, y_test = teacher_data(d, f, n, seed=seed)
    models = [factorised_dense(f, r) for r in ranks]
    for m in models:
        m.build((None, d))
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(epochs):
        order = rng.permutation(n)
        xs, ys = x[order], y[order]
        batches += [(xs[i : i + batch], ys[i : i + batch]) for i in range(0, n, batch)]
    _train_side_by_side(models, keras.losses.mean_squared_error, batches, 1e-2)
    result = []
    for r, m in zip(ranks, models):
        mse = float(np.mean((m(x_test).numpy() - y_test) ** 2))
        name = f"Dense({f})" if r is None else f"rank {r}"
        result.append(Variant(name, _weight_bytes(m), mse))
    return result


# --- 3. the hashing trick -------------------------------------------------


def id_data(vocab: int = 4096, classes: int = 10, n: int = 32768, seed: int = SEED):
    """Synthetic id classification: each of ``vocab`` ids has a random class; ids drawn Zipf-like.

    Id ``k`` (0-based) is drawn with probability proportional to ``1 / (k + 1)``,
    as word frequencies fall off; its label is fixed per id. A model must
    memorise one class per id, so colliding ids in a hashed table conflict.

    Returns:
        ``(ids_train, labels_train, ids_test, labels_test)``; ids int64,
        labels int32; ``n`` training and ``n // 4`` test examples.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    label_of = rng.integers(0, classes, vocab).astype("int32")
    train, test = rng.choice(vocab, n, p=p), rng.choice(vocab, n // 4, p=p)
    return train, label_of[train], test, label_of[test]


def id_model(vocab: int, buckets: int | None, dim: int = 16, classes: int = 10):
    """``Embedding(vocab, dim)`` or ``Hashing(buckets)`` + ``Embedding(buckets, dim)``, then ``Dense(classes)``."""
    import keras

    if buckets is None:
        head = [keras.layers.Embedding(vocab, dim)]
    elif buckets < 1:
        raise ValueError(f"buckets must be a positive integer, not {buckets!r}")
    else:
        head = [keras.layers.Hashing(buckets), keras.layers.Embedding(buckets, dim)]
    return keras.Sequential(head + [keras.layers.Dense(classes)])


def hashing_experiment(buckets: Sequence[int | None] = (None, 1024, 256, 64), vocab: int = 4096,
                       n: int = 32768, epochs: int = 4, batch: int = 1024,
                       seed: int = SEED) -> list[Variant]:
    """Train a full Embedding and hashed ones on :func:`id_data`; test accuracy of each.

    Returns:
        One :class:`Variant` per entry of ``buckets`` (``None`` = one row per
        id), in order; ``score`` is accuracy on held-out ids.
    """
    import keras
    import numpy as np

    seed_everything(seed)
    ids, labels, ids_test, labels_test = id_data(vocab, n=n, seed=seed)
    models = [id_model(vocab, b) for b in buckets]
    for m in models:
        m.build((None,))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    batches = [(ids[i : i + batch], labels[i : i + batch])
               for _ in range(epochs) for i in range(0, n, batch)]
    _train_side_by_side(models, loss, batches, 3e-2)
    result = []
    for b, m in zip(buckets, models):
        accuracy = float(np.mean(np.argmax(m(ids_test).numpy(), axis=-1) == labels_test))
        name = f"Embedding({vocab})" if b is None else f"Hashing({b})"
        result.append(Variant(name, _weight_bytes(m), accuracy))
    return result


# --- tables and command line ----------------------------------------------


def variant_table(variants: Sequence[Variant], score: str) -> str:
    """Variants as a table: name, weight bytes, bytes relative to the first, ``score`` (2 decimals).

    >>> print(variant_table([Variant("full", 4000, 0.5), Variant("half", 2000, 0.25)], "loss"))
    variant    weight bytes    vs first    loss
    ---------  --------------  ----------  ------
    full       4,000           1.000       0.50
    half       2,000           0.500       0.25
    """
    from tabulate import tabulate

    base = variants[0].weight_bytes
    rows = [(v.name, f"{v.weight_bytes:,}", f"{v.weight_bytes / base:.3f}", f"{v.score:.2f}")
            for v in variants]
    return tabulate(rows, headers=["variant", "weight bytes", "vs first", score], disable_numparse=True)


def seed_layer_table(batch: int = 64, rank: int = 512, buckets: int = 16384) -> str:
    """Bytes of the seed layer W[131072, 65536] float32 and of each smaller layer, full size.

    Pure arithmetic (:mod:`snippets.lib.communication`): nothing is allocated.
    """
    from tabulate import tabulate

    d, f = SEED_SHAPE
    w = units.tensor_bytes((d, f))
    rows = [
        ("Dense kernel W[131072, 65536]", w),
        (f"one-hot input [{batch}, {d}] (per step)", units.tensor_bytes((batch, d))),
        (f"ids input [{batch}] int32 (per step)", units.tensor_bytes((batch,), "int32")),
        ("dense gradient of W (per step)", w),
        (f"Embedding gradient: {batch} rows + ids (per step)",
         units.tensor_bytes((batch, f)) + units.tensor_bytes((batch,), "int32")),
        (f"rank-{rank} factors U[{d}, {rank}] + V[{rank}, {f}]", communication.low_rank_bytes(d, f, rank)),
        (f"hashed table [{buckets}, {f}]", units.tensor_bytes((buckets, f))),
    ]
    table = tabulate([(name, units.format_bytes(b)) for name, b in rows],
                     headers=["what", "bytes"], disable_numparse=True)
    factors = communication.low_rank_bytes(d, f, rank)
    if factors >= w:
        # (D + F) * r >= D * F once r >= D * F / (D + F): factorising then saves nothing.
        table += (f"\nnote: the rank-{rank} factors ({units.format_bytes(factors)}) are not smaller than "
                  f"W itself ({units.format_bytes(w)}); only a rank below {-(-d * f // (d + f))} saves memory")
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snippets.smaller_layers",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["sizes", "onehot", "lowrank", "hashing", "all"],
                        help="sizes: full-size bytes only (no TensorFlow); the others train at CI scale")
    parser.add_argument("--rank", type=int, default=512, help="rank for the full-size table (default 512)")
    parser.add_argument("--buckets", type=int, default=16384,
                        help="hash buckets for the full-size table (default 16384)")
    parser.add_argument("--batch", type=int, default=64, help="batch size for the full-size table (default 64)")
    parser.add_argument("--seed", type=int, default=SEED, help="random seed (default 0)")
    args = parser.parse_args(argv)
    cli.check_positive(parser, rank=args.rank, buckets=args.buckets, batch=args.batch)
    if args.rank > min(SEED_SHAPE):
        # A rank above min(D, F) is no factorisation: W[D, F] has rank at most min(D, F).
        parser.error(f"--rank {args.rank} exceeds min(D, F) = {min(SEED_SHAPE)} of W{list(SEED_SHAPE)}; "
                     f"use a rank from 1 to {min(SEED_SHAPE)}")
    print(seed_layer_table(args.batch, args.rank, args.buckets))
    if args.what == "sizes":
        return 0
    from snippets.lib import devices

    devices.configure(1, "2GiB")
    if args.what in ("onehot", "all"):
        product, lookup = onehot_vs_gather([3, 7, 3], 100, 5, args.seed)
        print(f"\none_hot(ids, 100) @ T == tf.gather(T, ids) for ids [3, 7, 3]: "
              f"{bool((product == lookup).all())}")
        for row in onehot_vs_embedding_bytes(seed=args.seed):
            print(f"{row.name:16} weights {row.weights:>9,} B  input {row.inputs:>7,} B  "
                  f"gradient {row.gradient:>9,} B ({row.gradient_type})")
        print("largest table difference after 50 SGD steps:",
              f"{onehot_vs_embedding_training(seed=args.seed):.1e}")
    if args.what in ("lowrank", "all"):
        print("\n" + variant_table(low_rank_experiment(seed=args.seed), "test MSE"))
    if args.what in ("hashing", "all"):
        print("\n" + variant_table(hashing_experiment(seed=args.seed), "test accuracy"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
