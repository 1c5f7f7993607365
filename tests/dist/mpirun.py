"""Start an MPI job from a test: its own process group, a hard timeout, killed in a finally.
Every process of the job carries a token in its environment (``launch.tag``): ``Job.left`` is
true while any of them runs (Hydra puts each rank in a session of its own), and the finally
ends them all."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from labkit.dist.launch import command, end_processes, environment, job_processes, tag

WORKER = Path(__file__).with_name("worker.py")


class Job:
    def __init__(self, rc, out, err, seconds, left):
        self.rc, self.out, self.err, self.seconds, self.left = rc, out, err, seconds, left

    def __repr__(self):
        return f"Job(rc={self.rc}, {self.seconds:.1f} s)\n--- stdout\n{self.out}\n--- " \
               f"stderr\n{self.err[-4000:]}"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def outlived(pgid: int, token: str, grace: float = 10.0) -> bool:
    """Whether a process of the job (its group ``pgid``, its ``token``) still runs ``grace``
    seconds after mpiexec ended (the ranks Hydra kills take a moment to go)."""
    deadline = time.monotonic() + grace
    while group_alive(pgid) or job_processes(token):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.02)
    return False


def run(n: int | None, args, timeout: float = 60, env: dict | None = None,
        script=WORKER) -> Job:
    """``script args`` on ``n`` ranks (``n=None``: one plain process, MPI's singleton mode)."""
    cmd = command(n, script, args) if n else [sys.executable, str(script), *map(str, args)]
    env = {**environment(1), **(env or {})}
    token = tag(env)  # NOTE: every process of the job, whatever its session, carries it
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    t0 = time.monotonic()
    try:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"the MPI job ran past {timeout} s (a hang): {cmd}\n"
                                 f"{err[-4000:]}") from None
        seconds = time.monotonic() - t0
        return Job(proc.returncode, out, err, seconds, outlived(proc.pid, token))
    finally:
        if proc.poll() is None or group_alive(proc.pid):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        end_processes(token)


def run_until(n: int, script, args, text: str, timeout: float = 30, env=None) -> str:
    """Start a job that is expected not to end; return its stderr up to the first line holding
    ``text`` (an AssertionError after ``timeout``), then kill the job's process group."""
    env = {**environment(1), **(env or {})}
    token = tag(env)
    proc = subprocess.Popen(command(n, script, args), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = []
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sel.select(timeout=max(0.0, deadline - time.monotonic())):
                line = proc.stderr.readline()
                if not line:
                    break
                seen.append(line)
                if text in line:
                    return "".join(seen)
        raise AssertionError(f"no {text!r} within {timeout} s; stderr:\n{''.join(seen)}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        end_processes(token)  # NOTE: the ranks are not in mpiexec's process group
