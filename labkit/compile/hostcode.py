"""What code a compiled step runs through ``lk.compile.host``: a replay runs it again, so
what it changes (a log it appends to, a counter a logger object keeps) changes at every call,
as in an eager one, and is not guarded (compile/guards.py)."""

from __future__ import annotations

import dis
import functools
import types


def host_codes_of(fn, objects) -> tuple:
    """The code ``lk.compile.host(fn, ...)`` runs: a function's, a bound method's, a callable
    object's ``__call__`` (the object, or the method's, put in ``objects`` by id)."""
    if isinstance(fn, functools.partial):
        return host_codes_of(fn.func, objects)
    if isinstance(fn, types.MethodType):
        objects[id(fn.__self__)] = fn.__self__
        return host_codes_of(fn.__func__, objects)
    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType):
        return (code,)
    call = next((k.__dict__["__call__"] for k in type(fn).__mro__ if "__call__" in k.__dict__),
                None)
    if isinstance(call, types.FunctionType) and not isinstance(fn, type):
        objects[id(fn)] = fn
        return (call.__code__,)
    return ()


def drop_host_only(walk, host_codes, host_objects=None) -> None:
    """Unguard the globals and closure values that only code run through ``host`` uses: a
    replay runs that code again (``lk.compile.host(lambda a: seen.append(a.sum()), x,
    effect=True)``), so what it changes is changed at every call, as in an eager one; and the
    attributes of an object called as a host function (a logger appending to ``self.rows``)."""
    if host_objects:
        walk.guards = [g for g in walk.guards
                       if not (g.kind == "a" and id(g.holder) in host_objects)]
    if not host_codes:
        return
    inside = set().union(*(_read_names(c, set()) for c in host_codes))
    outside = set().union(*(_read_names(c, host_codes) for c in walk.codes))
    only = inside - outside
    walk.guards = [g for g in walk.guards
                   if not (g.user and g.kind in ("g", "c") and g.name in only)]


#: instructions that read or write a global or closure variable by name (not LOAD_CLOSURE,
#: which only hands a cell to a nested function)
_BY_NAME = {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF", "STORE_GLOBAL",
            "STORE_DEREF", "DELETE_GLOBAL", "DELETE_DEREF"}


def _read_names(code, skip) -> set:
    """The global and closure names ``code`` and the code nested in it (but not in ``skip``)
    use."""
    if code in skip:
        return set()
    out = {i.argval for i in dis.get_instructions(code) if i.opname in _BY_NAME}
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _read_names(c, skip)
    return out
