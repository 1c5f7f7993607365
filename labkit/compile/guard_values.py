"""One checked Python value of a compiled step (``Guard``) and the comparable form of plain
values (``canon``): guards.py finds what a step reads, this says whether it is as traced."""

from __future__ import annotations

import collections
import functools

import numpy as np

_MISSING = object()
#: at most this many elements in a list, tuple or dict compared by value
_SMALL = 64


def canon(v, depth=0):
    """A comparable form of a plain value (floats by repr: NaN equals itself, -0.0 is not
    0.0), or None for anything else."""
    t = type(v)
    if v is None or t in (bool, int, str, bytes):
        return (t, v)
    if t in (float, complex) or isinstance(v, np.generic):
        return (t, repr(v))
    if t in (tuple, list) and len(v) <= _SMALL and depth < 3:
        items = tuple(canon(x, depth + 1) for x in v)
        return None if any(x is None for x in items) else (t, items)
    if t is dict and len(v) <= _SMALL and depth < 3:
        items = tuple((canon(k, depth + 1), canon(x, depth + 1)) for k, x in v.items())
        return None if any(a is None or b is None for a, b in items) else (t, items)
    if t in (set, frozenset, collections.deque) and len(v) <= _SMALL and depth < 3:
        # NOTE: "hot" in FLAGS, len(a_deque): a set by its members, a deque in order
        items = [canon(x, depth + 1) for x in v]
        if any(x is None for x in items):
            return None
        return (t, frozenset(items) if t is not collections.deque else tuple(items))
    return None


def _state(v):
    """What a guard compares: ("v", canon) for a plain value, else ("i", id): the object
    itself (a list of tensors the step appends to is the same list)."""
    c = canon(v)
    return ("v", c) if c is not None else ("i", id(v))


