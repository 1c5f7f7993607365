"""``lk.dist.start(script, n=2)``: a data-parallel job in the background, e.g. from a notebook.

The job is ``labkit launch``'s command (``mpiexec -n N python -m mpi4py script.py``, one BLAS
thread per rank) started in a process session of its own, so the kernel neither waits for it
nor shares its signals, and can end the whole group. The run exists before the job starts: it is
created here, in the store this process uses, and its id travels to the ranks in
``LABKIT_RUN_ID`` (the store's home in ``LABKIT_HOME``); rank 0's ``DataParallelLoop`` records
into that run, so ``job.run_id`` is known at once and the Dashboard, the Runs sidebar and
``lk.runs.send`` reach the job from its first batch. Its output goes to ``launch.log`` in the
run's folder. A thread of this process waits for the job and, if it ended without its loop
saying so (a crash, a kill, a script that never built the loop), marks the run failed (or
interrupted, after ``job.stop()`` had to signal it) with the log's tail and the reason found in
it (the rank killed by a signal, which its monitor names; the last exception a rank raised).
Every process of the job carries a token in its environment (``launch.tag``): Hydra gives
each rank a session of its own, so ``kill()`` and the end of the job find them by it, and none
outlives mpiexec.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from .. import runs
from .._proc import alive
from ..checkpoint import cleanup
from ..errors import RunStoreError
from ..training.resume import started_by_dist
from ._rank import NOTE
from .comm import DistError
from .launch import (
    check_threads,
    command,
    end_processes,
    ends_with_parent,
    environment,
    exiting_rank,
    job_processes,
    tag,
)

#: the variable that tells rank 0's DataParallelLoop which run to record into
RUN_ID_VAR = "LABKIT_RUN_ID"
#: set to "1" by ``resume``: the loop loads the run's newest valid checkpoint before training
RESUME_VAR = "LABKIT_RESUME"
#: the job's output (every rank's stdout and stderr), in the run's folder
LOG_NAME = "launch.log"


def start(script, n: int = 2, args=(), *, name: str | None = None, threads: int = 1,
          detach: bool = True) -> Job:
    """Start ``script`` on ``n`` ranks in the background and return its ``Job`` at once.

    The script trains with a ``lk.dist.DataParallelLoop`` (its first one takes the run made
    here); ``name`` is the run's name until the loop gives one (default: the script's name).
    The job outlives this process (a restarted kernel) unless ``detach=False``: then it gets
    SIGTERM when the thread that started it ends, the process killed included (Linux; what a
    command in a terminal wants, as ``labkit launch`` does), and its loop records the run
    interrupted.

    Examples
    --------
    >>> job = lk.dist.start("train.py", n=2, args=["--lr", 0.01])   # doctest: +SKIP
    >>> job.dashboard()                 # live plots, Pause / Stop for every rank  # doctest: +SKIP
    >>> job.wait(timeout=600); print(job.log())                      # doctest: +SKIP
    """
    check_threads(threads, "start")
    cmd = command(n, script, args)  # checks n, the script and mpiexec first
    if Path(script).suffix != ".py":
        raise DistError(f"start: the script must be a .py file (lk.dist.resume and the run "
                        f"store know a job by it), got {str(script)!r}")
    store = _ranks_store("start")
    home = store.path.parent
    script = Path(script).resolve()
    config = {"ranks": n}
    if args:
        config["script_args"] = [str(a) for a in args]
    run_id = store.create_run(name=name or script.stem, source=str(script), config=config)
    directory = home / "runs" / run_id
    directory.mkdir(parents=True, exist_ok=True)
    store.update_run(run_id, directory=str(directory))
    return _spawn(cmd, threads, store, run_id, directory, {}, "start", detach)


def resume(run_id: str, n: int | None = None, *, threads: int = 1,
           detach: bool = True) -> Job:
    """Continue a job that ``start()`` made and that was killed, failed or interrupted: the
    same script and arguments on ``n`` ranks (default: as many as last time; any number works,
    the global sample order is kept), recording into the same run. Every rank loads the run's
    newest valid checkpoint when its loop starts training. Returns the new ``Job`` at once.

    ``lk.resume(run_id)`` and ``labkit resume RUN`` come here for such runs. ``detach``: as
    ``start``'s.

    Examples
    --------
    >>> job = lk.dist.resume("a1b2c3d4", n=4)      # doctest: +SKIP
    >>> job.wait()                                  # doctest: +SKIP
    """
    check_threads(threads, "resume")
    store = runs.store()
    record = store.get(run_id)  # RunStoreError names a run that is not there
    config = record.get("config") or {}
    source = record.get("source")
    if not started_by_dist(record):
        raise DistError(f"resume: run {run_id} was not started by lk.dist.start (it records no "
                        "ranks and script); resume it with lk.resume(run_id)")
    if store.is_live(record):
        raise DistError(f"resume: run {run_id} is {record['status']}; stop it first "
                        f"(lk.runs.send({run_id!r}, 'stop'))")
    if record["status"] == "finished":
        raise DistError(f"resume: run {run_id} already finished; to train it further, fork it "
                        f"(lk.runs.fork({run_id!r}, ...))")
    if not runs.checkpoints(run_id):
        raise DistError(f"resume: run {run_id} has no checkpoint to continue from; start it "
                        "again with lk.dist.start (add lk.training.Checkpoint(every=...) so a "
                        "later run can be resumed)")
    n = config["ranks"] if n is None else n
    args = config.get("script_args") or []
    cmd = command(n, source, args)  # checks n, the script and mpiexec
    _ranks_store("resume")
    store.update_run(run_id, config={**config, "ranks": n})
    directory = Path(record.get("directory") or store.path.parent / "runs" / run_id)
    directory.mkdir(parents=True, exist_ok=True)
    cleanup(directory / "checkpoints")  # NOTE: a job whose reaper died with its kernel
    with open(directory / LOG_NAME, "ab") as f:
        f.write(f"\n--- resumed on {n} rank(s) at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n"
                .encode())
    return _spawn(cmd, threads, store, run_id, directory, {RESUME_VAR: "1"}, "resume",
                  detach)


def _ranks_store(what: str):
    """This process's run store, which the ranks must find as $LABKIT_HOME/runs.sqlite."""
    store = runs.store()
    if store.path.name != "runs.sqlite":
        raise DistError(f"{what}: the ranks find the run store as $LABKIT_HOME/runs.sqlite, but "
                        f"this process uses {str(store.path)!r}; use_store() a file named "
                        "runs.sqlite (its folder becomes the ranks' LABKIT_HOME)")
    return store


