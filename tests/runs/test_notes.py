"""A run's name, tags and note (schema v4): checked, stored in one transaction, migrated into
a v3 store (up to the current version), reachable from Python and the CLI; a failed run keeps
its traceback's tail."""

import sqlite3

import pytest

import labkit as lk
from labkit.cli import main
from labkit.errors import RunStoreError
from labkit.runs import notes, schema
from labkit.runs.store import RunStore

from ..training.helpers import make_loop

#: the tables and indexes of schema version 3, frozen as labkit 3 wrote them (labkit/runs/
#: schema.py and blocks.py at 8fecf1d^): the migration is tested from what old stores hold,
#: not from a current store with columns dropped
V3_SCHEMA = [
    """CREATE TABLE runs (
        id TEXT PRIMARY KEY, name TEXT, status TEXT NOT NULL, created REAL, started REAL,
        ended REAL, heartbeat REAL, host TEXT, pid INTEGER, source TEXT, factory TEXT,
        config TEXT, parent_run TEXT, parent_checkpoint TEXT, progress TEXT, error TEXT,
        directory TEXT, parent_checkpoint_id INTEGER)""",
    """CREATE TABLE metrics (
        run_id TEXT NOT NULL, iteration INTEGER NOT NULL, epoch INTEGER, key TEXT NOT NULL,
        value REAL, time REAL)""",
    """CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, iteration INTEGER,
        epoch INTEGER, path TEXT NOT NULL, size INTEGER, metrics TEXT, valid INTEGER,
        created REAL)""",
    """CREATE TABLE commands (
        id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, command TEXT NOT NULL,
        created REAL NOT NULL, acked REAL, result TEXT, iteration INTEGER)""",
    """CREATE TABLE metric_blocks (
        run_id TEXT NOT NULL, key TEXT NOT NULL, block INTEGER NOT NULL, n INTEGER NOT NULL,
        min_it INTEGER, min_v REAL, max_it INTEGER, max_v REAL,
        PRIMARY KEY (run_id, key, block)) WITHOUT ROWID""",
    "CREATE UNIQUE INDEX metrics_run_key_iteration ON metrics (run_id, key, iteration)",
    "CREATE INDEX checkpoints_run_iteration ON checkpoints (run_id, iteration)",
    "CREATE INDEX runs_parent ON runs (parent_run)",
    "CREATE INDEX commands_run ON commands (run_id, acked)",
]
V3_RUN = "20250101-120000-0123456789abcdef"


def v3_store(path):
    """A store as labkit wrote it at schema version 3 (no tags, note, traceback or sweep)."""
    c = sqlite3.connect(path)
    for statement in V3_SCHEMA:
        c.execute(statement)
    c.execute("INSERT INTO runs (id, name, status, created, config, progress) VALUES "
              "(?, 'old', 'finished', 1735732800.0, '{\"lr\": 0.1}', '{}')", (V3_RUN,))
    c.execute("INSERT INTO metrics VALUES (?, 1, 0, 'loss', 1.0, 0.0)", (V3_RUN,))
    c.execute("INSERT INTO metric_blocks VALUES (?, 'loss', 0, 1, 1, 1.0, 1, 1.0)", (V3_RUN,))
    c.execute("PRAGMA user_version = 3")
    c.commit()
    c.close()
    return V3_RUN


def test_a_v3_store_is_migrated_and_keeps_its_runs(tmp_path):
    path = tmp_path / "runs.sqlite"
    rid = v3_store(path)
    s = RunStore(path)
    assert s._conn().execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
    run = s.get(rid)
    assert run["name"] == "old" and run["tags"] == [] and run["note"] is None
    assert run["traceback"] is None and s.metrics(rid)["loss"]["value"] == [1.0]
    assert run["config"] == {"lr": 0.1} and run["sweep_id"] is None
    assert s.metrics(rid, max_points=10)["loss"]["value"] == [1.0]  # its blocks kept
    s.annotate(rid, tags=["kept"], note="after the migration")
    s.close()
    assert RunStore(path).get(rid)["tags"] == ["kept"]


def test_a_v3_migration_that_fails_changes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "runs.sqlite"
    v3_store(path)
    before = sorted(sqlite3.connect(path).iterdump())

    def fail(c):
        c.execute("ALTER TABLE runs ADD COLUMN tags TEXT")
        raise sqlite3.OperationalError("disk I/O error (injected midway)")

    monkeypatch.setattr(schema, "_from_3", fail)
    with pytest.raises(RunStoreError, match="cannot read or write"):
        RunStore(path)
    assert sorted(sqlite3.connect(path).iterdump()) == before


def test_a_store_newer_than_this_labkit_is_refused(tmp_path):
    path = tmp_path / "runs.sqlite"
    RunStore(path).close()
    c = sqlite3.connect(path)
    newer = schema.VERSION + 1
    c.execute(f"PRAGMA user_version = {newer}")
    c.close()
    with pytest.raises(RunStoreError,
                       match=f"schema version {newer}; this labkit knows {schema.VERSION}"):
        RunStore(path)


