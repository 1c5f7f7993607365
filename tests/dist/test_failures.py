"""Data-parallel jobs that lose a rank, a launcher or their agreement: each must end within a
bounded time with an error that names the cause, leave no process behind, leave no checkpoint
half written, and resume exactly. Every job runs in its own session with a hard timeout, and
every process it starts carries a token that the helpers look for afterwards
(tests/dist/mpirun.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py")
psutil = pytest.importorskip("psutil")

import labkit as lk  # noqa: E402
from labkit.dist.launch import job_processes  # noqa: E402

from . import mpirun  # noqa: E402
from .conftest import until  # noqa: E402
from .test_job import SCRIPT  # noqa: E402

STEPS, EVERY = 12, 4
ARGS = ["--steps", STEPS, "--bucket-mb", 0.0002]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """2 ranks, 12 steps, nothing killed: the parameters' CRC-32 and the loss after each step."""
    out = tmp_path_factory.mktemp("uninterrupted")
    job = mpirun.run(2, [out, *ARGS], timeout=60)
    assert job.rc == 0, job
    return np.load(out / "rank0.npz")


@pytest.mark.parametrize("where,rank,at", [("step", 1, 6), ("allreduce", 1, 6),
                                           ("checkpoint", 0, 8)])
def test_a_killed_rank_is_named_and_the_job_resumes_exactly(tmp_path, uninterrupted, where,
                                                            rank, at):
    """SIGKILL inside the step, in the wait for a gradient all-reduce, or on rank 0 half way
    through writing the checkpoint of iteration 8: mpiexec ends the other ranks, the rank is
    named, only whole checkpoints are left, and 2 ranks resumed from the newest go on exactly
    as the job that was never killed."""
    job = mpirun.run(2, [tmp_path, *ARGS, "--ckpt-every", EVERY, "--die-at", at, "--die-in",
                         where, "--die-rank", rank], timeout=60)
    assert job.rc != 0 and not job.left, job
    assert f"[labkit dist] rank {rank} of 2 (pid " in job.err, job
    assert "was killed by signal 9 (SIGKILL)" in job.err, job
    assert not (tmp_path / "rank0.npz").exists()
    assert [p.name for p in lk.checkpoint.list_checkpoints(tmp_path / "ckpt")] == \
        ["ckpt-00000004"]
    newest = lk.checkpoint.latest(tmp_path / "ckpt")
    assert newest.name == "ckpt-00000004" and lk.checkpoint.verify(newest) is None
    if where == "step":
        return  # NOTE: the resume is the same as after a kill elsewhere: two cases are enough
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    job = mpirun.run(2, [resumed, *ARGS, "--resume", newest], timeout=60)
    assert job.rc == 0, job
    got = np.load(resumed / "rank0.npz")
    np.testing.assert_array_equal(got["crc"], uninterrupted["crc"][EVERY:])
    np.testing.assert_array_equal(got["loss"], uninterrupted["loss"][EVERY:])


def test_a_job_that_loses_a_rank_fails_naming_it_and_resumes_exactly(store, jobs):
    reference = lk.dist.start(SCRIPT, n=2, args=["--iterations", 12])
    # rank 0 dies writing the checkpoint of iteration 8: its files written, not yet in place
    job = lk.dist.start(SCRIPT, n=2, args=["--iterations", 12, "--ckpt-every", 4,
                                           "--die-rank", 0, "--die-at", 8, "--die-in",
                                           "checkpoint"])
    jobs.extend([reference, job])
    assert job.wait(timeout=60) != 0 and job.status == "failed"
    assert job_processes(job._token) == [], "a rank outlived the job"
    run = lk.runs.get(job.run_id)
    assert run["status"] == "failed", run
    assert "rank 0 of 2 (pid" in run["error"] and "(SIGKILL)" in run["error"], run["error"]
    assert [(c["iteration"], c["valid"]) for c in lk.runs.checkpoints(job.run_id)] == \
        [(4, True)]
    # nothing half written is left beside it (the dead writer's folder is removed)
    assert os.listdir(Path(run["directory"]) / "checkpoints") == ["ckpt-00000004"]
    again = lk.dist.resume(job.run_id)
    jobs.append(again)
    assert reference.wait(timeout=60) == 0 and again.wait(timeout=60) == 0, again.log(60)
    assert lk.runs.get(job.run_id)["status"] == "finished"
    want = lk.runs.metrics(reference.run_id, ["loss"])["loss"]
    got = lk.runs.metrics(job.run_id, ["loss"])["loss"]
    assert got["iteration"] == want["iteration"] == list(range(1, 13))
    assert got["value"] == want["value"]  # the same numbers, bit for bit


