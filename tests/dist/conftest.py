"""Fixtures of the lk.dist job tests: a run store of the test's own, and the jobs a test started,
killed afterwards whatever happened, with nothing of them left running."""

from __future__ import annotations

import time

import pytest


def until(what, check, timeout=120.0, every=0.05):
    """Poll ``check()`` until it returns something true; fail naming ``what`` at the deadline.
    NOTE: the deadline only bounds a wait for a condition (most hold within a second or two):
    generous, for the first wait after mpiexec starts ranks on a loaded machine."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(every)


@pytest.fixture
def store(tmp_path):
    import labkit as lk

    with lk.runs.use_store(tmp_path / "home" / "runs.sqlite") as s:
        yield s


@pytest.fixture
def jobs():
    from labkit.dist.launch import job_processes

    from .mpirun import group_alive

    started = []
    yield started
    for job in started:  # whatever happened in the test: nothing of the job outlives it
        job.kill()
        assert not group_alive(job.pid), f"a process of {job} was left behind"
        # NOTE: Hydra gives each rank a session of its own: found by the job's token
        assert job_processes(job._token) == [], f"a rank of {job} was left behind"
