"""One pass per parameter for an update: a kernel on an OpenCL device, cache-sized pieces on
the CPU.

The rules are written once, as array arithmetic (``s["m"] * b1 + g * (1 - b1)``). Run on
symbolic arrays, that arithmetic writes itself down as OpenCL statements, in the order NumPy
would evaluate it, with each Python number a kernel argument (so a learning rate or a bias
correction that changes at every step changes no program). The update of a parameter, its
state and the parameter itself then take one launch instead of one per operation, with the
same rounding (see labkit.backend.opencl.fused). Rules that need more than elementwise
arithmetic (GradientClipping's global norm) make :func:`update` return False: the caller
then runs the unfused path. Plain SGD's kernels for a model's parameters go in one launch
(:func:`run_batch`: up to 8 parameters each; on PoCL a launch costs some 15 us of host time
and as much of the device's).

On the CPU (:func:`update_pieces`) the same rules run on NumPy arrays a piece of ``PIECE``
elements at a time: the temporaries of one piece (``g * lr``, Adam's moments) stay in the
cache instead of each being a whole parameter written to memory and read back. Elementwise
arithmetic on a piece gives the same bits as on the whole array, so the result is bitwise the
unpieced one (tested); only rules known to be elementwise are run this way. Plain SGD is the
exception: one BLAS axpy on the whole parameter (backend/blas.py), a single rounding of
``p - lr * g`` where the CPU has fused multiply-add (within half a unit of ``lr * g`` of the
unfused update; the same bits at every run on one machine, so resumes stay exact).
"""

from __future__ import annotations

import numbers

import numpy as np

from ..backend import blas as _blas
from ..backend.opencl import fused as _fused
from ..backend.opencl.core import ascontiguousarray
from ..backend.opencl.ndarray import ndarray


class _Unsupported(AttributeError):
    """What the symbols cannot express (an AttributeError, so that NumPy's probing of
    attributes reads it as absent)."""


class _Program:
    def __init__(self):
        self.lines: list[str] = []
        self.scalars: list = []
        self.k = 0

    def scalar(self, v) -> str:
        # NOTE: only Python numbers: NumPy treats them as the array's type, as the kernel
        # does; a NumPy float64 scalar would promote the eager result
        if type(v) not in (int, float):  # NOTE: np.float64 is a float subclass: refused
            raise _Unsupported(type(v).__name__)
        self.scalars.append(float(v))
        return f"s{len(self.scalars) - 1}"

    def emit(self, expr: str) -> _Sym:
        name = f"t{self.k}"
        self.k += 1
        self.lines.append(f"const T {name} = {expr};")
        return _Sym(self, name)


_UFUNCS = {"sqrt": "sqrt({0})", "add": "{0} + {1}", "subtract": "{0} - {1}",
           "multiply": "{0} * {1}", "true_divide": "{0} / {1}", "negative": "-{0}"}


class _Sym:
    """One element of an array, as the name of an OpenCL value."""

    __slots__ = ("prog", "name")

    def __init__(self, prog, name):
        self.prog, self.name = prog, name

    def _arg(self, o):
        if isinstance(o, _Sym):
            return o.name
        if isinstance(o, numbers.Number):
            return self.prog.scalar(o)
        raise _Unsupported(type(o).__name__)

    def _bin(self, o, op, right=False):
        a, b = self.name, self._arg(o)
        if right:
            a, b = b, a
        return self.prog.emit(f"{a} {op} {b}")

    def __add__(self, o): return self._bin(o, "+")
    def __radd__(self, o): return self._bin(o, "+", True)
    def __sub__(self, o): return self._bin(o, "-")
    def __rsub__(self, o): return self._bin(o, "-", True)
    def __mul__(self, o): return self._bin(o, "*")
    def __rmul__(self, o): return self._bin(o, "*", True)
    def __truediv__(self, o): return self._bin(o, "/")
    def __rtruediv__(self, o): return self._bin(o, "/", True)
    def __neg__(self): return self.prog.emit(f"-{self.name}")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        form = _UFUNCS.get(ufunc.__name__)
        if form is None or method != "__call__" or kwargs:
            raise _Unsupported(ufunc.__name__)
        return self.prog.emit(form.format(*[self._arg(x) for x in inputs]))

    def __getattr__(self, name):  # .sum(), .astype(), ...: not elementwise arithmetic
        raise _Unsupported(name)