def test_a_rank_killed_from_outside_is_named(store, jobs, tmp_path):
    """Rank 1 found as a user finds it (the job's process whose PMI_RANK is 1; each rank's
    monitor shows neither that nor the script) and killed with SIGKILL while it trains."""
    started = tmp_path / "started"
    job = lk.dist.start(SCRIPT, n=2, args=["--started", started])
    jobs.append(job)
    until("the first batch", started.exists)
    [rank1] = [p for p in psutil.Process(job.pid).children(recursive=True)
               if p.environ().get("PMI_RANK") == "1"]
    assert str(SCRIPT) in " ".join(rank1.cmdline())
    rank1.kill()
    assert job.wait(timeout=30) != 0
    # the rank's monitor (_rank.py) always notes the SIGKILL in the job's log, before it ends
    note = f"rank 1 of 2 (pid {rank1.pid}) was killed by signal 9 (SIGKILL)"
    log = job.log_path.read_text(errors="replace")
    assert f"[labkit dist] {note}" in log, log
    run = lk.runs.get(job.run_id)
    assert run["status"] == "failed", run
    # NOTE: two writers race to record the run (timing): the job's reaper, with the monitor's
    # note, or first rank 0's loop, with the DistError of its wait for rank 1 (it looks for
    # its peers after CHECK_AFTER, 0.5 s, before mpiexec has ended it); both name rank 1's pid
    if "the job exited with status" in run["error"]:
        assert note in run["error"], run["error"]
    else:
        assert f"DistError: rank 1 (pid {rank1.pid}) is gone " in run["error"], run["error"]


def test_a_killed_mpiexec_fails_the_job_and_leaves_no_rank(store, jobs, tmp_path):
    started = tmp_path / "started"
    job = lk.dist.start(SCRIPT, n=2, args=["--started", started])
    jobs.append(job)
    until("the first batch", started.exists)
    ranks = psutil.Process(job.pid).children(recursive=True)
    os.kill(job.pid, signal.SIGKILL)  # mpiexec alone: the ranks are in sessions of their own
    assert job.wait(timeout=30) != 0
    assert _wait_gone(ranks, timeout=60) == []  # none outlives the job's end (but by a moment)
    run = lk.runs.get(job.run_id)
    assert run["status"] == "failed" and "exited with status -9" in run["error"], run


