"""Captured launches: an op of a compiled step on an OpenCL device replayed as its kernels.

An op's ``forward`` on OpenCL arrays works out, at every call, which kernels to launch and
with which arguments (the path by shape, strides, sizes, the kernel objects, the argument
list): in a compiled MLP step at batch 1 about 20 us of host time per op, for 2 to 3 us of
launching. The first replay records what each op launched (``cl.Kernel.__call__`` on this
thread); later replays launch the recorded kernels again, each on a kernel object of its own
whose arguments were set once, setting only the buffers of the op's inputs and of its fresh
outputs. That is what tinygrad's TinyJit and CUDA graphs do for a whole step; here it is per
op, so that everything else of the replay (host steps, checks, the optimizer) stays as it is.

An op is captured only where that is sure to launch the same thing (else it runs as before):

* its inputs are OpenCL arrays of one device, its outputs new contiguous arrays it allocated;
* it launched kernels only (no copy, read, upload or wait) on arrays it was given or
  allocated itself (a buffer from elsewhere, a cached constant say, could change);
* it has no attribute a later op reads (``attr_out``) and changes nothing in place;
* at each replay its inputs have the recorded shapes, dtypes, strides, offsets, buffer sizes
  and aliasing (which inputs share a buffer), else it runs as before (``fallbacks``).

The buffers the op allocated for itself (a GEMM's partial sums) are kept for its later
replays: the queue is in order, so the next replay's writes come after this one's reads.
Every output is a new array at every replay (a returned value is never overwritten).
"""

from __future__ import annotations

import threading

#: the op classes whose forward is captured: array functions whose launches depend only on
#: their inputs' layout (not on values, not on state kept between calls); elementwise kernels
#: lk.compile fused (compile/fusion.py) are captured too
CAPTURED: set = set()
#: False: no op of a program built from then on is captured (its replays work their launches
#: out again); programs built before keep what they have
ENABLED = True
#: a recording that failed (a first call that tuned a GEMM, say) is tried again this often
ATTEMPTS = 3
_ONE = threading.Lock()
#: the runtime's methods a recording wraps (and puts back)
_HOOKS = ("allocate", "finish", "_release")


class _Recording:
    """What the op called on this thread launched, allocated and otherwise asked of the
    device, between ``start`` and ``stop``."""

    def __init__(self, rt):
        self.rt, self.tid = rt, threading.get_ident()
        self.launches, self.allocated, self.impure = [], {}, None
        #: whether the launch being made took ``rt.lock`` (opening the runtime's gate) rather
        #: than the launch lock alone (a small elementwise launch the gate holds back)
        self.opened = False

    def __enter__(self):
        import pyopencl as cl

        rec, rt = self, self.rt
        self._own = {k: rt.__dict__[k] for k in _HOOKS if k in rt.__dict__}
        self._call, self._copy, self._alloc = cl.Kernel.__call__, cl.enqueue_copy, rt.allocate
        self._finish, self._release = rt.finish, rt._release
        call, copy, alloc, release = self._call, self._copy, self._alloc, self._release

        def kernel_call(kernel, queue, gs, ls, *args, **kw):
            if threading.get_ident() == rec.tid:
                if kw or queue is not rt.queue:
                    rec.impure = rec.impure or "a launch with options or on another queue"
                rec.launches.append((kernel, gs, ls, args, rec.opened))
                rec.opened = False
            return call(kernel, queue, gs, ls, *args, **kw)

        def opening():
            if threading.get_ident() == rec.tid:
                rec.opened = True
            return release()

        def enqueue_copy(*a, **kw):
            if threading.get_ident() == rec.tid:
                rec.impure = rec.impure or "a copy, read or upload"
            return copy(*a, **kw)

        def allocate(nbytes):
            buf = alloc(nbytes)
            if threading.get_ident() == rec.tid:
                rec.allocated[id(buf)] = buf
            return buf

        def finish():
            if threading.get_ident() == rec.tid:
                rec.impure = rec.impure or "a wait for the device (a GEMM being tuned, say)"
            return self._finish()

        cl.Kernel.__call__, cl.enqueue_copy = kernel_call, enqueue_copy
        rt.allocate, rt.finish, rt._release = allocate, finish, opening
        return self

    def __exit__(self, *exc):
        import pyopencl as cl

        cl.Kernel.__call__, cl.enqueue_copy = self._call, self._copy
        for k in _HOOKS:  # NOTE: what the runtime had: its methods, or its own
            if k in self._own:
                setattr(self.rt, k, self._own[k])
            else:
                delattr(self.rt, k)


