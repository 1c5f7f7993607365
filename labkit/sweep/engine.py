"""Where trials run: a Dask client for ``engine=``.

- ``"local"``: a scheduler in this process and ``workers`` worker processes, all on 127.0.0.1
  (no dashboard). Each worker is started as its own Python process (``dask spec``)
  rather than forked or spawned from this one, so a plain script needs no ``if __name__ ==
  "__main__"`` guard; when this process dies the scheduler dies with it and the workers end
  themselves. Workers get one BLAS/OpenMP thread.
- ``"inprocess"``: one worker thread in this process (tests, debugging; no process starts).
- ``"tcp://host:port"``: the scheduler of a cluster someone started; workers there need the
  trials' run folders on a filesystem they share with this driver.
- a ``distributed.Client``: used as it is, left open.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys

from .._proc import THREAD_VARS
from .space import SweepError

#: where the HTTP servers of our own clusters listen: this machine only, any free port
LOOPBACK = "127.0.0.1:0"
#: seconds to wait for a scheduler's address to answer
CONNECT_TIMEOUT = 30
#: the most worker processes ``engine="local"`` starts (each imports labkit and trains)
LOCAL_MAX_WORKERS = max(8, 4 * (os.cpu_count() or 1))
#: the environment of local workers: one BLAS/OpenMP thread each
WORKER_ENV = dict.fromkeys(THREAD_VARS, "1")
#: Dask settings of local workers, unless this process's environment sets them: no sampling
#: profiler (it walks the training thread's stack on the worker's event loop every 10 ms, for
#: a dashboard local workers do not have) and slower system and memory monitors. Measured
#: with ``benchmarks/bench_sweep.py``: the workers' event loops took 6-8 ms of CPU per 30 ms
#: trial, on cores the trials share
WORKER_DASK_ENV = {"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
                   "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "5s",
                   "DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL": "1s"}


class _TrialFailures(logging.Filter):
    """Drops Dask's reports of a sweep's failed trial: a worker's "Compute Failed" (with the
    trial's traceback), the scheduler's "marked as failed because 2 workers died" (a trial
    that kills its workers). The driver records the failure, its reason and traceback with the
    trial's run, and says so in one line (``labkit sweep``, the ``labkit.sweep`` logger);
    other tasks' reports stay."""

    REPORTS = ("Compute Failed", "Task %s marked as failed because %d workers died")

    def filter(self, record):
        key = record.args[0] if isinstance(record.args, tuple) and record.args else None
        return not (isinstance(key, str) and key.startswith("labkit-trial-")
                    and str(record.msg).startswith(self.REPORTS))


def quiet_trial_failures() -> None:
    """Install ``_TrialFailures`` on this process's ``distributed.worker`` and
    ``distributed.scheduler`` loggers (once)."""
    for name in ("distributed.worker", "distributed.scheduler"):
        log = logging.getLogger(name)
        if not any(isinstance(f, _TrialFailures) for f in log.filters):
            log.addFilter(_TrialFailures())


class _NannyGone(logging.Filter):
    """Drops the line and traceback a worker process logs when its Nanny's pipe breaks
    ("Worker process died unexpectedly", from Dask's ``watch_stop_q``, which runs in the
    worker process, not in the Nanny's). Local workers see it after their driver was killed:
    the scheduler went with the driver, the Nanny ends, the worker follows it. The driver
    records what became of each trial (``labkit sweep resume``), so these lines only
    filled the terminal, one traceback per worker."""

    def filter(self, record):
        return not str(record.msg).startswith("Worker process died unexpectedly")


def dask_setup(worker) -> None:
    """Run in each local worker process as it starts (Dask's ``preload`` of this module),
    restarted ones included."""
    quiet_trial_failures()
    log = logging.getLogger("distributed.nanny")
    if not any(isinstance(f, _NannyGone) for f in log.filters):
        log.addFilter(_NannyGone())


#: a local worker process: ``dask spec`` (a Nanny and its worker), deaf to SIGINT. Ctrl-C in a
#: terminal reaches every process of the foreground group: the driver's (which interrupts the
#: sweep and kills its workers) and, before, each Nanny's (which closed its worker while the
#: scheduler went too: a page of CancelledError and CommClosedError tracebacks on stderr).
#: SIGINT is ignored before Python starts Dask, and dask spec waits for SIGTERM alone, so the
#: worker process the Nanny starts inherits the ignored SIGINT too
WORKER_MAIN = """
import asyncio, logging, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
from distributed.cli import dask_spec

DRIVER = os.getppid()


class Quiet(logging.Filter):
    # the Nanny's INFO lines about starting and closing (its worker process drops its own
    # "Worker process died unexpectedly": _NannyGone, installed by dask_setup); and all of
    # them once the driver is gone (killed: this process is an orphan, closing itself and its
    # worker as the scheduler went, and under load it said so: "Failed to unregister",
    # "Worker process still alive after 4.0 seconds, killing", with tracebacks). The driver's
    # record says what became of each trial (labkit sweep resume)
    def filter(self, record):
        return record.levelno >= logging.WARNING and os.getppid() == DRIVER


logging.getLogger("distributed.nanny").addFilter(Quiet())

async def sigterm():
    done = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, done.set)
    await done.wait()
    return signal.SIGTERM

dask_spec.wait_for_signals = sigterm
sys.argv[0] = "dask spec"
dask_spec.main()
"""


