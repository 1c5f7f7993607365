"""The class attributes a compiled step's guards read through ``__get__`` (guards.py)."""

from __future__ import annotations

import types


def class_attr(cls, name):
    """``name`` in the ``__dict__`` of ``cls`` or a class it derives from (not its ``__get__``'s
    value, which ``getattr`` gives), or None."""
    return next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)


def is_descriptor(f) -> bool:
    """Whether the class attribute ``f`` is a descriptor of a class written in Python outside
    labkit (a function, a property and a slot are dealt with before)."""
    t = type(f)
    return (f is not None and hasattr(t, "__get__")
            and not isinstance(f, (type, staticmethod, classmethod, property,
                                   types.FunctionType))
            and str(t.__module__).split(".")[0] not in ("labkit", "builtins", "functools"))
