"""Brick: a parameterised piece of a model. Children and parameters are registered by
assignment; names are hierarchical (``/mlp/linear_0.W``) and are the keys of ``state_dict()``;
sizes given as None are resolved on the first call (construct, then call)."""

from __future__ import annotations

import itertools
import types
import zlib
from collections.abc import Mapping

import numpy as np

from .. import roles
from ..autograd import function as _fn
from ..autograd import trace as _trace
from ..autograd.tensor import Tensor
from ..backend.device import device as _device
from ..backend.random import Generator
from ..checkpoint._common import listed as _listed
from ..checkpoint._common import shown_key as _shown
from ..errors import BrickError, CheckpointError, DeviceMismatchError, LabkitError

_SEED = {"seed": 0, "count": 0}


def set_seed(seed: int) -> None:
    """Seed brick initialization: bricks constructed after this call, in the same order, get
    the same parameters (bit for bit, on every device)."""
    _SEED["seed"], _SEED["count"] = int(seed), 0


def _host_array(v):
    """A state value as a NumPy array (from NumPy, an OpenCL array or a Tensor), or None
    when it is not an array at all (a list, a number, a string: refused, not converted)."""
    if isinstance(v, np.ndarray):
        return v
    if isinstance(v, Tensor):
        return v.numpy()
    from ..backend import opencl

    if isinstance(v, opencl.ndarray):
        return v.get()
    return None


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)`` where Python has it (3.11+); on 3.10 the same ``__notes__``
    list, which code that reports errors (IPython, pytest, the training loop) can read."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:
        error.__notes__ = [*getattr(error, "__notes__", ()), note]


def _next_init_seed() -> int:
    _SEED["count"] += 1
    return zlib.crc32(f"{_SEED['seed']}:{_SEED['count']}".encode())


class Parameter(Tensor):
    """A leaf Tensor that requires grad and carries a role (WEIGHT, FILTER, BIAS, ...)."""

    __slots__ = ("owner",)

    def __init__(self, data, role=roles.PARAMETER, name=None):
        super().__init__(data, requires_grad=True, name=name)
        self.role = role
        self.owner = None

    @property
    def path(self):
        """The hierarchical name, ``/mlp/linear_0.W``: the key in ``state_dict()``."""
        return f"{self.owner.path}.{self.name}" if self.owner is not None else None

    def __repr__(self):
        return f"Parameter({self.path or self.name}, shape={self.shape}, role={self.role})"


_NOT_SETTINGS = {"training", "built", "name", "seed"}


