"""settle_run records how a data-parallel job's run ended when its loop could not: never for a
run another process trains now (a second job, refused because the run was being trained,
marked it failed while the first trained it)."""

import os
import subprocess
import sys
import time

import labkit as lk
from labkit.dist.job import settle_run


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_run_another_process_trains_is_left_to_it(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        rid = store.create_run("job")
        store.update_run(rid, status="running", heartbeat=time.time(), pid=os.getpid())
        assert not settle_run(store, rid, "failed", "rank 0 exited with 1", "")
        assert store.get(rid)["status"] == "running"
        # its own trainer gone (this job's rank 0): recorded failed, with why
        store.update_run(rid, pid=_dead_pid())
        assert settle_run(store, rid, "failed", "rank 0 exited with 1", "boom\n")
        run = store.get(rid)
        assert run["status"] == "failed" and "rank 0 exited with 1" in run["error"]
