"""The seed: the layer from the report this site answers, defined once.

A Keras ``Dense(65536)`` on a 131072-wide input: its kernel ``W[131072, 65536]``
float32 is 2**35 B = 32 GiB, more than a V100-SXM2-32GB's allocator gets.

>>> SEED_SHAPE, units.tensor_bytes(SEED_SHAPE) == 2**35
((131072, 65536), True)
"""

from __future__ import annotations

from dataclasses import dataclass

from snippets.lib import private, units


#: The seed layer: input width and units of the Dense layer, dtype of its variables.
SEED_INPUT_DIM = 131072
SEED_UNITS = 65536


@dataclass(frozen=True)
class VariableSpec:
    """A model variable's path, shape, dtype, initializer and trainable flag, read without allocating it.

    ``initializer`` is the Keras initializer's class name (e.g.
    ``"GlorotUniform"``), or ``"NoneType"`` for a variable created from a value.
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    initializer: str = "GlorotUniform"
    trainable: bool = True

    @property
    def nbytes(self) -> int:
        return units.tensor_bytes(self.shape, self.dtype)


def seed_model(input_dim: int = SEED_INPUT_DIM, units: int = SEED_UNITS, dtype=None):
    """The seed model, uncompiled: ``Input((input_dim,))`` then ``Dense(units)``.

    Its kernel has shape ``[input_dim, units]``; with the defaults,
    ``[131072, 65536]`` float32 = 34359738368 B.
    """
    import keras

    return keras.Sequential([keras.Input((input_dim,)), keras.layers.Dense(units, dtype=dtype)])


def build_seed_model(input_dim: int = SEED_INPUT_DIM, units: int = SEED_UNITS, dtype=None):
    """:func:`seed_model` compiled with RMSprop and mean squared error, as in the report.

    Call it inside a strategy's ``scope()`` to create the variables under
    that strategy.
    """
    model = seed_model(input_dim, units, dtype)
    model.compile(optimizer="rmsprop", loss="mean_squared_error")
    return model


def variable_specs(build_model, *args, **kwargs) -> list[VariableSpec]:
    """Shapes and dtypes of the variables ``build_model(*args, **kwargs)`` creates, allocating none
    (:func:`shapes_only_model`)."""
    return specs_of(shapes_only_model(build_model, *args, **kwargs))


def specs_of(model) -> list[VariableSpec]:
    """Path, shape, dtype, initializer and trainability of each of ``model.weights``."""
    return [
        VariableSpec(
            v.path,
            tuple(int(d) for d in v.shape),
            str(v.dtype),
            type(getattr(v, "_initializer", None)).__name__,  # Keras keeps no public handle
            bool(v.trainable),
        )
        for v in model.weights
    ]


def shapes_only_model(build_model, *args, **kwargs):
    """What ``build_model(*args, **kwargs)`` returns, built with no variable allocated: enough for its
    weights' shapes and for ``model.to_json()``, never for a step.

    Builds the model under ``keras.StatelessScope(initialize_variables=False)``,
    in which Keras 3 records each variable's shape and dtype but runs no
    initializer (Keras API page "StatelessScope"), and whose variables are
    never initialised later (:func:`snippets.lib.private.shapes_only`). The seed model builds this
    way in about 0.01 s. A ``model.compile(...)`` inside ``build_model`` is skipped (it would
    create metric variables, which the scope refuses), and so is the body of an optimizer it
    constructs (its variables have values, which the scope refuses too).
    """
    import inspect
    from unittest import mock

    import keras

    # A reader's function often compiles its model; compile makes metric variables, which a
    # StatelessScope refuses. Shapes do not depend on compile, so it is skipped here. So is the
    # body of an optimizer the function constructs for compile (keras.optimizers.Adam(1e-3)): its
    # iteration counter and learning rate are variables with values, which the scope refuses too.
    base = next(c for c in keras.optimizers.Optimizer.__mro__ if c.__name__ == "BaseOptimizer")
    signature = inspect.signature(base.__init__)

    def unbuilt_optimizer(self, *args, **kwargs):
        object.__setattr__(self, "_lock", False)  # what the real __init__ sets first (its attribute checks)
        # Its plain arguments as attributes, as the real __init__ keeps them: a subclass's own __init__
        # reads some after calling it (AdamW checks self.weight_decay). The learning rate is a
        # property over a variable, which the scope refuses: left unset.
        given = signature.bind_partial(self, *args, **kwargs)
        given.apply_defaults()
        for key, value in given.arguments.items():
            if key not in ("self", "kwargs", "name") and not isinstance(getattr(type(self), key, None), property):
                setattr(self, key, value)
        self.name = given.arguments.get("name") or type(self).__name__.lower()

    # private.shapes_only: the variables stay without values even when later Keras code in this
    # process closes a StatelessScope (which would initialise them: the seed's 32 GiB kernel).
    with private.shapes_only(), \
            mock.patch.object(keras.Model, "compile", lambda self, *a, **k: None), \
            mock.patch.object(base, "__init__", unbuilt_optimizer):
        return build_model(*args, **kwargs)


#: The seed kernel.
SEED_SHAPE = (131072, 65536)
