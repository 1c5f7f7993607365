"""labkit's OpenCL device against PyTorch CUDA on the same NVIDIA GPU (run by gpu_check.sh,
which points the OpenCL loader at the driver): float32 GEMM GFLOP/s, and the MLP and CNN
training steps of ``bench_autograd.py`` with the same initial weights and data (losses
compared). Each time is the median of repeats after a warm-up, the device synchronised.

    python benchmarks/gpu_check.py          # needs torch.cuda and an OpenCL GPU as cl:0
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import labkit as lk
import labkit.functions as F
from labkit.backend import opencl as cp
from labkit.backend.opencl import runtime

try:
    import torch
except ImportError:
    torch = None

RT = runtime(0)


def median_time(f, sync, reps):
    f()
    sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        sync()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def tsync():
    torch.cuda.synchronize()


def row(*cells, widths=(22, 14, 14, 14, 14)):
    print("".join(str(c).rjust(w) if i else str(c).ljust(w)
                  for i, (c, w) in enumerate(zip(cells, widths))))


def gemm():
    print("\n## float32 GEMM, GFLOP/s")
    row("n", "labkit cl", "torch fp32", "cl/torch", "max rel err")
    rng = np.random.default_rng(0)
    for n in (1024, 2048, 4096):
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        da, db = cp.asarray(a), cp.asarray(b)
        flops = 2 * n**3
        reps = 20 if n < 4096 else 8
        g_cl = flops / median_time(lambda: da @ db, RT.finish, reps) / 1e9
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = float(np.abs((da @ db).get() - ref).max() / np.abs(ref).max())
        g_t = None
        if torch is not None and torch.cuda.is_available():
            ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
            g_t = flops / median_time(lambda: torch.matmul(ta, tb), tsync, reps) / 1e9
        row(n, f"{g_cl:.0f}", f"{g_t:.0f}" if g_t else "-",
            f"{g_cl / g_t:.1%}" if g_t else "-", f"{err:.1e}")
    tuned = {n: cfg for (kind, ct, n), cfg in RT.tuned.items() if kind == "gemm"}
    print(f"tuned blocking (rows, vectors, width) by size class: {tuned}")


def _steps(P0, X, Y, forward_lk, forward_t):
    """(labkit step on cl, torch step on cuda, first losses) for one model."""
    ps = [lk.tensor(p, device="cl", requires_grad=True) for p in P0]
    x, y = lk.tensor(X, device="cl"), lk.tensor(Y, device="cl").data
    losses = {}

    def lk_step():
        loss = F.softmax_cross_entropy(forward_lk(x, ps), y)
        for p in ps:
            p.grad = None
        loss.backward()
        with lk.no_grad():
            for p in ps:
                p.data -= 0.01 * p.grad.data
        losses.setdefault("labkit", loss)

    t_step = None
    if torch is not None and torch.cuda.is_available():
        tp = [torch.from_numpy(p.copy()).cuda().requires_grad_(True) for p in P0]
        tx, ty = torch.from_numpy(X).cuda(), torch.from_numpy(Y).cuda()

        def t_step():
            loss = torch.nn.functional.cross_entropy(forward_t(tx, tp), ty)
            for p in tp:
                p.grad = None
            loss.backward()
            with torch.no_grad():
                for p in tp:
                    p -= 0.01 * p.grad
            losses.setdefault("torch", loss)
    return lk_step, t_step, losses


def _report(label, lk_step, t_step, losses, reps):
    cl = lk.device("cl")
    t_lk = median_time(lk_step, cl.synchronize, reps)
    t_t = median_time(t_step, tsync, reps) if t_step else None
    l_lk = float(losses["labkit"].numpy())
    l_t = float(losses["torch"].item()) if "torch" in losses else float("nan")
    row(label, f"{t_lk * 1e3:.2f}", f"{t_t * 1e3:.2f}" if t_t else "-",
        f"{t_lk / t_t:.1f}x" if t_t else "-", f"{abs(l_lk - l_t) / abs(l_t):.1e}")


def mlp():
    print("\n## MLP 784-512-512-10 step (forward, backward, SGD), ms")
    row("batch", "labkit cl", "torch cuda", "cl/torch", "loss rel diff")
    rng = np.random.default_rng(0)
    sizes = [784, 512, 512, 10]
    for batch in (32, 256, 4096):
        X = rng.standard_normal((batch, 784)).astype(np.float32)
        Y = rng.integers(0, 10, batch)
        P0 = []
        for i, o in zip(sizes[:-1], sizes[1:]):
            P0 += [rng.standard_normal((o, i)).astype(np.float32) / np.float32(np.sqrt(i)),
                   np.zeros(o, np.float32)]

        def f_lk(h, ps):
            h = F.relu(F.linear(h, ps[0], ps[1]))
            h = F.relu(F.linear(h, ps[2], ps[3]))
            return F.linear(h, ps[4], ps[5])

        def f_t(h, ps):
            h = torch.relu(torch.nn.functional.linear(h, ps[0], ps[1]))
            h = torch.relu(torch.nn.functional.linear(h, ps[2], ps[3]))
            return torch.nn.functional.linear(h, ps[4], ps[5])
        _report(batch, *_steps(P0, X, Y, f_lk, f_t), reps=20)


def cnn():
    print("\n## CNN step: conv 3x3x32, pool, conv 3x3x64, pool, linear 10; 1x28x28, ms")
    row("batch", "labkit cl", "torch cuda", "cl/torch", "loss rel diff")
    rng = np.random.default_rng(0)
    for batch in (64, 256):
        X = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
        Y = rng.integers(0, 10, batch)
        P0 = [rng.standard_normal((32, 1, 3, 3)).astype(np.float32) * 0.3,
              np.zeros(32, np.float32),
              rng.standard_normal((64, 32, 3, 3)).astype(np.float32) * 0.05,
              np.zeros(64, np.float32),
              rng.standard_normal((10, 64 * 7 * 7)).astype(np.float32) * 0.02,
              np.zeros(10, np.float32)]

        def f_lk(x, ps):
            h = F.max_pool2d(F.relu(F.conv2d(x, ps[0], ps[1], pad=1)), 2)
            h = F.max_pool2d(F.relu(F.conv2d(h, ps[2], ps[3], pad=1)), 2)
            return F.linear(F.flatten(h), ps[4], ps[5])

        def f_t(x, ps):
            tf = torch.nn.functional
            h = tf.max_pool2d(torch.relu(tf.conv2d(x, ps[0], ps[1], padding=1)), 2)
            h = tf.max_pool2d(torch.relu(tf.conv2d(h, ps[2], ps[3], padding=1)), 2)
            return tf.linear(h.flatten(1), ps[4], ps[5])
        _report(batch, *_steps(P0, X, Y, f_lk, f_t), reps=10)


if __name__ == "__main__":
    info = RT.info
    print(f"labkit GPU check: cl:0 = {info.name} ({info.platform}); NumPy {np.__version__}"
          + (f"; PyTorch {torch.__version__}, CUDA device "
             f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}"
             if torch else "; PyTorch not installed"))
    if torch is not None and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 against fp32
        torch.backends.cudnn.allow_tf32 = False
    for name in sys.argv[1:] or ["gemm", "mlp", "cnn"]:
        globals()[name]()