def _worker_class():
    from distributed.deploy.subprocess import SubprocessWorker

    class Worker(SubprocessWorker):
        """A worker process (``dask spec``, a Nanny) with this process's import path, so that
        make_loop's module imports there too."""

        async def _start(self):
            cmd = [sys.executable, "-c", WORKER_MAIN, self.scheduler, "--spec",
                   json.dumps({"cls": self.worker_class, "opts": self.worker_kwargs})]
            path = os.pathsep.join(p or os.getcwd() for p in sys.path)
            env = {**WORKER_DASK_ENV, **os.environ, **WORKER_ENV, "PYTHONPATH": path}
            self.process = await asyncio.create_subprocess_exec(*cmd, env=env)

    return Worker


def local_cluster(workers: int):
    """A scheduler here and ``workers`` worker processes, bound to 127.0.0.1."""
    from distributed import Scheduler, SpecCluster

    spec = {"cls": _worker_class(), "options": {
        "worker_class": "distributed.Nanny",
        "worker_kwargs": {"host": "127.0.0.1", "nthreads": 1, "env": dict(WORKER_ENV),
                          "silence_logs": 40, "death_timeout": 30, "dashboard": False,
                          "preload": [__name__]}}}
    return SpecCluster(scheduler={"cls": Scheduler, "options": {
        "host": "127.0.0.1", "port": 0, "dashboard": False, "dashboard_address": LOOPBACK}},
        workers={i: spec for i in range(workers)}, worker=spec, silence_logs=40)


def _warm_up() -> None:
    """Import what a trial needs (labkit, its training loop, the data): on a fresh worker
    process that was most of the first trial's time."""
    import labkit.sweep.trial  # noqa: F401


def default_workers(engine) -> int:
    """``workers`` when not given: 1 for ``"inprocess"`` (all it runs), else 2."""
    return 1 if engine == "inprocess" else 2


def check(engine, workers) -> None:
    """A ``SweepError`` for an ``engine`` or ``workers`` that ``connect`` would refuse, raised
    before anything is written to the store."""
    from distributed import Client

    if isinstance(engine, Client):
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SweepError(f"workers must be a positive integer, got {workers!r}")
    if engine == "local" and workers > LOCAL_MAX_WORKERS:
        raise SweepError(f"workers={workers}: engine='local' starts one process per worker, and "
                         f"this machine has {os.cpu_count()} cores; give at most "
                         f"{LOCAL_MAX_WORKERS}, or a cluster's address as engine")
    if engine == "inprocess" and workers != 1:
        raise SweepError("engine='inprocess' runs one trial at a time in this process "
                         f"(workers=1), got workers={workers}: use engine='local' for more")
    if engine not in ("local", "inprocess") and not (isinstance(engine, str)
                                                     and "://" in engine):
        raise SweepError(f"engine must be 'local', 'inprocess', a scheduler address such as "
                         f"'tcp://10.0.0.5:8786', or a distributed.Client; got {engine!r}")


def connect(engine, workers: int):
    """``(client, close)``: a client for ``engine`` and what ends it (nothing for a given
    client)."""
    from distributed import Client, LocalCluster

    quiet_trial_failures()  # NOTE: the inprocess worker, or a given Client's in this process
    if isinstance(engine, Client):
        return engine, lambda: None
    check(engine, workers)
    if engine == "local":
        cluster = local_cluster(workers)
    elif engine == "inprocess":
        # NOTE: in one process Dask talks over inproc://; its scheduler's and worker's HTTP
        # servers (health and metrics routes, without a dashboard too) bound every interface
        # (0.0.0.0:8787) unless given an address
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                               dashboard_address=LOOPBACK, worker_dashboard_address=LOOPBACK,
                               scheduler_kwargs={"dashboard": False}, silence_logs=40)
    else:  # NOTE: a scheduler address (check)
        try:
            client = Client(engine, timeout=CONNECT_TIMEOUT)
        except (OSError, ValueError, TypeError) as e:  # NOTE: TimeoutError is an OSError
            raise SweepError(f"engine={engine!r:.80}: no Dask scheduler answered there ({e}); "
                             "start one (`dask scheduler`) or use engine='local'") from None
        return client, client.close
    try:
        client = Client(cluster)
        client.wait_for_workers(workers, timeout=120)
        if engine == "local":  # NOTE: each fresh worker imports labkit once, before any trial
            client.run(_warm_up)
    except BaseException:
        cluster.close()
        raise
    return client, closer(client, cluster)


def closer(client, cluster):
    """What closes ``client`` and then our own ``cluster``."""
    def close():
        # NOTE: our own cluster going down: its comms closing mid-message log tracebacks at
        # INFO ("Batched Comm Closed ... CommClosedError"), which say nothing to a user of the
        # sweep. A filter, not the handlers' level: the cluster puts back the level it found
        # before its event loop has ended, and a write still pending then logged on stderr
        quiet = _Below(logging.ERROR)
        handlers = logging.getLogger("distributed").handlers
        for h in handlers:
            h.addFilter(quiet)
        try:
            client.close()
        finally:
            try:
                cluster.close()
            finally:
                for h in handlers:
                    h.removeFilter(quiet)
    return close


class _Below(logging.Filter):
    """Drops records below ``level``."""

    def __init__(self, level):
        super().__init__()
        self.level = level

    def filter(self, record):
        return record.levelno >= self.level


def capacity(client) -> int:
    """How many trials can train at once: the cluster's worker threads (at least 1)."""
    return max(1, sum(client.nthreads().values()))