class _Param:
    """A parameter as the rules see it: its data symbolic, everything else (its roles) real."""

    def __init__(self, p, data):
        object.__setattr__(self, "_p", p)
        object.__setattr__(self, "data", data)

    def __getattr__(self, name):
        return getattr(self._p, name)


def _laid_out_as(d, g):
    """``g``, or where it is an OpenCL array of ``d``'s shape and dtype laid out otherwise (the
    weight gradient of ``x @ W.T``: the transposed view of the product that made it), a
    contiguous copy of it (a tiled transpose): the one-kernel update takes only contiguous
    arrays, and the update left to the elementwise ops read the view element by element
    (the MLP's (512, 784) weight at batch 1: 106 + 309 us of kernels, where the copy and the
    fused update take 155 + 109). The same values, so the same update."""
    if (type(g) is ndarray and type(d) is ndarray and not g.is_contiguous and d.is_contiguous
            and g.shape == d.shape and g.dtype == d.dtype and g.rt is d.rt):
        return ascontiguousarray(g)
    return g


def update(rules, p, g, states, group, t, batch=None) -> bool:
    """``p.data -= step`` and the rules' state, for one parameter, in one kernel; False (and
    nothing changed) when the rules or the arrays do not fit one. ``batch``: a list that
    plain SGD's launch is put in instead (:func:`run_batch` launches them together)."""
    sgd = sgd_rule(rules) and not states[0]
    if sgd and _SGD_BODY:
        # NOTE: SGD's kernel does not depend on its learning rate's value (a kernel
        # argument): the body its symbols wrote the first time, with this step's rate (the
        # symbolic run cost about 6 us of host time per parameter and step)
        if not _fused.fits(p.data, g):
            return False
        lr = rules[0].h("lr", group, t)
        if type(lr) not in (int, float):
            return False  # NOTE: what _Program.scalar refuses (a NumPy scalar, an array)
        if batch is None:
            _fused.run(_SGD_BODY[0], [p.data, g], [float(lr)], [0], name="optimizer")
        else:
            batch.append(([p.data, g], [float(lr)]))
        return True
    arrays = [p.data, g]
    keys = []
    for st in states:
        for k, v in st.items():
            keys.append((st, k))
            arrays.append(v)
    if not _fused.fits(*arrays):
        return False
    prog = _Program()
    x = [_Sym(prog, f"x{k}") for k in range(len(arrays))]
    sym_states = []
    pos = 2
    for st in states:
        d = {}
        for k in st:
            d[k] = x[pos]
            pos += 1
        sym_states.append(d)
    step = x[1]
    param = _Param(p, x[0])
    try:
        for r, st in zip(rules, sym_states):
            (step,) = r.apply([param], [step], [st], [group], t)
            if not isinstance(step, _Sym):
                raise _Unsupported(type(step).__name__)
        new_p = x[0] - step
    except (AttributeError, TypeError):
        return False
    writes, outs = [0], [new_p]
    pos = 2
    for st in sym_states:
        for v in st.values():
            if v is not x[pos]:
                if not isinstance(v, _Sym):
                    return False
                writes.append(pos)
                outs.append(v)
            pos += 1
    body = "\n".join(prog.lines + [f"const T y{j} = {o.name};" for j, o in enumerate(outs)])
    if sgd and len(prog.scalars) == 1:
        _SGD_BODY[:] = [body]
    _fused.run(body, arrays, prog.scalars, writes, name="optimizer")
    return True


#: SGD's kernel body, as its symbols write it (``update``)
_SGD_BODY: list = []


#: elements updated at a time on the CPU, over the parameter and its state arrays together
#: (SGD: 2**16 of the parameter, Adam: a third of that): the piece of every array the update
#: touches, temporaries included, stays in a core's cache. Measured on the 784-512-512-10
#: MLP's parameters: SGD 0.70x and Adam 0.78x the time of the whole-array update.
PIECE = 1 << 16


def root(a):
    """The array owning ``a``'s memory (``a`` itself when it owns it)."""
    while isinstance(getattr(a, "base", None), np.ndarray):
        a = a.base
    return a


#: the rules whose step is the gradient times ``lr`` and nothing else (SGD's apply; a
#: subclass that overrides it is not assumed to be): optimizers/__init__.py fills it
SCALE_ONLY: set = set()
#: Rule.h, which reads a hyper-parameter (a schedule's value at the step): the pieces resolve
#: each once and hand the values to ``apply``, whose ``h`` must give a value back unchanged;
#: a rule that overrides ``h`` (doubling lr) would apply it twice. optimizers/__init__.py
PLAIN_H: set = set()


def _weak(v, dtype) -> bool:
    """Whether ``g * v`` stays in ``dtype`` (a Python number, or a NumPy scalar of it)."""
    return type(v) in (int, float) or (isinstance(v, np.generic) and v.dtype == dtype)


def _scalar(v) -> bool:
    return isinstance(v, (numbers.Number, np.generic)) or (
        isinstance(v, np.ndarray) and v.ndim == 0)


def apply(opt, plist, idx, grads, piecewise):
    """The fused updates of ``opt``'s parameters at ``idx`` (``Optimizer._apply``): on an
    OpenCL device one kernel per parameter (:func:`update`; plain SGD's batched:
    :func:`run_batch`); on the CPU, when the rules are
    ``piecewise`` and no two parameters share memory, plain SGD's axpy (:func:`sgd_axpy`) or
    cache-sized pieces (:func:`update_pieces`). Returns the indices and gradients left to the
    unfused path."""
    rules, states = opt.rules, opt.states
    if not isinstance(grads[0], np.ndarray):
        if not all(r.elementwise for r in rules):
            return idx, grads
        # NOTE: every copy made before any kernel runs, as the unfused path computes every
        # step before it changes a parameter; and where a gradient is another parameter's
        # memory (b.grad = a's array), the unfused path for all: a kernel would read a
        # parameter an earlier one of this update has changed
        grads = [_laid_out_as(plist[i].data, g) for i, g in zip(idx, grads)]
        bufs = {id(getattr(plist[i].data, "data", None)): i for i in idx}
        if any(bufs.get(id(getattr(g, "data", None)), i) != i for i, g in zip(idx, grads)):
            return idx, grads
        batch: list = []
        rest = [(i, g) for i, g in zip(idx, grads)
                if not update(rules, plist[i], g, [st[i] for st in states], opt._group(i),
                              opt.t, batch)]
        run_batch(batch)
    elif (all(type(r).apply in piecewise for r in rules)
          and len({id(root(plist[i].data)) for i in idx}) == len(idx)):
        # NOTE: the whole-array update computes every step before it changes any parameter
        if plain_sgd(rules, states):
            rest = [(i, g) for i, g in zip(idx, grads)
                    if not sgd_axpy(rules[0], plist[i].data, g, opt._group(i), opt.t)]
        else:
            rest = [(i, g) for i, g in zip(idx, grads)
                    if not update_pieces(rules, plist[i], g, [st[i] for st in states],
                                         opt._group(i), opt.t)]
    else:
        return idx, grads
    return [i for i, _ in rest], [g for _, g in rest]


def run_batch(batch) -> None:
    """Plain SGD's updates ``batch`` (``update``'s) in as few launches as the device takes
    (backend/opencl/fused.run_many: a model's parameters in one instead of one each; the
    same arithmetic, so the same bits), or one by one, in order, where two of them share a
    buffer (an update would then read what another one in the same launch writes)."""
    bufs = [a.data.int_ptr for arrays, _ in batch for a in arrays]
    if len(set(bufs)) != len(bufs):
        for arrays, lr in batch:
            _fused.run(_SGD_BODY[0], arrays, lr, [0], name="optimizer")
        return
    kinds: dict = {}  # NOTE: one launch per device and dtype
    for arrays, lr in batch:
        kinds.setdefault((id(arrays[0].rt), arrays[0].dtype), []).append((arrays, lr))
    for part in kinds.values():
        _fused.run_many(_SGD_BODY[0], [a for a, _ in part], [lr for _, lr in part], [0],
                        name="optimizer")


def plain_sgd(rules, states) -> bool:
    """Whether ``rules`` are plain SGD: one rule whose step is ``lr * g``, with no state and
    the built-in reading of its hyper-parameters."""
    return sgd_rule(rules) and not any(states[0])


def sgd_rule(rules) -> bool:
    """Whether ``rules`` are one rule whose step is ``lr * g`` with the built-in reading of its
    hyper-parameters (plain SGD, where it keeps no state)."""
    return (len(rules) == 1 and type(rules[0]).apply in SCALE_ONLY
            and type(rules[0]).h in PLAIN_H)


def sgd_axpy(rule, d, g, group, t) -> bool:
    """Plain SGD's ``d -= lr * g`` for a NumPy parameter ``d`` as one BLAS axpy, whatever its
    size; False (``d`` untouched) where the arrays or the rate do not fit one. At batch 1 the
    MLP step's six parameters took 203 us through update_pieces and the unfused path for the
    small ones, against 153 us for six axpy calls; see update_pieces for the rounding."""
    if type(g) is not np.ndarray or g.dtype != d.dtype:
        return False
    lr = rule.h("lr", group, t)
    return _weak(lr, d.dtype) and _blas.axpy(-float(lr), g, d)


def update_pieces(rules, p, g, states, group, t) -> bool:
    """``p.data -= step`` and the rules' state for one NumPy parameter, ``PIECE`` elements at a
    time; False (and nothing changed) where that could differ from the whole-array update: a
    small parameter, arrays that are not contiguous ones of one shape, a gradient or state
    sharing memory with the parameter, a hyper-parameter that is an array, or a state whose
    dtype the rules would change. The caller makes sure no two parameters share memory."""
    d = p.data
    n = d.size
    arrays = [d] + [v for st in states for v in st.values()]
    size = PIECE // len(arrays)
    if (n < 2 * size or g.shape != d.shape
            or not all(type(a) is np.ndarray and a.shape == d.shape and a.flags.c_contiguous
                       for a in arrays)):
        return False
    if (g is not d and root(g) is root(d)) or len({id(root(a)) for a in arrays}) < len(arrays):
        return False  # NOTE: a later piece would read what an earlier one wrote
    if any(type(r).h not in PLAIN_H for r in rules):
        return False
    # NOTE: each rule's hyper-parameters at this step, once (a schedule is called once)
    groups = []
    for r in rules:
        values = {k: r.h(k, group, t) for k in r.hyper}
        if not all(_scalar(v) for v in values.values()):
            return False  # NOTE: an array (a learning rate per row) broadcasts the step
        groups.append({**group, **values})
    flat, gflat = d.reshape(-1), g.reshape(-1)
    if (len(rules) == 1 and type(rules[0]).apply in SCALE_ONLY and not states[0]
            and g.dtype == d.dtype and _weak(groups[0]["lr"], d.dtype)):
        # NOTE: SGD: one BLAS axpy where NumPy's BLAS can be called (the MLP's parameters:
        # 226 -> about 40 us; fused multiply-add: the last bit may differ from NumPy's), else
        # each piece's step into one kept array, not a new one per piece (the same multiply
        # and subtract; 271 -> 226 us)
        lr = groups[0]["lr"]
        if _blas.axpy(-float(lr), gflat, flat):
            return True
        scratch = np.empty(size, d.dtype)
        for lo in range(0, n, size):
            hi = min(lo + size, n)
            np.multiply(gflat[lo:hi], lr, out=scratch[:hi - lo])
            np.subtract(flat[lo:hi], scratch[:hi - lo], out=flat[lo:hi])
        return True
    flats = [{k: v.reshape(-1) for k, v in st.items()} for st in states]
    for lo in range(0, n, size):
        sl = slice(lo, lo + size)
        views = [{k: v[sl] for k, v in st.items()} for st in flats]
        pieces = [dict(vw) for vw in views]
        step = gflat[sl]
        param = _Param(p, flat[sl])
        for r, st, gr in zip(rules, pieces, groups):
            (step,) = r.apply([param], [step], [st], [gr], t)
        if lo == 0 and (step.shape != flat[sl].shape or any(
                k not in views[i] or v.dtype != views[i][k].dtype
                or v.shape != views[i][k].shape for i, st in enumerate(pieces)
                for k, v in st.items())):
            return False  # NOTE: nothing written yet; the whole-array path rebinds the state
        for vw, st in zip(views, pieces):
            for k, v in st.items():
                if v is not vw[k]:
                    vw[k][...] = v
        flat[sl] -= step
    return True


_ = np  # NOTE: the rules call numpy's ufuncs on the symbols (np.sqrt): __array_ufunc__
