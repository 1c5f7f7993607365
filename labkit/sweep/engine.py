"""Where trials run: a Dask client for ``engine=``.

- ``"local"``: a scheduler in this process and ``workers`` worker processes, all on 127.0.0.1
  (no dashboard). Each worker is started as its own Python process (``python -m dask spec``)
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

from .space import SweepError

#: the environment of local workers: one BLAS/OpenMP thread each
WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: Dask settings of local workers, unless this process's environment sets them: no sampling
#: profiler (it walks the training thread's stack on the worker's event loop every 10 ms, for
#: a dashboard local workers do not have) and slower system and memory monitors. Measured
#: with ``benchmarks/bench_sweep.py``: the workers' event loops took 6-8 ms of CPU per 30 ms
#: trial, on cores the trials share
WORKER_DASK_ENV = {"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
                   "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "5s",
                   "DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL": "1s"}


def _worker_class():
    from distributed.deploy.subprocess import SubprocessWorker

    class Worker(SubprocessWorker):
        """A worker process (``dask spec``, a Nanny) with this process's import path, so that
        make_loop's module imports there too."""

        async def _start(self):
            cmd = [sys.executable, "-m", "dask", "spec", self.scheduler, "--spec",
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
                          "silence_logs": 40, "death_timeout": 30, "dashboard": False}}}
    return SpecCluster(scheduler={"cls": Scheduler, "options": {
        "host": "127.0.0.1", "port": 0, "dashboard": False}},
        workers={i: spec for i in range(workers)}, worker=spec, silence_logs=40)


def _warm_up() -> None:
    """Import what a trial needs (labkit, its training loop, the data): on a fresh worker
    process that was most of the first trial's time."""
    import labkit.sweep.trial  # noqa: F401


def check(engine, workers) -> None:
    """A ``SweepError`` for an ``engine`` or ``workers`` that ``connect`` would refuse, raised
    before anything is written to the store."""
    from distributed import Client

    if isinstance(engine, Client):
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SweepError(f"workers must be a positive integer, got {workers!r}")
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

    if isinstance(engine, Client):
        return engine, lambda: None
    check(engine, workers)
    if engine == "local":
        cluster = local_cluster(workers)
    elif engine == "inprocess":
        # NOTE: in one process Dask talks over inproc://, which binds no network address
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                               dashboard_address=None, silence_logs=40)
    else:  # NOTE: a scheduler address (check)
        try:
            client = Client(engine, timeout=30)
        except OSError as e:
            raise SweepError(f"engine={engine!r}: no Dask scheduler answered there ({e}); start "
                             "one (`dask scheduler`) or use engine='local'") from None
        return client, client.close
    try:
        client = Client(cluster)
        client.wait_for_workers(workers, timeout=120)
        if engine == "local":  # NOTE: each fresh worker imports labkit once, before any trial
            client.run(_warm_up)
    except BaseException:
        cluster.close()
        raise

    def close():
        from distributed.utils import silence_logging_cmgr

        # NOTE: our own cluster going down: its comms closing mid-message log tracebacks at
        # INFO, which say nothing to a user of the sweep
        with silence_logging_cmgr(logging.ERROR):
            try:
                client.close()
            finally:
                cluster.close()
    return client, close


def capacity(client) -> int:
    """How many trials can train at once: the cluster's worker threads (at least 1)."""
    return max(1, sum(client.nthreads().values()))
