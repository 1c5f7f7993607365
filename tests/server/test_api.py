"""The run store's REST API: every endpoint, auth, bad and traversal-shaped ids, concurrency."""

import asyncio
import json
import os

import pytest
from tornado.httpclient import HTTPClientError

import labkit as lk

from ..training.helpers import make_loop


@pytest.fixture
def trained():
    loop = lk.training.build(make_loop, {"epochs": 2, "checkpoint_every": 6})
    loop.run()
    return loop


async def call(jp_fetch, *path, method="GET", body=None, **params):
    kw = {"method": method, "params": params}
    if body is not None:
        kw["body"] = json.dumps(body)
    elif method == "POST":
        kw["body"] = "{}"
    try:
        r = await jp_fetch("labkit", "api", *path, **kw)
    except HTTPClientError as e:
        return e.code, json.loads(e.response.body)
    return r.code, json.loads(r.body)


async def test_runs_run_metrics_checkpoints(jp_fetch, trained):
    code, body = await call(jp_fetch, "runs")
    assert code == 200 and [r["id"] for r in body["runs"]][0] == trained.run_id
    code, body = await call(jp_fetch, "runs", status="finished", name="helper")
    assert [r["id"] for r in body["runs"]] == [trained.run_id]
    code, run = await call(jp_fetch, "runs", trained.run_id)
    assert code == 200 and run["status"] == "finished" and run["config"]["epochs"] == 2
    assert run["progress"]["iteration"] == 24 and run["children"] == []
    code, m = await call(jp_fetch, "runs", trained.run_id, "metrics", keys="loss",
                         since_iteration="20")
    assert m["metrics"]["loss"]["iteration"] == [21, 22, 23, 24]
    assert "step" not in m["metrics"]["loss"]
    code, old = await call(jp_fetch, "runs", trained.run_id, "metrics", keys="loss",
                           since_step="20")  # the old name of the parameter still works
    assert code == 200 and old == m
    assert "train_loss" in m["keys"]
    code, m = await call(jp_fetch, "runs", trained.run_id, "metrics", keys="loss",
                         max_points="5")
    its = m["metrics"]["loss"]["iteration"]
    assert 2 <= len(its) <= 5 and its[0] == 1 and its[-1] == 24
    code, cks = await call(jp_fetch, "runs", trained.run_id, "checkpoints")
    assert [c["iteration"] for c in cks["checkpoints"]][-2:] == [18, 24]
    assert all("path" not in c for c in cks["checkpoints"])  # ids cross the API, not paths


async def test_fork_and_delete(jp_fetch, trained):
    cks = lk.runs.checkpoints(trained.run_id)
    code, body = await call(jp_fetch, "runs", trained.run_id, "fork", method="POST",
                            body={"checkpoint": cks[0]["id"], "changes": {"lr": 0.1}})
    assert code == 201
    child = body["run"]
    assert child["parent_run"] == trained.run_id and child["config"]["lr"] == 0.1
    assert child["parent_checkpoint"] == cks[0]["id"]  # an id, not a path
    assert "directory" not in child
    code, run = await call(jp_fetch, "runs", trained.run_id)
    assert run["children"] == [child["id"]]
    code, body = await call(jp_fetch, "runs", trained.run_id, "fork", method="POST",
                            body={"changes": {"nope": 1}})
    assert code == 400 and "not in the config" in body["message"]
    # the checkpoint the fork starts from (it has none of its own): refused unless forced
    code, body = await call(jp_fetch, "runs", trained.run_id, "checkpoints",
                            str(cks[0]["id"]), method="DELETE")
    assert code == 409 and f"is where run {child['id']} starts" in body["message"], body
    assert "force=True" in body["message"]
    assert len(lk.runs.checkpoints(trained.run_id)) == len(cks)
    assert os.path.isdir(cks[0]["path"])
    code, body = await call(jp_fetch, "runs", trained.run_id, "checkpoints",
                            str(cks[0]["id"]), method="DELETE", force="1")
    assert code == 200 and len(lk.runs.checkpoints(trained.run_id)) == len(cks) - 1
    code, body = await call(jp_fetch, "runs", child["id"], method="DELETE")
    assert code == 200
    code, body = await call(jp_fetch, "runs", child["id"])
    assert code == 404 and body["message"] == f"no run {child['id']}"


@pytest.mark.parametrize("bad", ["not-a-run", "..", "%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
                                 "20261203-000000-zzzzzz", "20261203-000000-abcdef/../../x"])
async def test_bad_and_traversal_shaped_ids_are_refused(jp_fetch, trained, bad):
    code, body = await call(jp_fetch, "runs", bad, "metrics")
    assert code in (400, 404) and "message" in body
    code, body = await call(jp_fetch, "runs", trained.run_id, "checkpoints", "99999",
                            method="DELETE")
    assert code == 404 and "no checkpoint 99999" in body["message"]


async def test_requests_without_a_token_are_refused(http_server_client, jp_base_url, trained):
    r = await http_server_client.fetch(f"{jp_base_url}labkit/api/runs", raise_error=False)
    assert r.code == 403
    r = await http_server_client.fetch(f"{jp_base_url}labkit/api/runs/{trained.run_id}",
                                       method="DELETE", raise_error=False)
    assert r.code == 403 and lk.runs.get(trained.run_id)


