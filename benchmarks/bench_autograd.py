"""labkit's define-by-run autograd against PyTorch (CPU) and hand-written NumPy, in one run.

    python benchmarks/bench_autograd.py            # overhead, mlp, cnn, lstm
    python benchmarks/bench_autograd.py mlp
    python benchmarks/bench_autograd.py batching   # cl with LABKIT_CL_BATCH on against off

Times are the median of repeats after a warm-up; compare the ratios.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import labkit as lk
import labkit.functions as F

try:
    import torch
except ImportError:
    torch = None


def timeit(f, reps=20, sync=None, every=None):
    """The median of ``reps`` timed calls after one untimed (``every``: a list that gets all
    the times)."""
    f()
    if sync:
        sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        if sync:
            sync()
        ts.append(time.perf_counter() - t)
    if every is not None:
        every.extend(ts)
    return statistics.median(ts)


def row(*cells, widths=(34, 13, 13, 13, 13, 13, 11, 15)):
    print("".join(str(c).rjust(w) if i else str(c).ljust(w)
                  for i, (c, w) in enumerate(zip(cells, widths))))


def fmt(t, unit=1e3):
    return "-" if t is None else f"{t * unit:.2f}"


def overhead():
    n = 100
    print(f"\n## per-op overhead: a chain of {n} elementwise ops on 16 floats, forward + "
          "backward, µs per op")
    row("", "labkit cpu", "labkit cl", "PyTorch", "NumPy tape", "cpu/PyTorch")
    h = np.linspace(0.1, 1, 16).astype(np.float32)

    def lk_chain(dev):
        def run():
            x = lk.tensor(h, device=dev, requires_grad=True)
            y = x
            for i in range(n):
                y = y * 1.001 if i % 2 else y + 0.5
            y.sum().backward()
            return x.grad
        return run

    t_cpu = timeit(lk_chain("cpu"), 30) / (n + 1)
    cl = lk.device("cl")
    cl_all = []
    t_cl = timeit(lk_chain("cl"), 20, cl.synchronize, every=cl_all) / (n + 1)
    t_t = None
    if torch is not None:
        th = torch.from_numpy(h)

        def tchain():
            x = th.clone().requires_grad_(True)
            y = x
            for i in range(n):
                y = y * 1.001 if i % 2 else y + 0.5
            y.sum().backward()
        t_t = timeit(tchain, 30) / (n + 1)

    def tape():  # the least a Python tape over NumPy can cost: record closures, replay
        x = h.copy()
        ops = []
        y = x
        for i in range(n):
            if i % 2:
                y = y * np.float32(1.001)
                ops.append(lambda g: g * np.float32(1.001))
            else:
                y = y + np.float32(0.5)
                ops.append(lambda g: g)
        g = np.ones_like(y)
        for op in reversed(ops):
            g = op(g)
        return g
    t_np = timeit(tape, 30) / (n + 1)
    row("y = y * c / y + c", fmt(t_cpu, 1e6), fmt(t_cl, 1e6), fmt(t_t, 1e6), fmt(t_np, 1e6),
        f"{t_cpu / t_t:.2f}x" if t_t else "-")
    q = statistics.quantiles(cl_all, n=4)
    print(f"labkit cl per op over 20 runs: fastest {min(cl_all) / (n + 1) * 1e6:.2f} µs, "
          f"quartiles {q[0] / (n + 1) * 1e6:.2f} / {q[1] / (n + 1) * 1e6:.2f} / "
          f"{q[2] / (n + 1) * 1e6:.2f} µs (the table shows the median; the spread is the "
          "host thread and PoCL's sharing the cores)")

    # what recording costs: the node, its metadata (op, shapes, dtype, brick path), per op
    import labkit.bricks as B

    class Chain(B.Brick):
        def forward(self, x):
            for i in range(n):
                x = x * 1.001 if i % 2 else x + 0.5
            return x

    brick = Chain()
    brick.built = True
    xr = lk.tensor(h, requires_grad=True)

    def fwd(rec, in_brick):
        def run():
            if rec:
                return brick(xr) if in_brick else Chain.forward(brick, xr)
            with lk.no_grad():
                return Chain.forward(brick, xr)
        return run
    t_none = timeit(fwd(False, False), 50) / n
    t_rec = timeit(fwd(True, False), 50) / n
    t_brick = timeit(fwd(True, True), 50) / n
    print(f"forward only, cpu, µs per op: no_grad {t_none * 1e6:.2f}, recording "
          f"{t_rec * 1e6:.2f}, recording inside a brick {t_brick * 1e6:.2f} "
          f"(graph + metadata: {(t_brick - t_none) * 1e6:.2f} µs per op)")


def _mlp_params(rng, sizes):
    ps = []
    for i, o in zip(sizes[:-1], sizes[1:]):
        ps.append(rng.standard_normal((o, i)).astype(np.float32) * np.float32(1 / np.sqrt(i)))
        ps.append(np.zeros(o, np.float32))
    return ps


def mlp():
    sizes = [784, 512, 512, 10]
    print("\n## MLP 784-512-512-10 training step (forward, backward, SGD), ms")
    row("batch", "labkit cpu", "labkit cl", "PyTorch", "NumPy", "cpu/PyTorch", "cpu/NumPy",
        "NumPy/PyTorch")
    rng = np.random.default_rng(0)
    for batch in (1, 32, 256):
        X = rng.standard_normal((batch, 784)).astype(np.float32)
        Y = rng.integers(0, 10, batch)
        P0 = _mlp_params(rng, sizes)

        def lk_step(dev):
            params = [lk.tensor(p, device=dev, requires_grad=True) for p in P0]
            x = lk.tensor(X, device=dev)
            y = Y if dev == "cpu" else lk.tensor(Y, device=dev).data

            def step():
                h = x
                for i in range(0, len(params), 2):
                    h = F.linear(h, params[i], params[i + 1])
                    if i < len(params) - 2:
                        h = F.relu(h)
                loss = F.softmax_cross_entropy(h, y)
                for p in params:
                    p.grad = None
                loss.backward()
                with lk.no_grad():
                    for p in params:
                        p.data -= 0.01 * p.grad.data
            return step

        t_cpu = timeit(lk_step("cpu"))
        cl = lk.device("cl")
        t_cl = timeit(lk_step("cl"), 10, cl.synchronize)
        t_t = None
        if torch is not None:
            tp = [torch.from_numpy(p.copy()).requires_grad_(True) for p in P0]
            tx, ty = torch.from_numpy(X), torch.from_numpy(Y)

            def tstep():
                h = tx
                for i in range(0, len(tp), 2):
                    h = torch.nn.functional.linear(h, tp[i], tp[i + 1])
                    if i < len(tp) - 2:
                        h = torch.relu(h)
                loss = torch.nn.functional.cross_entropy(h, ty)
                for p in tp:
                    p.grad = None
                loss.backward()
                with torch.no_grad():
                    for p in tp:
                        p -= 0.01 * p.grad
            t_t = timeit(tstep)
        Pn = [p.copy() for p in P0]

        def npstep():  # hand-written forward and backward
            W1, b1, W2, b2, W3, b3 = Pn
            a1 = X @ W1.T + b1
            h1 = np.maximum(a1, 0)
            a2 = h1 @ W2.T + b2
            h2 = np.maximum(a2, 0)
            z = h2 @ W3.T + b3
            z = z - z.max(1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(1, keepdims=True)
            p[np.arange(batch), Y] -= 1
            gz = p / batch
            gW3, gb3 = gz.T @ h2, gz.sum(0)
            g2 = (gz @ W3) * (a2 > 0)
            gW2, gb2 = g2.T @ h1, g2.sum(0)
            g1 = (g2 @ W2) * (a1 > 0)
            gW1, gb1 = g1.T @ X, g1.sum(0)
            for q, g in zip(Pn, (gW1, gb1, gW2, gb2, gW3, gb3)):
                q -= 0.01 * g
        t_np = timeit(npstep)
        row(batch, fmt(t_cpu), fmt(t_cl), fmt(t_t), fmt(t_np),
            f"{t_cpu / t_t:.2f}x" if t_t else "-", f"{t_cpu / t_np:.2f}x",
            f"{t_np / t_t:.2f}x" if t_t else "-")


def cnn():
    print("\n## CNN step: conv 3x3x32, pool, conv 3x3x64, pool, linear 10; batch 64 of "
          "1x28x28, ms")
    row("", "labkit cpu", "labkit cl", "PyTorch", "", "cpu/PyTorch")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 1, 28, 28)).astype(np.float32)
    Y = rng.integers(0, 10, 64)
    P0 = [rng.standard_normal((32, 1, 3, 3)).astype(np.float32) * 0.3,
          np.zeros(32, np.float32),
          rng.standard_normal((64, 32, 3, 3)).astype(np.float32) * 0.05,
          np.zeros(64, np.float32),
          rng.standard_normal((10, 64 * 7 * 7)).astype(np.float32) * 0.02,
          np.zeros(10, np.float32)]

    def lk_step(dev):
        ps = [lk.tensor(p, device=dev, requires_grad=True) for p in P0]
        x = lk.tensor(X, device=dev)
        y = Y if dev == "cpu" else lk.tensor(Y, device=dev).data

        def step():
            h = F.max_pool2d(F.relu(F.conv2d(x, ps[0], ps[1], pad=1)), 2)
            h = F.max_pool2d(F.relu(F.conv2d(h, ps[2], ps[3], pad=1)), 2)
            loss = F.softmax_cross_entropy(F.linear(F.flatten(h), ps[4], ps[5]), y)
            for p in ps:
                p.grad = None
            loss.backward()
            with lk.no_grad():
                for p in ps:
                    p.data -= 0.01 * p.grad.data
        return step

    t_cpu = timeit(lk_step("cpu"), 5)
    cl = lk.device("cl")
    t_cl = timeit(lk_step("cl"), 3, cl.synchronize)
    t_t = None
    if torch is not None:
        tp = [torch.from_numpy(p.copy()).requires_grad_(True) for p in P0]
        tx, ty = torch.from_numpy(X), torch.from_numpy(Y)
        tf = torch.nn.functional

        def tstep():
            h = tf.max_pool2d(torch.relu(tf.conv2d(tx, tp[0], tp[1], padding=1)), 2)
            h = tf.max_pool2d(torch.relu(tf.conv2d(h, tp[2], tp[3], padding=1)), 2)
            loss = tf.cross_entropy(tf.linear(h.flatten(1), tp[4], tp[5]), ty)
            for p in tp:
                p.grad = None
            loss.backward()
            with torch.no_grad():
                for p in tp:
                    p -= 0.01 * p.grad
        t_t = timeit(tstep, 5)
    row("step", fmt(t_cpu), fmt(t_cl), fmt(t_t), "", f"{t_cpu / t_t:.2f}x" if t_t else "-")


def _np_sigmoid(z):
    return 1 / (1 + np.exp(-z))


def lstm():
    T, B, Fi, H = 32, 32, 64, 128
    print(f"\n## LSTM step: T={T}, B={B}, F={Fi}, H={H}; forward over the sequence, "
          "mean squared error of the last hidden state, backward, SGD; ms")
    row("", "labkit cpu", "labkit cl", "PyTorch", "NumPy", "cpu/PyTorch", "cpu/NumPy",
        "NumPy/PyTorch")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((B, T, Fi)).astype(np.float32)
    Y = rng.standard_normal((B, H)).astype(np.float32) * np.float32(0.5)
    # gates concatenated as F.lstm wants them: a (cell input), i, f, o
    P0 = [rng.uniform(-1, 1, (4 * H, Fi)).astype(np.float32) * np.float32(np.sqrt(3 / Fi)),
          rng.uniform(-1, 1, (4 * H, H)).astype(np.float32) * np.float32(np.sqrt(3 / H)),
          np.zeros(4 * H, np.float32)]
    losses = {}

    def lk_step(dev):
        import labkit.bricks as B_

        net = B_.LSTM(Fi, H)
        for p, v in zip((net.W, net.U, net.b), P0):
            p.data = v.copy()
        net.to(dev)
        params = [net.W, net.U, net.b]
        x, y = lk.tensor(X, device=dev), lk.tensor(Y, device=dev)

        def step():
            loss = F.mean_squared_error(net(x)[:, -1], y)
            for p in params:
                p.grad = None
            loss.backward()
            with lk.no_grad():
                for p in params:
                    p.data -= 0.1 * p.grad.data
            losses.setdefault(f"labkit {dev}", loss.item())
        return step

    t_cpu = timeit(lk_step("cpu"), 10)
    cl = lk.device("cl")
    t_cl = timeit(lk_step("cl"), 3, cl.synchronize)
    t_t = None
    if torch is not None:
        tp = [torch.from_numpy(p.copy()).requires_grad_(True) for p in P0]
        tx, ty = torch.from_numpy(X), torch.from_numpy(Y)

        def tstep():  # the same ops, step by step (torch.nn.LSTM orders its gates i, f, g, o)
            W, U, b = tp
            pre = torch.nn.functional.linear(tx, W, b)
            h = c = torch.zeros(B, H)
            for t in range(T):
                a, i, f, o = (pre[:, t] + h @ U.T).chunk(4, dim=1)
                c = torch.tanh(a) * torch.sigmoid(i) + torch.sigmoid(f) * c
                h = torch.sigmoid(o) * torch.tanh(c)
            loss = torch.nn.functional.mse_loss(h, ty)
            for p in tp:
                p.grad = None
            loss.backward()
            with torch.no_grad():
                for p in tp:
                    p -= 0.1 * p.grad
            losses.setdefault("PyTorch", loss.item())
        t_t = timeit(tstep, 10)
    Pn = [p.copy() for p in P0]

    def npstep():  # hand-written forward and backpropagation through time
        W, U, b = Pn
        pre = X @ W.T + b
        h, c = np.zeros((B, H), np.float32), np.zeros((B, H), np.float32)
        saved = []
        for t in range(T):
            z = pre[:, t] + h @ U.T
            a, i, f, o = np.tanh(z[:, :H]), *np.split(_np_sigmoid(z[:, H:]), 3, axis=1)
            c_prev, h_prev = c, h
            c = a * i + f * c_prev
            tc = np.tanh(c)
            h = o * tc
            saved.append((a, i, f, o, c_prev, tc, h_prev))
        losses.setdefault("NumPy", float(np.mean((h - Y) ** 2)))
        gh = (h - Y) * np.float32(2 / h.size)
        gc = np.zeros_like(c)
        dz = np.empty_like(pre)
        for t in reversed(range(T)):
            a, i, f, o, c_prev, tc, h_prev = saved[t]
            gc = gc + gh * o * (1 - tc * tc)
            g = dz[:, t]
            g[:, :H] = gc * i * (1 - a * a)
            g[:, H:2 * H] = gc * a * i * (1 - i)
            g[:, 2 * H:3 * H] = gc * c_prev * f * (1 - f)
            g[:, 3 * H:] = gh * tc * o * (1 - o)
            gc = gc * f
            gh = g @ U
        hs = np.stack([s[6] for s in saved], axis=1)  # h_{t-1} for every t
        gW = dz.reshape(-1, 4 * H).T @ X.reshape(-1, Fi)
        gU = dz.reshape(-1, 4 * H).T @ hs.reshape(-1, H)
        gb = dz.sum((0, 1))
        for q, g in zip(Pn, (gW, gU, gb)):
            q -= np.float32(0.1) * g
    t_np = timeit(npstep, 10)
    row("step", fmt(t_cpu), fmt(t_cl), fmt(t_t), fmt(t_np),
        f"{t_cpu / t_t:.2f}x" if t_t else "-", f"{t_cpu / t_np:.2f}x",
        f"{t_np / t_t:.2f}x" if t_t else "-")
    ref = losses["NumPy"]
    worst = max(abs(v - ref) / ref for v in losses.values())
    print("first-step loss: " + ", ".join(f"{k} {v:.6f}" for k, v in losses.items())
          + f" (largest relative difference {worst:.1e})")


def batching(pairs=100):
    """The ``cl`` timings of the other sections with the CPU device's batching of small
    launches (``LABKIT_CL_BATCH``) on and off, alternated call by call in this process, so
    that both see the same machine: ``pairs`` timed calls each, medians and their ratio."""
    from labkit.backend.opencl import context

    rt = context.runtime(lk.device("cl").index)
    if not rt.info.is_cpu:
        print("\n## batching: cl is not a CPU device; its queue is never batched")
        return
    global timeit
    plain, got = timeit, []

    def ab(f, reps=20, sync=None, every=None):
        if sync is None:  # NOTE: not a cl timing: the section's other columns, quickly
            return plain(f, 2, sync)
        was, times = rt.batching, {True: [], False: []}
        try:
            for r in range(2 * pairs):
                rt.batching = r % 2 == 0
                f()
                sync()
                t = time.perf_counter()
                f()
                sync()
                times[rt.batching].append(time.perf_counter() - t)
        finally:
            rt.batching = was
        on, off = statistics.median(times[True]), statistics.median(times[False])
        got.append((on, off))
        if every is not None:
            every.extend(times[was])
        return on if was else off

    timeit = ab
    try:
        for name in ("overhead", "mlp", "cnn", "lstm"):
            SECTIONS[name]()
    finally:
        timeit = plain
    names = ["chain of 101 ops", "MLP batch 1", "MLP batch 32", "MLP batch 256", "CNN step",
             "LSTM step"]
    print(f"\n## cl with small launches batched (LABKIT_CL_BATCH on) against not, alternated "
          f"in one process, {pairs} calls each, median ms (the tables above: this process's "
          "setting)")
    row("", "batched", "not", "ratio")
    for name, (on, off) in zip(names, got):
        row(name, f"{on * 1e3:.3f}", f"{off * 1e3:.3f}", f"{on / off:.3f}")


SECTIONS = {"overhead": overhead, "mlp": mlp, "cnn": cnn, "lstm": lstm, "batching": batching}

if __name__ == "__main__":
    print(f"labkit autograd benchmark: NumPy {np.__version__}"
          + (f", PyTorch {torch.__version__} ({torch.get_num_threads()} threads)" if torch
             else ", PyTorch not installed"))
    for name in sys.argv[1:] or [k for k in SECTIONS if k != "batching"]:
        SECTIONS[name]()
