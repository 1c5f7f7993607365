"""A compiled step's Python results that nothing checks: a replay would return them again
unchanged (``len(a_list)`` returned by the step), so the step is refused (compile/guards.py's
walk says what is checked at each call)."""

from __future__ import annotations

import numpy as np

from ..errors import CompileError
from .guard_values import _add, _number, _show, canon


def _justified(walk, values, pyvals) -> set:
    """The plain values a result may hold without being stale: the code's constants, the
    values the guards check (and their parts), the Python values of the arguments and every
    dimension of the step's arrays (fixed for a program)."""
    ok = set(walk.consts)
    ok.add(canon(None))
    for g in walk.guards:
        if g.state[0] == "v":
            _add(ok, g.keep)
    for v in pyvals:
        _add(ok, v)
    for v in values:
        shape = tuple(int(d) for d in getattr(v, "shape", ()))
        _add(ok, shape)
        _add(ok, int(getattr(v, "size", 0)))
        _add(ok, int(getattr(v, "ndim", 0)))
    return ok


#: at most this many checked numbers (arguments' and guarded values) are combined
_COMBINED = 32


def _floats(v, out, depth=0):
    if isinstance(v, (bool, np.bool_)):
        return
    if isinstance(v, (int, float, np.integer, np.floating)):
        try:
            out.append(float(v))
        except OverflowError:  # NOTE: an int past a float's range: no float equals it
            pass
    elif isinstance(v, (tuple, list, dict)) and depth < 2:
        for x in (v.values() if isinstance(v, dict) else v):
            _floats(x, out, depth + 1)


def _combined(walk, pyvals) -> set:
    """The floats one arithmetic operation makes of a checked number (an argument's, a
    guarded value's) and another or a constant (``epoch / n_epochs``, ``lr * 0.5``): a float
    result equal to one is computed from what a call checks. Floats only: a count such as
    ``len(history)`` could equal a small sum by chance."""
    checked: list = []
    for v in pyvals:
        _floats(v, checked)
    for g in walk.guards:
        if g.state[0] == "v":
            _floats(g.keep, checked)
    checked = list(dict.fromkeys(checked))[:_COMBINED]
    consts = [float(c[1]) for c in walk.consts if c[0] in (int, float)][:4 * _COMBINED]
    out: set = set()
    others = checked + consts
    for a in checked:
        for b in others:
            for x, y in ((a, b), (b, a)):
                for r in (x + y, x - y, x * y, x / y if y else None):
                    if r is not None:
                        out.add(("number", repr(r)))
    return out


def stale_results(out_tree, walk, values, pyvals):
    """The first Python value in a step's results (or its dicts' keys) that nothing checks
    at each call, as (where, value); None when there is none."""
    ok = _justified(walk, values, pyvals)
    combined = None

    def unchecked(v):
        nonlocal combined
        c = canon(v)
        if c is None or c in ok or _number(v) in ok:
            return False
        if isinstance(v, (float, np.floating)):
            if combined is None:
                combined = _combined(walk, pyvals)
            return _number(v) not in combined
        return True

    def visit(tree, where):
        kind, body = tree
        if kind == "value":
            return (where, body) if unchecked(body) else None
        if kind in ("tensor", "array"):
            return None
        if kind == "dict":
            for k, x in body:
                if (c := canon(k)) is not None and c not in ok and c not in walk.keys:
                    return f"{where}, a key", k
                if (r := visit(x, f"{where}[{k!r}]")) is not None:
                    return r
            return None
        for i, x in enumerate(body):
            if (r := visit(x, f"{where}[{i}]")) is not None:
                return r
        return None

    return visit(out_tree, "in the result")


def refuse_stale(found, fn_name):
    where, value = found
    raise CompileError(
        f"lk.compile: {fn_name} returns the Python {type(value).__name__} {_show(value)} "
        f"({where}), which a replay would return again unchanged: nothing the step reads "
        "that is checked at each call (its arguments, the globals, closure and attributes "
        "its code names, its constants, the shapes of its arrays) gives it. Return a "
        "tensor computed by labkit ops, pass the value in as an argument, or compute it "
        "after the call")
