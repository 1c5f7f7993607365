"""A trial's run deleted while its sweep runs. Before, a queued trial's run (status created:
not live) was deleted without force, and the driver then failed at its next write into it:
the sweep failed, its trial stayed running, and every resume failed the same way. Now such a
delete is refused while the sweep's driver runs it, and one forced through leaves the trial
going on unrecorded, the sweep with it. Also: a chunk run again after its driver died reports
the outcome it had."""

import pytest

import labkit as lk

from .helpers import make_loop
from .test_sweep import client, store  # noqa: F401 - fixtures

SPACE = {"lr": [0.01, 0.02, 0.03], "hidden": 8, "epochs": 2}


def _sweep(client, tmp_path, hook):  # noqa: F811
    return lk.sweep.run(make_loop, SPACE, search="grid", metric="valid_accuracy", mode="max",
                        engine=client, directory=tmp_path / "runs", _hook=hook)


def test_a_trials_run_is_not_deleted_while_its_sweep_runs_unless_forced(client, tmp_path,  # noqa: F811
                                                                       store):  # noqa: F811
    seen = {}

    def hook(kind, info):
        if kind == "progress" and info["trial"] == 1 and "refused" not in seen:
            sweep = lk.sweep.list()[0]
            t1 = next(t for t in lk.runs.store().trials(sweep["id"]) if t["number"] == 1)
            with pytest.raises(lk.runs.RunStoreError, match=r"is a trial's run of sweep .* "
                                                           r"stop the sweep first .* "
                                                           "force=True") as e:
                _delete_created(t1)
            seen["refused"] = e.value.reason
            lk.runs.delete(t1["run_id"], force=True)
            seen["deleted"] = t1["run_id"]

    sw = _sweep(client, tmp_path, hook)
    assert seen["refused"] == "live"
    rows = sw.table()
    assert sw.status == "finished" and [r["status"] for r in rows] == ["finished"] * 3
    assert not lk.runs.store().exists(seen["deleted"])
    assert all(lk.runs.get(r["run_id"])["status"] == "finished"
               for r in rows if r["run_id"] != seen["deleted"])


def _delete_created(trial):
    """The delete as the REST API's DELETE runs/ID (no force) makes it, for a trial's run that
    is not itself live (as a queued trial's is not): the sweep's driver is what refuses it."""
    lk.runs.store().update_run(trial["run_id"], status="created", heartbeat=None)
    lk.runs.delete(trial["run_id"])


def test_a_sweep_goes_on_when_a_trials_run_is_deleted_under_it(client, tmp_path,  # noqa: F811
                                                                store):  # noqa: F811
    gone = []

    def hook(kind, info):
        if kind == "progress" and info["trial"] == 0 and not gone:
            sweep = lk.sweep.list()[0]
            t0 = next(t for t in lk.runs.store().trials(sweep["id"]) if t["number"] == 0)
            lk.runs.delete(t0["run_id"], force=True)
            gone.append(t0["run_id"])

    sw = _sweep(client, tmp_path, hook)
    assert sw.status == "finished" and [r["status"] for r in sw.table()] == ["finished"] * 3
    assert gone and not lk.runs.store().exists(gone[0])
    assert lk.sweep.resume(sw.id, engine=client).status == "finished"


@pytest.mark.parametrize("epochs,outcome", [(2, "finished"), (3, "rung")])
def test_a_chunk_run_again_after_its_driver_died_reports_what_it_did(tmp_path, epochs,
                                                                     outcome):
    """The driver killed before it recorded a chunk's result: the resumed driver runs the chunk
    again, which loads its last checkpoint. A rung on the loop's last epoch was reported as a
    rung: the trial stayed stopped (its run paused) for good, where the uninterrupted sweep
    has it finished."""
    from labkit.sweep import trial as trial_mod

    spec = {"sweep": "s", "trial": 0, "run_id": "r0", "params": {}, "name": "t0",
            "config": {"epochs": epochs}, "directory": str(tmp_path / "r0"), "factory": None,
            "metric": "valid_accuracy", "budget": 2, "seed": 0, "since": 0, "token": "x"}
    first = trial_mod.train(make_loop, spec, send=lambda m: None, should_stop=lambda: None)
    again = trial_mod.train(make_loop, spec, send=lambda m: None, should_stop=lambda: None)
    assert first["outcome"] == again["outcome"] == outcome
    assert again["loaded"] == first["iteration"] == again["iteration"]
    assert again["value"] == first["value"] and again["epoch"] == first["epoch"] == 2


def test_a_command_to_a_trials_run_is_refused_naming_the_sweep(client, tmp_path,  # noqa: F811
                                                                store):  # noqa: F811
    # NOTE: it was taken, never acted on (nothing in a trial listens), and stayed pending
    seen = {}

    def hook(kind, info):
        if kind == "progress" and info["trial"] == 0 and not seen:
            sweep = lk.sweep.list()[0]
            t0 = next(t for t in lk.runs.store().trials(sweep["id"]) if t["number"] == 0)
            run = lk.runs.get(t0["run_id"])
            seen["listening"] = lk.runs.listening(run)
            with pytest.raises(lk.runs.RunStoreError, match=rf"is a trial of sweep "
                                                           rf"{sweep['id']}, whose trials take "
                                                           r"no commands; pause or stop the "
                                                           "sweep") as e:
                lk.runs.send(t0["run_id"], "stop", wait=None)
            seen["reason"] = e.value.reason
            seen["pending"] = lk.runs.store().pending_commands(t0["run_id"])

    sw = _sweep(client, tmp_path, hook)
    assert seen["listening"] is False and seen["reason"] == "not_training"
    assert not seen["pending"]
    assert [r["status"] for r in sw.table()] == ["finished"] * 3
