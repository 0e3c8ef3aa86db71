"""Model functions a reader might hand to ``python -m snippets.decide --model`` (tests/test_plan.py, tests/test_plan_measured.py)."""

import keras

# Builders with string inputs, kept in a module of their own, under their names here.
from tests.plan_builders_steps import distiller, distiller_not_compiled  # noqa: F401
from tests.plan_builders_losses import ctc_tagger, triplet  # noqa: F401
from tests.plan_builders_text import closed_lookup_inside, closed_lookups, text_any_length, text_classifier  # noqa: F401

def tiny():
    """A small uncompiled model: the planner needs --loss for it."""
    return keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(8)])


def slow():
    """:func:`tiny`, returned after 60 s: a run that outlives a short timeout however soon its process starts."""
    import time

    time.sleep(60)
    return tiny()


def tiny_mixed():
    """Sets a mixed policy itself, as many scripts do, and compiles with its loss."""
    keras.config.set_dtype_policy("mixed_float16")
    model = tiny()
    model.compile(loss="mse")
    return model


def unbuilt():
    """No Input and no build(): a Sequential without weights yet."""
    return keras.Sequential([keras.layers.Dense(8)])


def failing():
    raise ValueError("the reader's bug")


def needs_width(width):
    """A builder with an argument the reader must give (--model-kwargs)."""
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(width)])


def inner_typo():
    """A builder whose own code calls another function with a misspelt argument: no --model-kwargs fixes it."""
    return needs_width(widht=8)


def not_a_model():
    """Returns the model's config by mistake, not the model."""
    return tiny().get_config()


def two_heads():
    """Returns a dict of two outputs, compiled with a loss for each: class ids for one, values for the other."""
    inputs = keras.Input((16,))
    hidden = keras.layers.Dense(32, activation="relu")(inputs)
    model = keras.Model(inputs, {"cls": keras.layers.Dense(3)(hidden), "reg": keras.layers.Dense(1)(hidden)})
    model.compile(loss={"cls": keras.losses.SparseCategoricalCrossentropy(from_logits=True), "reg": "mse"})
    return model


def tiny_jit_off():
    """Compiled with jit_compile=False (positionally, as compile's eighth argument): no XLA step anywhere."""
    model = tiny()
    model.compile("adam", "mse", None, None, None, False, 1, False)
    return model


def tiny_jit_on():
    """Compiled with jit_compile=True: Keras keeps XLA under a strategy too."""
    model = tiny()
    model.compile(optimizer="adam", loss="mse", jit_compile=True)
    return model


def tiny_sgd():
    """Compiles with its own optimizer object and a loss object."""
    model = tiny()
    model.compile(optimizer=keras.optimizers.SGD(), loss=keras.losses.Huber())
    return model


def tiny_adamw():
    """Compiles with an AdamW object (keras-io's ViT recipe): its __init__ reads weight_decay back."""
    model = tiny()
    model.compile(optimizer=keras.optimizers.AdamW(1e-3, weight_decay=1e-4), loss="mse")
    return model


def two_inputs():
    """Two inputs passed as a list (an image and tabular features), class ids out."""
    image, table = keras.Input((8, 8, 3)), keras.Input((5,))
    hidden = keras.layers.Concatenate()([keras.layers.Flatten()(keras.layers.Conv2D(4, 3)(image)), table])
    model = keras.Model([image, table], keras.layers.Dense(3)(hidden))
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def dict_inputs():
    """Named inputs passed as a dict, keys out of sorted order, one of them token ids."""
    tokens, features = keras.Input((6,), dtype="int32", name="tokens"), keras.Input((4,), name="features")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 8)(tokens))
    model = keras.Model({"tokens": tokens, "features": features},
                        keras.layers.Dense(1)(keras.layers.Concatenate()([pooled, features])))
    model.compile(loss="mse")
    return model


class SmallNet(keras.Model):
    """A subclassed model: no keras.Input, its layers built when it is first called."""

    def __init__(self):
        super().__init__()
        self.embed = keras.layers.Embedding(40, 8)
        self.pool = keras.layers.GlobalAveragePooling1D()
        self.out = keras.layers.Dense(4)

    def call(self, tokens):
        return self.out(self.pool(self.embed(tokens)))


