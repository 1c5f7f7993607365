"""A trial's checkpoint damaged on disk (a file cut short) is recorded invalid by the driver:
resume passed it over, and the store went on listing it as a valid checkpoint."""

import numpy as np

import labkit as lk
from labkit import checkpoint as ckpt
from labkit.sweep import trial as trial_mod
from labkit.sweep.driver import Driver


class _Loop:
    def __init__(self, directory):
        self.checkpoint_dir = directory


def test_a_truncated_checkpoint_is_listed_invalid(tmp_path):
    d = tmp_path / "checkpoints"
    good = ckpt.save(d, {"w": np.arange(1000.0)}, iteration=3)
    bad = ckpt.save(d, {"w": np.arange(1000.0)}, iteration=5)
    t = bad / "tensors.safetensors"
    t.write_bytes(t.read_bytes()[:-100])
    found = {c["iteration"]: c for c in trial_mod._checkpoints(_Loop(d))}
    assert found[3]["valid"] and not found[5]["valid"]
    assert found[3]["path"] == str(good)

    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        rid = store.create_run(name="trial")
        drv = Driver.__new__(Driver)
        drv.store = store
        # NOTE: a record made while the file was whole, and one first seen damaged
        store.add_checkpoint(rid, 5, 0, str(bad), 10, {})
        drv._sync_checkpoints(rid, list(found.values()))
        listed = {c["iteration"]: c["valid"] for c in store.checkpoints(rid)}
        assert listed == {3: True, 5: False}
        drv._sync_checkpoints(rid, list(found.values()))  # NOTE: nothing more to change
        assert {c["iteration"]: c["valid"] for c in store.checkpoints(rid)} == listed


def _two_trials(store, tmp_path) -> str:
    """A sweep of two pending trials, made in the store as its driver would."""
    settings = {"trials": 2, "search": "grid", "metric": "m", "mode": "max", "seed": 0,
                "early_stopping": None, "engine": "inprocess", "workers": 1,
                "directory": str(tmp_path)}
    return store.create_sweep("s", None, "{}", settings, [{"a": 1}, {"a": 2}])


def test_a_damaged_trial_row_names_the_store(tmp_path):
    import pytest

    from labkit.errors import RunStoreError

    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        sid = _two_trials(store, tmp_path)
        store._conn().execute("UPDATE trials SET params = '{bad' WHERE number = 1")
        with pytest.raises(RunStoreError, match=r"runs.sqlite: trial 1 of sweep .* cannot be "
                                                 r"read .*damaged") as e:
            lk.sweep.get(sid).table()
        assert e.value.reason == "damaged"


def test_a_dead_sweeps_running_trials_show_dead(tmp_path):
    """After its driver was killed, ``labkit sweep show`` listed its trials as running."""
    import time

    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        sid = _two_trials(store, tmp_path)
        store.update_trials(sid, {0: {"status": "running"}, 1: {"status": "finished"}})
        sw = lk.sweep.get(sid)
        assert [r["status"] for r in sw.table()] == ["running", "finished"]  # NOTE: it beats
        store.update_sweep(sid, heartbeat=time.time() - 3600)
        assert sw.status == "dead"
        assert [r["status"] for r in sw.table()] == ["dead", "finished"]
