"""keras-io's DCGAN as it is written there (examples/generative/dcgan_overriding_train_step.py, Keras 3), small: its own
``compile`` takes a discriminator's and a generator's optimizer, and its own ``train_step`` applies those two, never the
optimizer ``compile`` gave ``fit`` (helper-98: an accumulation remedy set on that one was offered)."""

import keras
import tensorflow as tf


class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn
        self.d_loss_metric = keras.metrics.Mean(name="d_loss")
        self.g_loss_metric = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_metric, self.g_loss_metric]

    def call(self, x):  # not keras-io's: the planner reads the weights through a call (its refusal asks for one)
        return self.discriminator(x)

    def train_step(self, real_images):
        batch_size = tf.shape(real_images)[0]
        latent = keras.random.normal(shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        combined = tf.concat([self.generator(latent), real_images], axis=0)
        labels = tf.concat([tf.ones((batch_size, 1)), tf.zeros((batch_size, 1))], axis=0)
        with tf.GradientTape() as tape:
            d_loss = self.loss_fn(labels, self.discriminator(combined))
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        latent = keras.random.normal(shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        with tf.GradientTape() as tape:
            g_loss = self.loss_fn(tf.zeros((batch_size, 1)), self.discriminator(self.generator(latent)))
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        self.d_loss_metric.update_state(d_loss)
        self.g_loss_metric.update_state(g_loss)
        return {"d_loss": self.d_loss_metric.result(), "g_loss": self.g_loss_metric.result()}


def gan():
    """On 32 x 32 x 1 images, a latent of 16: a strided Conv2D discriminator, a Dense and Conv2DTranspose generator;
    compiled as keras-io compiles it (two Adams), then called once (after compile, whose metrics come first)."""
    latent = 16
    discriminator = keras.Sequential([keras.Input((32, 32, 1)), keras.layers.Conv2D(64, 3, strides=2, padding="same"),
                                      keras.layers.LeakyReLU(0.2), keras.layers.Flatten(), keras.layers.Dense(1)])
    generator = keras.Sequential([keras.Input((latent,)), keras.layers.Dense(16 * 16 * 64), keras.layers.Reshape((16, 16, 64)),
                                  keras.layers.Conv2DTranspose(64, 4, strides=2, padding="same"),
                                  keras.layers.LeakyReLU(0.2), keras.layers.Conv2D(1, 3, padding="same", activation="sigmoid")])
    model = GAN(discriminator, generator, latent)
    model.compile(d_optimizer=keras.optimizers.Adam(1e-4), g_optimizer=keras.optimizers.Adam(1e-4),
                  loss_fn=keras.losses.BinaryCrossentropy(from_logits=True))
    model(keras.ops.zeros((1, 32, 32, 1)))
    return model
