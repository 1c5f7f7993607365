"""One damaged run or sweep row (JSON columns that do not decode) does not hide the others:
the lists (REST, ``lk.runs.list``, ``lk.sweep.list``, ``labkit runs``, ``labkit sweep ls``)
show it with status ``damaged`` and why; reading it by itself is still a 503 naming the damage."""

import json
import re
import time

import pytest
from tornado.httpclient import HTTPClientError

import labkit as lk
from labkit.cli import main

SETTINGS = {"metric": "loss", "mode": "min", "trials": 2}
# (column, damaged text, what the damage is called)
RUN_DAMAGE = [("config", "{oops", "its config is not JSON"),
              ("progress", "[1, 2]", "its progress is not a JSON object"),
              ("tags", '"x"', "its tags is not a JSON list")]


def damage(store, table: str, column: str, value, key: str, rid: str) -> None:
    store._conn().execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?",  # noqa: S608
                          (value, rid))


def seeded(store) -> dict:
    good = store.create_run("good", {"lr": 0.1})
    store.update_run(good, status="finished", progress={"iteration": 5})
    store.add_metrics(good, [(i, 0, "loss", 1.0 / (i + 1), 0.0) for i in range(5)])
    bad = {}
    for column, value, _ in RUN_DAMAGE:
        rid = store.create_run(f"bad {column}", {"lr": 0.2})
        store.update_run(rid, status="finished")
        damage(store, "runs", column, value, "id", rid)
        bad[rid] = column
    ok = store.create_sweep("ok", None, "{}", SETTINGS, [{"lr": 0.1}, {"lr": 0.2}])
    store.update_trials(ok, {0: {"status": "finished", "value": 0.5}})
    broken = store.create_sweep("broken", None, "{}", SETTINGS, [{"lr": 0.1}])
    damage(store, "sweeps", "settings", "[1, 2]", "id", broken)
    odd_trial = store.create_sweep("odd trial", None, "{}", SETTINGS, [{"lr": 0.1}])
    damage(store, "trials", "params", "nope", "sweep_id", odd_trial)
    return {"good": good, "bad": bad, "ok": ok, "broken": broken, "odd_trial": odd_trial}


def why(column: str) -> str:
    return next(w for c, _, w in RUN_DAMAGE if c == column)


def test_the_store_lists_damaged_rows_as_damaged(fresh_store):
    ids = seeded(fresh_store)
    listed = {r["id"]: r for r in fresh_store.list()}
    assert listed[ids["good"]]["status"] == "finished"
    assert listed[ids["good"]]["config"] == {"lr": 0.1} and "damaged" not in listed[ids["good"]]
    for rid, column in ids["bad"].items():
        r = listed[rid]
        assert r["status"] == "damaged" and r["stored_status"] == "finished"
        assert r["damaged"].startswith(why(column)), r["damaged"]
        assert (r["config"], r["progress"], r["tags"]) == ({}, {}, [])
        assert r["name"] == f"bad {column}" and isinstance(r["created"], float)
        with pytest.raises(lk.runs.RunStoreError) as e:
            fresh_store.get(rid)
        assert e.value.reason == "damaged" and why(column) in str(e.value)
    # a status filter finds a damaged run where the counts put it: by its stored status
    assert len(fresh_store.list(status="finished")) == 4
    page = fresh_store.page(status="finished", limit=10, metric="loss")
    assert page["total"] == len(page["runs"]) == page["counts"]["finished"] == 4
    assert fresh_store.page(status="created", limit=10)["runs"] == []
    sweeps = {s["id"]: s for s in lk.sweep.list()}
    assert sweeps[ids["broken"]]["status"] == "damaged"
    assert sweeps[ids["broken"]]["damaged"] == "its settings is not a JSON object"
    assert sweeps[ids["ok"]]["settings"]["metric"] == "loss"


def test_a_damaged_run_can_be_deleted(fresh_store):
    ids = seeded(fresh_store)
    rid = next(iter(ids["bad"]))
    lk.runs.delete(rid)
    assert not fresh_store.exists(rid) and fresh_store.exists(ids["good"])


