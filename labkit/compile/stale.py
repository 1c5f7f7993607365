"""A compiled step's Python results that nothing checks: a replay would return them again
unchanged (``len(a_list)`` returned by the step), so the step is refused (compile/guards.py's
walk says what is checked at each call)."""

from __future__ import annotations

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


def stale_results(out_tree, walk, values, pyvals):
    """The first Python value in a step's results (or its dicts' keys) that nothing checks
    at each call, as (where, value); None when there is none."""
    ok = _justified(walk, values, pyvals)

    def visit(tree, where):
        kind, body = tree
        if kind == "value":
            c = canon(body)
            return (where, body) if c is not None and c not in ok and (
                _number(body) not in ok) else None
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
