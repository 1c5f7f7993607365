"""Guards on the Python values a step reads: what a replay would otherwise freeze.

A replay runs no Python, so a number the step reads from a global, from its closure, from an
attribute of an object it names (``cfg.scale``, ``opt.lr`` written in the step) or from its
default arguments is the one of the traced call. Each such value is recorded when the step is
traced (by reading the step's code: the names it and the functions it calls use) and checked
at every call: a plain value (a number, a string, a tuple or a small list or dict of them) by
value, anything else (a model, a tensor, a function) by identity. A change traces again. What
a step itself changes (``global n; n += 1``, ``history.append(x)``, ``self.last = loss``) a
replay would not change: such a step is refused. Values read inside labkit (an optimizer's
learning rate read by its update, a brick's settings) are read at each replay or checked by
labkit itself, and are not guarded here.
"""

from __future__ import annotations

import functools
import os
import sysconfig
import types

import numpy as np

from ..autograd.tensor import Tensor
from ..backend import opencl
from ..backend.random import Generator
from ..errors import CompileError
from .code_reads import (
    _code_strings,
    _consts,
    _globals_read,
    _imports,
    _names,
    _strings,
    imported,
)
from .descriptors import class_attr, is_descriptor
from .guard_values import _MISSING, _SMALL, Guard, canon, first_failure, small_array
from .rngs import rng_of

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBS = tuple({os.path.abspath(p) for k in ("stdlib", "platstdlib", "purelib", "platlib")
               if (p := sysconfig.get_paths().get(k))})
#: how far the walk follows calls and objects from the step (step -> model -> its forward
#: -> a helper -> a config object is 4: a method and its function are one step; 8 walked
#: whole trees of objects a step names, 45 s to trace a tree of 37,000 nodes)
DEPTH = 4


def _user_code(code) -> bool:
    f = os.path.abspath(code.co_filename)
    return not (f.startswith(_PKG) or f.startswith(_LIBS) or f.startswith("<frozen"))


_LABKIT_NAMES: dict = {}  # NOTE: id(class) -> (the class, its names)


def _labkit_names(cls) -> frozenset:
    """The attribute names the code of labkit's classes among ``cls`` and its bases uses
    (``Optimizer.t``, ``MainLoop.status``): labkit reads or checks those itself. Kept by
    the class's id (a class whose metaclass defines ``__eq__`` alone cannot be hashed)."""
    got = _LABKIT_NAMES.get(id(cls))
    if got is not None and got[0] is cls:
        return got[1]
    out: set = set()
    for k in cls.__mro__:
        if str(getattr(k, "__module__", "")).split(".")[0] != "labkit":
            continue
        out.update(k.__dict__)
        for v in k.__dict__.values():
            for f in (v, getattr(v, "fget", None), getattr(v, "__func__", None)):
                if isinstance(f, types.FunctionType):
                    _names(f.__code__, out)
    if len(_LABKIT_NAMES) > 1024:
        _LABKIT_NAMES.clear()
    _LABKIT_NAMES[id(cls)] = (cls, frozenset(out))
    return _LABKIT_NAMES[id(cls)][1]


def _labkit_keys(fn, out, depth=0, seen=None) -> None:
    """Add the string constants of labkit's own function ``fn``, and of labkit's functions it
    names in its module, to ``out``: names labkit's code fixes, which the keys of a step's
    result dicts may be (a model zoo ``loss_fn``'s "accuracy"; compile/stale.py). Only keys:
    a value such as ``False`` that labkit's code also holds is not made plain by it."""
    seen = set() if seen is None else seen
    code = getattr(fn, "__code__", None)
    if (not isinstance(code, types.CodeType) or code in seen or depth > 3
            or not os.path.abspath(code.co_filename).startswith(_PKG)):
        return
    seen.add(code)
    strings: set = set()
    _consts(code, strings)
    out.update(c for c in strings if c[0] is str)
    g = getattr(fn, "__globals__", None) or {}
    for n in _names(code):
        if isinstance(g.get(n), types.FunctionType):
            _labkit_keys(g[n], out, depth + 1, seen)