@pytest.mark.parametrize("launcher", ["labkit launch", "start(detach=False)"])
def test_a_killed_launcher_leaves_no_rank_and_no_running_run(tmp_path, launcher):
    """The process that started the job killed with SIGKILL (`labkit launch`, or a script that
    called lk.dist.start(detach=False)): mpiexec gets SIGTERM (it ends with its parent) and
    passes it to the ranks, which stop after the same batch with a checkpoint, record the run
    as interrupted, and end."""
    started = tmp_path / "started"
    env = {**os.environ, "LABKIT_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
    if launcher == "labkit launch":
        code = "import sys; from labkit.cli import main; sys.exit(main())"
        args = ["launch", "-n", "2", SCRIPT, "--started", started]
    else:
        code = ("import sys, labkit as lk; lk.dist.start(sys.argv[1], n=2, args=sys.argv[2:], "
                "detach=False).wait()")
        args = [SCRIPT, "--started", started]
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    job = []
    try:
        until("the first batch", started.exists)
        job = psutil.Process(proc.pid).children(recursive=True)
        assert len(job) >= 4  # mpiexec, its proxy, a monitor and a rank per rank
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        alive = _wait_gone(job, timeout=30)
        assert alive == [], f"left running: {alive}\n{proc.stderr.read()[-3000:]}"
    finally:
        for p in [proc, *job]:
            try:
                p.kill()
            except (ProcessLookupError, psutil.NoSuchProcess):
                pass
        proc.wait()
    with lk.runs.use_store(tmp_path / "home" / "runs.sqlite"):
        [run] = lk.runs.list()
        assert run["status"] == "interrupted", run
        # every rank stopped after the same batch and the interrupt checkpoint was written
        assert [c["iteration"] for c in lk.runs.checkpoints(run["id"])] == \
            [run["progress"]["iteration"]]


def test_labkit_launch_records_the_run_of_a_rank_mpiexec_killed_as_failed(tmp_path):
    """Rank 1 SIGKILLed: mpiexec kills rank 0, which was training the run and (most often)
    records nothing. `labkit launch` records it failed, naming the rank, where it was left
    running (shown dead); the job's stderr still reaches the terminal."""
    env = {**os.environ, "LABKIT_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", "import sys; from labkit.cli import main; "
                           "sys.exit(main())", "launch", "-n", "2", SCRIPT, "--die-rank", "1",
                           "--die-at", "3", "--iterations", "50"], env=env, timeout=120,
                          start_new_session=True, capture_output=True, text=True)
    assert proc.returncode != 0, proc
    # the rank's monitor (_rank.py) always notes the SIGKILL on the job's stderr, before it ends
    found = re.search(r"\[labkit dist\] (rank 1 of 2 \(pid (\d+)\) was killed by signal 9 "
                      r"\(SIGKILL\))", proc.stderr)
    assert found, proc.stderr
    note, pid = found.group(1), found.group(2)
    with lk.runs.use_store(tmp_path / "home" / "runs.sqlite"):
        [run] = lk.runs.list()
        assert run["status"] == "failed", run
        # NOTE: two writers race to record the run (timing): `labkit launch`, with the
        # monitor's note, or first rank 0's loop, with the DistError of its wait for rank 1 (it
        # looks for its peers after CHECK_AFTER, 0.5 s, before mpiexec has ended it); both
        # name rank 1's pid
        if run["error"].startswith("labkit launch: "):
            assert run["error"].startswith(f"labkit launch: the job exited with status "
                                           f"{proc.returncode} while this run was running"), run
            assert note in run["error"], run
        else:
            assert f"DistError: rank 1 (pid {pid}) is gone " in run["error"], run


DISAGREE = {
    "data": "rank 1's data is not rank 0's: the examples of source 'x' differ",
    "epoch": "rank 0 at iteration 6 (epoch 0, batch 6 of it), rank 1 at iteration 6 (epoch 1, "
             "batch 1 of it)",
    "diverge": "parameters differ at the end of training (they were equal at iteration 1): "
               "'/mlp/linear_0.W' on rank 1 is not rank 0's",
    "nan": "NonFiniteGradientError: DataParallel: non-finite gradients on rank 1 "
           "('/mlp/linear_1.b': 3 NaN",
    "fewer": "rank 0 has left the job (its script ended after its collective 5: gradient "
             "bucket #0) while rank 1 waits in gradient bucket #0",
    "collective": "the all-reduce of gradient bucket #0 on rank 1 did not sum the 2 ranks' "
                  "gradients of this step",
    "shape": "did not reduce an array like this rank's (3 values of float32",
    "settings": "DataParallelLoop: the ranks' settings differ: shard_random is False on rank 1 "
                "but True on rank 0",
    "bucket": "DataParallel: the ranks' settings differ: bucket_mb is 0.5 on rank 1 but 1.0 "
              "on rank 0",
}


def test_ranks_that_disagree_stop_with_the_difference_named():
    """Each mode of disagree.py (its docstring says what differs), as 2-rank jobs run side by
    side: a DistError naming the difference, not a hang or a job that trains on."""
    script = Path(__file__).with_name("disagree.py")
    with ThreadPoolExecutor(len(DISAGREE)) as pool:
        done = dict(zip(DISAGREE, pool.map(
            lambda mode: mpirun.run(2, [mode], timeout=90, script=script), DISAGREE)))
    for mode, message in DISAGREE.items():
        job = done[mode]
        assert job.rc != 0 and not job.left, (mode, job)
        assert message in job.err, (mode, job)
        if mode != "fewer":  # NOTE: there, rank 0 ends its 3 steps before rank 1 fails
            assert "trained on" not in job.out, (mode, job)


def _running(p) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(procs, timeout: float) -> list:
    """The processes of ``procs`` still running after ``timeout`` seconds (zombies are gone)."""
    deadline = time.monotonic() + timeout
    while (alive := [p for p in procs if _running(p)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive
