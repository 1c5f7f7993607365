"""``PATCH runs/ID`` (name, tags, note), a failed run's traceback tail in ``runs/ID``, and
``checkpoints?verify=1`` off the server's event loop."""

import asyncio
import json
import threading
import time

import labkit as lk
from labkit.server import handlers

from .test_api import call, trained  # noqa: F401  (a fixture)


async def test_patch_renames_tags_and_notes(jp_fetch, fresh_store):
    rid = fresh_store.create_run("before", config={"lr": 0.1})
    code, run = await call(jp_fetch, "runs", rid, method="PATCH",
                           body={"name": "after", "tags": ["baseline", "lr:0.1"],
                                 "note": "first <b>try</b>\nsecond line"})
    assert code == 200, run
    assert (run["name"], run["tags"], run["note"]) == \
        ("after", ["baseline", "lr:0.1"], "first <b>try</b>\nsecond line")
    code, run = await call(jp_fetch, "runs", rid, method="PATCH", body={"tags": []})
    assert code == 200 and run["tags"] == [] and run["name"] == "after"
    stored = lk.runs.get(rid)
    assert stored["note"] == "first <b>try</b>\nsecond line" and stored["tags"] == []
    # the list carries tags (not notes or tracebacks: it stays small)
    lk.runs.tag(rid, add="listed")
    code, body = await call(jp_fetch, "runs")
    (listed,) = body["runs"]
    assert listed["tags"] == ["listed"] and "note" not in listed and "traceback" not in listed


async def test_two_pages_adding_and_removing_tags_keep_each_others(jp_fetch, fresh_store):
    rid = fresh_store.create_run("shared", config={"lr": 0.1})
    lk.runs.tag(rid, add=["old"])
    # two pages read ["old"]; each sends its own change, not its whole list
    for body in ({"add_tags": ["from-tab-1"]}, {"add_tags": ["from-tab-2"]},
                 {"remove_tags": ["old"]}):
        code, run = await call(jp_fetch, "runs", rid, method="PATCH", body=body)
        assert code == 200, run
    assert run["tags"] == ["from-tab-1", "from-tab-2"]
    code, run = await call(jp_fetch, "runs", rid, method="PATCH", body={"add_tags": ["a b"]})
    assert code == 400 and "add_tags[0]" in run["message"], run


async def test_a_bad_patch_names_its_field_and_changes_nothing(jp_fetch, fresh_store):
    rid = fresh_store.create_run("kept")
    cases = [
        ({"name": 5}, "name must be a string"),
        ({"name": None}, "name must be a string"),
        ({"name": ""}, "name must not be empty"),
        ({"name": "x" * 201}, "name is 201 characters"),
        ({"tags": "a"}, "tags must be a list"),
        ({"tags": ["ok", "not ok"]}, "tags[1] 'not ok' is not a tag"),
        ({"tags": [1]}, "tags[0] must be a string"),
        ({"note": 1}, "note must be a string"),
        ({"note": "x" * 10_001}, "note is 10,001 characters"),
        ({"name": "fine", "colour": "red"}, "unknown fields ['colour']"),
        ({}, 'give at least one of "name", "tags" and "note"'),
    ]
    for body, message in cases:
        code, got = await call(jp_fetch, "runs", rid, method="PATCH", body=body)
        assert code == 400 and message in got["message"], (body, got)
    run = lk.runs.get(rid)
    assert (run["name"], run["tags"], run["note"]) == ("kept", [], None)
    code, got = await call(jp_fetch, "runs", "20200101-000000-0123456789abcdef",
                           method="PATCH", body={"name": "x"})
    assert code == 404


async def test_a_failed_runs_traceback_without_paths(jp_fetch, fresh_store, tmp_path):
    rid = fresh_store.create_run("failed")
    tb = (f'Traceback (most recent call last):\n  File "{tmp_path}/train.py", line 3, in '
          f'<module>\n    open("{tmp_path}/data.h5")\nFileNotFoundError: no such file')
    fresh_store.update_run(rid, status="failed", error="FileNotFoundError: x", traceback=tb)
    code, run = await call(jp_fetch, "runs", rid)
    assert code == 200
    assert 'File "train.py", line 3' in run["traceback"] and str(tmp_path) not in run["traceback"]
    assert 'open("<path>")' in run["traceback"]


async def test_another_request_is_answered_while_a_verify_reads(jp_fetch, trained,  # noqa: F811
                                                                 monkeypatch):
    started, release = threading.Event(), threading.Event()
    real = handlers.checkpoint.verify

    def slow_verify(path):
        started.set()
        assert release.wait(30), "the test never released the verify"
        return real(path)

    monkeypatch.setattr(handlers.checkpoint, "verify", slow_verify)
    verify = asyncio.ensure_future(call(jp_fetch, "runs", trained.run_id, "checkpoints",
                                        verify="1"))
    try:
        assert await asyncio.to_thread(started.wait, 30), "the verify never began"
        # the verify is blocked inside the server: the event loop still answers
        code, run = await call(jp_fetch, "runs", trained.run_id)
        assert code == 200 and run["id"] == trained.run_id
        assert not verify.done()
    finally:
        release.set()
    code, body = await verify
    assert code == 200 and all(c["valid"] for c in body["checkpoints"])


async def test_verifications_run_at_most_verify_threads_at_once(jp_fetch, trained,  # noqa: F811
                                                                monkeypatch):
    lock, running, peak = threading.Lock(), [0], [0]
    release = threading.Event()
    real = handlers.checkpoint.verify

    def counted(path):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        release.wait(30)
        with lock:
            running[0] -= 1
        return real(path)

    monkeypatch.setattr(handlers.checkpoint, "verify", counted)
    calls = [asyncio.ensure_future(call(jp_fetch, "runs", trained.run_id, "checkpoints",
                                        verify="1")) for _ in range(handlers.VERIFY_THREADS + 3)]

    def saturated():
        while True:
            with lock:
                if running[0] >= handlers.VERIFY_THREADS:
                    return True
            time.sleep(0.01)

    await asyncio.wait_for(asyncio.to_thread(saturated), 30)
    release.set()
    answers = await asyncio.gather(*calls)
    assert all(code == 200 for code, _ in answers), json.dumps(answers)[:300]
    assert peak[0] == handlers.VERIFY_THREADS
