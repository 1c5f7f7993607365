"""An optimizer's hyper-parameters in its state: the values changed during the run (an
extension's or a cell's ``opt.lr = ...``), so that a resumed run trains with them.

A state holds ``{"rule_i.name": {"value", "built"}}`` for each hyper-parameter whose value (a
number) is not the one its rule was built with; a loaded value is set where the optimizer's
rule was built as the saved run's (a fork whose config builds it with another value keeps its
own). A schedule set during the run is code, and is not saved.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ..checkpoint import shown_key


def quoted(key) -> str:
    """A key from a file in quotes (``shown_key``: escaped, cut, or named with its type)."""
    shown = shown_key(key)
    return f"'{shown}'" if shown == key else shown


#: the NumPy dtypes a hyper-parameter saved in a state may have (its value a JSON number)
DTYPES = ("float32", "float64", "int32", "int64", "bool")


def saved_value(v):
    """A hyper-parameter's value as a state holds it: a Python number as itself, a NumPy one
    as ``{"dtype", "value"}``; None for anything else (a schedule is code, an array data)."""
    if type(v) in (bool, int, float):
        return v
    if isinstance(v, np.generic) and v.dtype.name in DTYPES:
        return {"dtype": v.dtype.name, "value": v.item()}
    return None


def _same(a, b) -> bool:
    """Two saved values alike, types included (``1``, ``1.0`` and ``True`` differ)."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(_same(a[k], b[k]) for k in a))
    return type(a) is type(b) and a == b


def _loaded(v, at, problems, none_ok=False):
    """A saved hyper-parameter value back as a number (``_saved_hyper``'s form checked), or
    ``problems`` told why not; a finite number only (a NaN rate is no run's)."""
    if v is None and none_ok:
        return None
    if isinstance(v, Mapping):
        dt, x = v.get("dtype"), v.get("value")
        if set(v) != {"dtype", "value"} or dt not in DTYPES:
            problems.append(f"{at} must be a number or {{'dtype': one of "
                            f"{', '.join(DTYPES)}, 'value': a number}}, got "
                            f"{_shown(v)}")
            return _BAD
        n = _loaded(x, at, problems)
        if n is _BAD:
            return _BAD
        typed = np.dtype(dt).type(n)
        if typed.item() != n:
            problems.append(f"{at}: {n!r:.40} is not a {dt} value (the saved value was "
                            "changed)")
            return _BAD
        return typed
    if type(v) not in (bool, int, float):
        problems.append(f"{at} must be a number, got {_shown(v)}")
        return _BAD
    if type(v) is float and not math.isfinite(v):
        problems.append(f"{at} must be a finite number, got {v!r}")
        return _BAD
    return v


_BAD = object()


def _shown(v) -> str:
    return f"{type(v).__name__} {v!r:.60}"



def changed(rules) -> dict:
    """``{"rule_i.name": {"value", "built"}}``: each hyper-parameter whose value (a
    number) is not the one its rule was built with. A schedule set during the run is
    code and is not saved: set it again after loading."""
    out = {}
    for ri, r in enumerate(rules):
        built = getattr(r, "built", {})
        for k, v in r.hyper.items():
            now = saved_value(v)
            b = saved_value(built.get(k))
            if now is not None and not (b is not None and _same(b, now)):
                out[f"{ri}.{k}"] = {"value": now, "built": b}
    return out

def loaded(rules, saved, problems) -> list:
    """``state_dict()``'s ``"hyper"`` checked: ``(rule, name, value)`` to set, for each
    value changed during the saved run whose rule this optimizer built as that run did.
    One built otherwise (a fork's config with another ``lr``) keeps its own."""
    if not isinstance(saved, Mapping):
        problems.append(f"'hyper' must be a dict of 'rule.name' -> {{'value', 'built'}} "
                        f"(the hyper-parameters changed during the run), got "
                        f"{type(saved).__name__}")
        return []
    out = []
    mine = [f"{i}.{k}" for i, r in enumerate(rules) for k in r.hyper]
    if len(saved) > len(mine):
        problems.append(f"'hyper' has {len(saved)} entries; this optimizer's rules have "
                        f"{len(mine)} hyper-parameters ({', '.join(mine)})")
        return []
    for key in sorted(saved, key=shown_key):
        at = f"hyper[{quoted(key)}]"
        ri, _, name = key.partition(".") if isinstance(key, str) else ("", "", "")
        rule = (rules[int(ri)] if ri.isdecimal() and len(ri) < 6
                and int(ri) < len(rules) else None)
        if rule is None or name not in rule.hyper:
            problems.append(f"{at} names a hyper-parameter this optimizer's rules lack "
                            f"(theirs: {', '.join(mine)})")
            continue
        entry = saved[key]
        if not isinstance(entry, Mapping) or set(entry) != {"value", "built"}:
            problems.append(f"{at} must be a dict with 'value' and 'built', got "
                            f"{_shown(entry)}")
            continue
        value = _loaded(entry["value"], f"{at}['value']", problems)
        built = _loaded(entry["built"], f"{at}['built']", problems, none_ok=True)
        if value is _BAD or built is _BAD:
            continue
        b = entry["built"]
        if _same(saved_value(getattr(rule, "built", {}).get(name)), b):
            out.append((rule, name, value))
    return out