def subclassed():
    """Called once on a batch of token ids in the function, as keras-io builds subclassed models."""
    import numpy as np

    model = SmallNet()
    model(np.zeros((1, 12), dtype="int32"))
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def subclassed_unbuilt():
    """build(shape) on a subclassed model without its own build(): Keras creates no weights."""
    model = SmallNet()
    model.build((None, 12))
    return model


class Autoencoder(keras.Model):
    """Its own train_step computes its loss from x alone (keras-io's VAE takes its batch so)."""

    def __init__(self):
        super().__init__()
        self.encode = keras.layers.Dense(4, activation="relu")
        self.decode = keras.layers.Dense(16)

    def call(self, x):
        return self.decode(self.encode(x))

    def train_step(self, data):
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(self(data, training=True) - data))
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply(grads, self.trainable_weights)
        return {"loss": loss}


def _built_with_adam(model):
    """``model`` called once on 16 features (its weights made), compiled with Adam and no loss."""
    model(keras.ops.zeros((1, 16)))
    model.compile(optimizer="adam")
    return model


def own_step_x_only():
    """No loss compiled: the model's own train_step takes x alone."""
    return _built_with_adam(Autoencoder())


class ClassIds(Autoencoder):
    """Its own train_step reads y as class ids, as a sparse loss takes them (a new user's trial), and unpacks
    ``(x, y, sample_weight)`` or ``(x, y)`` as keras-io's masked language model does (helper-61): it gets two."""

    def train_step(self, data):
        import tensorflow as tf

        x, y, weights = data if len(data) == 3 else (*data, None)
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y, self(x, training=True)) *
                                  (1.0 if weights is None else weights))
        self.optimizer.apply(tape.gradient(loss, self.trainable_weights), self.trainable_weights)
        return {"loss": loss}


def own_step_class_ids():
    """No loss compiled: the model's own train_step wants class ids for y."""
    return _built_with_adam(ClassIds())


class OneDense(keras.Model):
    """A subclassed model of one ``Dense(units)``."""

    def __init__(self, units=16):
        super().__init__()
        self.dense = keras.layers.Dense(units)

    def call(self, x):
        return self.dense(x)


def own_step_class_ids_compiled():
    """The same, compiled with a loss its train_step does not use (keras-io's image captioning compiles one)."""
    model = ClassIds()
    model(keras.ops.zeros((1, 16)))
    model.compile(optimizer="adam", loss="mse")
    return model


class LogisticEndpoint(keras.layers.Layer):
    """keras-io's endpoint layer ("Making new layers and models via subclassing"): it adds the model's loss."""

    def __init__(self, name=None):
        super().__init__(name=name)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)

    def call(self, targets, logits):
        self.add_loss(self.loss_fn(targets, logits))
        return keras.ops.sigmoid(logits)


def endpoint(compiled: bool = True):
    """keras-io's endpoint model: its targets are an input, and it compiles an optimizer and no loss
    (``compiled=False``: nothing; fit still trains on the loss its layer adds)."""
    inputs, targets = keras.Input((3,), name="inputs"), keras.Input((10,), name="targets")
    model = keras.Model([inputs, targets], LogisticEndpoint(name="predictions")(targets, keras.layers.Dense(10)(inputs)))
    if compiled:
        model.compile(optimizer="adam")
    return model


class TrainingPenalty(keras.layers.Layer):
    """Adds a penalty on its input in training only (``if training: self.add_loss(...)``), as an activity
    regulariser that should not count at evaluation: the build, which leaves ``training`` unset, never adds it."""

    def call(self, x, training=None):
        if training:
            self.add_loss(1e-3 * keras.ops.mean(keras.ops.square(x)))
        return x