class Walk:
    """The guards of a step, found from its code (``walk(fn)``, then ``finish()``), and the
    code constants of the user's functions it reaches (results made of them are not stale).
    An object's attributes are guarded for the names any of those functions use (``opt``
    held by the step, ``opt.lr`` read by a function it calls)."""

    def __init__(self):
        self.guards: list[Guard] = []
        self.consts: set = set()
        self.keys: set = set()  # NOTE: labkit's strings a result's dict keys may be
        self.names: set = set()
        self.strings: set = set()   # NOTE: names by string: the user's objects' only
        self.subkeys: set = set()   # NOTE: constant keys of subscripts (large containers)
        self._seen: set = set()
        self._objects: list = []   # (object, how to name it, depth): attributes to guard
        self._object_ids: dict = {}  # id -> object, of those in _objects
        self._guarded: set = set()  # (id(object), name) done; (id(container), key) too
        self._big: list = []        # (list, tuple or dict of over _SMALL items, label, depth)
        self.rngs: list = []        # (Python's or NumPy's random generator, how to name it)
        self.codes: list = []       # the code of the user's functions walked

    def walk(self, fn, depth=0):
        seen = ((id(fn.__func__), id(fn.__self__)) if isinstance(fn, types.MethodType)
                else id(fn))
        if depth > DEPTH or seen in self._seen:
            return
        self._seen.add(seen)
        from . import Compiled

        if isinstance(fn, Compiled):
            return self.walk(fn.fn, depth + 1)
        if isinstance(fn, functools.partial):
            # NOTE: its keywords are a dict the user may change in place (p.keywords["s"] = 5)
            what = f"functools.partial({getattr(fn.func, '__name__', 'a function')}, ...)"
            for k, v in sorted(fn.keywords.items()):
                self._value(v, "g", fn.keywords, k, True, f"the keyword {k} of {what}", depth)
            for i, v in enumerate(fn.args):
                self._value(v, "i", fn.args, i, True, f"argument {i} of {what}", depth)
            return self.walk(fn.func, depth + 1)
        if isinstance(fn, types.MethodType):
            f = fn.__func__
            # NOTE: the attributes of its object that a method reads: the user's methods, and
            # the step itself (MainLoop's, whose loss_fn is the user's)
            if isinstance(f, types.FunctionType) and (depth == 0 or _user_code(f.__code__)):
                self.names |= _names(f.__code__)
                if _user_code(f.__code__):
                    self.strings |= _code_strings(f.__code__)[0]
                self.walk(f, depth)  # NOTE: the method and its function: one step
                self.objects([fn.__self__], depth + 1)
            return None
        if not isinstance(fn, types.FunctionType):
            call = next((k.__dict__["__call__"] for k in type(fn).__mro__
                         if "__call__" in k.__dict__), None)
            if isinstance(call, types.FunctionType) and not isinstance(fn, type):
                self.walk(types.MethodType(call, fn), depth + 1)
            return None
        code = fn.__code__
        if not _user_code(code):
            _labkit_keys(fn, self.keys)
            return None
        names = _names(code)
        self.names |= names
        names_, keys_ = _code_strings(code)
        self.strings |= names_
        self.subkeys |= keys_
        self.codes.append(code)
        _consts(code, self.consts)
        where = fn.__name__
        g = fn.__globals__
        for n in sorted(_globals_read(code)):
            if n in g:
                self._value(g[n], "g", g, n, True, f"the global {n} (read by {where})", depth)
        for level, n in sorted(_imports(code)):  # NOTE: `import cfg` in the step: cfg.SCALE
            m = imported(level, n, g)
            if m is not None:
                self._value(m, "g", g, m.__name__, True,
                            f"the module {m.__name__} (imported by {where})", depth)
        for n, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            self._value(v, "c", cell, n, True, f"{n} (in the closure of {where})", depth)
        # NOTE: each default a value of its own (model=m: by identity, then its attributes)
        for i, v in enumerate(fn.__defaults__ or ()):
            self._value(v, "d", fn, i, True, f"default argument {i} of {where}", depth)
        for n, v in sorted((fn.__kwdefaults__ or {}).items()):
            self._value(v, "k", fn, n, True, f"the default of {n} (of {where})", depth)
        return None

    def objects(self, objs, depth=1):
        """Guard the attributes the step's code names of ``objs`` too (its arguments)."""
        for obj in objs:
            if id(obj) not in self._object_ids:
                self._object_ids[id(obj)] = obj  # NOTE: held: an id is never another's
                self._objects.append((obj, _name_of(obj), depth))

    def finish(self):
        """Guard the objects' attributes, for every name the functions read use (reading
        one may reach more functions and objects: until nothing new comes)."""
        while True:
            n_names, n_objects = len(self.names) + len(self.strings), len(self._objects)
            n_big = len(self._guarded)
            for obj, what, depth in list(self._objects):
                try:
                    self._attrs(obj, what, depth)
                except Exception:  # noqa: BLE001 - an object whose attributes cannot be read
                    continue       # (a proxy that raises): its attributes are not guarded
            self._big_items()
            if (len(self.names) + len(self.strings) == n_names
                    and len(self._objects) == n_objects
                    and len(self._guarded) == n_big):
                return self

    def _rng(self, v, label):
        r = rng_of(v)
        if r is not None and all(x is not r for x, _ in self.rngs):
            self.rngs.append((r, label))
        return r is not None

    def _value(self, v, kind, holder, name, user, label, depth):
        if self._rng(v, label):
            return
        if user:
            _strings(v, self.strings)  # NOTE: names the step may read by (getattr(cfg, k))
        if not isinstance(v, types.ModuleType):
            self.guards.append(Guard(kind, holder, name, v, user, label))
            if canon(v) is not None:
                return
        from . import Compiled

        if isinstance(v, (types.FunctionType, types.MethodType, functools.partial, Compiled)):
            self.walk(v, depth + 1)
        else:
            self.objects([v], depth + 1)
            self._items(v, label, depth)
            self.called(v, depth)

    def called(self, v, depth):
        """An object the step may call (a loss object): its ``__call__`` is the user's code,
        whose reads (``self.temp``) are checked as a method's are. Not a main loop's
        extension, which the loop calls between steps (a KL annealing's counter, moved at
        every iteration by its ``__call__``, traced a compiled MainLoop at every call)."""
        if (callable(v) and not isinstance(v, type)
                and not getattr(type(v), "lk_between_steps", False)):
            self.walk(v, depth + 1)

    def _items(self, v, label, depth):
        """A small container's items in turn: CFG["c"].scale, hooks in a list, an rng. Of a
        larger one, the items at the constant keys of the code walked (``finish``)."""
        if type(v) not in (list, tuple, dict) or depth > DEPTH:
            return
        if len(v) > _SMALL:
            self._big.append((v, label, depth))
            return
        for k, x in (v.items() if type(v) is dict else enumerate(v)):
            self._item(v, k, x, label, depth)

    def _big_items(self):
        """The items of the large containers read at the code's int and str constants
        (``BIG[5]``, ``TABLE["lr"]``)."""
        keys = sorted(self.subkeys | self.strings, key=repr) if self._big else ()
        for v, label, depth in self._big:
            for k in keys:
                if (id(v), k) in self._guarded:
                    continue
                try:
                    if type(v) is dict:
                        x = v.get(k, _MISSING)
                    else:
                        x = v[k] if type(k) is int and -len(v) <= k < len(v) else _MISSING
                except Exception:  # noqa: BLE001 - keys whose comparison raises: not read
                    continue
                if x is not _MISSING:
                    self._guarded.add((id(v), k))
                    if canon(x) is None and not small_array(x):
                        # NOTE: an object there replaced (by identity; a small array is
                        # checked by _item, its values too)
                        self.guards.append(Guard("g" if type(v) is dict else "i", v, k, x,
                                                 True, f"{label}[{k!r}]"))
                    self._item(v, k, x, label, depth)

    def _item(self, v, k, x, label, depth):
        from . import Compiled

        if isinstance(x, (types.FunctionType, types.MethodType, functools.partial, Compiled)):
            self.walk(x, depth + 1)
        elif canon(x) is not None:
            # NOTE: a plain value beside objects (CFG = {"model": m, "scales": [1.0]}):
            # the container is checked by identity only, its plain items by value
            if canon(v) is None:
                self.guards.append(Guard("g" if type(v) is dict else "i", v, k, x, True,
                                         f"{label}[{k!r}]"))
        elif not self._rng(x, f"an item of {label}"):
            if small_array(x) and canon(v) is None:
                # NOTE: a small array held there (SMALL["w"][0]): its values too
                self.guards.append(Guard("g" if type(v) is dict else "i", v, k, x, True,
                                         f"{label}[{k!r}]"))
            self.objects([x], depth + 1)
            self._items(x, label, depth + 1)
            self.called(x, depth)  # NOTE: losses[0](...)

    def _attrs(self, obj, what, depth):
        """Guards on the attributes of ``obj`` the code names: a module's and a class's
        plain values (and the user's functions there, read in turn), an object's instance
        attributes and its properties whose value is plain; not of tensors, arrays, bricks
        or generators, whose values a replay reads or labkit checks."""
        from ..bricks.base import Brick

        if depth > DEPTH or isinstance(obj, (Tensor, np.ndarray, opencl.ndarray, Generator)):
            return
        brick = isinstance(obj, Brick)
        if brick:
            # NOTE: its code, and (below) the settings among its attributes that the code
            # names (self.temp, self.cfg.scale, self.opts["s"][0]): Brick.__call__ checks its
            # flat settings only, and a brick the step reads but does not call, none
            _brick_methods(self, obj, depth)
        module = getattr(obj, "__module__", None) if isinstance(obj, type) else (
            getattr(obj, "__name__", None) if isinstance(obj, types.ModuleType)
            else type(obj).__module__)
        labkit = str(module).split(".")[0] == "labkit"
        if labkit and isinstance(obj, (type, types.ModuleType)):
            return
        user = _is_user_module(obj) if isinstance(obj, types.ModuleType) else not labkit
        d = getattr(obj, "__dict__", None)
        if not isinstance(d, (dict, types.MappingProxyType)):
            d = {}  # NOTE: an object of __slots__ only: its slots are below
        from ..optimizers import Optimizer

        if isinstance(obj, Optimizer) and (id(obj), "params") not in self._guarded:
            # NOTE: its update, replayed, applies the traced parameters' gradients to the
            # parameters it holds then: setup() onto other parameters traces again
            self._guarded.add((id(obj), "params"))
            self.guards.append(Guard("a", obj, "params", obj.params, False,
                                     f"the parameters of {what} (setup() again?)"))
        # NOTE: by string, not the attributes labkit's own code uses (batch["t"]: not an
        # optimizer's step count Optimizer.t, which its update moves and labkit reads)
        names = self.names | (self.strings - _labkit_names(type(obj)))
        for n in sorted(names):
            if (id(obj), n) in self._guarded:
                continue
            if n in d:
                self._guarded.add((id(obj), n))
                v = d[n]
                if brick:
                    if isinstance(v, Brick):
                        self.objects([v], depth + 1)
                    elif _setting(v):
                        self._value(v, "a", obj, n, user, f"{what}.{n}", depth)
                elif isinstance(obj, (type, types.ModuleType)):
                    if canon(v) is not None:
                        self.guards.append(Guard("a", obj, n, v, user, f"{what}.{n}"))
                    elif isinstance(v, types.FunctionType):
                        self.walk(v, depth + 1)
                    elif isinstance(v, types.ModuleType):  # np.random
                        self.objects([v], depth + 1)
                    elif isinstance(v, (staticmethod, classmethod)):
                        # NOTE: Cls.sm(x), Cls.cm(x): the wrapper by identity, as the class
                        # holds it (getattr gives the function, or a new bound method: a
                        # staticmethod was refused as changed), and the function it wraps
                        # walked (a global it reads was not checked)
                        self.guards.append(Guard("g", d, n, v, user, f"{what}.{n}"))
                        self.walk(v.__func__, depth + 1)
                    elif not self._rng(v, f"{what}.{n}") and callable(v) and user:
                        # NOTE: an object of the user's called there (Cfg.loss(...)). Not its
                        # plain objects: the names are every name the code walked uses, and a
                        # module's logger whose .data changed at every call (read as h.data
                        # elsewhere) traced the step again at every call
                        self._value(v, "a", obj, n, user, f"{what}.{n}", depth)
                else:
                    self._value(v, "a", obj, n, user, f"{what}.{n}", depth)
            elif isinstance(obj, (type, types.ModuleType)):
                continue
            elif isinstance(f := getattr(type(obj), n, None), types.FunctionType):
                self._guarded.add((id(obj), n))
                if _user_code(f.__code__):  # NOTE: a method of the user's that it calls
                    self.walk(types.MethodType(f, obj), depth + 1)
            elif isinstance(f, types.MemberDescriptorType):  # a slot
                self._guarded.add((id(obj), n))
                v = getattr(obj, n, _MISSING)
                if v is not _MISSING:
                    self._value(v, "a", obj, n, user, f"{what}.{n}", depth)
            elif isinstance(f, property):
                self._guarded.add((id(obj), n))
                try:
                    v = getattr(obj, n)
                except Exception:  # noqa: BLE001 - a property that raises: not guarded
                    continue
                if canon(v) is not None:
                    self.guards.append(Guard("a", obj, n, v, False, f"{what}.{n}"))
                    if isinstance(obj, Optimizer) and n == "lr":
                        _next_rate(self, obj, what)
            elif isinstance(f, types.MethodType) and isinstance(f.__func__, types.FunctionType):
                self._guarded.add((id(obj), n))  # NOTE: a classmethod of the user's
                if _user_code(f.__func__.__code__):
                    self.walk(f, depth + 1)
            elif not n.startswith("__") and is_descriptor(class_attr(type(obj), n)):
                # NOTE: a descriptor of the user's (its __get__ reads state): its value at each
                # check, as a property's
                self._guarded.add((id(obj), n))
                v = getattr(obj, n, _MISSING)
                if v is not _MISSING and canon(v) is not None:
                    self.guards.append(Guard("a", obj, n, v, False, f"{what}.{n}"))
            elif (f is not None and canon(f) is not None and not n.startswith("__")
                  and getattr(obj, n, _MISSING) is f):
                # NOTE: a class attribute read through the instance (K.scale = 3.0 later; an
                # instance attribute that comes to shadow it is read the same way)
                self._guarded.add((id(obj), n))
                self.guards.append(Guard("a", obj, n, f, user, f"{what}.{n}"))