async def test_the_run_list_shows_a_damaged_run_and_its_page_is_a_503(jp_fetch, fresh_store,
                                                                      tmp_path):
    ids = seeded(fresh_store)
    for params in ({}, {"limit": "50", "metric": "loss", "sort": "name"},
                   {"limit": "50", "status": "finished", "ids": "1"},
                   {"q": "bad "}):  # NOTE: q also matches ids, and "bad" is hex: "bad " is not
        r = await jp_fetch("labkit", "api", "runs", params=params)
        body = json.loads(r.body)
        listed = {x["id"]: x for x in body["runs"]}
        assert set(ids["bad"]) <= set(listed), params
        assert (ids["good"] in listed) == ("q" not in params)
        if "q" not in params:
            assert listed[ids["good"]]["status"] == "finished"
            assert "damaged" not in listed[ids["good"]]
        for rid, column in ids["bad"].items():
            entry = listed[rid]
            assert entry["status"] == "damaged" and entry["damaged"].startswith(why(column))
            # what the sidebar reads of a row is there, with the shapes it expects
            assert entry["name"] == f"bad {column}" and isinstance(entry["created"], float)
            assert entry["progress"] == {} and "directory" not in entry
        assert str(tmp_path) not in r.body.decode()
    for rid, column in ids["bad"].items():
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("labkit", "api", "runs", rid)
        message = json.loads(e.value.response.body)["message"]
        assert e.value.code == 503 and why(column) in message and "damaged" in message
        assert str(tmp_path) not in message
    rid = next(iter(ids["bad"]))
    r = await jp_fetch("labkit", "api", "runs", rid, method="DELETE")
    assert r.code == 200 and not fresh_store.exists(rid)


async def test_the_sweep_list_shows_a_damaged_sweep_and_its_page_is_a_503(jp_fetch,
                                                                          fresh_store):
    ids = seeded(fresh_store)
    body = json.loads((await jp_fetch("labkit", "api", "sweeps")).body)
    listed = {s["id"]: s for s in body["sweeps"]}
    assert body["total"] == 3 and len(listed) == 3
    broken = listed[ids["broken"]]
    assert broken["status"] == "damaged"
    assert broken["damaged"] == "its settings is not a JSON object"
    assert (broken["trials"], broken["done"], broken["best"]) == (1, 0, None)
    ok = listed[ids["ok"]]
    assert "damaged" not in ok and ok["best"] == 0.5 and ok["metric"] == "loss"
    # the list does not read trials: a damaged trial shows when its sweep is opened
    assert "damaged" not in listed[ids["odd_trial"]]
    for sid, what in ((ids["broken"], "settings"), (ids["odd_trial"], "params")):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("labkit", "api", "sweeps", sid)
        message = json.loads(e.value.response.body)["message"]
        assert e.value.code == 503 and "damaged" in message and f"its {what}" in message