def adds_loss_in_training():
    """Compiles an optimizer and no loss; fit trains on the penalty its layer adds in training (helper-44's
    remark: read from the build alone, it was refused for having no loss)."""
    inputs = keras.Input((32,))
    hidden = keras.layers.BatchNormalization()(keras.layers.Dense(64, activation="relu")(inputs))
    model = keras.Model(inputs, TrainingPenalty()(keras.layers.Dense(8)(hidden)))
    model.compile(optimizer="adam")
    return model


class NoCallGAN(keras.Model):
    """keras-io's GAN as readers vary it: its networks built apart, its optimizers made in ``__init__``, Keras's own
    compile, a train_step of its own and no call(). fit trains it (a real step, Keras 3.15), though it was never built or
    called (helper-45: told "no weights yet", with a fix, model(x), that raises without call())."""

    def __init__(self):
        super().__init__()
        self.discriminator = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
        self.generator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8)])
        self.d_optimizer = keras.optimizers.Adam()

    def train_step(self, real):
        import tensorflow as tf

        noise = keras.random.normal((keras.ops.shape(real)[0], 4))
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(self.discriminator(self.generator(noise))) - keras.ops.mean(self.discriminator(real))
        weights = self.discriminator.trainable_weights
        self.d_optimizer.apply(tape.gradient(loss, weights), weights)
        return {"d_loss": loss}


def gan_without_call():
    """:class:`NoCallGAN`, compiled as its own compile would (no arguments)."""
    model = NoCallGAN()
    model.compile()
    return model


class CalledGAN(NoCallGAN):
    """:class:`NoCallGAN` with the call() its refusal asks for (the discriminator on x), called once."""

    def call(self, x):
        return self.discriminator(x)


def gan_with_call():
    """:class:`CalledGAN`, compiled with no arguments and called on a batch: its train_step applies ``d_optimizer``."""
    model = CalledGAN()
    model.compile()
    model(keras.ops.zeros((2, 8)))
    return model


class PenalisedSubclass(keras.Model):
    """A subclassed model whose :class:`TrainingPenalty` adds its loss in training only."""

    def __init__(self):
        super().__init__()
        self.hidden, self.penalty, self.out = keras.layers.Dense(64), TrainingPenalty(), keras.layers.Dense(8)

    def call(self, x, training=None):
        return self.out(self.penalty(self.hidden(x), training=training))


def subclass_adds_loss_in_training():
    """:class:`PenalisedSubclass`, called once on a batch as the planner asks, compiled with an optimizer and no loss
    (helper-47: its input was not recorded when read, so the penalty was not seen and the model was refused)."""
    model = PenalisedSubclass()
    model(keras.ops.zeros((2, 32)))
    model.compile(optimizer="adam")
    return model


def returns_another():
    """Builds and compiles a model it does not return, whose layer adds a loss, then returns another, uncompiled
    (helper-43: the first's compile was read as the second's, and --loss was dropped)."""
    endpoint()
    return tiny()


def lstm_tagger():
    """An LSTM with Keras's default arguments: on a GPU host it runs cuDNN's kernel, and Keras compiles
    no XLA step for it (whatever jit_compile says)."""
    inputs = keras.Input((12, 8))
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.LSTM(16, return_sequences=True)(inputs)))
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


class TaggerLSTM(keras.layers.LSTM):
    """A reader's own LSTM, under its own class name (still cuDNN's kernel on a GPU host)."""


def custom_lstm_tagger():
    """:func:`lstm_tagger` with the reader's LSTM subclass."""
    inputs = keras.Input((12, 8))
    model = keras.Model(inputs, keras.layers.Dense(3)(TaggerLSTM(16, return_sequences=True)(inputs)))
    model.compile(loss="mse")
    return model


def tiny_sgd_momentum():
    """SGD with Nesterov momentum and a learning-rate schedule: a momentum slot per variable."""
    model = tiny()
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=100, decay_rate=0.9)
    model.compile(optimizer=keras.optimizers.SGD(schedule, momentum=0.9, nesterov=True), loss="mse")
    return model


def augmented():
    """Augmentation inside the model: RandomRotation, which Keras never compiles (supports_jit=False)."""
    inputs = keras.Input((8, 8, 3))
    features = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3)(keras.layers.RandomRotation(0.1)(inputs)))
    model = keras.Model(inputs, keras.layers.Dense(2)(features))
    model.compile(loss="mse")
    return model