async def test_concurrent_requests_while_training_writes(jp_fetch):
    import time

    loop = make_loop({"epochs": 100})
    loop.add(lambda loop: time.sleep(0.002), event="after_batch")
    loop.start()
    try:
        while loop.run_id is None or not lk.runs.metrics(loop.run_id).get("loss"):
            await asyncio.sleep(0.05)
        results = await asyncio.gather(*[
            call(jp_fetch, "runs", loop.run_id, "metrics", keys="loss") for _ in range(20)],
            *[call(jp_fetch, "runs") for _ in range(10)])
        assert all(code == 200 for code, _ in results)
        its = [r["metrics"]["loss"]["iteration"] for _, r in results[:20]]
        assert all(s == list(range(1, len(s) + 1)) for s in its)  # no gaps, in order
    finally:
        loop.stop()
        loop.wait()


class TestUnderABaseUrl:
    @pytest.fixture
    def jp_base_url(self):
        return "/user/test/"

    async def test_api_lives_under_the_base_url(self, jp_fetch, trained):
        code, body = await call(jp_fetch, "runs")
        assert code == 200 and body["runs"][0]["id"] == trained.run_id


async def test_commands_reach_a_loop_training_in_this_process(jp_fetch, tmp_path,
                                                              monkeypatch):
    """POST a command; the loop (training on a thread, as a script's would in its process)
    acknowledges it; GET shows the answer. Another run's command is not found."""
    import threading
    import time

    # NOTE: the loop acknowledges only once the POST has answered (a stall in the handler
    # let the ack land first, and the answer's acked was not None), so that the POST is seen
    # to answer at once, without waiting for the loop
    store, answered = lk.runs.store(), threading.Event()
    ack = store.ack_command

    def ack_after_the_answer(*args, **kwargs):
        answered.wait(60)
        return ack(*args, **kwargs)

    monkeypatch.setattr(store, "ack_command", ack_after_the_answer)
    loop = lk.training.build(make_loop, {"epochs": 10_000})
    loop.ensure_run()
    loop.start()
    try:
        t = time.monotonic()
        while lk.runs.get(loop.run_id)["status"] != "running" and time.monotonic() - t < 30:
            await asyncio.sleep(0.02)
        try:
            code, sent = await call(jp_fetch, "runs", loop.run_id, "commands", method="POST",
                                    body={"command": "pause"})
        finally:
            answered.set()
        assert code == 202 and sent["command"]["acked"] is None
        cid = sent["command"]["id"]
        deadline = time.monotonic() + 60  # the answer: about 0.1 s
        while True:
            code, got = await call(jp_fetch, "runs", loop.run_id, "commands", str(cid))
            if got["command"]["acked"] is not None or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
        assert got["command"]["result"].startswith("paused at iteration")
        assert got["command"]["iteration"] == loop.status["iteration"] and loop.paused
        assert lk.runs.get(loop.run_id)["status"] == "paused"
        other = lk.runs.store().create_run("other")
        code, body = await call(jp_fetch, "runs", other, "commands", str(cid))
        assert code == 404
        code, sent = await call(jp_fetch, "runs", loop.run_id, "commands", method="POST",
                                body={"command": "stop"})
        assert code == 202
        deadline = time.monotonic() + 60
        while loop.running and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    finally:
        if loop.running:
            loop.stop()
            loop.resume()
        loop.wait()
    assert loop.stop_reason == "stopped by a command"
    code, body = await call(jp_fetch, "runs", loop.run_id, "commands", method="POST",
                            body={"command": "pause"})
    assert code == 409 and "not training" in body["message"]


@pytest.mark.parametrize("path,method", [(("nope",), "GET"), (("runs", "", "x"), "GET"),
                                         (("runs", "", "20261206-101100-803bb79e0dc92b0a"),
                                          "DELETE"),
                                         (("sweeps", "", "stop"), "POST"),
                                         (("compare", "x"), "GET"), (("RUNS",), "GET")])
async def test_a_path_the_api_lacks_is_a_json_404(jp_fetch, path, method):
    # NOTE: these got the server's HTML page, where every other refusal is JSON (a path with
    # an empty part may reach the client's or server's normalisation as runs/x: a 400 or 404)
    code, body = await call(jp_fetch, *path, method=method)
    if "" in path:
        assert code in (400, 404) and body["message"]
    else:
        assert code == 404 and body["message"].startswith("no such endpoint")


async def test_since_iteration_takes_the_whole_documented_range(jp_fetch, trained):
    # NOTE: 2**62 has 19 digits: it was refused with a message that named it as the bound
    for v, code in (("-4611686018427387904", 200), ("4611686018427387904", 200),
                    ("4611686018427387905", 400), ("12345678901234567890", 400)):
        got, body = await call(jp_fetch, "runs", trained.run_id, "metrics", keys="loss",
                               since_iteration=v)
        assert got == code, body
    got, body = await call(jp_fetch, "runs", trained.run_id, "metrics", keys="loss",
                           since_iteration="-4611686018427387904")
    assert body["metrics"]["loss"]["iteration"][:2] == [1, 2]
