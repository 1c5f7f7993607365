"""Sweeps in this process (one Dask worker thread, shared by the module): the store's
records, ASHA continuing trials from checkpoints, clear errors, a stop request."""

import os
import time
from pathlib import Path

import pytest

import labkit as lk
from labkit.sweep import SweepError, TrialError, api

from .helpers import broken_loop, make_loop, odd_loop

SPACE = {"lr": lk.sweep.loguniform(1e-3, 1e-1), "hidden": [8, 16], "epochs": 3}


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                           dashboard_address="127.0.0.1:0", worker_dashboard_address=
                           "127.0.0.1:0", scheduler_kwargs={"dashboard": False}, silence_logs=40)
    c = Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture
def store(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as s:
        yield s


def sweep(client, tmp_path, **kw):
    args = {"trials": 4, "metric": "valid_accuracy", "mode": "max", "engine": client,
            "directory": tmp_path / "runs", **kw}
    return lk.sweep.run(kw.pop("make_loop", make_loop), kw.pop("space", SPACE),
                        **{k: v for k, v in args.items() if k not in ("make_loop", "space")})


def test_each_trial_is_a_run_in_the_store(client, tmp_path, store):
    sw = sweep(client, tmp_path)
    rows = sw.table()
    assert [r["trial"] for r in rows] == [0, 1, 2, 3] and sw.status == "finished"
    for r in rows:
        run = lk.runs.get(r["run_id"])
        assert r["status"] == "finished" == run["status"] and run["sweep_id"] == sw.id
        assert run["config"] == {k: r[k] for k in ("lr", "hidden", "epochs")}
        series = lk.runs.metrics(r["run_id"], ["valid_accuracy", "loss"])
        assert series["valid_accuracy"]["value"][-1] == r["valid_accuracy"]
        assert len(series["loss"]["value"]) == r["iteration"] == 33
        assert [c["iteration"] for c in lk.runs.checkpoints(r["run_id"])] == [22, 33]
    best = sw.best()
    assert best["valid_accuracy"] == max(r["valid_accuracy"] for r in rows)
    assert sw.table(sort="value")[0] == best
    assert lk.sweep.list()[0]["counts"] == {"finished": 4}
    # NOTE: where the chunks recorded their starts (Driver._blameless) is not left behind
    began = client.get_metadata([f"labkit-sweep-{sw.id}-began"], default="never made")
    assert began is None, began


def test_asha_continues_trials_from_their_checkpoints(client, tmp_path, store):
    """A promoted trial resumes (no retraining): its numbers equal a trial trained straight
    through, bit for bit."""
    plain = sweep(client, tmp_path).table()
    sw = sweep(client, tmp_path, early_stopping=lk.sweep.ASHA(grace=1, reduction=2))
    rows = sw.table()
    assert {r["status"] for r in rows} == {"finished", "stopped"}
    done = [r for r in rows if r["status"] == "finished"]
    assert done and all(r["epoch"] == 3 for r in done)
    for r in rows:
        assert lk.runs.get(r["run_id"])["status"] == ("finished" if r in done else "paused")
        twin = plain[r["trial"]]
        a = lk.runs.metrics(r["run_id"], ["loss", "valid_accuracy"])
        b = lk.runs.metrics(twin["run_id"], ["loss", "valid_accuracy"])
        n = len(a["loss"]["value"])
        assert n == r["iteration"] and a["loss"]["value"] == b["loss"]["value"][:n]
        assert a["valid_accuracy"]["value"] == b["valid_accuracy"]["value"][:r["epoch"]]


def test_a_rung_on_the_last_epoch_finishes_the_trial(client, tmp_path, store):
    """ASHA's second rung (2 epochs) is these trials' end: the trials that reach it are
    finished (not stopped at a rung), and the best one is among them."""
    space = {**SPACE, "epochs": 2}
    sw = sweep(client, tmp_path, space=space, early_stopping=lk.sweep.ASHA(grace=1,
                                                                           reduction=2))
    rows = sw.table()
    done = [r for r in rows if r["epoch"] == 2]
    assert done and all(r["status"] == "finished" for r in done)
    assert all(r["status"] == "stopped" for r in rows if r["epoch"] == 1)
    assert all(lk.runs.get(r["run_id"])["status"] == "finished" for r in done)
    assert sw.best()["status"] == "finished"


def test_an_unknown_metric_stops_the_sweep_with_the_names(client, tmp_path, store):
    """Each trial without the metric fails; the first three failing stop the sweep."""
    with pytest.raises(TrialError, match=r"first 3 trials all failed.*'valid_acc' is not in "
                       r"the log.*'valid_accuracy'"):
        sweep(client, tmp_path, metric="valid_acc")
    rec = lk.sweep.list()[0]
    assert rec["status"] == "failed" and "valid_acc" in rec["error"]
    assert "running" not in rec["counts"] and rec["counts"]["failed"] == 3


def test_a_trial_without_the_metric_nan_or_exit_fails_alone(client, tmp_path, store):
    """A trial that never reports the metric, or calls sys.exit, fails with the reason; one
    whose metric ends NaN has no value and says so; the sweep goes on."""
    sw = sweep(client, tmp_path, make_loop=odd_loop, space={"kind": ["ok", "nometric", "nan",
                                                                     "exit"], "epochs": 1},
               search="grid")
    rows = {r["kind"]: r for r in sw.table()}
    assert sw.status == "finished" and rows["ok"]["status"] == "finished"
    assert rows["nometric"]["status"] == "failed"
    assert "'valid_accuracy' is not in the log" in rows["nometric"]["error"]
    assert rows["exit"]["status"] == "failed" and "sys.exit(3)" in rows["exit"]["error"]
    assert rows["nan"]["status"] == "finished" and rows["nan"]["valid_accuracy"] is None
    assert "valid_accuracy was nan" in rows["nan"]["error"]
    sw = sweep(client, tmp_path, make_loop=odd_loop, space={"kind": ["exit_in_make_loop", "ok"],
                                                             "epochs": 1}, search="grid",
               trials=2)
    rows = {r["kind"]: r for r in sw.table()}  # NOTE: sys.exit in make_loop: no hang
    assert rows["exit_in_make_loop"]["status"] == "failed" and rows["ok"]["status"] == "finished"
    # NOTE: KeyboardInterrupt raised by a trial's code hung the in-process engine for good
    sw = sweep(client, tmp_path, make_loop=odd_loop, space={
        "kind": ["kbint_in_make_loop", "kbint", "ok"], "epochs": 1}, search="grid", trials=3)
    rows = {r["kind"]: r for r in sw.table()}
    assert sw.status == "finished" and rows["ok"]["status"] == "finished"
    for kind in ("kbint_in_make_loop", "kbint"):
        assert rows[kind]["status"] == "failed"
        assert "raised KeyboardInterrupt (in make_loop or training" in rows[kind]["error"]
    # NOTE: an exception a worker could not send back (it cannot be pickled): its message
    # in a TrialError; one that Dask sends (it rebuilds one whose __init__ takes other
    # arguments) as it is; each with its traceback in the trial's run
    sw = sweep(client, tmp_path, make_loop=odd_loop, space={
        "kind": ["unpicklable_in_make_loop", "ok", "two_args"], "epochs": 1}, search="grid",
        trials=3)
    rows = {r["kind"]: r for r in sw.table()}
    assert rows["unpicklable_in_make_loop"]["error"] == (
        "TrialError: make_loop raised Unpicklable for trial 0 (params {'kind': "
        "'unpicklable_in_make_loop', 'epochs': 1}): not sent as it is")
    assert rows["two_args"]["error"] == "TwoArgs: two args 3 4"
    tb = lk.runs.get(rows["two_args"]["run_id"])["traceback"]
    assert "raise TwoArgs(3, 4)" in tb and "helpers.py" in tb


def test_bad_engine_or_workers_write_nothing_and_leave_a_sweep_as_it_was(client, tmp_path,
                                                                        store):
    for kw, words in (({"engine": "bogus"}, "engine must be"),
                      ({"engine": "local", "workers": 0}, "workers must be a positive"),
                      ({"engine": "inprocess", "workers": 2}, "workers=1")):
        with pytest.raises(SweepError, match=words):
            sweep(client, tmp_path, **kw)
    assert lk.sweep.list() == []
    sw = sweep(client, tmp_path, trials=1)
    for kw in ({"engine": "bogus"}, {"workers": 0}, {"workers": -1}):
        with pytest.raises(SweepError):
            lk.sweep.resume(sw.id, **kw)
        rec = lk.sweep.get(sw.id).record
        assert rec["status"] == "finished" and rec["error"] is None


def test_two_drivers_cannot_take_one_sweep(client, tmp_path, store):
    """The check that no live driver holds the sweep and the taking are one transaction: a
    driver that took it in between is seen."""
    import os

    sw = sweep(client, tmp_path, trials=1)
    st = lk.runs.store()

    def taken_meanwhile(rec):  # another live process takes it just before the check
        st_rec = {**rec, "status": "running", "pid": os.getppid(), "heartbeat": time.time()}
        return api._not_driven(st_rec)

    with pytest.raises(SweepError, match="is running.*stop it first"):
        st.claim_sweep(sw.id, taken_meanwhile, status="running", pid=os.getpid())
    assert lk.sweep.get(sw.id).record["status"] == "finished"  # nothing written
    st.update_sweep(sw.id, status="running", pid=os.getppid(), heartbeat=time.time(),
                    host=__import__("socket").gethostname())
    with pytest.raises(SweepError, match="is running"):
        lk.sweep.resume(sw.id)


def test_a_chunk_stops_when_its_driver_is_gone():
    import os
    import socket
    import subprocess
    import sys

    from labkit.sweep import trial as trial_mod

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    here, ns = socket.gethostname(), trial_mod._pid_namespace()
    me = trial_mod.driver_identity()
    assert me[:3] == [here, ns, os.getpid()]
    assert not trial_mod._driver_gone({"driver": me})
    assert trial_mod._driver_gone({"driver": [here, ns, p.pid, 0]})
    assert trial_mod._driver_gone({"driver": [here, ns, os.getpid(), me[3] + 1]})  # pid reused
    # a worker that cannot see the driver's processes (another pid namespace: a container on
    # the host's network; or another machine of the same name) does not judge by the pid
    assert not trial_mod._driver_gone({"driver": [here, "pid:[other]", p.pid, 0]})
    assert not trial_mod._driver_gone({})  # off a worker, no driver recorded


def test_a_new_worker_waits_for_a_slow_scheduler_before_taking_its_driver_for_gone(
        monkeypatch):
    """A worker that joined after the driver's last push reads the driver's state from the
    scheduler. A scheduler slow to answer (its driver's process loaded) is waited for; before,
    the first 5 s timeout stopped the trial as superseded. A scheduler that is gone (any other
    error), or one that never answers within STATE_WAIT, still means the driver is gone."""
    import distributed

    from labkit.sweep import trial as trial_mod

    class Slow:
        def __init__(self, name, answers):
            self.answers = list(answers)

        def get(self, timeout=None):
            a = self.answers.pop(0)
            if isinstance(a, BaseException):
                raise a
            return a

    state = {"owner": "tok", "stop": False, "version": 1}
    spec = {"sweep": "slow-scheduler", "token": "tok", "state_variable": "v"}
    for answers, want in (([TimeoutError(), TimeoutError(), state], None),
                          ([OSError("connection closed")], "superseded"),
                          ([{**state, "owner": "another"}], "superseded"),
                          ([{**state, "stop": True}], "stopped")):
        trial_mod._TOLD.pop("slow-scheduler", None)
        monkeypatch.setattr(distributed, "Variable", lambda name, a=answers: Slow(name, a))
        assert trial_mod._dask_stop_check(spec)() == want, answers
    trial_mod._TOLD.pop("slow-scheduler", None)
    monkeypatch.setattr(trial_mod, "STATE_WAIT", 0.0)
    monkeypatch.setattr(distributed, "Variable", lambda name: Slow(name, [TimeoutError()] * 3))
    assert trial_mod._dask_stop_check(spec)() == "superseded"
    trial_mod._TOLD.pop("slow-scheduler", None)


def test_a_make_loop_that_raises(client, tmp_path, store):
    with pytest.raises(TrialError, match="first 3 trials all failed.*make_loop raised "
                       "ValueError for trial 0.*no such layer size 8"):
        sweep(client, tmp_path, make_loop=broken_loop)
    t = lk.sweep.list()[0]
    # NOTE: trial 3 waits queued behind trial 2 on the one worker: whether the worker began it
    # before the driver saw trial 2 fail is a race, so it is left pending (not begun) or
    # interrupted (begun, then cut by the abort); never running, failed or finished
    counts = dict(t["counts"])
    assert counts.pop("failed") == 3
    assert counts in ({"pending": 1}, {"interrupted": 1})


def test_bad_arguments_are_named(client, tmp_path, store):
    with pytest.raises(SweepError, match="mode must be 'min' or 'max'"):
        sweep(client, tmp_path, mode="best")
    with pytest.raises(SweepError, match="early_stopping must be lk.sweep.ASHA"):
        sweep(client, tmp_path, early_stopping="asha")
    with pytest.raises(SweepError, match="engine must be 'local'"):
        sweep(client, tmp_path, engine="cluster")
    assert lk.sweep.list() == []  # NOTE: refused before anything is written to the store


def test_stop_request_checkpoints_and_resume_finishes(client, tmp_path, store, monkeypatch):
    """A stop (from any process: it goes through the store) interrupts the training trials
    after a checkpoint; resume continues them and starts the rest."""
    from distributed import Event

    from labkit.sweep import trial as trial_mod

    # NOTE: stop checks at epoch ends only (the engine runs in this process): else a second
    # between the epoch-1 report and a batch of epoch 2 halts trial 0 within epoch 2
    monkeypatch.setattr(trial_mod, "REPORT_EVERY", 1e9)
    gate = f"gate-{tmp_path.name}"

    def hook(kind, info):
        if kind == "progress" and info["progress"]["epoch"] == 1:
            lk.sweep.get(lk.sweep.list()[0]["id"]).stop()
        if kind == "stop":  # trial 0 waits before epoch 2 until the sweep is stopping
            Event(gate, client=client).set()

    sw = sweep(client, tmp_path, _hook=hook, space={**SPACE, "gate": gate})
    assert sw.status == "stopped"
    rows = sw.table()
    assert rows[0]["status"] == "interrupted" and rows[0]["epoch"] == 2
    assert [c["iteration"] for c in lk.runs.checkpoints(rows[0]["run_id"])] == [11, 22]
    assert {r["status"] for r in rows[1:]} == {"pending"}
    assert lk.runs.get(rows[0]["run_id"])["status"] == "interrupted"
    done = lk.sweep.resume(sw.id, engine=client).table()
    assert [r["status"] for r in done] == ["finished"] * 4
    plain = sweep(client, tmp_path).table()
    assert [r["valid_accuracy"] for r in done] == [r["valid_accuracy"] for r in plain]


def test_pause_checkpoints_the_trials_and_resume_continues_them(client, tmp_path, store):
    """A pause (through the store, as from another process) halts the training trial after a
    checkpoint and starts nothing new while the driver waits; resume continues it from the
    checkpoint and starts the rest: the values equal an uninterrupted sweep's."""
    from distributed import Event

    gate = f"gate-{tmp_path.name}"
    seen = []

    def hook(kind, info):
        sw = lk.sweep.get(lk.sweep.list()[0]["id"])
        if kind == "progress" and info["progress"]["epoch"] == 1 and not seen:
            seen.append("asked")
            sw.pause()
        if kind == "pause":  # trial 0 waits before epoch 2 until the sweep pauses
            seen.append(("paused", sw.status, sw.record["counts"]))
            Event(gate, client=client).set()
        if kind == "result" and "paused" in {s[0] for s in seen if isinstance(s, tuple)} \
                and "resumed" not in seen:
            seen.append(("halted", info["outcome"], sw.table()[1]["status"]))
            assert sw.resume() is sw  # a paused sweep with a live driver: asked, not driven
        if kind == "resume":
            seen.append("resumed")

    sw = sweep(client, tmp_path, _hook=hook, space={**SPACE, "gate": gate})
    assert seen[0] == "asked" and seen[1][:2] == ("paused", "paused")
    assert seen[2] == ("halted", "stopped", "pending") and seen[3] == "resumed"
    assert sw.status == "finished"
    rows = sw.table()
    assert [r["status"] for r in rows] == ["finished"] * 4
    assert lk.runs.get(rows[0]["run_id"])["status"] == "finished"
    plain = sweep(client, tmp_path, space={**SPACE, "gate": gate}).table()
    assert [r["valid_accuracy"] for r in rows] == [r["valid_accuracy"] for r in plain]


def test_resume_grows_a_sweep_with_the_searchs_next_points(client, tmp_path, store):
    small = sweep(client, tmp_path, trials=2, search="sobol")
    with pytest.raises(SweepError, match="trials must be a whole number >= the sweep's 2"):
        lk.sweep.resume(small.id, engine=client, trials=1)
    grown = lk.sweep.resume(small.id, engine=client, trials=4)
    assert grown.record["settings"]["trials"] == 4
    rows = grown.table()
    assert [r["status"] for r in rows] == ["finished"] * 4
    whole = sweep(client, tmp_path, trials=4, search="sobol").table()
    for a, b in zip(rows, whole):  # the same points, trained the same way
        assert {k: a[k] for k in ("lr", "hidden", "valid_accuracy")} == \
            {k: b[k] for k in ("lr", "hidden", "valid_accuracy")}
    grid = sweep(client, tmp_path, search="grid", trials=1,
                 space={"lr": [0.01, 0.02], "hidden": 8, "epochs": 1})
    with pytest.raises(SweepError, match="a grid of this space has 2 points"):
        lk.sweep.resume(grid.id, engine=client, trials=3)
    assert len(lk.sweep.resume(grid.id, engine=client, trials=2).table()) == 2


def test_pause_needs_a_driver(client, tmp_path, store):
    sw = sweep(client, tmp_path, trials=1, space={**SPACE, "epochs": 1})
    with pytest.raises(SweepError, match="is finished: no driver runs it to pause it"):
        sw.pause()


def test_a_trial_stopped_before_its_first_evaluation_has_no_value_not_an_error(tmp_path,
                                                                              monkeypatch):
    """A stop or pause in a trial's first epoch (before DataStreamMonitoring has reported the
    metric) halts it with a checkpoint and no value; it is not the sweep's setup error that a
    metric missing at a rung or at the end is."""
    from labkit.sweep import trial as trial_mod

    monkeypatch.setattr(trial_mod, "REPORT_EVERY", 0.0)  # ask at the first batch
    spec = {"sweep": "s", "trial": 0, "run_id": "r0", "params": {}, "config": {"epochs": 2},
            "name": "t0", "directory": str(tmp_path / "r0"), "factory": None,
            "metric": "valid_accuracy", "budget": None, "seed": 0, "since": 0, "token": "x"}
    asked = []

    def stop_after_the_start():  # NOTE: the first check, before the chunk begins, says go on
        asked.append(1)
        return "stopped" if len(asked) > 1 else None

    res = trial_mod.train(make_loop, spec, send=lambda m: None, should_stop=stop_after_the_start)
    assert res["outcome"] == "stopped" and res["value"] is None and res["iteration"] == 1
    assert [c["iteration"] for c in res["checkpoints"]] == [1]
    res = trial_mod.train(make_loop, spec, send=lambda m: None, should_stop=lambda: None)
    assert res["outcome"] == "finished" and res["loaded"] == 1 and res["value"] > 0


def test_a_request_written_while_the_driver_acts_on_another_is_kept(store):
    """The driver clears the request it acted on only if it is still there: a Stop clicked
    right after Pause is not erased (the sweep would stay paused)."""
    sid = store.create_sweep("s", None, '{"a": {"value": 1}}', {"metric": "m", "mode": "min"},
                             [{"a": 1}])
    store.update_sweep(sid, request="pause")
    assert store.clear_sweep_request(sid, "pause") is True
    assert store.get_sweep(sid)["request"] is None
    store.update_sweep(sid, request="stop")  # written after the driver read "pause"
    assert store.clear_sweep_request(sid, "pause") is False
    assert store.get_sweep(sid)["request"] == "stop"
    with pytest.raises(ValueError, match="request must be one of"):
        store.update_sweep(sid, request="restart")


def test_trials_read_the_drivers_state_pushed_or_from_its_variable(client):
    """A trial's stop check is a lookup of what the driver pushed to its worker; a worker
    that missed the push (it joined later) reads the driver's Variable once. An older state
    never replaces a newer one (a pushed stop outranks a slower read of the variable)."""
    from distributed import Variable

    from labkit.sweep import trial as trial_mod

    spec = {"sweep": "s-state", "token": "mine", "state_variable": "labkit-test-state"}
    Variable("labkit-test-state", client=client).set({"owner": "mine", "stop": False,
                                                      "version": 1})
    check = trial_mod._dask_stop_check(spec)
    trial_mod._TOLD.pop("s-state", None)
    assert check() is None and trial_mod._TOLD["s-state"]["version"] == 1  # read once
    trial_mod.tell("s-state", {"owner": "mine", "stop": True, "version": 3})
    assert check() == "stopped"
    trial_mod.tell("s-state", {"owner": "mine", "stop": False, "version": 2})  # older
    assert check() == "stopped"
    trial_mod.tell("s-state", {"owner": "theirs", "stop": False, "version": 4})
    assert check() == "superseded"
    trial_mod._TOLD.pop("s-state")


def _watch_until_released(spec, path):
    """A task: its stop check, asked until it says something (at most 60 s); what it said
    (or "never") is written to ``path``."""
    from labkit.sweep import trial as trial_mod

    check = trial_mod._dask_stop_check(spec)
    said = check()
    _write(path + ".started", str(said))
    deadline = time.monotonic() + 60
    while said is None and time.monotonic() < deadline:
        time.sleep(0.05)
        said = check()
    _write(path, str(said or "never"))


def _write(path, text):
    """Whole or not there: the test reads the file as soon as it exists (a file created and
    not yet written read as '', a failure by chance on a busy CI machine)."""
    Path(path + ".tmp").write_text(text)
    os.replace(path + ".tmp", path)


def _wait_for(path, seconds=60):
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.read_text() if path.exists() else None


def test_a_chunk_whose_task_the_scheduler_let_go_stops(client, tmp_path):
    """Where no pid tells a worker that its driver died (another host or pid namespace) and
    the cluster's scheduler outlives the driver, the scheduler releasing the task (as it does
    when the driver's client disconnects) stops the chunk; before, it trained on until a
    resumed driver took the sweep over."""
    from distributed import Variable

    from labkit.sweep import trial as trial_mod

    spec = {"sweep": "s-released", "token": "mine", "state_variable": "labkit-test-released",
            "driver": ["another-host", "pid:[elsewhere]", 1, 0]}
    Variable("labkit-test-released", client=client).set({"owner": "mine", "stop": False,
                                                         "version": 1})
    out = tmp_path / "said"
    fut = client.submit(_watch_until_released, spec, str(out), pure=False)
    try:
        # NOTE: running, owned, not stopped: the check says nothing while the task is wanted
        assert _wait_for(Path(str(out) + ".started")) == "None"
        assert not out.exists()
        fut.release()  # NOTE: what a disconnected client's futures get from the scheduler
        del fut
        assert _wait_for(out) == "superseded"
    finally:
        trial_mod._TOLD.pop("s-released", None)
    # off a worker there is no task to be released: the check never stops a direct call
    assert trial_mod._task_released()() is False


class _Done:
    """A finished Dask future's face, for the driver's bookkeeping."""

    def __init__(self, result):
        self.status, self._result = "finished", result

    def result(self):
        return self._result


def _driver(client, store, tmp_path, asha=None):
    from labkit.sweep.driver import Driver

    sid = store.create_sweep("unit", None, "{}", {"metric": "valid_accuracy", "mode": "max",
                                                  "seed": 0, "directory": str(tmp_path)},
                             [{"lr": 0.01}, {"lr": 0.02}])
    return Driver(store, store.get_sweep(sid), make_loop, {}, asha, client, 1)


def test_a_rerun_chunk_that_skips_leaves_the_trial_interrupted_with_its_records(
        client, store, tmp_path):
    """Dask reruns a chunk that had begun (its worker died) and the rerun finds the sweep
    pausing: the trial is interrupted (resumed from its checkpoint later), its checkpoint
    records and numbers untouched; a stale 'started' message of an earlier chunk is ignored."""
    d = _driver(client, store, tmp_path, asha=lk.sweep.ASHA(grace=1, reduction=2))
    d.submit = lambda n, rung: None  # NOTE: bookkeeping only, nothing sent to Dask
    rid = store.start_trial_run(d.id, 0, "unit-0", {}, None, tmp_path)
    d.trials[0]["run_id"] = rid
    store.add_checkpoint(rid, 11, 1, str(tmp_path / "c11"), 10, {})
    d._set(0, status="running", rung=0, attempts=1, epoch=1, value=0.5)
    d.submission[0] = 7
    d.paused = True
    d.events.put((0, {"attempt": d.token, "trial": 0, "started": True, "submission": 6,
                      "worker": "tcp://old"}))
    d._drain()
    assert 0 not in d.began_on  # NOTE: an earlier chunk's message
    d.finished(_Done({"outcome": "skipped"}), 0)
    t = store.trials(d.id)[0]
    assert t["status"] == "interrupted" and t["epoch"] == 1 and t["value"] == 0.5
    assert [c["iteration"] for c in lk.runs.checkpoints(rid)] == [11]
    assert d.next_job() == (0, 0)  # NOTE: once unpaused, trial 0 goes on first


def test_a_driver_whose_clock_is_behind_still_outranks_the_last(client, store, tmp_path,
                                                                monkeypatch):
    from distributed import Variable

    d = _driver(client, store, tmp_path)
    Variable(d._state_name(), client=client).set({"owner": "old", "stop": True,
                                                  "version": 10**30})
    client.set_metadata([d._state_name(), "version"], 10**30)  # NOTE: the old driver's
    monkeypatch.setattr("labkit.sweep.driver.time.time_ns", lambda: 5)
    d._tell_trials(stop=False)
    from labkit.sweep import trial as trial_mod

    told = trial_mod._TOLD[d.id]
    assert told["owner"] == d.token and told["version"] > 10**30 and not told["stop"]


def test_a_stop_mid_epoch_checkpoint_counts_for_keep_last(tmp_path, monkeypatch):
    """The checkpoint a stop writes goes through the loop's Checkpoint extension, so that
    keep_last prunes it later like any other."""
    from labkit.sweep import trial as trial_mod

    monkeypatch.setattr(trial_mod, "REPORT_EVERY", 0.0)  # NOTE: a stop check at each batch
    spec = {"sweep": "s", "trial": 0, "token": "t", "run_id": "r0", "params": {},
            "config": {"epochs": 4, "hidden": 8}, "name": "t0", "metric": "valid_accuracy",
            "directory": str(tmp_path / "r0"), "seed": 0, "budget": None, "since": 0}
    batches = []

    def stop_at(n):
        def should_stop():
            batches.append(1)
            return "stopped" if len(batches) == n else None
        return should_stop

    res = trial_mod.train(make_loop, spec, send=lambda m: None, should_stop=stop_at(16))
    assert res["outcome"] == "stopped"
    batches.clear()
    res = trial_mod.train(make_loop, spec, send=lambda m: None, should_stop=stop_at(10 ** 9))
    assert res["outcome"] == "finished"
    on_disk = sorted(p.name for p in (tmp_path / "r0" / "checkpoints").glob("ckpt-*"))
    assert len(on_disk) == 2, on_disk  # keep_last=2: the stop's checkpoint pruned too