def _spawn(cmd, threads, store, run_id, directory, extra_env, what, detach=True) -> Job:
    env = environment(threads)
    env.pop(RESUME_VAR, None)  # NOTE: a job started from a resumed job's rank is fresh
    env.update({RUN_ID_VAR: run_id, "LABKIT_HOME": str(store.path.parent),
                "PYTHONUNBUFFERED": "1", **extra_env})
    token = tag(env)
    log = directory / LOG_NAME
    with open(log, "ab") as out:
        try:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=None if detach else ends_with_parent())
        except OSError as e:
            store.update_run(run_id, status="failed", ended=time.time(),
                             error=f"the job did not start: {e}")
            raise DistError(f"{what}: mpiexec did not start ({e})") from e
    return Job(proc, run_id, log, store, cmd, token)


#: a line of a traceback that names the exception (the reason a rank failed)
_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)"
                     r"(?::|$)")


def reasons(text: str, most: int = 3) -> list[str]:
    """Why a job ended, from its log's ``text``: the notes of ranks lost to a signal or that
    exited with an error (the rank monitor's lines, ``_rank.py``), and the last exception a
    rank raised."""
    lines = [ln.strip() for ln in text.splitlines()]
    notes = list(dict.fromkeys(ln[len(NOTE):] for ln in lines if ln.startswith(NOTE)))
    raised = [ln for ln in lines if _RAISED.match(ln)]
    return (notes[:most - 1] + raised[-1:]) if raised else notes[:most]