def test_rename_tag_and_note(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as s:
        rid = s.create_run("first", config={"lr": 0.1})
        assert lk.runs.rename(rid, "wide mlp")["name"] == "wide mlp"
        assert lk.runs.tag(rid, add=["baseline", "lr:0.1"]) == ["baseline", "lr:0.1"]
        assert lk.runs.tag(rid, add="baseline") == ["baseline", "lr:0.1"]  # each tag once
        assert lk.runs.tag(rid, add=["v2"], remove="baseline") == ["lr:0.1", "v2"]
        assert lk.runs.tag(rid, tags=[]) == []
        assert lk.runs.note(rid, "diverged\nafter epoch 3\t(lr too high)")["note"] == \
            "diverged\nafter epoch 3\t(lr too high)"
        assert lk.runs.get(rid)["name"] == "wide mlp" and lk.runs.note(rid, "")["note"] == ""


@pytest.mark.parametrize("call,message", [
    (lambda r: lk.runs.rename(r, ""), "name must not be empty"),
    (lambda r: lk.runs.rename(r, " padded"), "must not begin or end with spaces"),
    (lambda r: lk.runs.rename(r, "x" * 201), "201 characters long; at most 200"),
    (lambda r: lk.runs.rename(r, "a\x1b[2Jb"), r"control character '\\x1b'"),
    (lambda r: lk.runs.rename(r, "a\u202eb"), r"control character '\\u202e'"),
    (lambda r: lk.runs.rename(r, 3), "name must be a string, got int"),
    (lambda r: lk.runs.tag(r, add=["two words"]), "'two words' is not a tag"),
    (lambda r: lk.runs.tag(r, add=["-x"]), "a letter or digit first"),
    (lambda r: lk.runs.tag(r, add=["x" * 41]), "1 to 40 characters"),
    (lambda r: lk.runs.tag(r, add=["<b>"]), "'<b>' is not a tag"),
    (lambda r: lk.runs.tag(r, add=[1]), "add must be a string, got int"),
    (lambda r: lk.runs.tag(r, add=5), "add must be a tag or a list of tags"),
    (lambda r: lk.runs.tag(r, tags="abc"), "tags must be a list of strings"),
    (lambda r: lk.runs.tag(r, tags=[f"t{i}" for i in range(33)]), "at most 32"),
    (lambda r: lk.runs.note(r, "x" * 10_001), "at most 10,000"),
    (lambda r: lk.runs.note(r, "bell\x07"), r"control character '\\x07'"),
    (lambda r: lk.runs.note(r, None), "note must be a string, got NoneType"),
])
def test_bad_values_are_refused_and_change_nothing(tmp_path, call, message):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as s:
        rid = s.create_run("kept", config={})
        s.annotate(rid, tags=["a"], note="n")
        with pytest.raises(RunStoreError, match=message) as e:
            call(rid)
        assert e.value.reason == "invalid"
        run = s.get(rid)
        assert (run["name"], run["tags"], run["note"]) == ("kept", ["a"], "n")


def test_adding_past_the_limit_is_refused(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as s:
        rid = s.create_run("full")
        lk.runs.tag(rid, tags=[f"t{i}" for i in range(32)])
        with pytest.raises(RunStoreError, match="at most 32"):
            lk.runs.tag(rid, add="one-more")
        assert len(s.get(rid)["tags"]) == 32
        with pytest.raises(RunStoreError, match="no run|deleted"):
            lk.runs.rename("20200101-000000-0123456789abcdef", "ghost")


def test_cli_rename_tag_note(tmp_path, capsys, monkeypatch):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as s:
        rid = s.create_run("cli")
        assert main(["runs", "rename", rid, "renamed"]) == 0
        assert main(["runs", "tag", rid, "a", "b"]) == 0
        assert main(["runs", "tag", rid, "c", "--remove", "a"]) == 0
        assert "tags: b c" in capsys.readouterr().out
        assert main(["runs", "note", rid, "from the CLI"]) == 0
        assert main(["runs", "show", rid]) == 0
        out = capsys.readouterr().out
        assert "(renamed)" in out and "tags: b c" in out and "note: from the CLI" in out
        assert main(["runs", "tag", rid, "bad tag"]) == 1
        assert "'bad tag' is not a tag" in capsys.readouterr().err
        assert s.get(rid)["tags"] == ["b", "c"]


def test_a_failed_run_keeps_its_traceback_tail(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = lk.training.build(make_loop, {"epochs": 1}, name="fails")

        # two functions in turn: Python does not fold their frames as "repeated"
        def ping(n):
            if n == 0:
                raise FloatingPointError("loss became NaN")
            return pong(n - 1)

        def pong(n):
            return ping(n - 1)

        def loss_fn(model, batch):
            return ping(40)  # a traceback longer than the tail kept

        loop.loss_fn = loss_fn
        with pytest.raises(FloatingPointError):
            loop.run()
        loop.close()
        run = lk.runs.get(loop.run_id)
        assert run["status"] == "failed" and run["error"] == "FloatingPointError: loss became NaN"
        lines = run["traceback"].splitlines()
        assert lines[-1] == "FloatingPointError: loss became NaN"
        assert len(lines) == notes.TRACEBACK_LINES + 1 and lines[0].startswith("... (")
        assert "in ping" in run["traceback"] and "in pong" in run["traceback"]


def test_a_failed_run_trained_again_loses_its_old_error(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = lk.training.build(make_loop, {"epochs": 1}, name="fails once")
        works = loop.loss_fn
        seen = []

        def fails(model, batch):
            raise FloatingPointError("loss became NaN")

        def watches(model, batch):  # what the run page reads while the loop trains
            run = lk.runs.get(loop.run_id)
            seen.append((run["status"], run["error"], run["traceback"]))
            return works(model, batch)

        loop.loss_fn = fails
        with pytest.raises(FloatingPointError):
            loop.run()
        assert lk.runs.get(loop.run_id)["error"] == "FloatingPointError: loss became NaN"
        loop.loss_fn = watches
        loop.run(max_iterations=2)
        loop.close()
        assert seen and seen[0] == ("running", None, None)
        run = lk.runs.get(loop.run_id)
        assert run["status"] != "failed" and run["error"] is None and run["traceback"] is None


def test_the_traceback_tail_is_capped():
    try:
        raise ValueError("x" * 20_000)
    except ValueError as e:
        text = notes.traceback_tail(e)
    assert len(text) == notes.MAX_TRACEBACK and text.startswith("...")
