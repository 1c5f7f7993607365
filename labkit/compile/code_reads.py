"""What a step's code reads, from its code objects: the names it uses (globals and
attributes), the globals alone, the identifier-like strings and subscript keys it loads, and
its constants (compile/guards.py guards the values behind them)."""

from __future__ import annotations

import dis
import functools
import types

from .guard_values import _SMALL, _add


def _names(code, out=None) -> set:
    """The global and attribute names a code object and the code nested in it use."""
    out = set() if out is None else out
    out.update(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _names(c, out)
    return out


#: the instructions that name a global (an attribute's name is in co_names too: a step reading
#: ``x.T`` guarded a global ``T`` of its module, and traced again at every change of it)
_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"})


@functools.lru_cache(maxsize=4096)
def _globals_read(code) -> frozenset:
    """The global names a code object and the code nested in it load (or store)."""
    out = {x.argval for x in dis.get_instructions(code) if x.opname in _GLOBAL_OPS}
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _globals_read(c)
    return frozenset(out)


@functools.lru_cache(maxsize=4096)
def _imports(code) -> frozenset:
    """The (level, name) of the modules a code object and the code nested in it import
    (``import cfg``, ``from cfg import SCALE``: the step then reads that module's
    attributes; level > 0 for a relative import)."""
    out = set()
    ins = list(dis.get_instructions(code))
    for i, x in enumerate(ins):
        if x.opname == "IMPORT_NAME":
            level = ins[i - 2].argval if i >= 2 and ins[i - 2].opname == "LOAD_CONST" else 0
            out.add((level if isinstance(level, int) else 0, x.argval))
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _imports(c)
    return frozenset(out)


def imported(level, name, g):
    """The module ``import`` (at ``level``) of ``name`` in globals ``g`` gives, when it is
    loaded already (else None: the step imports it when it runs)."""
    import importlib.util
    import sys

    try:
        full = (importlib.util.resolve_name("." * level + name, g.get("__package__") or "")
                if level else name)
    except (ImportError, ValueError):
        return None
    m = sys.modules.get(full)
    return m if isinstance(m, types.ModuleType) else None


def _strings(v, out, depth=0, keys=False) -> None:
    """The identifier-like strings of a value (and of the tuples, lists, sets and dicts in
    it): names code may read attributes by. With ``keys``, every string (a dict's keys need
    not be names)."""
    if isinstance(v, str):
        if keys or v.isidentifier():
            out.add(v)
    elif isinstance(v, (tuple, list, frozenset, set)) and depth < 3 and len(v) <= _SMALL:
        for c in v:
            _strings(c, out, depth + 1, keys)
    elif isinstance(v, dict) and depth < 3 and len(v) <= _SMALL:
        for k, c in v.items():
            _strings(k, out, depth + 1, keys)
            _strings(c, out, depth + 1, keys)


#: the methods whose constant argument is a key (``d.get(3)``)
_GETS = frozenset({"get", "__getitem__", "pop"})
#: plain loads: the one value between a single-entry dict display's key and BUILD_MAP
_LOADS = frozenset({"LOAD_FAST", "LOAD_CONST", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_NAME"})


def _returned_keys(ins, i) -> bool:
    """Whether instruction ``i`` loads the keys of a dict display the code returns at once
    (``return {"loss": loss, "step": n}``; one of a single entry of a plain load): a result's
    keys. Any other dict's keys may be names (``for a, d in {"scale": 1.0}.items():
    getattr(cfg, a, d)``)."""
    def at(k):
        return ins[k].opname if k < len(ins) else ""
    if at(i + 1) == "BUILD_CONST_KEY_MAP":
        return at(i + 2) == "RETURN_VALUE"
    return (isinstance(ins[i].argval, str) and at(i + 1) in _LOADS
            and at(i + 2) == "BUILD_MAP" and ins[i + 2].arg == 1
            and at(i + 3) == "RETURN_VALUE")


@functools.lru_cache(maxsize=4096)
def _code_strings(code) -> tuple:
    """(names, keys) of the code and the code nested in it. Names: the identifier-like
    strings it loads (``getattr(cfg, "scale")``, ``for k in ("a", "b"): getattr(c, k)``),
    not the keys of a dict it returns at once (a result's ``{"loss": ..., "step": ...}``: a
    logger's ``step`` counter guarded by it traced the step at every call). Keys, at which
    a large container is checked: the same strings (``BIG["w"]``, ``hp("w")``), and the ints
    it uses as a subscript's key (``BIG[5]``, ``d.get(3)``; not every int, a reshape's -1 is
    none)."""
    names: set = set()
    keys: set = set()
    ins = list(dis.get_instructions(code))
    for i, x in enumerate(ins):
        if x.opname != "LOAD_CONST" or isinstance(x.argval, types.CodeType):
            continue
        after = ins[i + 1].opname if i + 1 < len(ins) else ""
        if type(x.argval) is int:
            before = ins[i - 1] if i else None
            if after == "BINARY_SUBSCR" or (
                    before is not None and before.opname in ("LOAD_METHOD", "LOAD_ATTR")
                    and before.argval in _GETS):
                keys.add(x.argval)
        elif not _returned_keys(ins, i):
            _strings(x.argval, names)
            _strings(x.argval, keys, keys=True)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            n, k = _code_strings(c)
            names |= n
            keys |= k
    return frozenset(names), frozenset(keys)


def _consts(code, out) -> None:
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _consts(c, out)
        else:
            _add(out, c)