#: Traces of :class:`CountingTraces`' train_step in this process (each Python call is one trace).
TRACES = []


class CountingTraces(OneDense):
    """A Dense model whose train_step records each trace: Python runs it only while tracing."""

    def train_step(self, data):
        TRACES.append(self.optimizer.built)
        return super().train_step(data)


def counting_traces():
    import numpy as np

    model = CountingTraces(8)
    model(np.zeros((1, 16), dtype="float32"))
    model.compile(loss="mse")
    return model


def traces():
    """:data:`TRACES`, read from the kernel that measured (whether the slots were built at each trace)."""
    return list(TRACES)


def tf_keras_inside():
    """Imports tf_keras inside the function, not at the module's top: a 64 MiB tf_keras kernel."""
    import tf_keras

    return tf_keras.Sequential([tf_keras.Input((4096,)), tf_keras.layers.Dense(4096)])


def printing():
    """Prints its summary and a word while it builds, as many scripts do; an LSTM in it asks, while it
    is built, whether cuDNN can run it (TensorFlow's first device listing)."""
    model = lstm_tagger()
    model.summary()
    print("built")
    model.compile(loss="mse")
    return model


def unfinished_line():
    """Prints a word with no newline and flushes it, as a progress bar does."""
    print("building ...", end="", flush=True)
    return tiny()


def _tiny_compiled(optimizer):
    """:func:`tiny`, compiled with ``optimizer`` and MSE."""
    model = tiny()
    model.compile(optimizer=optimizer, loss="mse")
    return model


def accumulating():
    """Compiles with Adam accumulating gradients over 4 steps."""
    return _tiny_compiled(keras.optimizers.Adam(gradient_accumulation_steps=4))


def averaging():
    """Compiles with Adam keeping exponential moving averages of the weights."""
    return _tiny_compiled(keras.optimizers.Adam(use_ema=True))


def with_metrics():
    """Compiles with metrics, positional loss_weights and run_eagerly, as scripts do: options the plan leaves out."""
    model = tiny()
    model.compile("adam", "mse", None, ["mae"], run_eagerly=True, steps_per_execution=1)
    return model


def two_any_length():
    """keras-io's ticket model's text inputs, named and of any length, beside one of fixed shape."""
    title, body = keras.Input((None,), dtype="int32", name="title"), keras.Input((None,), dtype="int32", name="body")
    tags = keras.Input((12,), name="tags")
    pooled = [keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(100, 8)(t)) for t in (title, body)]
    model = keras.Model([title, body, tags], keras.layers.Dense(2)(keras.layers.concatenate([*pooled, tags])))
    model.compile(loss="mse")
    return model


def any_length():
    """Token ids of any length (``keras.Input((None,))``): the planner needs a length to run a step at."""
    inputs = keras.Input((None,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(100, 8)(inputs))
    model = keras.Model(inputs, keras.layers.Dense(2)(pooled))
    model.compile(loss="mse")
    return model


def fixed_batch():
    """``keras.Input(..., batch_size=8)``: a model that declares the batch it trains at."""
    inputs = keras.Input((32,), batch_size=8)
    model = keras.Model(inputs, keras.layers.Dense(8)(inputs))
    model.compile(optimizer="adam", loss="mse")
    return model


def unregistered_json() -> str:
    """``model.to_json()`` of SmallNet, a subclass Keras cannot rebuild from a file (not registered)."""
    return subclassed().to_json()


def per_position():
    """Dense layers on every position of a sequence: the rule counts their activations once per sample."""
    inputs = keras.Input((16, 32))
    hidden = keras.layers.Dense(64, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(hidden)))


def stateful_rnn():
    """An RNN that keeps its states between batches: Keras makes them from values, not initializers."""
    inputs = keras.Input((10, 4), batch_size=8)
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.LSTM(16, stateful=True)(inputs)))
    model.compile(optimizer="adam", loss="mse")
    return model