def _number(v):
    """A key of a number by its value, whatever its type (0.5 and np.float32(0.5)), or None."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
        return None
    try:
        return ("number", repr(float(v)))
    except (OverflowError, TypeError, ValueError):
        return None


def _add(out, v, depth=0):
    """``v`` and, for a tuple (a dict's constant keys) or a list, each of its items."""
    if (k := canon(v)) is not None:
        out.add(k)
        if (n := _number(v)) is not None:
            out.add(n)
    if isinstance(v, (tuple, list, frozenset)) and depth < 3:
        for x in v:
            _add(out, x, depth + 1)
    elif isinstance(v, dict) and depth < 3:
        for k, x in v.items():
            _add(out, k, depth + 1)
            _add(out, x, depth + 1)


class Guard:
    """One Python value the step read: where it lives, what it was, whether it is the user's
    (a change the step itself makes is refused) and how to name it."""

    __slots__ = ("kind", "holder", "name", "state", "user", "label", "keep", "shown", "get",
                 "plain", "items", "exact", "array")

    def __init__(self, kind, holder, name, value, user, label):
        self.kind, self.holder, self.name = kind, holder, name
        self.user, self.label = user, label
        self.state = _state(value)
        self.plain = self.state[0] == "v"
        self.keep = value  # NOTE: alive, so that an id is never another object's
        self.shown = _show(value) if self.plain else None
        # NOTE: a small list or dict of objects (models, tensors): its items by identity.
        # While the step is traced it may add items (a list it appends to: what a replay does
        # not do, like printing); after the trace (settle) they are what a call must find
        self.items = None
        self.exact = False
        # NOTE: a small NumPy array (class weights, a schedule's table): its values too, which
        # the step may read as Python numbers (float(w[0])); dropped for one the step uploads
        # (lk.tensor(mask): a replay reads it afresh), read_afresh
        self.array = (value.copy() if small_array(value) and value.dtype.kind in "biufc"
                      else None)
        if not self.plain and type(value) in (list, dict) and len(value) <= _SMALL:
            self.items = list(value.items()) if type(value) is dict else list(value)
        if kind == "g":
            self.get = functools.partial(holder.get, name, _MISSING)
        elif kind == "i":  # NOTE: an item of a list or tuple
            self.get = functools.partial(holder.__getitem__, name)
        elif kind == "a":
            self.get = functools.partial(getattr, holder, name, _MISSING)
        elif kind == "c":
            self.get = lambda: holder.cell_contents
        elif kind == "f":  # NOTE: a value computed by ``holder()``
            self.get = holder
        elif kind == "d":
            self.get = lambda: holder.__defaults__[name]
        else:  # NOTE: "k", a keyword-only default
            self.get = lambda: holder.__kwdefaults__[name]

    def again(self):
        """This guard on the value it holds now (after a traced call: what the next call
        must find for the trace to still be this step's), or None where it holds none."""
        v = self.read()
        if v is _MISSING:
            return None
        g = Guard(self.kind, self.holder, self.name, v, self.user, self.label)
        g.settle()
        if self.array is None:
            g.array = None
        return g

    def read(self):
        try:
            return self.get()
        except Exception:  # noqa: BLE001 - an empty cell, a property that raised
            return _MISSING

    def ok(self) -> bool:
        """Whether the value is as traced (the check at each call)."""
        try:
            v = self.get()
        except Exception:  # noqa: BLE001
            return False
        if self.plain:
            return canon(v) == self.state[1]
        if v is not self.keep:
            return False
        if self.array is not None and not _same_array(v, self.array):
            return False
        return self.items is None or self.same_items(v, self.exact)

    def same_items(self, v, exact) -> bool:
        """Whether list or dict ``v`` holds the items recorded (by identity), and with
        ``exact`` no others."""
        if exact and len(v) != len(self.items):
            return False
        if type(v) is dict:
            return all(v.get(k, _MISSING) is x for k, x in self.items)
        return len(v) >= len(self.items) and all(a is b for a, b in zip(v, self.items))

    def settle(self):
        """After the trace: a list's or dict's items as the step left them are what each
        call must find (the length too: len(a_list) read by the step)."""
        v = self.keep
        if self.items is not None:
            self.items = list(v.items()) if type(v) is dict else list(v)
            self.exact = len(self.items) <= _SMALL
            if not self.exact:
                self.items = None

    def failure(self):
        """None when the value is as traced, else what changed."""
        if self.ok():
            return None
        v = self.read()
        if self.plain and canon(v) is not None:
            return f"{self.label} was {self.shown} when traced, is {_show(v)}"
        if v is _MISSING:
            return f"{self.label} is gone since it was traced"
        if v is self.keep and self.array is not None and not _same_array(v, self.array):
            return f"{self.label} holds other values than when traced"
        if v is self.keep:
            return (f"{self.label} holds other items than when traced (another object where "
                    "it held one, or more or fewer)")
        return f"{self.label} is another {type(v).__name__} object than when traced"


def _show(v):
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def first_failure(guards):
    for g in guards:
        if not g.ok():
            return g.failure()
    return None


def small_array(x) -> bool:
    """Whether ``x`` is a NumPy array small enough to be checked by value (Guard.array)."""
    return type(x) is np.ndarray and x.size <= _SMALL


def _same_array(a, b) -> bool:
    """Whether array ``a`` holds what ``b`` does, bit for bit (NaN equals itself)."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def read_afresh(walk, trace) -> None:
    """Drop the value checks of the small arrays a replay reads afresh: uploaded
    (``lk.tensor(mask)``; not through a view, ``lk.tensor(w[:4])``, whose copy a replay does
    not make again), or held by an op of ``trace`` (an index array and what it is a view of,
    ``x[:, perm[:4]]``). A change of those is no reason to trace again."""
    def bases(a):
        while a is not None:
            yield a
            a = getattr(a, "base", None)

    afresh = {id(src.value) for src in trace.sources.values() if src.value is not None}
    afresh |= {id(b) for n in trace.nodes for _, _, a in n.consts for b in bases(a)}
    for g in walk.guards:
        if g.array is not None and id(g.keep) in afresh:
            g.array = None