def settle_run(store, run_id: str, status: str, why, text: str, see: str = "") -> bool:
    """Record the run ``run_id`` as ``status`` (failed, interrupted) if its loop did not record
    how it ended (it is still ``created``, ``running`` or ``paused``): the error says ``why``
    (a string, or a function of the status it was left in), a failure adds the ``reasons``
    found in the job's output ``text``, then ``see``; its last 60 lines are the traceback.
    Whether it recorded the run. A run another process trains now (live: a fresh heartbeat
    and, on this host, a live process: this job's have ended) is left to it: a second job
    refused because the run was being trained (RunBusyError) must not mark it failed."""
    run = store.get(run_id)
    stored = run["stored_status"]
    if stored not in ("created", "running", "paused") or store.is_live(run):
        return False
    why = why(stored) if callable(why) else why
    found = reasons(text) if status == "failed" else []
    if found:
        why += ": " + "; ".join(found)
    store.update_run(run_id, status=status, ended=time.time(), error=(why + see)[:2000],
                     traceback="\n".join(text.splitlines()[-60:]) or None)
    return True


class Job:
    """A data-parallel job started by ``start()``: its run, its log, its processes."""

    def __init__(self, proc, run_id: str, log_path: Path, store, cmd, token: str | None = None):
        self.run_id, self.log_path, self.command = run_id, Path(log_path), cmd
        self._proc, self._store, self._token = proc, store, token
        self._signalled: str | None = None
        self._done = threading.Event()
        # NOTE: waiting in a thread reaps the job as soon as it ends (no zombie while the
        # notebook idles) and puts the run's final status in the store for the sidebar
        self._reaper = threading.Thread(target=self._reap, daemon=True,
                                        name=f"labkit-job-{run_id}")
        self._reaper.start()

    @property
    def pid(self) -> int:
        """mpiexec's process id, also the id of the job's process group."""
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The job's exit status (non-zero when any rank failed); None while it runs."""
        return self._proc.returncode if self._done.is_set() else None

    @property
    def status(self) -> str:
        """``"running"``, ``"done"`` (exit status 0) or ``"failed"``."""
        if not self._done.is_set():
            return "running"
        return "done" if self._proc.returncode == 0 else "failed"

    def run(self) -> dict:
        """The run's record in the store (status, progress, ...), as ``lk.runs.get`` gives."""
        return self._store.get(self.run_id)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the job to end and return its exit status (``TimeoutError`` after
        ``timeout`` seconds; the job goes on)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"job {self.run_id} still runs after {timeout} s; its log ends "
                               f"with:\n{self.log(10)}")
        return self._proc.returncode

    def log(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the job's output (every rank's stdout and stderr)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 200 * lines - 4096))
                text = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 30.0) -> int:
        """Stop every rank: a ``"stop"`` command through the store (all ranks stop after the
        same batch and the loop ends the run as finished), then, if the job has not ended
        within ``grace`` seconds (or its loop takes no commands), SIGTERM to its process group
        (mpiexec passes it to the ranks: a ``DataParallelLoop`` stops every rank after the same
        batch with a checkpoint, the run interrupted) and, 5 s later, SIGKILL to every process
        of the job. Returns the exit status."""
        if self._done.is_set():
            return self._proc.returncode
        try:
            run = self._store.get(self.run_id)
            if self._store.is_live(run) and (run.get("progress") or {}).get("training"):
                self._store.add_command(self.run_id, "stop")
                if self._done.wait(grace):
                    return self._proc.returncode
        except RunStoreError:
            pass  # NOTE: no store, no command: the signals below still end the job
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
            self._signal(sig)
            if self._done.wait(wait):
                break
        return self._proc.returncode

    def interrupt(self, grace: float = 30.0) -> int:
        """As Ctrl-C on ``labkit launch``: SIGTERM to the job, so every rank stops after the
        same batch with a checkpoint and the run is ``interrupted`` (``resume`` continues
        it), then SIGKILL if it has not ended within ``grace`` seconds. Returns the exit
        status."""
        if not self._done.is_set():
            self._signal(signal.SIGTERM)
            if not self._done.wait(grace):
                self._signal(signal.SIGKILL)
                self._done.wait()
        return self._proc.returncode

    def kill(self) -> int:
        """SIGKILL to every process of the job, now; returns the exit status once none of
        them runs any more."""
        self._signal(signal.SIGKILL)
        self._done.wait()
        return self._proc.returncode

    def _signal(self, sig) -> None:
        if self._done.is_set():
            return
        self._signalled = self._signalled or signal.Signals(sig).name
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGKILL and self._token:
            # NOTE: the ranks are not in mpiexec's process group (Hydra gives each a session)
            for pid in job_processes(self._token):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

    def dashboard(self, **kwargs):
        """The run's live ``lk.notebook.Dashboard`` (make it a cell's value to show it)."""
        # NOTE: the viewer the package root registers for MainLoop.show() is the notebook
        # Dashboard, which takes a run id as well as a loop: dist never imports the notebook
        from ..training import loop as _loop

        if _loop._viewer is None:
            raise DistError("job.dashboard: no notebook viewer is registered; import labkit "
                            "(pip install 'labkit[notebook]' for the widgets)")
        return _loop._viewer(self.run_id, **kwargs)

    def _reap(self) -> None:
        rc = self._proc.wait()
        try:
            if self._token:
                # NOTE: mpiexec gone (killed) may leave ranks for a moment: none outlives it
                end_processes(self._token)
                self._trainer_gone()
            # NOTE: what a rank killed while writing a checkpoint left (its writer is gone)
            cleanup(self.log_path.parent / "checkpoints")
            self._settle(rc)
        finally:
            self._done.set()

    def _trainer_gone(self, grace: float = 10.0) -> None:
        """Wait (at most ``grace`` seconds) until the process the run names as its trainer
        has ended, where it is one of this job's ranks: a rank killed a moment ago can still
        exist (its environment already gone, so end_processes no longer finds it), and
        settle_run would take it for a live trainer and leave the run ``paused`` or
        ``running`` for good. Another job's trainer (this one refused: the run was busy) is
        not waited for."""
        try:
            run = self._store.get(self.run_id)
        except RunStoreError:
            return
        pid = run.get("pid")
        if run.get("host") != socket.gethostname() or not exiting_rank(pid, self._token):
            return
        deadline = time.monotonic() + grace
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)

    def _settle(self, rc: int) -> None:
        """A run the job left ``created``, ``running`` or ``paused`` ended without its loop
        recording how: record it here."""
        try:
            run = self._store.get(self.run_id)
            if run["stored_status"] == "interrupted" and self._signalled and not run["error"]:
                # NOTE: the ranks' loops took the SIGTERM and recorded the run themselves
                self._store.update_run(self.run_id, error=f"ended by {self._signalled} from "
                                       f"job.stop(); see {self.log_path}")
            if self._signalled:
                status, why = "interrupted", f"ended by {self._signalled} from job.stop()"
            else:
                status, why = "failed", lambda stored: (
                    f"the job exited with status {rc} before a DataParallelLoop trained this "
                    "run" if stored == "created" else
                    f"the job exited with status {rc} while training")
            settle_run(self._store, self.run_id, status, why, self.log(200),
                       see=f"; see {self.log_path}")
        except RunStoreError:
            pass  # NOTE: deleted meanwhile, or the store fails: nothing to record into

    def __repr__(self):
        rc = "" if self.returncode is None else f", exit status {self.returncode}"
        return f"Job(run {self.run_id}: {self.status}{rc}, pid {self.pid}, log {self.log_path})"
