"""An optimizer's hyper-parameters in its state: the values changed during the run (an
extension's or a cell's ``opt.lr = ...``), so that a resumed run trains with them.

A state holds ``{"rule_i.name": {"rule", "value", "built"}}`` for each hyper-parameter whose
value (a number) is not the one its rule was built with. A loaded value is set where this
optimizer has the same rule at that place, built with the same value (``describe``); anything
else is left as it is: a fork whose config builds its optimizer otherwise (another ``lr``,
another schedule, another chain of rules) keeps its own. A schedule set during the run is code
and is not saved: set it again after loading.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..checkpoint import shown_key


def quoted(key) -> str:
    """A key from a file in quotes (``shown_key``: escaped, cut, or named with its type)."""
    shown = shown_key(key)
    return f"'{shown}'" if shown == key else shown


#: the most entries a state's "hyper" may hold (a real one holds a few)
MAX_ENTRIES = 1024


def _number(v):
    """``v`` as a NumPy or Python number, or None: a 0-d numeric array is its scalar."""
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v[()]
    if type(v) in (bool, int, float):
        return v
    if isinstance(v, np.generic) and v.dtype.kind in "biuf":
        return v
    return None


def saved_value(v):
    """A hyper-parameter's value as a state holds it: a Python number as itself, a NumPy one
    (or a 0-d array) as ``{"dtype", "value"}``; None for anything else (a schedule is code:
    set it again after loading)."""
    v = _number(v)
    if v is None or type(v) in (bool, int, float):
        return v
    return {"dtype": v.dtype.name, "value": v.item()}


def describe(v):
    """What a rule was built with, comparable after a trip through JSON: a number by value
    (``np.float64(0.1)`` from a grid and the Python float it reads back as are alike), a
    schedule by its class and numeric settings; None for what cannot be told apart (a
    lambda): such an entry is never applied."""
    n = _number(v)
    if n is not None:
        return ["bool", bool(n)] if isinstance(n, (bool, np.bool_)) else \
            ["number", repr(float(n))]
    settings = getattr(v, "__dict__", None)
    if callable(v) and isinstance(settings, dict) and all(
            _number(x) is not None for x in settings.values()):
        return ["code", f"{type(v).__module__}.{type(v).__qualname__}",
                sorted([k, describe(x)] for k, x in settings.items())]
    return None


def _loaded(v, at, problems):
    """A saved hyper-parameter value back as a number (``saved_value``'s form checked), or
    ``problems`` told why not. NaN and infinities load (a value a run had: a state must load
    what it saves)."""
    if isinstance(v, Mapping):
        dt, x = v.get("dtype"), v.get("value")
        try:
            dtype = np.dtype(dt) if isinstance(dt, str) and set(v) == {"dtype", "value"} \
                else None
        except TypeError:
            dtype = None
        if dtype is None or dtype.kind not in "biuf":
            problems.append(f"{at} must be a number or {{'dtype': a NumPy number dtype, "
                            f"'value': a number}}, got {_shown(v)}")
            return _BAD
        n = _loaded(x, at, problems)
        if n is _BAD:
            return _BAD
        try:
            with np.errstate(all="ignore"):
                typed = dtype.type(n)
        except (OverflowError, ValueError, TypeError):
            typed = None
        if typed is None or not (typed.item() == n or (n != n and typed != typed)):
            problems.append(f"{at}: {n!r:.40} is not a {dtype.name} value (the saved value "
                            "was changed)")
            return _BAD
        return typed
    if type(v) not in (bool, int, float):
        problems.append(f"{at} must be a number, got {_shown(v)}")
        return _BAD
    return v


_BAD = object()


def _shown(v) -> str:
    return f"{type(v).__name__} {v!r:.60}"


def changed(rules) -> dict:
    """``{"rule_i.name": {"rule", "value", "built"}}``: each hyper-parameter whose value (a
    number) is not the one its rule was built with."""
    out = {}
    for ri, r in enumerate(rules):
        built = getattr(r, "built", {})
        for k, v in r.hyper.items():
            now = saved_value(v)
            b = describe(built.get(k))
            if now is not None and not (b is not None and b == describe(v)):
                out[f"{ri}.{k}"] = {"rule": type(r).__name__, "value": now, "built": b}
    return out


def loaded(rules, saved, problems) -> list:
    """``state_dict()``'s ``"hyper"`` checked: ``(rule, name, value)`` to set, for each value
    changed during the saved run whose rule this optimizer built as that run did (the same
    rule at the same place, built with the same value). Others are left: a fork whose config
    builds its optimizer otherwise (another ``lr``, another chain of rules) keeps its own."""
    if not isinstance(saved, Mapping) or len(saved) > MAX_ENTRIES:
        what = (f"{len(saved)} entries" if isinstance(saved, Mapping)
                else type(saved).__name__)
        problems.append(f"'hyper' must be a dict of at most {MAX_ENTRIES} 'rule.name' -> "
                        f"{{'rule', 'value', 'built'}} (the hyper-parameters changed during "
                        f"the run), got {what}")
        return []
    out = []
    for key in sorted(saved, key=shown_key):
        at = f"hyper[{quoted(key)}]"
        ri, _, name = key.partition(".") if isinstance(key, str) else ("", "", "")
        entry = saved[key]
        if not (ri.isascii() and ri.isdigit() and len(ri) < 6 and name):
            problems.append(f"{at}: a key is 'rule_index.name' (as '1.lr')")
            continue
        if not isinstance(entry, Mapping) or not {"value", "built"} <= set(entry) <= {
                "rule", "value", "built"}:
            problems.append(f"{at} must be a dict with 'rule', 'value' and 'built', got "
                            f"{_shown(entry)}")
            continue
        value = _loaded(entry["value"], f"{at}['value']", problems)
        if value is _BAD:
            continue
        rule = rules[int(ri)] if int(ri) < len(rules) else None
        if (rule is not None and name in rule.hyper and entry["built"] is not None
                and entry.get("rule", type(rule).__name__) == type(rule).__name__
                and describe(getattr(rule, "built", {}).get(name)) == entry["built"]):
            out.append((rule, name, value))
    return out
