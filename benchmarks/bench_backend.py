"""labkit's OpenCL arrays against NumPy, PyTorch CPU and tinygrad's CL backend on the same
device (each if installed), side by side.

    python benchmarks/bench_backend.py            # all sections
    python benchmarks/bench_backend.py gemm       # one of: gemm, elementwise, overhead, softmax

Every row is measured in this run: timings on a shared machine are noisy, compare the ratios.
Each timing is the best of several repeats, with the device synchronised around it.
tinygrad's GEMM and elementwise kernels run under its TinyJit (captured, then replayed); the
per-op overhead has no tinygrad column: it is lazy, and a chain of ops becomes one kernel.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from labkit.backend import opencl as cp
from labkit.backend.opencl import runtime

try:
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
except ImportError:  # PyTorch is optional here: `pip install torch==2.13.0` (CPU build)
    torch = None

RT = runtime(0)


def best(f, reps=5, sync=True):
    """The fastest of ``reps`` timed calls after one untimed; ``sync``: True waits for
    labkit's device after each, a function is called instead (tinygrad's), False: no wait."""
    wait = RT.finish if sync is True else (sync or None)
    f()
    if wait:
        wait()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        if wait:
            wait()
        times.append(time.perf_counter() - t)
    return min(times)


#: tinygrad on the same CL device (if installed): its GEMM and elementwise kernels, each call
#: replayed by TinyJit, in the last two columns
TG, TG_NOTE = None, "not tried"


def _tg_time(fn, arrays, reps=5):
    """The fastest call of ``fn`` (tinygrad Tensors -> Tensor), realized under TinyJit, on
    copies of ``arrays``."""
    from tinygrad import Device, Tensor, TinyJit

    ts = [Tensor(a).realize() for a in arrays]
    jit = TinyJit(lambda *xs: fn(*xs).realize())
    jit(*ts)  # NOTE: TinyJit: the first call runs, the second captures, later ones replay
    return best(lambda: jit(*ts), reps, sync=Device["CL"].synchronize)


def row(*cells, widths=(28, 12, 12, 12, 12, 12, 12, 13)):
    print("".join(str(c).rjust(w) if i else str(c).ljust(w)
                  for i, (c, w) in enumerate(zip(cells, widths))))


def gemm():
    print(f"\n## float32 GEMM, GFLOP/s (device: {RT.info.name}, {RT.info.platform})")
    row("n", "labkit cl", "NumPy", "cl/NumPy", "PyTorch", "cl/PyTorch", "tinygrad",
        "cl/tinygrad")
    rng = np.random.default_rng(0)
    for n in (256, 1024, 2048):
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        da, db = cp.asarray(a), cp.asarray(b)
        reps = 10 if n <= 1024 else 4
        flops = 2 * n**3
        t_cl = best(lambda da=da, db=db: da @ db, reps)
        t_np = best(lambda a=a, b=b: a @ b, reps, sync=False)
        g_cl, g_np = flops / t_cl / 1e9, flops / t_np / 1e9
        cells = [n, f"{g_cl:.1f}", f"{g_np:.1f}", f"{g_cl / g_np:.0%}"]
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            g_t = flops / best(lambda ta=ta, tb=tb: ta @ tb, reps, sync=False) / 1e9
            cells += [f"{g_t:.1f}", f"{g_cl / g_t:.0%}"]
        else:
            cells += ["-", "-"]
        if TG is not None:
            g_g = flops / _tg_time(lambda x, y: x @ y, (a, b), reps) / 1e9
            cells += [f"{g_g:.1f}", f"{g_cl / g_g:.0%}"]
        row(*cells)
    # the transposed-operand path (B packed once per call, like a BLAS)
    n = 1024
    a = rng.standard_normal((n, n)).astype(np.float32)
    da = cp.asarray(a)
    t_cl = best(lambda: da @ da.T, 10)
    t_np = best(lambda: a @ a.T, 10, sync=False)
    row("1024, a @ a.T", f"{2 * n**3 / t_cl / 1e9:.1f}", f"{2 * n**3 / t_np / 1e9:.1f}",
        f"{t_np / t_cl:.0%}")
    tuned = {n: cfg for (kind, ct, n), cfg in RT.tuned.items() if kind == "gemm"}
    print(f"tuned blocking (rows, vectors, width) by size class: {tuned}")


def elementwise():
    n = 16 * 1024 * 1024
    print(f"\n## elementwise on {n // 2**20}M float32 elements, GB/s (bytes read + written)")
    row("op", "labkit cl", "NumPy", "cl/NumPy", "PyTorch", "cl/PyTorch", "tinygrad",
        "cl/tinygrad")
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = np.empty_like(a)
    pos = np.abs(a) + np.float32(0.1)
    da, db, dpos = cp.asarray(a), cp.asarray(b), cp.asarray(pos)
    dout = cp.empty(n)
    ta, tb, tpos, tout = (torch.from_numpy(x) for x in (a, b, pos, out)) if torch \
        else (None,) * 4
    def sq(x):
        return x.reshape(4096, 4096)

    cases = [
        ("a + b", 12, lambda: cp.add(da, db, out=dout), lambda: np.add(a, b, out=out),
         (lambda: torch.add(ta, tb, out=tout)) if torch else None),
        ("exp(a)", 8, lambda: cp.exp(da, out=dout), lambda: np.exp(a, out=out),
         (lambda: torch.exp(ta, out=tout)) if torch else None),
        ("log(|a|)", 8, lambda: cp.log(dpos, out=dout), lambda: np.log(pos, out=out),
         (lambda: torch.log(tpos, out=tout)) if torch else None),
        ("tanh(a)", 8, lambda: cp.tanh(da, out=dout), lambda: np.tanh(a, out=out),
         (lambda: torch.tanh(ta, out=tout)) if torch else None),
        ("a * 2.5 (scalar)", 8, lambda: cp.multiply(da, 2.5, out=dout),
         lambda: np.multiply(a, np.float32(2.5), out=out),
         (lambda: torch.mul(ta, 2.5, out=tout)) if torch else None),
        ("a + b[::1] (4096x4096)+row", 8 + 4 / 4096,
         lambda: cp.add(da.reshape(4096, 4096), db[:4096], out=dout.reshape(4096, 4096)),
         lambda: np.add(a.reshape(4096, 4096), b[:4096], out=out.reshape(4096, 4096)), None),
        ("a.T + b (transposed)", 12,
         lambda: cp.add(sq(da).T, sq(db), out=sq(dout)),
         lambda: np.add(sq(a).T, sq(b), out=sq(out)), None),
        ("sum(a)", 4, lambda: da.sum(), lambda: a.sum(), (lambda: ta.sum()) if torch else None),
    ]
    # tinygrad's form of each case that it has (a Tensor function and its NumPy inputs)
    tg_cases = {"a + b": (lambda x, y: x + y, (a, b)), "exp(a)": (lambda x: x.exp(), (a,)),
                "log(|a|)": (lambda x: x.log(), (pos,)), "tanh(a)": (lambda x: x.tanh(), (a,)),
                "a * 2.5 (scalar)": (lambda x: x * 2.5, (a,)),
                "sum(a)": (lambda x: x.sum(), (a,))}
    for name, bpe, f_cl, f_np, f_t in cases:
        g_cl = bpe * n / best(f_cl) / 1e9
        g_np = bpe * n / best(f_np, sync=False) / 1e9
        cells = [name, f"{g_cl:.1f}", f"{g_np:.1f}", f"{g_cl / g_np:.0%}"]
        if f_t:
            g_t = bpe * n / best(f_t, sync=False) / 1e9
            cells += [f"{g_t:.1f}", f"{g_cl / g_t:.0%}"]
        else:
            cells += ["-", "-"]
        if TG is not None and name in tg_cases:
            g_g = bpe * n / _tg_time(*tg_cases[name]) / 1e9
            cells += [f"{g_g:.1f}", f"{g_cl / g_g:.0%}"]
        row(*cells)


def overhead():
    print("\n## per-op overhead on tiny arrays (16 float32), µs per op, a chain of 1000 ops")
    row("op", "labkit cl", "NumPy", "pyopencl.array", "PyTorch",
        widths=(28, 12, 12, 16, 12))
    h = np.ones(16, np.float32)
    d = cp.asarray(h)
    import pyopencl.array as cla

    pa = cla.to_device(RT.queue, h)
    th = torch.from_numpy(h) if torch else None
    N = 1000

    def chain(x, f):
        def run():
            y = x
            for _ in range(N):
                y = f(y)
            return y
        return run

    cases = [
        ("y = y + 1.0", lambda y: y + 1.0),
        ("y = y * y", lambda y: y * y),
        ("y = exp(y) [ufunc]", None),
    ]
    for name, f in cases:
        if f is None:
            import pyopencl.clmath as clmath

            # exp(exp(...)) overflows to inf after a few steps: that is fine for timing
            with np.errstate(over="ignore"):
                r = [best(chain(d, cp.exp)), best(chain(h, np.exp), sync=False),
                     best(chain(pa, clmath.exp)),
                     best(chain(th, torch.exp), sync=False) if torch else None]
        else:
            r = [best(chain(d, f)), best(chain(h, f), sync=False), best(chain(pa, f)),
                 best(chain(th, f), sync=False) if torch else None]
        row(name, *[f"{t / N * 1e6:.1f}" if t is not None else "-" for t in r],
            widths=(28, 12, 12, 16, 12))
    t = best(lambda: (d + d).sum().get())
    print(f"a sync round trip ((d + d).sum().get()): {t * 1e6:.0f} µs")


def softmax():
    from labkit.backend.opencl import softmax as sm

    print("\n## softmax and log-softmax over rows, µs per call (forward; gradient from y and g)")
    row("shape / op", "cl kernel", "cl composed", "NumPy", "PyTorch", "kernel/NumPy",
        widths=(26, 12, 13, 10, 10, 14))
    rng = np.random.default_rng(0)
    for shape in ((32, 10), (256, 1000), (4096, 64)):
        x = rng.standard_normal(shape).astype(np.float32)
        g = rng.standard_normal(shape).astype(np.float32)
        dx, dg = cp.asarray(x), cp.asarray(g)
        tx, tg = (torch.from_numpy(x), torch.from_numpy(g)) if torch else (None, None)

        def np_ls():
            m = x.max(1, keepdims=True)
            return x - (np.log(np.exp(x - m).sum(1, keepdims=True)) + m)

        y = np.exp(np_ls())
        dy, ty = cp.asarray(y), (torch.from_numpy(y) if torch else None)
        cases = [
            ("log_softmax", lambda: sm.softmax(dx, 1, log=True),
             lambda: cp.subtract(dx, cp.logsumexp(dx, axis=1, keepdims=True)), np_ls,
             (lambda: torch.log_softmax(tx, 1)) if torch else None),
            ("softmax", lambda: sm.softmax(dx, 1, log=False),
             lambda: cp.exp(cp.subtract(dx, cp.logsumexp(dx, axis=1, keepdims=True))),
             lambda: np.exp(np_ls()), (lambda: torch.softmax(tx, 1)) if torch else None),
            ("softmax gradient", lambda: sm.grad(dy, dg, 1, log=False),
             lambda: cp.multiply(dy, cp.subtract(dg, cp.multiply(dg, dy).sum(axis=1,
                                                                             keepdims=True))),
             lambda: y * (g - (g * y).sum(1, keepdims=True)),
             (lambda: torch._softmax_backward_data(tg, ty, 1, ty.dtype)) if torch else None),
        ]
        for name, f_k, f_c, f_np, f_t in cases:
            t = [best(f_k), best(f_c), best(f_np, sync=False),
                 best(f_t, sync=False) if f_t else None]
            row(f"{shape} {name}", *[f"{v * 1e6:.0f}" if v is not None else "-" for v in t],
                f"{t[2] / t[0]:.0%}", widths=(26, 12, 13, 10, 10, 14))


SECTIONS = {"gemm": gemm, "elementwise": elementwise, "overhead": overhead,
            "softmax": softmax}

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tinygrad_cl

    TG, TG_NOTE = tinygrad_cl.load()
    print(f"labkit backend benchmark: NumPy {np.__version__}"
          + (f", PyTorch {torch.__version__} ({torch.get_num_threads()} threads)" if torch else
             ", PyTorch not installed") + f"; {TG_NOTE if TG else 'no tinygrad: ' + TG_NOTE}")
    for name in sys.argv[1:] or list(SECTIONS):
        SECTIONS[name]()