def test_the_cli_lists_list_damaged_rows_and_the_others(fresh_store, capsys):
    ids = seeded(fresh_store)
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert set(lines) == {ids["good"], *ids["bad"]}
    assert " finished " in lines[ids["good"]]
    for rid, column in ids["bad"].items():
        assert " damaged " in lines[rid] and f"damaged: {why(column)}" in lines[rid]
    assert main(["runs", "ls", "--status", "finished"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5
    assert main(["sweep", "ls"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert set(lines) == {ids["ok"], ids["broken"], ids["odd_trial"]}
    assert "loss 0.5 (trial 0)" in lines[ids["ok"]]
    assert " damaged " in lines[ids["broken"]]
    assert "damaged: its settings is not a JSON object" in lines[ids["broken"]]
    assert "damaged: trial 0 of sweep" in lines[ids["odd_trial"]]
    assert "its params is not JSON" in lines[ids["odd_trial"]]


async def test_compare_shows_a_damaged_run_in_its_place_and_the_others_as_usual(jp_fetch,
                                                                               fresh_store,
                                                                               tmp_path):
    ids = seeded(fresh_store)
    other = fresh_store.create_run("other", {"lr": 0.3})
    fresh_store.update_run(other, status="finished")
    fresh_store.add_metrics(other, [(i, 0, "loss", 2.0 / (i + 1), 0.0) for i in range(5)])
    bad = {column: rid for rid, column in ids["bad"].items()}
    # the damaged run's metrics are rows of their own, readable: drawn as the list's sparkline is
    fresh_store.add_metrics(bad["config"], [(i, 0, "loss", 3.0 / (i + 1), 0.0) for i in range(5)])
    asked = [ids["good"], bad["config"], other, bad["tags"]]
    r = await jp_fetch("labkit", "api", "compare", params={"ids": ",".join(asked)})
    body = json.loads(r.body)
    assert [x["id"] for x in body["runs"]] == asked
    good, config, second, tags = body["runs"]
    for run in (good, second):
        assert run["status"] == "finished" and "damaged" not in run
        assert len(run["metrics"]["loss"]["value"]) == 5
    assert good["config"] == {"lr": 0.1}
    listed = {x["id"]: x for x in json.loads(
        (await jp_fetch("labkit", "api", "runs")).body)["runs"]}
    for run, column in ((config, "config"), (tags, "tags")):
        # what the run list shows of it, and its metrics (none, or the readable ones)
        assert run["status"] == "damaged" and run["damaged"].startswith(why(column))
        assert run["damaged"] == listed[run["id"]]["damaged"]
        assert run["name"] == f"bad {column}" and run["stored_status"] == "finished"
        assert (run["config"], run["progress"]) == ({}, {})
        assert {k: v for k, v in run.items() if k != "metrics"} == listed[run["id"]]
    assert config["metrics"]["loss"]["iteration"] == [0, 1, 2, 3, 4]
    assert tags["metrics"] == {}
    assert str(tmp_path) not in r.body.decode()
    # a live page's poll of new points (since_iteration) answers the same way
    r = await jp_fetch("labkit", "api", "compare",
                       params={"ids": f"{bad['progress']},{other}", "since_iteration": "3"})
    first, then = json.loads(r.body)["runs"]
    assert first["status"] == "damaged" and then["metrics"]["loss"]["iteration"] == [4]


async def test_compare_of_a_missing_and_a_damaged_run_is_still_a_404(jp_fetch, fresh_store):
    ids = seeded(fresh_store)
    absent = "20200101-000000-0123456789abcdef"
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("labkit", "api", "compare",
                       params={"ids": f"{next(iter(ids['bad']))},{absent}"})
    assert e.value.code == 404 and json.loads(e.value.response.body)["missing"] == [absent]


@pytest.mark.parametrize("column, value, why_", [
    ("heartbeat", "soon", "its heartbeat is a str ('soon'), not a time"),
    ("settings", "[1, 2]", "its settings is not a JSON object")])
async def test_a_damaged_sweeps_own_endpoints_answer_503_naming_the_damage(
        jp_fetch, fresh_store, column, value, why_):
    sid = fresh_store.create_sweep("s", None, "{}", SETTINGS, [{"lr": 0.1}])
    fresh_store.update_sweep(sid, status="running", heartbeat=time.time(), host="elsewhere")
    damage(fresh_store, "sweeps", column, value, "id", sid)
    for path, kw in ((("sweeps", sid), {}), (("sweeps", sid), {"params": {"best": "3"}}),
                     (("sweeps", sid, "stop"), {"method": "POST", "body": "{}"}),
                     (("sweeps", sid, "pause"), {"method": "POST", "body": "{}"})):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("labkit", "api", *path, **kw)
        message = json.loads(e.value.response.body)["message"]
        assert e.value.code == 503, (path, e.value.code, message)
        assert why_ in message and "damaged" in message and sid in message, message


@pytest.mark.parametrize("column", ["heartbeat", "created", "started", "ended"])
async def test_a_sweep_whose_time_is_not_a_number_is_listed_damaged(jp_fetch, fresh_store,
                                                                    column):
    """A running sweep's heartbeat that is text (a damaged row) made the whole sweep list a
    500 (driver_alive read it as a float): it is one damaged row now, the others listed."""
    sid = fresh_store.create_sweep("s", None, "{}", SETTINGS, [{"lr": 0.1}])
    ok = fresh_store.create_sweep("ok", None, "{}", SETTINGS, [{"lr": 0.1}])
    fresh_store.update_sweep(sid, status="running", heartbeat=time.time(), host="elsewhere")
    damage(fresh_store, "sweeps", column, "soon", "id", sid)
    r = await jp_fetch("labkit", "api", "sweeps")
    listed = {s["id"]: s for s in json.loads(r.body)["sweeps"]}
    assert listed[sid]["status"] == "damaged"
    assert listed[sid]["damaged"].startswith(f"its {column} is a str ('soon'), not a time")
    assert listed[ok]["status"] != "damaged"
    assert {s["id"]: s["status"] for s in lk.sweep.list()}[sid] == "damaged"


# ---- a sweep's settings whose values are not what lk.sweep.run writes -------------------------
#: (key, damaged value, what the damage is called)
SETTINGS_DAMAGE = [
    ("mode", 5, "its settings' mode is 5, expected one of ('min', 'max')"),
    ("mode", "best", "its settings' mode is 'best', expected one of ('min', 'max')"),
    ("metric", ["x"], "its settings' metric is ['x'], expected a metric's name"),
    ("metric", "", "its settings' metric is '', expected a metric's name"),
    ("trials", "a lot", "its settings' trials is 'a lot', expected a whole number >= 0"),
    ("trials", True, "its settings' trials is True, expected a whole number >= 0"),
    ("search", 3, "its settings' search is 3, expected one of ('grid', 'random', 'sobol')"),
    ("engine", {"a": 1}, "its settings' engine is {'a': 1}, expected 'local', 'inprocess'"),
    ("seed", -1, "its settings' seed is -1, expected a whole number >= 0"),
    ("workers", 0, "its settings' workers is 0, expected a whole number >= 1"),
    ("early_stopping", {"asha": {"grace": "1", "reduction": 3}},
     "its settings' early_stopping is {'asha': {'grace': '1', 'reduction': 3}}, expected"),
    ("directory", None, "its settings' directory is None, expected a directory"),
]
FULL = {"trials": 1, "search": "grid", "metric": "loss", "mode": "min", "seed": 0,
        "early_stopping": {"asha": {"grace": 1, "reduction": 3}}, "engine": "local",
        "workers": 1, "directory": "/somewhere/runs"}
IDS = [f"{k}={v!r}" for k, v, _ in SETTINGS_DAMAGE]


def settings_damaged(store, key, value) -> tuple[str, str]:
    """A sweep with a finished trial whose settings' ``key`` is ``value`` (written into the
    store by hand, as damage would), and a good one beside it."""
    sid = store.create_sweep("odd settings", None, "{}", FULL, [{"lr": 0.1}])
    store.update_trials(sid, {0: {"status": "finished", "value": 0.5}})
    damage(store, "sweeps", "settings", json.dumps({**FULL, key: value}), "id", sid)
    ok = store.create_sweep("ok", None, "{}", FULL, [{"lr": 0.1}])
    store.update_trials(ok, {0: {"status": "finished", "value": 0.25}})
    return sid, ok


@pytest.mark.parametrize("key, value, why_", SETTINGS_DAMAGE, ids=IDS)
def test_a_sweep_whose_settings_values_are_wrong_is_damaged_in_the_store(fresh_store, key,
                                                                         value, why_):
    """A mode of 5 sorted the trials as "min" and a metric that is a list failed every reader
    (TypeError): such a sweep is a damaged row, listed as such, the others as usual; read by
    itself (lk.sweep.get, resume, add_trials), a RunStoreError naming the damage."""
    sid, ok = settings_damaged(fresh_store, key, value)
    for listing in (lk.sweep.list(), fresh_store.sweep_summaries()["sweeps"]):
        listed = {s["id"]: s for s in listing}
        assert listed[sid]["status"] == "damaged" and listed[sid]["damaged"].startswith(why_)
        assert listed[ok]["status"] != "damaged" and "damaged" not in listed[ok]
    summary = {s["id"]: s for s in fresh_store.sweep_summaries()["sweeps"]}
    assert (summary[sid]["best"], summary[sid]["mode"], summary[sid]["metric"]) == (None,) * 3
    for read in (lambda: lk.sweep.get(sid), lambda: fresh_store.add_trials(sid, [{"lr": 1}]),
                 lambda: lk.sweep.resume(sid, make_loop=lambda config: None)):
        with pytest.raises(lk.runs.RunStoreError) as e:
            read()
        assert e.value.reason == "damaged" and why_ in str(e.value) and sid in str(e.value)
    assert len(fresh_store.trials(sid)) == 1  # nothing was added to it
    assert lk.sweep.get(ok).best()["trial"] == 0


@pytest.mark.parametrize("key, value, why_", SETTINGS_DAMAGE[:6:2], ids=IDS[:6:2])
def test_the_store_refuses_to_write_settings_a_sweep_cannot_have(fresh_store, key, value, why_):
    want = why_.replace("its settings", "settings")
    with pytest.raises(lk.runs.RunStoreError, match=re.escape(f"create_sweep: {want}")):
        fresh_store.create_sweep("s", None, "{}", {**FULL, key: value}, [{"lr": 0.1}])
    assert fresh_store.list_sweeps() == []
    sid = fresh_store.create_sweep("s", None, "{}", FULL, [{"lr": 0.1}])
    with pytest.raises(lk.runs.RunStoreError, match=re.escape(f"update_sweep: {want}")):
        fresh_store.update_sweep(sid, settings={**FULL, key: value})
    assert fresh_store.get_sweep(sid)["settings"] == FULL


@pytest.mark.parametrize("key, value, why_", SETTINGS_DAMAGE[:6:2], ids=IDS[:6:2])
def test_the_cli_shows_a_sweep_whose_settings_values_are_wrong_as_damaged(fresh_store, capsys,
                                                                         key, value, why_):
    sid, ok = settings_damaged(fresh_store, key, value)
    assert main(["sweep", "ls"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert " damaged " in lines[sid] and f"damaged: {why_}" in lines[sid]
    assert "loss 0.25 (trial 0)" in lines[ok]
    assert main(["sweep", "show", sid]) == 1
    err = capsys.readouterr().err
    assert why_ in err and "damaged" in err and "Traceback" not in err


@pytest.mark.parametrize("key, value, why_", SETTINGS_DAMAGE[:6:2], ids=IDS[:6:2])
async def test_the_rest_api_shows_a_sweep_whose_settings_values_are_wrong_as_damaged(
        jp_fetch, fresh_store, key, value, why_):
    sid, ok = settings_damaged(fresh_store, key, value)
    body = json.loads((await jp_fetch("labkit", "api", "sweeps")).body)
    listed = {s["id"]: s for s in body["sweeps"]}
    assert listed[sid]["status"] == "damaged" and listed[sid]["damaged"].startswith(why_)
    assert (listed[sid]["metric"], listed[sid]["mode"], listed[sid]["best"]) == (None,) * 3
    assert listed[ok]["best"] == 0.25 and "damaged" not in listed[ok]
    for path, kw in ((("sweeps", sid), {}), (("sweeps", sid), {"params": {"best": "3"}}),
                     (("sweeps", sid, "stop"), {"method": "POST", "body": "{}"})):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("labkit", "api", *path, **kw)
        message = json.loads(e.value.response.body)["message"]
        assert e.value.code == 503 and why_ in message and "damaged" in message, message
