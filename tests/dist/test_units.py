"""lk.dist in one process (rank 0 of 1): the grad-ready hook, buckets, no_sync, sharding with a
global state, the launcher's command line. No mpiexec needed."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit.data import DataStream, IndexableDataset, ShuffledScheme


def leaf(*shape, seed=0):
    rng = np.random.default_rng(seed)
    return lk.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)


def test_import_labkit_does_not_import_mpi4py():
    code = "import sys, labkit; labkit.dist.DataParallel; print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "False"


def test_grad_ready_hook_fires_once_with_the_final_gradient():
    w, v, unused = leaf(3, 3), leaf(3, seed=1), leaf(2, seed=2)
    x = lk.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    seen = []
    for t, name in ((w, "w"), (v, "v"), (unused, "unused")):
        t.register_grad_ready_hook(lambda t, name=name: seen.append((name, t.grad.numpy())))
    # w is used twice (shared), v in two branches; unused is never reached
    y = ((x @ w) @ w + v).sum() + (v * v).sum()
    y.backward()
    assert sorted(n for n, _ in seen) == ["v", "w"]
    final = dict(seen)
    np.testing.assert_array_equal(final["w"], w.grad.numpy())
    np.testing.assert_array_equal(final["v"], v.grad.numpy())
    wn, xn = w.numpy(), x.numpy()
    want_w = xn.T @ np.ones((2, 3), np.float32) @ wn.T + (xn @ wn).T @ np.ones((2, 3))
    np.testing.assert_allclose(final["w"], want_w, rtol=1e-5)
    # lk.grad leaves .grad alone: the hooks are not called
    seen.clear()
    lk.grad([(w * w).sum()], [w])
    assert seen == []


def test_grad_ready_hook_before_backward_ends_and_remove():
    a, b = leaf(4), leaf(4, seed=1)
    order = []
    h = a.register_grad_ready_hook(lambda t: order.append("a"))
    b.register_grad_ready_hook(lambda t: order.append("b"))
    # b's last use is the first op backward meets: b is final before a's branch runs
    ((F.tanh(a * 2) * 3).sum() * (b * b).sum()).backward()
    assert order == ["b", "a"]
    h.remove()
    order.clear()
    (a * b).sum().backward()
    assert order == ["b"]
    with pytest.raises(RuntimeError, match="only a leaf"):
        (a * 2).register_grad_ready_hook(print)


def test_buckets_in_reverse_order_and_shared_parameter_once():
    model = B.MLP([6, 5, 4, 3], seed=0)
    params = dict(model.params())
    params["/alias"] = params["/mlp/linear_0.W"]  # one parameter under two names
    dp = lk.dist.DataParallel(params, bucket_mb=40 / 2 ** 20)  # ~10 floats per bucket
    names = [n for b in dp.buckets for n in b.names]
    assert names == list(reversed(list(model.params())))
    assert "/alias" not in names
    assert len(dp.buckets) >= 4
    model(lk.tensor(np.ones((2, 6), np.float32))).sum().backward()
    started = dp.stats["launched_early"]
    assert started == len(dp.buckets)  # every bucket started from a hook, during backward
    before = {k: p.grad.numpy().copy() for k, p in model.params().items()}
    dp.synchronize()
    for k, p in model.params().items():  # one rank: the average is the gradient itself
        np.testing.assert_array_equal(p.grad.numpy(), before[k])


def test_unused_parameter_keeps_no_gradient_and_second_backward_is_refused():
    model = B.MLP([4, 3], seed=0)
    spare = model.add_param("spare", (2,), lambda s, d, r: np.zeros(s, d))
    dp = lk.dist.DataParallel(model)
    x = lk.tensor(np.ones((2, 4), np.float32))
    model(x).sum().backward()
    with pytest.raises(lk.dist.DistError, match="second backward"):
        model(x).sum().backward()
    dp.synchronize()
    assert spare.grad is None


def test_no_sync_accumulates_then_synchronizes_the_sum():
    model = B.MLP([4, 3], seed=0)
    dp = lk.dist.DataParallel(model)
    x = lk.tensor(np.ones((2, 4), np.float32))
    with dp.no_sync():
        model(x).sum().backward()
        assert dp.stats["launched_early"] == 0
    W = model.linears[0].W
    once = W.grad.numpy().copy()
    model(x).sum().backward()
    dp.synchronize()
    np.testing.assert_allclose(W.grad.numpy(), 2 * once, rtol=1e-6)


def test_collectives_on_one_rank(dev):
    x = lk.tensor(np.arange(4, dtype=np.float32), device=dev)
    y = lk.dist.allreduce(x, op="mean")
    assert isinstance(y, lk.Tensor) and y.device == x.device
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    assert lk.dist.broadcast(x) is x
    lk.dist.barrier()
    assert (lk.dist.rank(), lk.dist.size()) == (0, 1)
    with pytest.raises(lk.dist.DistError, match="op must be"):
        lk.dist.allreduce(x, op="prod")
    for root in (1, -1, "0", True):  # one rank: only rank 0 is a root
        with pytest.raises(lk.dist.DistError, match="root must be a rank, 0 to 0"):
            lk.dist.broadcast(x, root=root)


def test_sharded_stream_state_is_the_global_position():
    ds = IndexableDataset({"i": np.arange(40)})
    comm = lk.dist.world()
    stream = lk.dist.shard_stream(DataStream(ds, batch_size=8, shuffle=True, seed=5), comm)
    it = iter(stream)
    next(it)
    state = stream.state_dict()
    plain = DataStream(ds, batch_size=8, shuffle=True, seed=5)
    assert state == {**plain.state_dict(), "position": 1}  # loadable by a plain stream
    plain.load_state_dict(state)
    s = ShuffledScheme(40, 8, seed=5)
    np.testing.assert_array_equal(next(iter(plain))["i"], s.request(0, 1))


def test_batches_too_small_to_split_are_refused():
    ds = IndexableDataset({"i": np.arange(9)})

    class Two:  # a stand-in communicator of two ranks: the check needs only rank and size
        rank, size = 0, 2

    with pytest.raises(lk.dist.DistError, match="cannot be split between 2 ranks"):
        lk.dist.shard_stream(DataStream(ds, batch_size=4), Two())
    with pytest.raises(lk.dist.DistError, match="single examples"):
        lk.dist.shard_stream(DataStream(ds), Two())


def test_launch_command_and_environment(tmp_path):
    from labkit.dist import launch

    script = tmp_path / "s.py"
    script.write_text("print(1)\n")
    cmd = launch.command(3, script, ["--x", 1])
    assert cmd[0].endswith("mpiexec") and cmd[1:3] == ["-n", "3"]
    # each rank under its monitor, which names it if it is killed
    assert cmd[3:] == [sys.executable, str(launch.MONITOR), sys.executable, "-m", "mpi4py",
                       str(script), "--x", "1"]
    env = launch.environment(1, {"OMP_NUM_THREADS": "8"})
    assert all(env[k] == "1" for k in launch.THREAD_VARS)
    with pytest.raises(lk.dist.DistError, match="no script"):
        launch.command(2, tmp_path / "missing.py")


def test_a_second_data_parallel_detaches_the_first():
    model = B.MLP([4, 3], seed=0)
    first = lk.dist.DataParallel(model)
    with pytest.warns(UserWarning, match="detached"):
        second = lk.dist.DataParallel(model)
    x = lk.tensor(np.ones((2, 4), np.float32))
    for _ in range(2):  # the first one's hooks are gone: no "second backward" from it
        model(x).sum().backward()
        second.synchronize()
    assert first.stats["launched_early"] == 0
    assert second.stats["launched_early"] == 2


def test_sync_batchnorm_on_one_rank_is_batchnorm(rng):
    """One rank (no MPI needed): SyncBatchNorm is BatchNorm, bit for bit, running statistics
    included; the conversion keeps parameters and buffers, so checkpoints load either way."""
    import labkit.bricks as B

    x = rng.standard_normal((6, 3, 4, 4)).astype(np.float32)
    plain = B.BatchNorm(3)
    synced = lk.dist.convert_sync_batchnorm(B.BatchNorm(3))
    assert type(synced) is lk.dist.SyncBatchNorm
    synced.load_state_dict(plain.state_dict())
    outs = []
    for bn in (plain, synced):
        t = lk.tensor(x, requires_grad=True)
        y = bn(t)
        (y * y).sum().backward()
        outs.append((y.numpy(), t.grad.numpy(), np.array(bn.running_var)))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


def test_allreduce_sum_on_one_rank_and_its_gradient_weighting():
    x = lk.tensor(np.array([1.0, -2.0], np.float32), requires_grad=True)
    comm = lk.dist.Communicator()
    y = lk.dist.allreduce_sum(x * 3.0, comm)
    np.testing.assert_array_equal(y.numpy(), [3.0, -6.0])
    comm.loss_weight = 4.0  # one rank: weighted, then divided by its own weight
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 18 * np.array([1.0, -2.0]), rtol=1e-6)


def test_sync_batchnorm_names_bad_arguments():
    from labkit.functions.normalization import check_batch_norm

    op = "sync_batch_normalization"
    x = lk.tensor(np.zeros((2, 3), np.float32))
    g = lk.tensor(np.ones(3, np.float32))
    with pytest.raises(lk.ShapeError, match=rf"{op}: gamma and beta must have shape \(3,\)"):
        check_batch_norm(op, x, lk.tensor(np.ones(4, np.float32)), g, None, None, 0.1, 1e-5)
    with pytest.raises(ValueError, match=f"{op}: give both running_mean and running_var"):
        check_batch_norm(op, x, g, g, np.zeros(3, np.float32), None, 0.1, 1e-5)
    with pytest.raises(lk.ShapeError, match=rf"{op}: running_var must have shape \(3,\)"):
        check_batch_norm(op, x, g, g, np.zeros(3, np.float32), np.zeros(2, np.float32), 0.1,
                         1e-5)
    with pytest.raises(lk.ShapeError, match=rf"{op}: x must be \(N, C, \.\.\.\)"):
        check_batch_norm(op, lk.tensor(np.zeros(3, np.float32)), g, g, None, None, 0.1, 1e-5)


def test_bad_launch_arguments_are_refused_before_anything_starts(tmp_path):
    from labkit.dist import launch

    script = tmp_path / "s.py"
    script.write_text("print(1)\n")
    for n in (launch.max_ranks() + 1, 10**9):
        with pytest.raises(lk.dist.DistError, match=f"-n {n} is more ranks than this machine"):
            launch.command(n, script)
    with pytest.raises(lk.dist.DistError, match="arguments must be a list"):
        launch.command(2, script, "--lr 0.1")  # a string would be split into characters
    assert launch.command(2, script, None)[-1] == str(script)  # None: no arguments
    with pytest.raises(lk.dist.DistError, match="NUL"):
        launch.command(2, script, ["a\0b"])
    with pytest.raises(lk.dist.DistError, match="no script"):
        launch.command(2, str(script) + "\0x")
    other = tmp_path / "train"
    other.write_text("print(1)\n")
    with pytest.raises(lk.dist.DistError, match=r"must be a \.py file"):
        lk.dist.start(other, n=2)


def test_bad_data_parallel_arguments_are_refused():
    model = B.MLP([4, 3], seed=0)
    with pytest.raises(lk.dist.DistError, match="bucket_mb must be a finite number"):
        lk.dist.DataParallel(model, bucket_mb=float("inf"))
    ds = IndexableDataset({"x": np.zeros((8, 4), np.float32)})
    with pytest.raises(lk.dist.DistError, match="check_every must be a whole number"):
        lk.dist.DataParallelLoop(model, lk.optimizers.SGD(lr=0.1).setup(model),
                                 DataStream(ds, batch_size=4), lambda m, b: None,
                                 check_every=0, store=False)


def _two_ranks(rows, seq):
    """A communicator of rank 1 of 2 waiting at collective ``seq``, with the shared table
    ``rows`` (no MPI: only what the checks read)."""
    from labkit.dist.comm import Communicator

    comm = Communicator.__new__(Communicator)
    comm.rank, comm.size, comm.seq, comm._odd = 1, 2, seq, {}
    comm._table = np.array(rows, dtype=np.int64)
    return comm


def test_a_wait_names_a_rank_that_left_is_gone_or_sits_in_another_collective():
    from labkit.dist.comm import OPS

    me = os.getpid()
    bucket, barrier = OPS.index("gradient bucket"), OPS.index("barrier")
    # rank 0 left after its collective 5 (its script ended); rank 1 waits at 6
    comm = _two_ranks([[5, bucket, 0, me, 1], [6, bucket, 0, me, 0]], 6)
    with pytest.raises(lk.dist.DistError, match=r"rank 0 has left the job \(its script ended "
                       r"after its collective 5: gradient bucket #0\) while rank 1 waits in "
                       r"gradient bucket #0 \(collective 6"):
        comm._check_peers("gradient bucket", 0)
    # rank 0's process is gone before it reached collective 6
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    comm = _two_ranks([[5, bucket, 0, gone.pid, 0], [6, bucket, 0, me, 0]], 6)
    with pytest.raises(lk.dist.DistError, match=rf"rank 0 \(pid {gone.pid}\) is gone"):
        comm._check_peers("gradient bucket", 0)
    # both at collective 6, rank 0 in a barrier: named once seen twice (a row may be torn)
    comm = _two_ranks([[6, barrier, -1, me, 0], [6, bucket, 0, me, 0]], 6)
    comm._check_peers("gradient bucket", 0)
    with pytest.raises(lk.dist.DistError, match=r"rank 0 in barrier and rank 1 in gradient "
                       r"bucket #0, both their collective 6"):
        comm._check_peers("gradient bucket", 0)
    # rank 0 went past collective 6 while rank 1 still waits in it (seen twice: it may have
    # just finished): the ranks reduced buffers of other sizes
    comm = _two_ranks([[7, barrier, -1, me, 0], [6, bucket, 0, me, 0]], 6)
    comm._check_peers("gradient bucket", 0)
    with pytest.raises(lk.dist.DistError, match=r"rank 0 has gone past this collective \(it "
                       r"is in its collective 7: barrier\)"):
        comm._check_peers("gradient bucket", 0)
    # a rank merely late (alive, at an earlier collective) is waited for
    comm = _two_ranks([[4, bucket, 0, me, 0], [6, bucket, 0, me, 0]], 6)
    comm._check_peers("gradient bucket", 0)
    comm._check_peers("gradient bucket", 0)


def test_the_rank_monitor_names_a_rank_killed_by_a_signal(tmp_path):
    from labkit.dist import launch
    from labkit.dist.job import reasons

    def rank(code):
        return subprocess.run([sys.executable, str(launch.MONITOR), sys.executable, "-c", code],
                              env={**os.environ, "PMI_RANK": "1", "PMI_SIZE": "2"},
                              capture_output=True, text=True, timeout=60)

    killed = rank("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert killed.returncode == -9  # the monitor dies as its rank did: mpiexec sees the same
    assert killed.stderr.startswith("[labkit dist] rank 1 of 2 (pid "), killed.stderr
    assert killed.stderr.rstrip().endswith("was killed by signal 9 (SIGKILL)"), killed.stderr
    failed = rank("raise SystemExit(3)")
    assert failed.returncode == 3 and "rank 1 of 2" in failed.stderr
    ok = rank("print('trained')")
    assert ok.returncode == 0 and ok.stdout == "trained\n" and ok.stderr == ""
    log = (f"{killed.stderr}Traceback (most recent call last):\n  ...\n"
           "labkit.dist.comm.DistError: rank 0 has left the job\nAbort(1) on node 1\n")
    assert reasons(log) == [killed.stderr.strip()[len("[labkit dist] "):],
                            "labkit.dist.comm.DistError: rank 0 has left the job"]


def test_the_processes_of_a_job_are_found_by_its_token():
    from labkit.dist import launch

    env = dict(os.environ)
    token = launch.tag(env)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env,
                            start_new_session=True)
    try:
        # NOTE: Popen returns as the child execs (vfork), maybe before the kernel has set up
        # its /proc/PID/environ: read until it is there (it failed once under load)
        deadline = time.monotonic() + 30
        while launch.job_processes(token) != [proc.pid] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert launch.job_processes(token) == [proc.pid]
        assert launch.job_processes(launch.tag({})) == []
        assert launch.end_processes(token) == [proc.pid]
        assert proc.wait(10) == -9
        assert launch.job_processes(token) == []
    finally:
        proc.kill()
        proc.wait()


def test_a_process_being_torn_down_is_not_alive_and_a_rank_of_the_job_is_waited_for(
        monkeypatch):
    """A rank SIGKILLed a moment ago still passes ``os.kill(pid, 0)`` while its /proc stat is
    already gone (ESRCH): it was taken for a live trainer, and the run of a killed job stayed
    ``paused`` (tests/dist/test_job.py failed so about one run in four on a loaded machine)."""
    from labkit import _proc
    from labkit.dist import launch

    me = os.getpid()
    assert _proc.alive(me)
    monkeypatch.setattr(_proc, "_stat", lambda pid: None)  # its stat unreadable
    assert not _proc.alive(me)
    monkeypatch.setattr(_proc, "_PROC", False)  # no /proc at all: existence is all we know
    assert _proc.alive(me)
    monkeypatch.undo()

    env = dict(os.environ)
    token = launch.tag(env)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        # NOTE: until its /proc/PID/environ holds the token (empty before the exec, and an
        # empty environment is read as a process being torn down)
        deadline = time.monotonic() + 30
        while launch.job_processes(token) != [proc.pid] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert launch.exiting_rank(proc.pid, token)  # one of the job's
        assert not launch.exiting_rank(proc.pid, launch.tag({}))  # another job's
        assert not launch.exiting_rank(me, token)
    finally:
        proc.kill()
        proc.wait()
    assert not launch.exiting_rank(proc.pid, token)  # gone

    def torn_down(path, mode="r"):  # NOTE: what reading a dying process's environ raises
        raise ProcessLookupError(3, "No such process")
    monkeypatch.setattr(launch, "open", torn_down, raising=False)
    assert launch.exiting_rank(me, token)


def test_the_agreement_names_ranks_that_report_other_values_or_took_no_part():
    from labkit.dist.loop import _Agreement

    class Two:  # rank 0 of 2; rank 1 reported only the loss
        rank, size = 0, 2

        def allgather_object(self, obj, what):
            return [obj, (["loss"], [])]

    agree = _Agreement(Two(), None, True, dict, 20)
    # one row per rank: signature, length, iteration, epoch, its batch, parameters (-1: unread)
    heads = np.array([[11, 7, 3, 0, 3, -1], [12, 6, 3, 0, 3, -1]], np.float64)
    with pytest.raises(lk.dist.DistError, match=r"reported different things at iteration 3 "
                       r"\(rank 0: values \['loss', 'accuracy'\], buffers \[\]; rank 1: "
                       r"values \['loss'\], buffers \[\]\)"):
        agree._check(None, heads, ["loss", "accuracy"], [])
    heads[1] = 0  # rank 1's row never arrived: MPI paired the all-reduce with another one
    with pytest.raises(lk.dist.DistError, match=r"ranks \[1\] took no part"):
        agree._check(None, heads, ["loss"], [])


def test_runs_a_failed_launch_left_unfinished_are_recorded_with_the_reason(tmp_path,
                                                                          monkeypatch):
    """What `labkit launch` does after a job that failed: the runs its ranks made (listed by
    RunStore.create_run in LABKIT_DIST_RUNS) and left unfinished are failed with the reasons
    the job's stderr gives, or interrupted after a Ctrl-C; runs their loops ended are left as
    they are; a line cut short and a store that is not there are passed over."""
    from labkit.dist.launch import settle
    from labkit.runs import launched

    listing = tmp_path / "runs.jsonl"
    monkeypatch.setenv(launched.VAR, str(listing))
    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        running, created, done = (store.create_run(name=n) for n in ("a", "b", "c"))
        # NOTE: the ranks that made them have ended (a live trainer's run is left to it)
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        for rid in (running, created, done):
            store.update_run(rid, pid=gone.pid)
        store.update_run(running, status="running")
        store.update_run(done, status="finished")
        with open(listing, "a") as f:  # NOTE: a rank killed while it wrote a line
            f.write('{"store": "' + str(tmp_path / "gone.sqlite") + '", "run": "x"}\n{"sto')
        assert [r for _, r in launched.listed(listing)] == [running, created, done, "x"]
        text = ("Traceback (most recent call last):\n  File 'x.py'\nRuntimeError: rank 1 fails"
                "\n[labkit dist] rank 1 of 2 (pid 7) exited with status 1\nAbort(1) on node 1\n")
        assert settle(listing, 1, text) == [running, created]
        for rid, was in ((running, "running"), (created, "created")):
            run = store.get(rid)
            assert run["status"] == "failed", run
            assert run["error"] == (f"labkit launch: the job exited with status 1 while this run "
                                    f"was {was} (mpiexec ends every rank when one fails): rank "
                                    "1 of 2 (pid 7) exited with status 1; RuntimeError: rank 1 "
                                    "fails")
            assert run["traceback"].endswith("Abort(1) on node 1")
        assert store.get(done)["status"] == "finished"
        assert not (tmp_path / "gone.sqlite").exists()
        again = store.create_run(name="d")
        store.update_run(again, status="running", pid=gone.pid)
        assert settle(listing, 130, "", "ended by Ctrl-C of labkit launch",
                      "interrupted") == [again]
        assert store.get(again)["status"] == "interrupted"
        assert store.get(again)["error"] == ("labkit launch: ended by Ctrl-C of labkit launch "
                                             "before its loop recorded it")


def test_a_sigterm_echoed_within_a_second_is_the_same_stop(monkeypatch):
    """A launcher killed outright sends mpiexec its parent-death SIGTERM once per thread of it
    as each ends (Linux reparents mpiexec to the next), and mpiexec passes each on: the ranks
    took the second as "stop at once" and died without their interrupt checkpoint (a flaky
    `labkit launch` test showed it). Within SIGTERM_ECHO seconds it is the first one again;
    after that, a second SIGTERM still stops at once."""
    import signal
    import types

    from labkit.dist import loop as dl

    asked = []
    stub = types.SimpleNamespace(comm=types.SimpleNamespace(size=2, rank=0), status={
        "iteration": 5}, control=types.SimpleNamespace(terminate=lambda: asked.append(1)))
    before = signal.getsignal(signal.SIGTERM)
    restore = dl.DataParallelLoop._on_sigterm(stub)
    try:
        handler = signal.getsignal(signal.SIGTERM)
        handler(signal.SIGTERM, None)
        handler(signal.SIGTERM, None)  # NOTE: the echo: nothing more
        assert asked == [1]
        monkeypatch.setattr(dl, "SIGTERM_ECHO", 0.0)
        with pytest.raises(dl.Terminated, match="rank 0 of 2 received SIGTERM"):
            handler(signal.SIGTERM, None)
    finally:
        restore()
    assert signal.getsignal(signal.SIGTERM) is before


def test_data_parallel_loop_takes_check_finite():
    """The README documents check_finite=False; DataParallelLoop passed it on to MainLoop,
    a TypeError on every rank (then MPI_Abort)."""
    ds = IndexableDataset({"x": np.zeros((8, 4), np.float32)})
    for value in (False, True):
        model = B.MLP([4, 3], seed=0)
        loop = lk.dist.DataParallelLoop(model, lk.optimizers.SGD(lr=0.1).setup(model),
                                        DataStream(ds, batch_size=4), lambda m, b: None,
                                        check_finite=value, store=False)
        assert loop.dp.check_finite is value
        loop.close()
