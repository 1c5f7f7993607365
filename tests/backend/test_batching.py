"""Small launches on a CPU OpenCL device are released to it in batches (``Runtime.tick``):
the queue holds them behind a gate that every wait for the device opens first. These tests
hold it to that: results are the same, a gate is really closed while launches are held, and
no wait can hang behind a gate — not a read, a finish, a dropped upload, nor a wait in one
thread while another launches (those run in a child process with a hard timeout)."""

import os
import subprocess
import sys
import textwrap

import numpy as np

import labkit as lk
from labkit.backend.opencl import context


def _chain(x, n):
    for i in range(n):
        x = x * np.float32(1.001) if i % 2 else x + np.float32(0.5)
    return x


def test_launches_are_held_behind_a_gate_and_give_the_same_results(monkeypatch):
    rt = context.runtime(0)
    monkeypatch.setenv("LABKIT_CL_BATCH", "on")
    if not rt.info.is_cpu:
        assert not context.Runtime(rt.info, rt.cl_device).batching  # a GPU's is never gated
        return
    monkeypatch.setattr(rt, "batching", True)
    h = np.linspace(-1, 1, 37).astype(np.float32)
    rt.finish()
    assert rt._gate is None  # a wait opened it
    y = _chain(lk.tensor(h, device="cl").data, 3 * context.BATCH)
    assert rt._gate is not None  # the last launches wait behind it
    np.testing.assert_array_equal(y.get(), _chain(h, 3 * context.BATCH))
    assert rt._gate is None
    # any other kernel (a GEMM here) opens the gate as it is launched: it runs at once, with
    # the launches held before it, and does not wait behind the gate for the next batch
    m = lk.tensor(np.ones((37, 5), np.float32), device="cl").data  # NOTE: an upload opens it
    y = _chain(lk.tensor(h, device="cl").data, context.BATCH + 3)
    assert rt._gate is not None
    z = y.reshape(1, 37) @ m
    assert rt._gate is None
    np.testing.assert_allclose(z.get(), _chain(h, context.BATCH + 3).reshape(1, 37) @
                               np.ones((37, 5), np.float32), rtol=1e-6)
    rt.batching = False
    assert rt.lock is rt.launch_lock  # no gate to open: the plain lock
    y = _chain(lk.tensor(h, device="cl").data, 3 * context.BATCH)
    assert rt._gate is None
    np.testing.assert_array_equal(y.get(), _chain(h, 3 * context.BATCH))


def test_a_large_elementwise_launch_is_not_held(monkeypatch):
    """Only launches of up to ``HELD_MAX`` elements wait behind the gate: a larger one opens
    it as it is launched (holding it back would give up its overlap with the host)."""
    rt = context.runtime(0)
    if not rt.info.is_cpu:
        return  # NOTE: a GPU's queue is never gated (the test above)
    monkeypatch.setattr(rt, "batching", True)
    h = np.linspace(-1, 1, 37).astype(np.float32)
    big = np.linspace(-1, 1, context.HELD_MAX + 1).astype(np.float32)
    xb = lk.tensor(big, device="cl").data  # NOTE: an upload opens the gate
    for n in (context.UNGATED + 3, context.UNGATED + 3 + context.BATCH):
        y = _chain(lk.tensor(h, device="cl").data, n)
        assert rt._gate is not None
        zb = xb * np.float32(2)  # a repeated call (the shortcut) and its first call alike
        assert rt._gate is None
        np.testing.assert_array_equal(zb.get(), big * np.float32(2))
        np.testing.assert_array_equal(y.get(), _chain(h, n))
    small = lk.tensor(big[:context.HELD_MAX], device="cl").data
    _chain(lk.tensor(h, device="cl").data, context.UNGATED + 3)
    assert rt._gate is not None
    z = small * np.float32(2)
    assert rt._gate is not None  # HELD_MAX elements: held like the chain's
    np.testing.assert_array_equal(z.get(), big[:context.HELD_MAX] * np.float32(2))


WAITS = textwrap.dedent("""
    import threading
    import numpy as np
    import labkit as lk
    from labkit.backend.opencl import context

    rt = context.runtime(0)
    h = np.ones(16, np.float32)

    def held():  # launches left behind a closed gate (on a CPU device)
        x = lk.tensor(h, device="cl").data
        for _ in range(context.BATCH + 3):
            x = x + np.float32(1)
        assert rt._gate is not None or not rt.batching
        return x

    x = held()
    assert x.get()[0] == context.BATCH + 4                       # a read
    held(); rt.finish()                                         # a finish
    held(); lk.device("cl").synchronize()
    x = held(); host = np.empty(16, np.float32)
    rt.download_later(x, host).wait()                           # a read queued for later
    assert host[0] == context.BATCH + 4
    held()
    ups = [lk.tensor(np.full(16, i, np.float32), device="cl") for i in range(40)]
    held()
    rt._uploads.clear()                       # dropped upload events wait for their copies
    del ups

    # one thread launching while another waits: the waits never end up behind its gates
    stop = threading.Event()

    def launcher():
        y = lk.tensor(h, device="cl").data
        while not stop.is_set():
            y = y * np.float32(1)
    t = threading.Thread(target=launcher)
    t.start()
    try:
        for i in range(300):
            z = lk.tensor(np.full(4, i, np.float32), device="cl").data + np.float32(1)
            assert z.get()[0] == i + 1
            if i % 10 == 0:
                rt.finish()
    finally:
        stop.set()
        t.join()
    x = held()                                               # and at exit, one still held
    print("ok")
""")


def test_no_wait_hangs_behind_a_gate():
    p = subprocess.run([sys.executable, "-c", WAITS], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "LABKIT_CL_BATCH": "on"})
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-3000:]


def test_batching_is_on_for_a_cpu_device_unless_the_setting_turns_it_off(monkeypatch):
    rt = context.runtime(0)
    monkeypatch.delenv("LABKIT_CL_BATCH", raising=False)
    assert context.Runtime(rt.info, rt.cl_device).batching == rt.info.is_cpu
    monkeypatch.setenv("LABKIT_CL_BATCH", "off")
    assert not context.Runtime(rt.info, rt.cl_device).batching
    monkeypatch.setenv("LABKIT_CL_BATCH", "on")
    assert context.Runtime(rt.info, rt.cl_device).batching == rt.info.is_cpu
