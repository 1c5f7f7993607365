"""``GET sweeps``, ``GET sweeps/ID`` and ``POST sweeps/ID/stop|pause|resume``: the Runs
sidebar's Sweeps section (the hostile requests are rows of test_hostile.py). Sweeps are
written into the store as a driver writes them, without Dask."""

import json
import math
import os
import socket
import time

import pytest
from tornado.httpclient import HTTPClientError

import labkit as lk

SETTINGS = {"trials": 4, "search": "grid", "metric": "valid_accuracy", "mode": "max", "seed": 0,
            "early_stopping": None, "engine": "local", "workers": 2,
            "directory": "/secret/home/runs"}


def seed(store, mode="max", values=(0.5, 0.9, 0.7, None), statuses=None):
    """A sweep of four trials: three ended with ``values``, the last still running."""
    statuses = statuses or ("finished", "finished", "stopped", "running")
    sid = store.create_sweep("digits", "train.py:make_loop", "{}", {**SETTINGS, "mode": mode},
                             [{"lr": 0.1 * (i + 1), "depth": i} for i in range(4)])
    for i, (v, st) in enumerate(zip(values, statuses)):
        store.start_trial_run(sid, i, f"digits-{i}", {"lr": 0.1 * (i + 1), "depth": i},
                              "train.py:make_loop", "/secret/home/runs")
        store.update_trials(sid, {i: {"status": st, "value": v}})
    return sid


async def get(jp_fetch, *path, **params):
    r = await jp_fetch("labkit", "api", *path, params=params or None)
    return json.loads(r.body)


async def test_sweeps_lists_each_with_counts_done_and_best(jp_fetch, fresh_store):
    older = seed(fresh_store, mode="min")
    newer = seed(fresh_store, mode="max")
    body = await get(jp_fetch, "sweeps")
    assert body["total"] == 2
    assert [s["id"] for s in body["sweeps"]] == [newer, older]
    s = body["sweeps"][0]
    assert s["name"] == "digits" and s["status"] == "running"
    assert s["counts"] == {"finished": 2, "stopped": 1, "running": 1}
    assert (s["trials"], s["done"]) == (4, 3)
    assert s["metric"] == "valid_accuracy" and s["mode"] == "max"
    # the best *finished* trial, as Sweep.best chooses (the stopped 0.7 does not count)
    assert s["best"] == pytest.approx(0.9)
    assert body["sweeps"][1]["best"] == pytest.approx(0.5)  # mode min
    assert "/secret" not in json.dumps(body)


async def test_sweeps_limit_and_best_of_stopped_when_none_finished(jp_fetch, fresh_store):
    sid = seed(fresh_store, values=(0.2, float("nan"), float("inf"), 0.3),
               statuses=("stopped", "stopped", "stopped", "stopped"))
    seed(fresh_store)
    body = await get(jp_fetch, "sweeps", limit="1")
    assert len(body["sweeps"]) == 1 and body["total"] == 2
    (mine,) = [s for s in (await get(jp_fetch, "sweeps"))["sweeps"] if s["id"] == sid]
    assert mine["best"] == pytest.approx(0.3)  # NaN and infinity are not a best value


async def test_a_running_sweep_whose_driver_is_gone_is_dead(jp_fetch, fresh_store):
    sid = seed(fresh_store)
    fresh_store.update_sweep(sid, pid=2**22 + 12345, host=socket.gethostname())
    assert not os.path.exists(f"/proc/{2**22 + 12345}")
    assert (await get(jp_fetch, "sweeps"))["sweeps"][0]["status"] == "dead"
    assert (await get(jp_fetch, "sweeps", sid))["status"] == "dead"
    assert lk.sweep.get(sid).status == "dead"  # the same as the Python API says
    fresh_store.update_sweep(sid, pid=os.getpid(), heartbeat=time.time() - 3600)
    assert (await get(jp_fetch, "sweeps", sid))["status"] == "dead"


