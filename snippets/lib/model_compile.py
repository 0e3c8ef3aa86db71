"""How the planner compiles the reader's model again, with the step's optimizer, loss and XLA mode: the model's own
``compile`` where it takes them, else ``keras.Model.compile``, keeping what the function's call of its own set."""

from __future__ import annotations

from collections.abc import Callable

from snippets.lib.errors import ModelError, error_line


def own_compile(model) -> str | None:
    """The signature of ``model``'s own ``compile`` where it cannot take one optimizer and a loss (keras-io's GAN takes
    two optimizers and a loss_fn, its Keras 3 distiller the student's and the distillation's losses), as
    ``"(optimizer, metrics, ...)"``; None where it can (Keras's own, or one that passes them on)."""
    import inspect

    signature = inspect.signature(type(model).compile)
    try:
        signature.bind(model, optimizer=None, loss=None, jit_compile=False)
    except TypeError:
        return str(signature).replace("(self, ", "(")
    return None


def compile_of(model, name: str, called: bool) -> Callable:
    """How the planner compiles ``model`` again with the step's optimizer, loss and XLA mode: ``model.compile``, or,
    where its own compile cannot take them (:func:`own_compile`) and the function called it (``called``),
    ``keras.Model.compile`` on the model, so that what its own compile set (a distiller's loss functions, a GAN's
    optimizers) stays for its ``train_step`` or ``compute_loss`` (helper-48: keras-io's distiller was refused, with
    the advice to plan the student and the teacher apart, which leaves the teacher's forward pass out).

    Raises:
        ModelError: its own compile cannot take them and the function did not call it, so what its step reads
            (``self.loss_fn``) was never set.
    """
    import functools

    import keras

    signature = own_compile(model)
    if signature is None:
        return model.compile
    if not called:
        raise ModelError(f"{name}'s model has its own compile{signature}, which the function does not call: call it "
                         "there as you do before fit, so that what its step reads is set; the planner keeps that and "
                         "compiles the model again with keras.Model.compile")
    return functools.partial(keras.Model.compile, model)


def compile_again(model, name: str, optimizer, loss, jit: bool | str) -> None:
    """Compile ``model`` with ``optimizer``, ``loss`` and ``jit_compile=jit`` as :func:`compile_of` says; where its own
    compile takes them but fails when called a second time, with ``keras.Model.compile``, what the function's call of it
    set kept (helper-49: keras-io's DDIM makes its metric trackers after ``super().compile()``, which a built model
    refuses: "You cannot add new elements of state").

    Raises:
        ModelError: as :func:`compile_of`; or compiling failed otherwise (one line, naming ``name``).
    """
    import keras

    try:
        compile_of(model, name, model.compiled)(optimizer=optimizer, loss=loss, jit_compile=jit)
    except ModelError:
        raise
    except Exception as error:  # noqa: BLE001 (the reader's own compile can raise anything)
        if own_compile(model) is not None or not model.compiled or type(model).compile is keras.Model.compile:
            raise ModelError(f"compiling {name}'s model again failed: {type(error).__name__}: {error_line(error)}") from None
        keras.Model.compile(model, optimizer=optimizer, loss=loss, jit_compile=jit)
