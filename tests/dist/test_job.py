"""``lk.dist.start``: a data-parallel job started from Python as a notebook cell starts it,
watched and steered through the run store only (as the Dashboard and the Runs sidebar do).

Every job runs in its own process group (``start`` makes a session), is killed in a finally,
and the tests assert no process of it is left (conftest.py's ``jobs``). No sleeps for
synchronisation: the store and the log are polled until a deadline.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

import labkit as lk  # noqa: E402

from .conftest import until  # noqa: E402
from .mpirun import group_alive  # noqa: E402

SCRIPT = Path(__file__).with_name("background.py")


def test_a_background_job_is_watched_paused_resumed_and_stopped_through_the_store(store, jobs):
    job = lk.dist.start(SCRIPT, n=2)
    jobs.append(job)
    assert job.status == "running" and job.returncode is None
    assert store.get(job.run_id)["status"] in ("created", "running")  # the run exists at once

    # rank 0 records into the run made for the job, and its metrics arrive
    until("loss in the store", lambda: lk.runs.metrics(job.run_id, ["loss"])["loss"]["value"])
    run = lk.runs.get(job.run_id)
    assert run["status"] == "running" and run["name"] == "background-dp"
    assert run["config"] == {"ranks": 2, "lr": 0.01}
    assert len(store.list()) == 1  # one run for the job: rank 0's, none from rank 1

    rec = lk.runs.send(job.run_id, "pause", wait=30)
    assert rec["result"].startswith("paused at iteration"), rec
    at = rec["iteration"]
    log = until("both ranks' pause in the log", lambda: all(
        f"rank {r} paused at iteration {at}" in job.log() for r in (0, 1)) and job.log())
    assert lk.runs.get(job.run_id)["status"] == "paused", log

    rec = lk.runs.send(job.run_id, "checkpoint", wait=30)
    assert rec["result"] == f"checkpoint ckpt-{at:08d} written", rec
    assert [c["iteration"] for c in lk.runs.checkpoints(job.run_id)] == [at]

    assert lk.runs.send(job.run_id, "resume", wait=30)["result"] == "resumed"
    until("training after the resume",
          lambda: lk.runs.get(job.run_id)["progress"]["iteration"] > at)
    # NOTE: the ranks' output reaches the log through mpiexec, later than the store's progress
    until("both ranks' resume in the log", lambda: all(
        f"rank {r} resumed at iteration {at}" in job.log() for r in (0, 1)))

    assert job.stop(grace=30) == 0, job.log()
    assert job.status == "done" and job.returncode == 0
    run = lk.runs.get(job.run_id)
    assert run["status"] == "finished", run  # a stop command ends the loop as finished
    ended = {line.rsplit(" ", 1)[1] for line in job.log().splitlines() if " ended at " in line}
    assert ended == {str(run["progress"]["iteration"])}, job.log()  # every rank, same batch
    assert not group_alive(job.pid)
    assert repr(job).startswith(f"Job(run {job.run_id}: done, exit status 0")


def test_a_killed_job_resumes_from_its_checkpoint_on_another_number_of_ranks(store, jobs):
    job = lk.dist.start(SCRIPT, n=2, args=["--iterations", 30, "--pause-at", 7])
    jobs.append(job)
    run_id = job.run_id
    until("the pause", lambda: lk.runs.get(run_id)["status"] == "paused")
    with pytest.raises(lk.dist.DistError, match="is paused; stop it first"):
        lk.dist.resume(run_id)
    rec = lk.runs.send(run_id, "checkpoint", wait=30)
    at = rec["iteration"]
    assert rec["result"] == f"checkpoint ckpt-{at:08d} written", rec
    job.kill()
    assert lk.runs.get(run_id)["status"] == "interrupted"
    with pytest.raises(lk.TrainingError, match=rf"lk.dist.resume\('{run_id}', n=N\)"):
        lk.resume(run_id)  # one process cannot rebuild a script's loop: it says what can

    again = lk.dist.resume(run_id, n=1)
    jobs.append(again)
    assert again.run_id == run_id and again.command[2] == "1"
    assert again.wait(timeout=120) == 0, again.log(60)
    log = again.log(200)
    assert f"resumed run {run_id} from" in log and f"(iteration {at}) on 1 rank(s)" in log, log
    assert "rank 0 ended at iteration 30" in log, log
    run = lk.runs.get(run_id)
    assert run["status"] == "finished" and run["progress"]["iteration"] == 30, run
    assert run["config"]["ranks"] == 1
    assert run["config"]["script_args"] == ["--iterations", "30", "--pause-at", "7"]
    assert len(store.list()) == 1  # the same run, not a new one
    with pytest.raises(lk.dist.DistError, match="already finished"):
        lk.dist.resume(run_id)


def test_resume_refuses_what_it_cannot_continue(store, tmp_path):
    plain = store.create_run(name="plain", config={"lr": 0.1})
    with pytest.raises(lk.dist.DistError, match="was not started by lk.dist.start"):
        lk.dist.resume(plain)
    script = tmp_path / "s.py"
    script.write_text("print(1)\n")
    unsaved = store.create_run(name="job", source=str(script), config={"ranks": 2})
    store.update_run(unsaved, status="failed")
    with pytest.raises(lk.dist.DistError, match="has no checkpoint to continue from"):
        lk.dist.resume(unsaved)
    with pytest.raises(lk.runs.RunStoreError):
        lk.dist.resume("nosuchrun")


def test_a_failing_rank_fails_the_job_and_the_log_has_the_traceback(store, jobs):
    job = lk.dist.start(SCRIPT, n=2, args=["--fail-rank", 1])
    jobs.append(job)
    assert job.wait(timeout=60) != 0
    assert job.status == "failed"
    log = job.log(200)
    assert "Traceback" in log and "RuntimeError: rank 1 fails on purpose" in log, log
    # rank 0 was aborted mid-run: the job's reaper records the run as failed, with the log;
    # or rank 0's loop did first, from the error that ended its wait for rank 1 (seen once in
    # a loaded full run: which of the two writes first is timing)
    run = lk.runs.get(job.run_id)
    assert run["status"] == "failed", run
    if "the job exited with status" in run["error"]:
        assert "rank 1 fails on purpose" in run["traceback"]
    else:  # NOTE: "rank 1 ... is gone", "rank 1 has left", or "rank 0/2: MPI failed in ..."
        assert re.search(r"rank [01]\b", run["error"]), run
    assert not group_alive(job.pid)


def test_a_job_that_takes_no_commands_is_stopped_by_signals(store, jobs, tmp_path):
    script = tmp_path / "idle.py"  # never builds a loop: only the signals can end it
    script.write_text("import sys, threading\nprint('idle', flush=True)\n"
                      "threading.Event().wait()\n")
    job = lk.dist.start(script, n=2, name="idle")
    jobs.append(job)
    until("the job's output", lambda: job.log().count("idle") == 2)
    assert job.stop(grace=1) != 0
    assert not group_alive(job.pid)
    run = lk.runs.get(job.run_id)
    assert run["status"] == "interrupted" and "SIGTERM from job.stop()" in run["error"], run


def test_clear_errors_before_anything_starts(store, tmp_path, monkeypatch):
    script = tmp_path / "s.py"
    script.write_text("print(1)\n")
    for n in (0, -1, 1.5, True):
        with pytest.raises(lk.dist.DistError, match="must be a whole number >= 1"):
            lk.dist.start(script, n=n)
    with pytest.raises(lk.dist.DistError, match="no script"):
        lk.dist.start(tmp_path / "missing.py", n=2)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(lk.dist.DistError, match=r"no mpiexec found; pip install 'labkit\[dist\]'"):
        lk.dist.start(script, n=2)
    assert store.list() == []  # no run was made for a job that did not start


def test_the_ranks_need_a_store_they_can_find(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("print(1)\n")
    with lk.runs.use_store(tmp_path / "elsewhere.sqlite"):
        with pytest.raises(lk.dist.DistError, match="use_store"):
            lk.dist.start(script, n=2)