def allowed(fn) -> bool:
    """Whether ``fn`` (a Function) is of a class whose forward is captured."""
    if not CAPTURED:
        from ..functions import activation as act
        from ..functions import array as arr
        from ..functions import broadcast as bc
        from ..functions import connection as conn
        from ..functions import loss
        from ..functions import math as m
        from ..functions import pooling as pool
        from ..functions import recurrent as rec
        from ..functions import reduction as red

        CAPTURED.update({conn.MatMul, conn.MatMulAdd, conn.MatMulMask, conn.Linear, red.Sum,
                         bc.SumTo,
                         act.ReLU, act.ReLUGrad, m.Add, m.AddConstant, m.Sub, m.Mul,
                         m.MulConstant, m.DivConstant,
                         m.Tanh, m.Sigmoid, rec.LSTM, rec.LSTMGrad, pool.TiledMaxCL,
                         pool.PoolScatterCL, act.Softmax, act.LogSoftmax, act.SoftmaxGrad,
                         act.LogSoftmaxGrad, loss.SoftmaxCrossEntropy, loss._KeptSoftmax,
                         loss._XentGrad,
                         arr.Concat, arr.Stack})
    return type(fn) in CAPTURED


def _meta(a):
    return (a.shape, a.dtype, a._st, a.offset, a._nbuf)


def _aliasing(arrays):
    first: dict = {}
    return tuple(first.setdefault(id(a.data), i) for i, a in enumerate(arrays))


def _inputs(fn_obj, attr_in, ins):
    """The arrays the op reads: its arguments, then the attributes the replay set on it."""
    if not attr_in:
        return ins
    got = list(ins)
    for name, i in attr_in:
        v = getattr(fn_obj, name)
        got.append(v if i is None else v[i])
    return got


def capturing(forward, fn_obj, attr_in, multi, ndarray, stats, rate=None):
    """A stand-in for ``forward`` in a replay (see the module's doc): it records at its first
    call and launches the recorded kernels from then on. ``stats`` counts ``captured`` ops,
    ``fallbacks`` (calls run as before after a capture) and ``refused`` recordings (with the
    last reason in ``why``). ``rate``: a function giving the scalar argument object of this
    call that is set again at each replay (``_build``); a forward that returns None (it did
    not run: compile/sgd.py's product) is not recorded."""
    state = {"run": None, "tries": 0}

    def plain_or_record(*ins):
        arrays = _inputs(fn_obj, attr_in, ins)
        if state["tries"] >= ATTEMPTS or not arrays or any(
                type(a) is not ndarray for a in arrays) or len({id(a.rt) for a in arrays}) > 1:
            return forward(*ins)
        rt = arrays[0].rt
        if not _ONE.acquire(blocking=False):  # NOTE: one recording at a time (it patches)
            return forward(*ins)
        state["tries"] += 1
        try:
            rec = _Recording(rt)
            with rec:
                out = forward(*ins)
        finally:
            _ONE.release()
        if out is None:
            return out
        run, why = _build(rec, arrays, out, multi, forward, fn_obj, attr_in, ndarray, stats,
                          rate=None if rate is None else rate())
        if run is None:
            stats["refused"] += 1
            stats["why"] = why
        else:
            state["run"] = run
            stats["captured"] += 1
        return out

    def call(*ins):
        run = state["run"]
        if run is not None:
            return run(*ins) if rate is None else run(*ins, rate=rate())
        return plain_or_record(*ins)

    return call


def _build(rec, arrays, out, multi, forward, fn_obj, attr_in, ndarray, stats, rate=None):
    """The replay of the launches ``rec`` recorded (see the module's doc), or None and why
    not. ``rate``: a scalar argument object of the recording (compile/sgd.py's learning rate)
    whose places are set again at each replay from its ``rate=`` value."""
    import pyopencl as cl

    from ..backend.opencl.shapes import c_strides

    if rec.impure:
        return None, rec.impure
    outs = list(out) if multi else [out]
    if not outs or any(type(o) is not ndarray for o in outs):
        return None, "an output that is not an OpenCL array"
    for o in outs:
        if (id(o.data) not in rec.allocated or o.offset or not o.is_contiguous
                or o._nbuf != o.size):  # NOTE: a reshaped view of a new array will do
            return None, "an output that is not a new contiguous array"
    if not rec.launches:
        return None, "no launch"
    by_buffer: dict = {}
    for i, a in enumerate(arrays):
        by_buffer.setdefault(id(a.data), (0, i))
    for j, o in enumerate(outs):
        by_buffer[id(o.data)] = (1, j)
    keep, launches = [], []
    rt = arrays[0].rt
    for kernel, gs, ls, args, opened in rec.launches:
        types = getattr(kernel, "lk_types", None)
        if types is None or len(types) != len(args):
            return None, f"a kernel without its argument types ({kernel.function_name})"
        clone = cl.Kernel(kernel.program, kernel.function_name)
        clone.set_scalar_arg_dtypes(types)
        sets, rated = [], []
        for pos, (t, v) in enumerate(zip(types, args)):
            if t is not None:
                if rate is not None and v is rate:
                    rated.append((pos, t))
                continue
            where = by_buffer.get(id(v))
            if where is not None:
                sets.append((pos,) + where)
            elif id(v) in rec.allocated:
                keep.append(v)  # NOTE: the op's own scratch, kept for its next replays
            elif not isinstance(v, cl.LocalMemory):
                return None, f"a buffer from outside the op ({kernel.function_name})"
        clone.set_args(*args)
        # NOTE: held back as the op's own launch was: one that did not open the gate
        launches.append((clone, gs, ls, tuple(sets), tuple(rated),
                         rt.batching and not opened))
    metas = tuple(_meta(a) for a in arrays)
    # NOTE: made as ndarray.fresh makes them (ndarray.__init__'s conversions cost about 3 us
    # an output: 70 us of an MLP step's 0.9 ms at batch 1)
    shapes = [(o.shape, o.dtype, c_strides(o.shape), o.size) for o in outs]
    run = _generate(launches, metas, _aliasing(arrays), shapes, rt, fn_obj, attr_in, forward,
                    stats, multi, ndarray)
    run.keep = keep
    return run, None


def _generate(launches, metas, alias, shapes, rt, fn_obj, attr_in, forward, stats, multi,
              ndarray):
    """The replay of ``launches`` as one generated Python function: the inputs' layouts
    compared with ``metas`` and ``alias`` line by line, the outputs made, the buffers set and
    the kernels enqueued (a loop over the same tables took 8-10 us of host time an op; an op
    at batch 1 launches in 1-2). A launch the op made without opening the runtime's gate (a
    small elementwise one, ``Runtime.tick``) is held back as it was; any other takes
    ``rt.lock``, which opens it. (Holding every launch over at most ``HELD_MAX`` work-items,
    GEMMs and the LSTM's cells included, made the compiled LSTM step 8% slower.) The op's
    launches are not made under one lock: the scratch buffers it keeps (``run.keep``) are safe
    because a compiled step runs one call at a time (its lock) on an in-order queue."""
    import pyopencl as cl

    from ..backend.opencl.ndarray import fresh_fields

    def fallback(ins):
        stats["fallbacks"] += 1
        return forward(*ins)

    env = {"ND": ndarray, "RT": rt, "NEW": object.__new__, "FALLBACK": fallback,
           "ENQ": cl.enqueue_nd_range_kernel, "Q": rt.queue, "LOCK": rt.launch_lock,
           "TICK": rt.tick, "ALIASING": _aliasing, "ALIAS": alias, "INPUTS": _inputs,
           "FN": fn_obj, "ATTR": attr_in}
    n = len(metas)
    lines = ["def run(*ins, rate=None):",
             "    got = INPUTS(FN, ATTR, ins)" if attr_in else "    got = ins",
             f"    if len(got) != {n}:", "        return FALLBACK(ins)"]
    names = [f"a{i}" for i in range(n)]
    lines.append(f"    {', '.join(names)}, = got")
    bad = []
    for i, (shape, dtype, st, offset, nbuf) in enumerate(metas):
        env[f"S{i}"], env[f"D{i}"], env[f"T{i}"] = shape, dtype, st
        bad.append(f"type(a{i}) is not ND or a{i}.rt is not RT or a{i}.shape != S{i} or "
                   f"a{i}._st != T{i} or a{i}.offset != {int(offset)} or "
                   f"a{i}._nbuf != {int(nbuf)} or a{i}.dtype != D{i}")
    if n <= 6:  # NOTE: which inputs share a buffer, pair by pair; else as a table
        bad += [f"(a{i}.data is a{j}.data) is not {alias[i] == alias[j]}"
                for i in range(n) for j in range(i + 1, n)]
    else:
        bad.append("ALIASING(got) != ALIAS")
    lines.append("    if (" + "\n            or ".join(bad) + "):")
    lines.append("        return FALLBACK(ins)")
    for j, (shape, dtype, st, size) in enumerate(shapes):
        env[f"OS{j}"], env[f"OD{j}"], env[f"OT{j}"] = shape, dtype, st
        lines += [f"    o{j} = NEW(ND)",
                  fresh_fields(f"o{j}", "RT", f"OS{j}", f"OD{j}", f"OT{j}", str(size)).rstrip(),
                  f"    o{j}.data = RT.allocate({size * dtype.itemsize})"]
    for k, (clone, gs, ls, sets, rated, held) in enumerate(launches):
        env[f"K{k}"], env[f"G{k}"], env[f"L{k}"] = clone, gs, ls
        lines.append("    with LOCK:" if held else "    with RT.lock:")
        for pos, kind, i in sets:
            lines.append(f"        K{k}.set_arg({pos}, {'o' if kind else 'a'}{i}.data)")
        for pos, t in rated:
            env[f"R{k}_{pos}"] = t
            lines.append(f"        K{k}.set_arg({pos}, R{k}_{pos}(rate))")
        lines.append(f"        ENQ(Q, K{k}, G{k}, L{k})")
        if held:
            lines.append("        TICK()")
    outs = ", ".join(f"o{j}" for j in range(len(shapes)))
    lines.append(f"    return ({outs},)" if multi else f"    return {outs}")
    src = "\n".join(lines) + "\n"
    exec(compile(src, "<lk.compile captured launches>", "exec"), env)  # noqa: S102
    run = env["run"]
    run.source = src
    return run