def _next_rate(walk, opt, what):
    """A scheduled learning rate read by the step is also checked as it will be after the
    call's update: read after ``opt.update()`` (a value logged), a replay returned the traced
    rate, one call behind at each decay of the schedule."""
    from ..optimizers import _value

    rule = opt._lr_rule()
    if rule is None or not callable(rule.hyper["lr"]):
        return

    def after():
        return _value(rule.hyper["lr"], opt.t + 1)
    walk.guards.append(Guard("f", after, None, after(), False,
                             f"{what}.lr after this call's update"))


def _setting(v, depth=0) -> bool:
    """Whether a brick's attribute ``v`` is a setting to guard: a plain value, an object of
    the user's, or a small container of such (not a tensor, an array, a brick, a generator
    or a function, which labkit reads or checks itself)."""
    from ..bricks.base import Brick

    if canon(v) is not None:
        return True
    if isinstance(v, (Tensor, np.ndarray, opencl.ndarray, Brick, Generator, types.FunctionType,
                      types.MethodType, type, types.ModuleType)) or depth > 2:
        return False
    if type(v) in (list, tuple, dict):
        items = v.values() if type(v) is dict else v
        return len(v) <= _SMALL and all(_setting(x, depth + 1) for x in items)
    return str(type(v).__module__).split(".")[0] != "labkit"