def bf16_layers():
    """Gives its layers dtype="mixed_bfloat16" one by one (no global policy), and compiles with Adam."""
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu", dtype="mixed_bfloat16"),
                              keras.layers.Dense(8, dtype="mixed_bfloat16")])
    model.compile(optimizer="adam", loss="mse")
    return model


#: The same builder under another name, as a module may export it.
alias_of_needs_width = needs_width


class WidthModel(keras.Model):
    """A subclassed model given as the builder itself: calling the class builds it (its width is an argument)."""

    def __init__(self, width):
        super().__init__()
        self.dense = keras.layers.Dense(width)

    def call(self, x):
        return self.dense(x)


class ScaledDense(keras.layers.Layer):
    """A custom layer with a weight of its own and a Dense inside, as keras-io writes blocks."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(units, dtype=kwargs.get("dtype"))

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(), initializer="ones")
        self.inner.build(input_shape)

    def call(self, x):
        return self.inner(x) * keras.ops.cast(self.scale, self.compute_dtype)


def custom_bf16_block():
    """One custom layer with dtype="mixed_bfloat16": its own weight and its Dense's, two layers with weights."""
    model = keras.Sequential([keras.Input((32,)), ScaledDense(8, dtype="mixed_bfloat16")])
    model.compile(optimizer="adam", loss="mse")
    return model


def tiny_float32():
    """Sets float32 itself, whatever policy it is run under (helper-44: read as --policy's)."""
    keras.config.set_dtype_policy("float32")
    model = tiny()
    model.compile(loss="mse")
    return model


def float32_head():
    """Keras's mixed-precision guide's pattern without its global policy: the output layer kept in float32."""
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(8, dtype="float32")])
    model.compile(optimizer="adam", loss="mse")
    return model


def contrastive():
    """A SimCLR-style head trained by a loss over the pairs within the batch: its B x B logits grow with the
    square of the batch (helper-34's trial)."""
    from keras import ops

    def in_batch(y_true, y_pred):
        z = y_pred / (ops.norm(y_pred, axis=-1, keepdims=True) + 1e-6)
        logits = ops.matmul(z, ops.transpose(z)) / 0.1
        return keras.losses.sparse_categorical_crossentropy(ops.arange(ops.shape(z)[0]), logits, from_logits=True)

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(32)])
    model.compile(optimizer="adam", loss=in_batch)
    return model


def volume():
    """A 3-D CNN with MaxPool3D, which TensorFlow's CPU build has no float16 kernel for (helper-34's video model)."""
    return keras.Sequential([keras.Input((8, 8, 8, 1)), keras.layers.Conv3D(4, 3, padding="same"),
                             keras.layers.MaxPooling3D(2), keras.layers.Flatten(), keras.layers.Dense(2)])


def volume_mixed():
    """:func:`volume` under a mixed_float16 policy the function sets itself."""
    keras.config.set_dtype_policy("mixed_float16")
    return volume()


def clipped():
    """Compiles with Adam clipping the gradients' global norm."""
    return _tiny_compiled(keras.optimizers.Adam(global_clipnorm=1.0))


def loss_scaled():
    """Compiles with a LossScaleOptimizer around an accumulating, clipping Adam, as a mixed_float16 script can."""
    inner = keras.optimizers.Adam(global_clipnorm=1.0, gradient_accumulation_steps=2)
    return _tiny_compiled(keras.optimizers.LossScaleOptimizer(inner))


class HostCall(keras.layers.Layer):
    """Runs a Python function on the host (``tf.py_function``), which XLA cannot compile."""

    def call(self, x):
        import tensorflow as tf

        out = tf.py_function(lambda t: t * 2.0, [x], x.dtype)
        out.set_shape(x.shape)
        return out


def not_xla_compilable():
    """A Dense model with :class:`HostCall` in it, compiled with MSE (helper-51: a graph network XLA could not compile)."""
    model = keras.Sequential([keras.Input((16,)), HostCall(), keras.layers.Dense(4)])
    model.compile(optimizer="adam", loss="mse")
    return model