async def test_sweep_gives_settings_and_trials_without_paths(jp_fetch, fresh_store):
    sid = seed(fresh_store)
    fresh_store.update_trials(sid, {3: {"status": "failed",
                                        "error": "OSError: cannot read /secret/home/data.h5"}})
    body = await get(jp_fetch, "sweeps", sid)
    assert body["id"] == sid and body["total"] == 4
    assert body["settings"]["metric"] == "valid_accuracy"
    assert "directory" not in body["settings"]
    assert [t["trial"] for t in body["trials"]] == [0, 1, 2, 3]
    t1 = body["trials"][1]
    assert t1["status"] == "finished" and t1["value"] == pytest.approx(0.9)
    assert t1["params"] == {"lr": pytest.approx(0.2), "depth": 1}
    assert lk.runs.get(t1["run_id"])["sweep_id"] == sid
    assert body["trials"][3]["error"] == "OSError: cannot read <path>"
    assert "/secret" not in json.dumps(body)
    two = await get(jp_fetch, "sweeps", sid, limit="2")  # NOTE: only these rows are read
    assert [t["trial"] for t in two["trials"]] == [0, 1] and two["total"] == 4
    # best=N: the best trials with a run, best first (mode max; no value last)
    best = await get(jp_fetch, "sweeps", sid, best="3")
    assert [t["trial"] for t in best["trials"]] == [1, 2, 0] and best["total"] == 4


async def test_unknown_sweep_is_a_404_naming_it(jp_fetch, fresh_store):
    absent = "20200101-000000-0123456789abcdef"
    for method, path in (("GET", ("sweeps", absent)), ("POST", ("sweeps", absent, "stop"))):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("labkit", "api", *path, method=method,
                           body="{}" if method == "POST" else None)
        assert e.value.code == 404
        assert absent in json.loads(e.value.response.body)["message"]


async def test_stop_asks_the_driver_as_sweep_stop_does(jp_fetch, fresh_store):
    sid = seed(fresh_store)
    r = await jp_fetch("labkit", "api", "sweeps", sid, "stop", method="POST", body="")
    assert r.code == 202
    assert fresh_store.get_sweep(sid)["request"] == "stop"
    assert (await get(jp_fetch, "sweeps", sid))["request"] == "stop"


async def test_stop_refuses_a_body_and_an_ended_or_dead_sweep(jp_fetch, fresh_store):
    sid = seed(fresh_store)
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("labkit", "api", "sweeps", sid, "stop", method="POST",
                       body='{"force": true}')
    assert e.value.code == 400 and "force" in json.loads(e.value.response.body)["message"]
    fresh_store.update_sweep(sid, status="finished")
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("labkit", "api", "sweeps", sid, "stop", method="POST", body="{}")
    assert e.value.code == 409 and "finished" in json.loads(e.value.response.body)["message"]
    fresh_store.update_sweep(sid, status="running", heartbeat=time.time() - 3600)
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("labkit", "api", "sweeps", sid, "stop", method="POST", body="{}")
    assert e.value.code == 409 and "resume" in json.loads(e.value.response.body)["message"]
    assert fresh_store.get_sweep(sid)["request"] is None


async def test_pause_and_resume_ask_the_driver_in_the_states_that_take_them(jp_fetch,
                                                                           fresh_store):
    sid = seed(fresh_store)

    async def post(what):
        try:
            r = await jp_fetch("labkit", "api", "sweeps", sid, what, method="POST", body="")
            return r.code, json.loads(r.body)
        except HTTPClientError as e:
            return e.code, json.loads(e.response.body)

    code, body = await post("resume")  # running: nothing to resume
    assert code == 409 and "is running: no driver runs it to resume it" in body["message"]
    assert await post("pause") == (202, {"id": sid, "request": "pause"})
    assert fresh_store.get_sweep(sid)["request"] == "pause"
    fresh_store.update_sweep(sid, status="paused", request=None)  # as the driver answers
    code, body = await post("pause")
    assert code == 409 and "is paused" in body["message"]
    assert await post("resume") == (202, {"id": sid, "request": "resume"})
    fresh_store.update_sweep(sid, request=None)
    assert await post("stop") == (202, {"id": sid, "request": "stop"})  # paused: stops too
    fresh_store.update_sweep(sid, request=None, heartbeat=time.time() - 3600)
    code, body = await post("resume")  # its driver is gone: lk.sweep.resume, not a request
    assert code == 409 and "is dead" in body["message"] and "lk.sweep.resume" in body["message"]
    assert fresh_store.get_sweep(sid)["request"] is None


def test_finite_best_helper():
    from labkit.runs.sweeps import best_value

    assert best_value({}, "max") is None
    assert best_value({"stopped": (1.0, 2.0)}, "min") == 1.0
    assert best_value({"finished": (3.0, 4.0), "stopped": (1.0, 9.0)}, "max") == 4.0
    assert not math.isnan(best_value({"finished": (0.0, 0.0)}, "max"))
