"""Builders of tests/plan_builders.py whose class computes its own loss with a compile of its own (re-exported there
under their names): keras-io's Keras 3 knowledge distillation, as it is written there."""

import keras


class Distiller(keras.Model):
    """keras-io's ``Distiller`` (examples/vision/knowledge_distillation.py, Keras 3): its own compile, which takes the
    student's and the distillation's losses, and its own compute_loss, which runs the teacher on x."""

    def __init__(self, student, teacher):
        super().__init__()
        self.teacher = teacher
        self.student = student

    def compile(self, optimizer, metrics, student_loss_fn, distillation_loss_fn, alpha=0.1, temperature=3):
        super().compile(optimizer=optimizer, metrics=metrics)
        self.student_loss_fn = student_loss_fn
        self.distillation_loss_fn = distillation_loss_fn
        self.alpha = alpha
        self.temperature = temperature

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, allow_empty=False):
        teacher_pred = self.teacher(x, training=False)
        student_loss = self.student_loss_fn(y, y_pred)
        distillation_loss = self.distillation_loss_fn(
            keras.ops.softmax(teacher_pred / self.temperature, axis=1),
            keras.ops.softmax(y_pred / self.temperature, axis=1),
        ) * (self.temperature**2)
        return self.alpha * student_loss + (1 - self.alpha) * distillation_loss

    def call(self, x):
        return self.student(x)


def _classifier(units):
    return keras.Sequential([keras.Input((16,)), keras.layers.Dense(units, activation="relu"), keras.layers.Dense(4)])


def distiller():
    """A teacher of 256 units distilled into a student of 8, compiled as keras-io compiles its distiller (helper-48:
    refused for its compile, with the advice to plan its parts apart, which leaves the teacher's forward pass out)."""
    model = Distiller(student=_classifier(8), teacher=_classifier(256))
    model.compile(optimizer=keras.optimizers.Adam(), metrics=[keras.metrics.SparseCategoricalAccuracy()],
                  student_loss_fn=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  distillation_loss_fn=keras.losses.KLDivergence(), alpha=0.1, temperature=10)
    model(keras.ops.zeros((1, 16)))
    return model


def distiller_not_compiled():
    """The same, its own compile never called: what its compute_loss reads (``student_loss_fn``) was never set."""
    model = Distiller(student=_classifier(8), teacher=_classifier(256))
    model(keras.ops.zeros((1, 16)))
    return model


class _Denoiser(keras.Model):
    """A denoiser trained as keras-io's DDIM is often copied: its train_step takes images alone and draws its noise
    with unseeded ``keras.random`` calls (Keras's global SeedGenerator), not a SeedGenerator of its own, at the batch's
    size, or at ``noise_batch`` (keras-io's module-level ``batch_size``)."""

    def __init__(self, noise_batch=None):
        super().__init__()
        self.noise_batch = noise_batch
        self.net = keras.Sequential([keras.layers.Conv2D(8, 3, padding="same"), keras.layers.Conv2D(3, 3, padding="same")])

    def call(self, images, training=False):
        return self.net(images, training=training)

    def train_step(self, images):
        import tensorflow as tf

        shape = keras.ops.shape(images)
        noises = keras.random.normal(shape=(self.noise_batch or shape[0], *shape[1:]))
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.abs(self.net(images + noises, training=True) - noises))
        gradients = tape.gradient(loss, self.net.trainable_weights)
        self.optimizer.apply_gradients(zip(gradients, self.net.trainable_weights))
        return {"loss": loss}


def unseeded_denoiser():
    """:class:`_Denoiser` on 16 x 16 RGB images, compiled with Adam and MAE (helper-87: refused, its x-alone run failing
    on "seed must have shape [2], not [0]", where a fresh process trained it)."""
    model = _Denoiser()
    model.compile(optimizer="adam", loss="mae")
    model(keras.ops.zeros((2, 16, 16, 3)))
    return model


def fixed_noise_denoiser():
    """The same, its noise drawn at 64 samples whatever the batch, as keras-io's DDIM draws it at its ``batch_size``
    (helper-87: refused at 16 with TensorFlow's "Dimensions must be equal" and nothing on the cause)."""
    model = _Denoiser(noise_batch=64)
    model.compile(optimizer="adam", loss="mae")
    model(keras.ops.zeros((2, 16, 16, 3)))
    return model