def _brick_methods(walk, brick, depth):
    """Walk the code of the user's bricks in ``brick`` and inside it (forward, and methods
    the code names): not their attributes, which the bricks check (Brick.__call__)."""
    stack = [brick]
    while stack:
        b = stack.pop()
        for n in sorted({"forward"} | walk.names):
            if (id(b), n) in walk._guarded:
                continue
            f = getattr(type(b), n, None)
            if isinstance(f, types.FunctionType) and _user_code(f.__code__):
                walk._guarded.add((id(b), n))
                walk.walk(types.MethodType(f, b), depth + 1)
        stack.extend(getattr(b, "_children", {}).values())


def _name_of(obj):
    if isinstance(obj, (type, types.ModuleType)):
        return obj.__name__
    return type(obj).__name__


def _is_user_module(m) -> bool:
    f = getattr(m, "__file__", None)
    return bool(f) and not os.path.abspath(f).startswith((_PKG,) + _LIBS)


def hook_guards(walk, tensors) -> None:
    """Add to ``walk`` the guards of what the gradient hooks of ``tensors`` read (the tensors
    a traced step read: ``register_hook(lambda g: g * cfg["scale"])``): the engine calls them,
    not the step's code, so the walk before the call did not reach them."""
    fns = [h for t in tensors for h in (getattr(t, "_hooks", None) or ())]
    if not fns:
        return
    w = Walk()
    for h in fns:
        w.walk(h)
    w.finish()
    walk.guards += w.guards


