"""Python's and NumPy's random generators a compiled step reads (``random.random``,
``np.random.rand``, a ``np.random.Generator``): their draws are made once, when the step is
traced, so a step that draws from one outside ``lk.compile.host`` is refused
(compile/guards.py finds them, compile/trace.py compares their states)."""

from __future__ import annotations

import numpy as np

from ..errors import CompileError


def rng_of(v):
    """The Python or NumPy random generator ``v`` is, or is a method of (``random.random``,
    ``np.random.rand``: of the module's hidden one), else None."""
    import random

    kinds = (random.Random, np.random.RandomState, np.random.Generator)
    if isinstance(v, kinds):
        return v
    try:
        s = getattr(v, "__self__", None)
    except Exception:  # noqa: BLE001 - an object whose __getattr__ raises
        return None
    return s if isinstance(s, kinds) else None


def rng_state(r):
    """A comparable state of a generator ``rng_of`` gives."""
    import random

    if isinstance(r, random.Random):
        return r.getstate()
    if isinstance(r, np.random.RandomState):
        s = r.get_state()
        return (s[1].tobytes(), *s[2:])
    return repr(r.bit_generator.state)


def refuse_draw(label, fn_name):
    raise CompileError(
        f"lk.compile: {fn_name} draws random numbers from {label} outside lk.compile.host: "
        "they are drawn once, when the step is traced, and a replay would reuse them (a "
        "branch taken at random would always go the same way). Draw them inside "
        "lk.compile.host(fn, ...), which a replay calls again, use labkit's random "
        "numbers (F.dropout, an lk.Generator), or pass them in as arguments")
