"""A run store crafted or damaged below the JSON columns: views and triggers labkit never makes
(a view named ``runs`` that recursed for ever hung every list), tables or columns missing,
column values of the wrong SQLite type (a flipped type byte, binary data, text where a number
belongs, a time past the year 9999), JSON nested thousands deep. Each is refused or shown as
damaged with the column named — by the store, the ``labkit`` command and the REST API (503,
never a 500) — not a raw exception, a hang or a value loaded wrong. Also: a crafted run named
like a folder never has that folder deleted, and a crafted factory is never called."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from tornado.httpclient import HTTPClientError

import labkit as lk
from labkit.cli import main
from labkit.errors import RunStoreError, TrainingError
from labkit.training.resume import load_factory

ROOT = Path(__file__).resolve().parents[2]


def seeded(store, tmp_path) -> str:
    rid = store.create_run("r1", {"lr": 0.1})
    store.update_run(rid, status="finished", progress={"iteration": 10})
    store.add_metrics(rid, [(i, 0, "loss", 1.0 / (i + 1), 0.0) for i in range(10)])
    store.add_checkpoint(rid, 5, 0, tmp_path / "ckpt", 1000, metrics={"loss": 0.2})
    return rid


def sql(store, *statements):
    c = sqlite3.connect(store.path, isolation_level=None)
    try:
        for s in statements:
            c.execute(s)
    finally:
        c.close()


# ---- the structure ---------------------------------------------------------------------------
STRUCTURE = {
    "a view that recurses for ever": (
        ["ALTER TABLE runs RENAME TO runs_real",
         "CREATE VIEW runs AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
         "SELECT r.* FROM runs_real r, c"], "it has a view 'runs'"),
    "a trigger": (["CREATE TRIGGER t AFTER INSERT ON metrics BEGIN DELETE FROM metrics; END"],
                  "it has a trigger 't'"),
    "a dropped column": (["ALTER TABLE runs DROP COLUMN status"],
                         "its table 'runs' lacks the columns ['status']"),
    "a dropped table": (["DROP TABLE metrics"], "it has no table 'metrics'"),
}


@pytest.mark.parametrize("case", list(STRUCTURE))
def test_a_store_labkit_never_makes_is_refused_on_open(fresh_store, tmp_path, case, capsys):
    seeded(fresh_store, tmp_path)
    statements, what = STRUCTURE[case]
    sql(fresh_store, *statements)
    with pytest.raises(RunStoreError) as e:
        lk.runs.RunStore(fresh_store.path).list()
    assert e.value.reason == "damaged" and what in str(e.value)
    assert str(fresh_store.path) in str(e.value) and "altered or crafted" in str(e.value)
    # the command line says so in one line (it hung on the view)
    env = {**os.environ, "LABKIT_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    fresh_store.close()
    out = subprocess.run([sys.executable, "-m", "labkit.cli", "runs", "ls"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and what in out.stderr and "Traceback" not in out.stderr


def test_an_old_store_with_a_view_is_refused_before_its_migration(fresh_store, tmp_path):
    sql(fresh_store, "CREATE VIEW v AS SELECT 1", "PRAGMA user_version = 4")
    with pytest.raises(RunStoreError, match="it has a view 'v'"):
        lk.runs.RunStore(fresh_store.path)
    c = sqlite3.connect(fresh_store.path)
    assert c.execute("PRAGMA user_version").fetchone()[0] == 4  # not migrated
    c.close()


# ---- run columns -----------------------------------------------------------------------------
RUN_COLUMNS = [
    ("created", "'yesterday'", "its created is a str ('yesterday'), not a time"),
    ("created", "x'00ff'", "its created is binary data (2 bytes), not a time"),
    ("created", "1e300", "its created is a float ('1e+300'), not a time"),
    ("status", "7", "its status '7' is not one of"),
    ("status", "x'ff'", "its status is binary data (1 bytes), not text"),
    ("name", "x'41ff'", "its name is binary data (2 bytes), not text"),
    ("host", "x'00'", "its host is binary data (1 bytes), not text"),
    ("pid", "99999999999999999999", "its pid is a float ('1e+20'), not an integer"),
    ("heartbeat", "'now'", "its heartbeat is a str ('now'), not a time"),
    ("config", "'" + '{"a":' * 5000 + "1" + "}" * 5000 + "'",
     "its config is not JSON (JSON nested too deeply to read)"),
    ("tags", """'[1, {"a": 2}, null]'""", "its tags are not all text"),
]
IDS = [f"{c}={v[:12]}" for c, v, _ in RUN_COLUMNS]


@pytest.mark.parametrize("column, value, why", RUN_COLUMNS, ids=IDS)
def test_a_run_column_of_the_wrong_kind_is_a_damaged_run(fresh_store, tmp_path, column, value,
                                                         why, capsys):
    rid = seeded(fresh_store, tmp_path)
    other = fresh_store.create_run("fine")
    sql(fresh_store, f"UPDATE runs SET {column} = {value} WHERE id = '{rid}'")  # noqa: S608
    listed = {r["id"]: r for r in fresh_store.list()}
    assert listed[rid]["status"] == "damaged" and listed[rid]["damaged"].startswith(why)
    assert listed[other]["status"] == "created"  # one damaged row hides nothing else
    for v in listed[rid].values():  # what a list shows is plain values
        assert v is None or isinstance(v, (str, int, float, dict, list))
    for t in ("created", "started", "ended", "heartbeat"):
        assert listed[rid][t] is None or 0 <= listed[rid][t] < 1e12
    with pytest.raises(RunStoreError) as e:
        fresh_store.get(rid)
    assert e.value.reason == "damaged" and why in str(e.value)
    # the command line: the list shows it, show says why in one line, no traceback
    assert main(["runs", "ls"]) == 0
    out = capsys.readouterr().out
    assert "damaged" in out and "fine" in out
    assert main(["runs", "show", rid]) == 1
    assert why in capsys.readouterr().err


@pytest.mark.parametrize("column, value, why", RUN_COLUMNS, ids=IDS)
async def test_the_rest_api_answers_a_damaged_run_with_503_not_500(jp_fetch, fresh_store,
                                                                   tmp_path, column, value, why):
    rid = seeded(fresh_store, tmp_path)
    sql(fresh_store, f"UPDATE runs SET {column} = {value} WHERE id = '{rid}'")  # noqa: S608
    for path in (("runs",), ("compare",)):
        r = await jp_fetch("labkit", "api", *path, params={"ids": rid} if path == ("compare",)
                           else {})
        entry = next(x for x in json.loads(r.body)["runs"] if x["id"] == rid)
        assert entry["status"] == "damaged" and entry["damaged"].startswith(why)
    for path in ((rid,), (rid, "metrics"), (rid, "checkpoints")):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("labkit", "api", "runs", *path)
        assert e.value.code == 503 and why in json.loads(e.value.response.body)["message"]


# ---- metrics and checkpoints -----------------------------------------------------------------
@pytest.mark.parametrize("value", ["'abc'", "x'00'"])
async def test_a_metric_value_that_is_not_a_number_is_damage_not_a_value(jp_fetch, fresh_store,
                                                                        tmp_path, value):
    rid = seeded(fresh_store, tmp_path)
    sql(fresh_store, f"UPDATE metrics SET value = {value} WHERE iteration = 3")  # noqa: S608
    with pytest.raises(RunStoreError) as e:
        fresh_store.metrics(rid)
    assert e.value.reason == "damaged" and "metric 'loss'" in str(e.value)
    assert "its row at iteration 3" in str(e.value)
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("labkit", "api", "runs", rid, "metrics")
    assert e.value.code == 503


CHECKPOINT_COLUMNS = [("iteration", "'x'", "its iteration is a str ('x'), not an integer"),
                      ("size", "x'00'", "its size is binary data (1 bytes), not an integer"),
                      ("path", "x'2f746d70'", "its path is binary data (4 bytes), not text"),
                      ("metrics", "'[1]'", "its metrics is not a JSON object")]


@pytest.mark.parametrize("column, value, why", CHECKPOINT_COLUMNS,
                         ids=[c for c, _, _ in CHECKPOINT_COLUMNS])
async def test_a_damaged_checkpoint_record_is_listed_invalid_and_its_files_are_kept(
        jp_fetch, fresh_store, tmp_path, column, value, why, capsys):
    rid = seeded(fresh_store, tmp_path)
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "keep.txt").write_text("x")
    good = fresh_store.add_checkpoint(rid, 9, 0, tmp_path / "ckpt9", 1000)
    sql(fresh_store, f"UPDATE checkpoints SET {column} = {value} "  # noqa: S608
                     f"WHERE id != {good}")
    (bad,) = [c for c in fresh_store.checkpoints(rid) if c["id"] != good]
    assert bad["valid"] is False and bad["damaged"].startswith(why) and bad["metrics"] == {}
    assert all(bad[k] is None or isinstance(bad[k], int) for k in ("iteration", "size"))
    assert bad["path"] is None or isinstance(bad["path"], str)
    r = await jp_fetch("labkit", "api", "runs", rid, "checkpoints")
    listed = json.loads(r.body)["checkpoints"]
    assert {c["id"] for c in listed} == {bad["id"], good}
    assert main(["runs", "show", rid]) == 0
    assert "DAMAGED" in capsys.readouterr().out
    # deleting the damaged record removes the record; its path is not believed: files stay
    removed, kept = lk.runs.delete_checkpoint(bad["id"], explain=True)
    assert not removed and [c["id"] for c in fresh_store.checkpoints(rid)] == [good]
    assert (folder / "keep.txt").exists()
    assert kept is None or "record is damaged" in kept


# ---- deleting and resuming from a crafted store ----------------------------------------------
def test_a_run_named_like_a_folder_never_has_that_folder_deleted(fresh_store, tmp_path):
    folder = tmp_path / "Documents"
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work")
    sql(fresh_store, "INSERT INTO runs (id, name, status, directory) VALUES "
                     f"('Documents', 'x', 'finished', '{folder}')")
    lk.runs.delete("Documents")
    assert not fresh_store.exists("Documents")
    assert (folder / "thesis.tex").read_text() == "years of work"


@pytest.mark.parametrize("factory", ["subprocess:run", "os:system", "builtins:exec",
                                     "os.path:join", "labkit.training.resume:Path"])
def test_a_factory_that_is_not_one_is_never_called(tmp_path, factory):
    with pytest.raises(TrainingError, match="factory .* (is in Python's standard library|is "
                                            "(type|function) .*), which builds no MainLoop"):
        load_factory(factory)


def test_labkit_resume_of_a_crafted_factory_runs_nothing(fresh_store, tmp_path):
    marker = tmp_path / "pwned"
    rid = fresh_store.create_run("r", {"sh": 0, "-c": 0, f"touch {marker}": 0},
                                 factory="subprocess:run")
    env = {**os.environ, "LABKIT_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    fresh_store.close()
    out = subprocess.run([sys.executable, "-m", "labkit.cli", "resume", rid], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "standard library" in out.stderr, out.stderr[-2000:]
    assert not marker.exists()


# ---- sweeps ----------------------------------------------------------------------------------
SETTINGS = {"metric": "loss", "mode": "min", "trials": 2}


@pytest.mark.parametrize("table, column, value, why", [
    ("sweeps", "name", "x'41ff'", "its name is binary data (2 bytes), not text"),
    ("sweeps", "status", "'gone'", "its status 'gone' is not one of"),
    ("sweeps", "created", "1e300", "its created is a float ('1e+300'), not a time"),
    ("trials", "value", "'abc'", "its value is not a number ('abc')"),
    ("trials", "rung", "x'00'", "its rung is binary data (1 bytes), not an integer"),
], ids=lambda v: str(v)[:14])
async def test_a_sweep_or_trial_column_of_the_wrong_kind_is_damage(jp_fetch, fresh_store, table,
                                                                   column, value, why):
    sid = fresh_store.create_sweep("s", None, "{}", SETTINGS, [{"lr": 0.1}, {"lr": 0.2}])
    ok = fresh_store.create_sweep("ok", None, "{}", SETTINGS, [{"lr": 0.1}])
    key = "id" if table == "sweeps" else "sweep_id"
    sql(fresh_store, f"UPDATE {table} SET {column} = {value} WHERE {key} = '{sid}'")  # noqa: S608
    if table == "sweeps":
        r = await jp_fetch("labkit", "api", "sweeps")
        listed = {s["id"]: s for s in json.loads(r.body)["sweeps"]}
        assert listed[sid]["status"] == "damaged" and listed[sid]["damaged"].startswith(why)
        assert listed[ok]["status"] != "damaged"
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("labkit", "api", "sweeps", sid)
    assert e.value.code == 503 and why in json.loads(e.value.response.body)["message"]


def test_a_factory_imported_into_a_package_or_aliased_still_loads(tmp_path, monkeypatch):
    """What the sweep CLI records is the target as typed: a package's re-export, an alias."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "impl.py").write_text("def make_loop(config):\n    return config\n"
                                 "build = make_loop\n")
    (pkg / "__init__.py").write_text("from .impl import make_loop, build\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("mypkg:make_loop", "mypkg.impl:build", "mypkg.impl:make_loop"):
        assert load_factory(name)({"a": 1}) == {"a": 1}


def test_a_newer_labkits_store_says_upgrade_even_with_a_view(fresh_store, tmp_path):
    sql(fresh_store, "CREATE VIEW newer_feature AS SELECT 1", "PRAGMA user_version = 99")
    with pytest.raises(RunStoreError, match="written by a newer labkit .* upgrade labkit"):
        lk.runs.RunStore(fresh_store.path)