def python_guards(fn, objects=(), strings=()) -> Walk:
    """The guards of ``fn`` as it is now (before a traced call); ``objects``: the objects
    passed to it (a method's ``self``), whose attributes its code names are guarded too;
    ``strings``: the strings passed to it (names it may read attributes by)."""
    w = Walk()
    for v in strings:
        _strings(v, w.strings)
    w.walk(fn)
    w.objects(objects)
    for o in objects:  # NOTE: a loss object passed in and called
        w.called(o, 0)
    return w.finish()


def _grown(g):
    """What the call added to or took from a small list or dict of objects it reads (a
    replay would not: ``history.append(x)``), or None."""
    if g.items is None or g.exact:
        return None
    v = g.read()
    if g.same_items(v, exact=True):
        return None
    return f"it held {len(g.items)} items when the call began, {len(v)} when it ended"


def check_unchanged(walk, fn_name):
    """After a traced call: refuse a step that changed a Python value of the user's it
    reads (a replay would not change it again)."""
    for g in walk.guards:
        if g.user and (why := g.failure() or _grown(g)) is not None:
            raise CompileError(
                f"lk.compile: {fn_name} changes {g.label} while it runs ({why}); a replay "
                "runs no Python, so it would not change it again. Return the value from the "
                "step and keep it after the call, or pass it in as an argument; a side "
                "effect such as a log can run in lk.compile.host(fn, *arrays, effect=True), "
                "which a replay runs again")


__all__ = ["Guard", "Walk", "canon", "check_unchanged", "first_failure", "hook_guards",
           "python_guards"]
