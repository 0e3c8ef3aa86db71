"""A model saved as ``model.to_json()``, rebuilt in a process that did not define it, or one line naming what it lacks.

The notebook hands its function's model to the planner's fresh processes as ``model.to_json()``, and ``--model-json``
reads such a file. A fresh process knows Keras's own classes and those registered in it: a class the reader wrote (a
layer, a regularizer, an initializer, a constraint) was defined, and perhaps registered, in another process, and Keras
imports no module but its own to find one (``_retrieve_class_or_fn`` in keras/src/saving/serialization_lib.py, Keras
3.15). What then fails depends on the name: an unknown one is "Could not locate class", and one Keras has a class of
its own by, such as keras-io PointNet's ``OrthogonalRegularizer``, rebuilds Keras's class with the reader's config and
fails in its ``__init__`` (helper-91).
"""

from __future__ import annotations

import json

from snippets.lib.errors import ModelError, unregistered


#: Packages whose classes Keras imports itself to rebuild a config (``_retrieve_class_or_fn``, Keras 3.15).
KERAS_PACKAGES = frozenset({"keras", "keras_hub", "keras_cv", "keras_nlp"})


def own_classes(text: str) -> list[str]:
    """Each object of the reader's own that the saved config ``text`` names, as ``Name (module)``, in the order found:
    one with a ``registered_name`` (Keras writes it for a class outside its own) from a module outside
    :data:`KERAS_PACKAGES`.

    >>> own_classes('{"class_name": "Sequential", "module": "keras", "registered_name": null, "config": {"layers": '
    ...             '[{"class_name": "Orthogonal", "module": "pointnet", "registered_name": "Orthogonal"}, {"class_name": '
    ...             '"Backbone", "module": "keras_hub.src.models", "registered_name": "keras_hub>Backbone"}]}}')
    ['Orthogonal (pointnet)']
    """
    found: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            module = node.get("module") or "__main__"
            if node.get("registered_name") and module.split(".")[0] not in KERAS_PACKAGES:
                name = f"{node.get('class_name')} ({module})"
                found.extend([name] if name not in found else [])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(text))
    return found


def named(error: BaseException, text: str) -> list[str]:
    """What ``error``, raised rebuilding the saved config ``text``, could not find: Keras's own words for it
    (:func:`snippets.lib.errors.unregistered`), else the config's classes of the reader's own (:func:`own_classes`,
    where Keras rebuilt a class of its own by that name); empty where it names neither."""
    return [f"{kind} {name!r}" for kind, name in filter(None, [unregistered(error)])] or own_classes(text)


def rebuild_line(error: BaseException, text: str) -> str:
    """The one line for ``error``, raised rebuilding the saved config ``text``, where it names a class of the reader's
    own (:func:`named`); "" otherwise."""
    if not (found := named(error, text)):
        return ""
    return (f"the saved model names {', '.join(found)}, of your own, which a fresh process cannot rebuild from "
            "model.to_json(): Keras finds only its own classes and those registered in that process. Give the function "
            "that builds the model, in a module, as module:function (--model, or ModelStep's model)")


def rebuild(text: str):
    """``keras.models.model_from_json(text)``.

    Raises:
        ModelError: it names a class of the reader's own and could not be rebuilt (:func:`rebuild_line`).
    """
    import keras

    try:
        return keras.models.model_from_json(text)
    except Exception as error:  # noqa: BLE001 (Keras wraps a reader's class's own error: any type)
        if line := rebuild_line(error, text):
            raise ModelError(line) from None
        raise