def _setting(v) -> bool:
    """A plain value a brick's forward may read (compared by a compiled step's guard)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, tuple):
        return len(v) <= 8 and all(_setting(x) for x in v)
    return isinstance(v, (types.FunctionType, types.BuiltinFunctionType))


#: versions of bricks' buffers: a brick whose buffers are replaced takes the next one
_versions = itertools.count(1)
_UNSET = object()


def unique_name(name: str, taken) -> str:
    """``name``, or ``name_1``, ``name_2``, ... : the first not in ``taken``."""
    base, i = name, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    return name


class Brick:
    """Base class: subclasses define ``forward(*inputs)`` and, for sizes resolved on the first
    call, ``build(*inputs)`` that creates the parameters with ``self.add_param``."""

    #: changes when the buffers, or a parameter or other object it holds, are replaced (a
    #: compiled step holding the old ones retraces)
    _version = 0
    #: buffers that hold variances (never negative: NaN can be, a run that diverged); a state
    #: with a negative value there is damaged or edited, and is refused on load
    NONNEGATIVE_BUFFERS: tuple = ()

    def __init__(self, name: str | None = None, seed: int | None = None):
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_inits", {})
        self.name = name or type(self).__name__.lower()
        self.training = True
        self.built = False
        self.seed = seed if seed is not None else _next_init_seed()
        self._device = None
        object.__setattr__(self, "_parent", None)

    # ---- registration -------------------------------------------------------------------
    def __setattr__(self, key, value):
        if key == "_parent":
            object.__setattr__(self, key, value)
            return
        if isinstance(value, Brick):
            old = self.__dict__.get(key)
            if isinstance(old, Brick) and old is not value:
                self._drop_child(old, key)  # NOTE: replaced: it was kept, trained and saved
            if not self._is_child(value):
                if value._parent is None and value.name == type(value).__name__.lower():
                    value.name = key
                self._check_child_name(value, value.name)
                value._parent = self
                self._children[value.name] = value
        elif isinstance(value, Parameter):
            value.name = key
            value.owner = self
            self._params[key] = value
        elif (type(value) in (list, tuple) and value and key[0] != "_"
              and all(isinstance(v, Brick) for v in value)):
            # NOTE: a list of bricks (self.blocks = [Linear(...), ...]) is registered, each a
            # child named blocks_0, blocks_1, ...: else nothing in it was trained or saved
            for i, b in enumerate(value):
                if not self._is_child(b):
                    self.add_child(b, f"{key}_{i}")
        old = self.__dict__.get(key, _UNSET)
        object.__setattr__(self, key, value)
        if (old is not _UNSET and old is not value and key[0] != "_"
                and not (_setting(old) and _setting(value))):
            # NOTE: a parameter, buffer, generator or child replaced (by anything, None
            # included): compiled steps that read the old one trace again (plain settings are
            # compared by value). Not while a step is traced: what its forward stores on the
            # brick is Python a replay does not run (it would retrace at every call)
            if isinstance(old, Parameter) and not isinstance(value, Parameter):
                self._params.pop(key, None)
            if isinstance(old, Brick) and not isinstance(value, Brick):
                self._drop_child(old, key)
            if _trace.tracer() is None:
                object.__setattr__(self, "_version", next(_versions))

    def __delattr__(self, key):
        old = self.__dict__.get(key, _UNSET)
        object.__delattr__(self, key)
        # NOTE: a child, parameter or buffer deleted is no longer trained, saved or counted
        if isinstance(old, Brick):
            self._drop_child(old, key)
        elif isinstance(old, Parameter) and self._params.get(key) is old:
            del self._params[key]
        self._buffers.pop(key, None)
        if old is not _UNSET and _trace.tracer() is None:
            object.__setattr__(self, "_version", next(_versions))

    def _is_child(self, brick) -> bool:
        return any(c is brick for c in self._children.values())

    def _drop_child(self, brick, key) -> None:
        if any(v is brick for k, v in self.__dict__.items() if k != key and k[0] != "_"):
            return  # NOTE: still held under another attribute (a brick shared)
        for name, c in list(self._children.items()):
            if c is brick:
                del self._children[name]
                if brick._parent is self:
                    brick._parent = None

    def _check_child_name(self, brick, name) -> None:
        if not isinstance(name, str) or not name or "/" in name or "." in name:
            raise BrickError(f"{self.path}: a child brick's name must be a non-empty string "
                             f"without '/' or '.' (they separate a parameter's path), got "
                             f"{name!r}")
        other = self._children.get(name)
        if other is not None and other is not brick:
            raise BrickError(f"{self.path}: it already has a child named {name!r} "
                             f"({type(other).__name__}); give the bricks different names "
                             "(two children of one name would share one path: one of them "
                             "would not be trained or saved)")

    def _check_state_name(self, name, what) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            # NOTE: a "." in it split its state_dict key wrongly: load_state_dict raised a
            # bare StopIteration after loading part of the state
            raise BrickError(f"{self.path}: a {what}'s name must be a Python identifier (it is "
                             f"an attribute, and its key is '<brick path>.<name>'), got "
                             f"{name!r}")

    def add_child(self, brick: Brick, name: str | None = None) -> Brick:
        """Register ``brick`` as a child named ``name`` (default: its own name, made unique
        among the children with ``_1``, ``_2``, ...); a brick that is a child already (one
        brick used twice) keeps its name and is registered once."""
        if self._is_child(brick):
            return brick
        if name is None:
            name = unique_name(brick.name, self._children)
        self._check_child_name(brick, name)
        brick.name = name
        brick._parent = self
        self._children[brick.name] = brick
        object.__setattr__(self, brick.name, brick)
        if _trace.tracer() is None:  # NOTE: a compiled step traced without it traces again
            object.__setattr__(self, "_version", next(_versions))
        return brick

    @property
    def path(self) -> str:
        return (self._parent.path if self._parent is not None else "") + "/" + self.name

    @property
    def device(self):
        """The device of the brick's parameters: set by ``.to(device)`` or by the first
        call's inputs, else where the parameters it (or a child) holds are; None when it has
        none yet."""
        if self._device is not None:
            return self._device
        for b in self.bricks():
            if b._device is not None:
                return b._device
            for p in b._params.values():
                return p.device
        return None

    def _rng(self) -> Generator:
        return Generator(self.seed, "cpu")

    def add_param(self, name, shape, init, role=roles.PARAMETER, dtype=np.float32) -> Parameter:
        """Create a parameter from ``init`` (drawn on the host: the same bits on every device)."""
        self._check_state_name(name, "parameter")
        rng = self._rng()
        rng.counter = len(self._params) << 40  # a separate stream per parameter
        data = init(tuple(int(d) for d in shape), np.dtype(dtype), rng)
        p = Parameter(self._on_device(data), role=role)
        setattr(self, name, p)
        return p

    def register_buffer(self, name, array) -> None:
        """State that is saved but not trained (running statistics)."""
        self._check_state_name(name, "buffer")
        self._buffers[name] = name
        object.__setattr__(self, name, self._on_device(np.asarray(array)))

    def _on_device(self, arr):
        dev = self._device
        if dev is None or dev.kind == "cpu":
            return arr
        from ..backend import opencl

        return opencl.asarray(arr, device=dev)

    # ---- calling ------------------------------------------------------------------------
    def build(self, *inputs) -> None:
        """Create parameters whose sizes depend on the first inputs (override as needed)."""

    def forward(self, *inputs):  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, *inputs, **kwargs):
        first = None
        if not self.built:
            # NOTE: a first call that fails (an input of the wrong rank) leaves the brick
            # unbuilt: it built for the wrong sizes, and the right call then failed too
            first = (dict(self._params), dict(self._buffers), dict(self._children),
                     self._device)
            for x in inputs:
                if isinstance(x, Tensor):
                    if self._device is None:
                        self._device = x.device
                    break
            try:
                self.build(*inputs)
                self.built = True
                return self._call(inputs, kwargs)
            except BaseException:
                self._unbuild(*first)
                raise
        return self._call(inputs, kwargs)

    def _unbuild(self, params, buffers, children, device) -> None:
        for own, before in ((self._params, params), (self._buffers, buffers),
                            (self._children, children)):
            for k in [k for k in own if k not in before]:
                del own[k]
                self.__dict__.pop(k, None)
        self._device, self.built = device, False

    def _call(self, inputs, kwargs):
        for x in inputs:
            if isinstance(x, Tensor) and self._device is not None and x.device != self._device:
                raise DeviceMismatchError(
                    f"{self.path}: input is on {x.device} but the brick's parameters are on "
                    f"{self._device}; move one with .to('{self._device}')")
        tr = _trace.tracer()
        if tr is not None:
            # a compiled step is traced for this mode (train or eval), these buffers
            # (load_state_dict, to()) and these settings (a ratio, a momentum, an activation):
            # a change traces again
            tr.depends(self, "training")
            tr.depends(self, "_version")
            for name, v in vars(self).items():
                if name[0] != "_" and name not in _NOT_SETTINGS and _setting(v):
                    tr.depends(self, name)
                elif (name[0] != "_" and type(v) in (list, dict) and len(v) <= 64
                      and all(_setting(x) for x in (v.values() if type(v) is dict else v))):
                    # NOTE: a list or dict of plain values (scales per layer), compared by
                    # value: a change in place traces again
                    tr.depends(self, name, type(v)(v))
        for x in inputs:
            # NOTE: what a brick is given that has no role yet (the model's data, a function's
            # result between bricks) is its input, as in Blocks: Graph.filter(role=INPUT)
            if type(x) is Tensor and x.role is None:
                x.role = roles.INPUT
        prev = _fn._state.brick
        _fn._state.brick = self.path
        try:
            out = self.forward(*inputs, **kwargs)
        except LabkitError as e:
            # NOTE: the innermost brick that fails attaches the graph computed so far (its
            # inputs' history), so lk.notebook.GraphView(error) can draw where it broke
            if getattr(e, "graph", None) is None:
                from ..graph import Graph

                ts = [x for x in inputs if isinstance(x, Tensor)]
                try:
                    e.graph = Graph(ts) if ts else None
                except RuntimeError:
                    e.graph = None
                e.brick = self.path
                if e.graph is not None and not getattr(e, "_noted", False):
                    e._noted = True
                    add_note(e, f"(in brick {self.path}; lk.notebook.GraphView(error) draws "
                                f"the graph up to it: {len(e.graph.nodes)} ops)")
            raise
        finally:
            _fn._state.brick = prev
        for o in out if isinstance(out, tuple) else (out,):
            # NOTE: not an input passed through (Dropout in eval mode): the user's data
            if (isinstance(o, Tensor) and o.role is None
                    and not any(o is x for x in inputs)):
                o.role = roles.OUTPUT
        return out

    # ---- traversal ----------------------------------------------------------------------
    def children(self):
        return list(self._children.values())

    def bricks(self):
        """This brick and every descendant, depth first."""
        out = [self]
        for c in self._children.values():
            out += c.bricks()
        return out

    def params(self, role=None) -> dict:
        """``{"/mlp/linear_0.W": Parameter, ...}``, filtered by role (subroles included)."""
        out = {}
        for b in self.bricks():
            for p in b._params.values():
                if role is None or roles.has_role(p, role):
                    out[p.path] = p
        return out

    def buffers(self) -> dict:
        return {f"{b.path}.{n}": getattr(b, n) for b in self.bricks() for n in b._buffers}

    # ---- modes and devices --------------------------------------------------------------
    def train(self, flag: bool = True) -> Brick:
        tr = _trace.tracer()
        for b in self.bricks():
            if tr is not None and hasattr(tr, "changing"):
                tr.changing(b, "training")  # NOTE: lk.compile guards the mode at the start
            b.training = flag
        return self

    def eval(self) -> Brick:
        return self.train(False)

    def to(self, device) -> Brick:
        """Move every parameter and buffer (in place: optimizers keep their references)."""
        from ..backend import asarray

        dev = _device(device)
        for b in self.bricks():
            b._device = dev
            b._version = next(_versions)
            for p in b._params.values():
                p.data = asarray(p.data, device=dev)
                p.grad = None
            for n in b._buffers:
                object.__setattr__(b, n, asarray(getattr(b, n), device=dev))
        return self

    # ---- state --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Parameters and buffers as NumPy arrays, keyed by hierarchical name."""
        out = {k: np.array(p.numpy()) for k, p in self.params().items()}
        out.update({k: np.array(v if isinstance(v, np.ndarray) else v.get())
                    for k, v in self.buffers().items()})
        return out

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """Load parameters and buffers from ``state`` (``state_dict()``'s form).

        Every array must have exactly the model's shape and dtype: nothing is cast or
        broadcast. With ``strict`` (the default) every key must be there and no other. Nothing
        is loaded unless everything fits; ``CheckpointError`` lists each key that does not,
        with what the model expects and what the state holds.
        """
        from ..backend import asarray

        where = f"load_state_dict into {self.path}"
        if not isinstance(state, Mapping):
            raise CheckpointError(f"{where}: expected a dict of arrays keyed by parameter "
                                  f"name (state_dict()'s form), got {type(state).__name__}")
        odd = [k for k in state if not isinstance(k, str)]
        if odd:
            raise CheckpointError(
                f"{where}: keys are parameter names (strings, as state_dict() gives them); got "
                f"{len(odd)} other key{'s' * (len(odd) > 1)}: "
                + _listed([f"{_shown(k)} ({type(k).__name__})" for k in odd], ", "))
        # NOTE: a str subclass compares, hashes and prints as it likes: its plain text is the key
        state = {str.__str__(k): v for k, v in state.items()}
        params, buffers = self.params(), self.buffers()
        own = {**{k: p.data for k, p in params.items()}, **buffers}
        variances = {f"{b.path}.{n}" for b in self.bricks() for n in b.NONNEGATIVE_BUFFERS}
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        shapes, dtypes, kinds, damaged, arrays = [], [], [], [], {}
        for k in sorted(set(own) & set(state)):
            cur, arr = own[k], _host_array(state[k])
            if arr is None or isinstance(arr, np.ma.MaskedArray):
                what = "a masked array (its mask would be lost)" if arr is not None else \
                    type(state[k]).__name__
                kinds.append(f"{_shown(k)}: {what}, model an array "
                             f"{cur.dtype}{tuple(cur.shape)}")
            elif arr.shape != tuple(cur.shape):
                shapes.append(f"{_shown(k)}: checkpoint {arr.shape}, model {tuple(cur.shape)}")
            elif arr.dtype != cur.dtype:
                dtypes.append(f"{_shown(k)}: checkpoint {arr.dtype}, model {cur.dtype}")
            elif k in variances and arr.dtype.kind == "f" and bool((arr < 0).any()):
                damaged.append(f"{_shown(k)}: {int((arr < 0).sum())} negative values (the least "
                             f"{float(arr.min()):.6g}) in a variance, which is never negative: "
                             "the state is damaged or was edited")
            else:
                arrays[k] = arr
        if shapes or dtypes or kinds or damaged or (strict and (missing or unexpected)):
            parts = []
            if missing:
                parts.append("missing keys: " + _listed(list(map(_shown, missing)), ", "))
            if unexpected:
                parts.append("unexpected keys: " + _listed(list(map(_shown, unexpected)), ", "))
            if kinds:
                parts.append("not arrays: " + _listed(kinds, "; "))
            if damaged:
                parts.append("damaged: " + _listed(damaged, "; "))
            if shapes:
                parts.append("shape mismatches: " + _listed(shapes, "; "))
            if dtypes:
                parts.append("dtype mismatches (nothing is cast; convert the state or the "
                             "model first): " + _listed(dtypes, "; "))
            hint = "" if self.built or not missing else (
                " (a brick with sizes left as None creates its parameters on its first call: "
                "call the model once, or give every size)")
            raise CheckpointError(f"{where}: " + "; ".join(parts) + hint)
        for k, arr in arrays.items():
            if k in params:
                p = params[k]
                p.data = asarray(arr.copy(), device=p.device)
            else:
                brick_path, name = k.rsplit(".", 1)
                b = next(b for b in self.bricks() if b.path == brick_path)
                cur = getattr(b, name)
                dev = "cpu" if isinstance(cur, np.ndarray) else cur.device
                object.__setattr__(b, name, asarray(arr.copy(), device=dev))
                b._version = next(_versions)  # NOTE: compiled steps that hold the old retrace

    # ---- repr ---------------------------------------------------------------------------
    def n_params(self) -> int:
        return sum(p.size for p in self.params().values())

    def _repr_lines(self, depth=0):
        own = ", ".join(f"{n}{tuple(p.shape)}" for n, p in self._params.items())
        count = sum(p.size for b in self.bricks() for p in b._params.values())
        extra = f" [{own}]" if own else ("" if self.built or not self._needs_build() else
                                          " [sizes resolved on the first call]")
        lines = ["  " * depth + f"{self.name}: {type(self).__name__}{extra}  "
                 f"({count:,} params)"]
        for c in self._children.values():
            lines += c._repr_lines(depth + 1)
        return lines

    def _needs_build(self):
        return type(self).build is not Brick.build

    def __repr__(self):
        return "\n".join(self._repr_lines())
