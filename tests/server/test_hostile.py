"""Hostile requests against the REST API: a table of malformed bodies, odd query values, wrong
methods and odd paths. Every one gets a 4xx with a JSON message, none creates or deletes a run,
and no response (of these or of ordinary requests) carries a filesystem path."""

import json
import os
import time
import urllib.parse

import numpy as np
import pytest

import labkit as lk
from labkit import checkpoint as ckpt

DEEP = "[" * 100_000 + "]" * 100_000
NESTED = {"lr": 1}
for _ in range(60):
    NESTED = {"lr": NESTED}

# (what, method, path, query, body, statuses): {run} is a run with checkpoints, {ck} one of
# them, {other_ck} a checkpoint of another run, {absent} a well-formed id of no run
FORK = "runs/{run}/fork"
TABLE = [
    # bodies that are not an object of the known fields
    ("body []", "POST", FORK, "", b"[]", {400}),
    ("body null", "POST", FORK, "", b"null", {400}),
    ("body string", "POST", FORK, "", b'"fork it"', {400}),
    ("body number", "POST", FORK, "", b"42", {400}),
    ("body true", "POST", FORK, "", b"true", {400}),
    ("body not JSON", "POST", FORK, "", b"{", {400}),
    ("body nested 100,000 deep", "POST", FORK, "", DEEP.encode(), {400}),
    ("body invalid UTF-8", "POST", FORK, "", b'{"changes": {"lr": "\xff\xfe"}}', {400}),
    ("body UTF-16", "POST", FORK, "", '{"changes": {}}'.encode("utf-16"), {400}),
    ("body with a BOM", "POST", FORK, "", "\ufeff{}".encode(), {400}),
    ("body NaN", "POST", FORK, "", b'{"changes": {"lr": NaN}}', {400}),
    ("body with a key twice", "POST", FORK, "", b'{"changes": {"lr": 1, "lr": 2}}', {400}),
    ("body Infinity", "POST", FORK, "", b'{"changes": {"lr": -Infinity}}', {400}),
    ("body 1e400", "POST", FORK, "", b'{"changes": {"lr": 1e400}}', {400}),
    ("body unknown field", "POST", FORK, "", b'{"checkpoints": 1}', {400}),
    ("body over 256 KiB", "POST", FORK, "", b'{"changes": {"lr": "' + b"x" * 300_000 + b'"}}',
     {413}),
    # changes that are not an object, or not a config
    ("changes list", "POST", FORK, "", b'{"changes": [["lr", 1]]}', {400}),
    ("changes string", "POST", FORK, "", b'{"changes": "lr=1"}', {400}),
    ("changes number", "POST", FORK, "", b'{"changes": 1}', {400}),
    ("changes true", "POST", FORK, "", b'{"changes": true}', {400}),
    ("changes unknown key", "POST", FORK, "", b'{"changes": {"nope": 1}}', {400}),
    ("changes empty key", "POST", FORK, "", b'{"changes": {"": 1}}', {400}),
    ("changes nested 61 deep", "POST", FORK, "", json.dumps({"changes": NESTED}).encode(), {400}),
    ("changes over 64 KiB", "POST", FORK, "", json.dumps(
        {"changes": {"lr": "x" * 70_000}}).encode(), {400}),
    # checkpoints that are not an id of this run
    ("checkpoint string", "POST", FORK, "", b'{"checkpoint": "1"}', {400}),
    ("checkpoint path", "POST", FORK, "", b'{"checkpoint": "/etc"}', {400}),
    ("checkpoint float", "POST", FORK, "", b'{"checkpoint": 1.0}', {400}),
    ("checkpoint true", "POST", FORK, "", b'{"checkpoint": true}', {400}),
    ("checkpoint false", "POST", FORK, "", b'{"checkpoint": false}', {400}),
    ("checkpoint 0", "POST", FORK, "", b'{"checkpoint": 0}', {400}),
    ("checkpoint -1", "POST", FORK, "", b'{"checkpoint": -1}', {400}),
    ("checkpoint 2**70", "POST", FORK, "", b'{"checkpoint": 1180591620717411303424}', {400}),
    ("checkpoint object", "POST", FORK, "", b'{"checkpoint": {"id": 1}}', {400}),
    ("checkpoint list", "POST", FORK, "", b'{"checkpoint": [1]}', {400}),
    ("checkpoint absent", "POST", FORK, "", b'{"checkpoint": 987654}', {404}),
    ("checkpoint of another run", "POST", FORK, "", b'{"checkpoint": {other_ck}}', {404}),
    ("fork of no run", "POST", "runs/{absent}/fork", "", b"{}", {404}),
    # query values
    ("status unknown", "GET", "runs", "status=bogus", None, {400}),
    ("status markup", "GET", "runs", "status=%3Cscript%3E", None, {400}),
    ("name 5000 chars", "GET", "runs", "name=" + "x" * 5000, None, {400}),
    ("query invalid UTF-8", "GET", "runs", "name=%FF%FE", None, {400}),
    # the sidebar's window: limit, offset, sort, metric, points, ids
    ("limit 0", "GET", "runs", "limit=0", None, {400}),
    ("limit -1", "GET", "runs", "limit=-1", None, {400}),
    ("limit 1001", "GET", "runs", "limit=1001", None, {400}),
    ("limit text", "GET", "runs", "limit=all", None, {400}),
    ("limit float", "GET", "runs", "limit=2.5", None, {400}),
    ("limit huge", "GET", "runs", "limit=" + "9" * 400, None, {400}),
    ("offset -1", "GET", "runs", "limit=5&offset=-1", None, {400}),
    ("offset 1e3", "GET", "runs", "offset=1e3", None, {400}),
    ("offset over 10**9", "GET", "runs", "offset=1000000001", None, {400}),
    ("sort unknown", "GET", "runs", "sort=size", None, {400}),
    ("sort SQL", "GET", "runs", "sort=created%3B%20DROP%20TABLE%20runs", None, {400}),
    ("sort markup", "GET", "runs", "sort=%3Cb%3E", None, {400}),
    ("metric without limit", "GET", "runs", "metric=loss", None, {400}),
    ("metric 201 chars", "GET", "runs", "limit=5&metric=" + "m" * 201, None, {400}),
    ("points 1", "GET", "runs", "limit=5&metric=loss&points=1", None, {400}),
    ("points 201", "GET", "runs", "limit=5&metric=loss&points=201", None, {400}),
    ("points text", "GET", "runs", "limit=5&metric=loss&points=many", None, {400}),
    ("ids maybe", "GET", "runs", "ids=maybe", None, {400}),
    ("status live typo", "GET", "runs", "status=alive", None, {400}),
    ("q 201 chars", "GET", "runs", "q=" + "q" * 201, None, {400}),
    ("max_points -5", "GET", "runs/{run}/metrics", "max_points=-5", None, {400}),
    ("max_points 0", "GET", "runs/{run}/metrics", "max_points=0", None, {400}),
    ("max_points 1", "GET", "runs/{run}/metrics", "max_points=1", None, {400}),
    ("max_points 1e3", "GET", "runs/{run}/metrics", "max_points=1e3", None, {400}),
    ("max_points huge", "GET", "runs/{run}/metrics", "max_points=" + "9" * 400, None, {400}),
    ("max_points 100001", "GET", "runs/{run}/metrics", "max_points=100001", None, {400}),
    ("since huge", "GET", "runs/{run}/metrics", "since_iteration=" + "9" * 5000, None, {400}),
    ("since below int64", "GET", "runs/{run}/metrics",
     "since_iteration=-9223372036854775809", None, {400}),
    ("since text", "GET", "runs/{run}/metrics", "since_iteration=abc", None, {400}),
    ("since float", "GET", "runs/{run}/metrics", "since_step=1.5", None, {400}),
    ("since spaced", "GET", "runs/{run}/metrics", "since_iteration=%205", None, {400}),
    ("keys unknown", "GET", "runs/{run}/metrics", "keys=nope", None, {404}),
    ("keys 10,000 commas", "GET", "runs/{run}/metrics", "keys=" + "," * 10_000, None, {400}),
    ("force maybe", "DELETE", "runs/{run}", "force=maybe", None, {400}),
    # a parameter given twice: a 400, not its last value (force=0&force=1 deleted the run)
    ("force twice", "DELETE", "runs/{run}", "force=0&force=1", None, {400}),
    ("limit twice", "GET", "runs", "limit=5&limit=6", None, {400}),
    ("status twice", "GET", "runs", "status=all&status=finished", None, {400}),
    ("empty and given", "GET", "runs", "q=&q=x", None, {400}),
    ("verify twice", "GET", "runs/{run}/checkpoints", "verify=1&verify=0", None, {400}),
    ("keys twice", "GET", "runs/{run}/metrics", "keys=loss&keys=nope", None, {400}),
    ("since and since_step", "GET", "runs/{run}/metrics", "since_iteration=1&since_step=2",
     None, {400}),
    ("compare ids twice", "GET", "compare?ids={run}&ids={other}", "", None, {400}),
    ("sweeps limit twice", "GET", "sweeps", "limit=1&limit=2", None, {400}),
    # compare: a list of at most 50 run ids, each once, each a run of the store
    ("compare since --5", "GET", "compare?ids={run}", "since_iteration=--5", None, {400}),
    ("compare since 1,--5", "GET", "compare?ids={run},{other}", "since_iteration=1,--5", None,
     {400}),
    ("compare since 2**63-1", "GET", "compare?ids={run}", "since_iteration=9223372036854775807",
     None, {400}),
    ("compare since 19 nines", "GET", "compare?ids={run}", "since_iteration=9999999999999999999",
     None, {400}),
    ("compare since superscript", "GET", "compare?ids={run}", "since_iteration=%C2%B2", None,
     {400}),
    ("compare without ids", "GET", "compare", "", None, {400}),
    ("compare ids empty", "GET", "compare", "ids=", None, {400}),
    ("compare ids trailing comma", "GET", "compare?ids={run},", "", None, {400}),
    ("compare ids spaced", "GET", "compare?ids={run},%20{other}", "", None, {400}),
    ("compare id traversal", "GET", "compare", "ids=..%2F..%2Fetc", None, {400}),
    ("compare id markup", "GET", "compare", "ids=%3Cscript%3E", None, {400}),
    ("compare id upper-case", "GET", "compare", "ids=20261203-000000-ABCDEF", None, {400}),
    ("compare 51 ids", "GET", "compare", "ids=" + ",".join(
        f"20261203-000000-{i:016x}" for i in range(51)), None, {400}),
    ("compare 5000 commas", "GET", "compare", "ids=" + "," * 5000, None, {400}),
    ("compare id twice", "GET", "compare?ids={run},{run}", "", None, {400}),
    ("compare unknown id", "GET", "compare?ids={run},{absent}", "", None, {404}),
    ("compare max_points 1", "GET", "compare?ids={run}", "max_points=1", None, {400}),
    ("compare max_points 5001", "GET", "compare?ids={run}", "max_points=5001", None, {400}),
    ("compare max_points text", "GET", "compare?ids={run}", "max_points=all", None, {400}),
    ("POST compare", "POST", "compare?ids={run}", "", b"{}", {405}),
    ("DELETE compare", "DELETE", "compare?ids={run}", "", None, {405}),
    # commands: only the four, as a string, for a run a loop is training
    ("command unknown", "POST", "runs/{run}/commands", "", b'{"command": "rm"}', {400}),
    ("command list", "POST", "runs/{run}/commands", "", b'{"command": ["stop"]}', {400}),
    ("command object", "POST", "runs/{run}/commands", "", b'{"command": {"a": 1}}', {400}),
    ("command null", "POST", "runs/{run}/commands", "", b'{"command": null}', {400}),
    ("command upper-case", "POST", "runs/{run}/commands", "", b'{"command": "STOP"}', {400}),
    ("command missing", "POST", "runs/{run}/commands", "", b"{}", {400}),
    ("command and more", "POST", "runs/{run}/commands", "", b'{"command": "stop", "x": 1}',
     {400}),
    ("command twice", "POST", "runs/{run}/commands", "", b'{"command": "x", "command": "stop"}',
     {400}),
    ("command, not training", "POST", "runs/{run}/commands", "", b'{"command": "stop"}', {409}),
    ("command of no run", "POST", "runs/{absent}/commands", "", b'{"command": "stop"}', {404}),
    ("command absent", "GET", "runs/{run}/commands/987654", "", None, {404}),
    ("command id huge", "GET", "runs/{run}/commands/" + "9" * 30, "", None, {400, 404}),
    ("command id text", "GET", "runs/{run}/commands/abc", "", None, {404}),
    ("GET commands", "GET", "runs/{run}/commands", "", None, {405}),
    ("DELETE command", "DELETE", "runs/{run}/commands/1", "", None, {405}),
    # methods an endpoint does not have
    ("PUT runs", "PUT", "runs", "", b"{}", {405}),
    ("POST runs", "POST", "runs", "", b"{}", {405}),
    ("DELETE runs", "DELETE", "runs", "", None, {405}),
    # PATCH runs/ID: name, tags and note only, each checked
    ("PATCH run empty", "PATCH", "runs/{run}", "", b"{}", {400}),
    ("PATCH run no body", "PATCH", "runs/{run}", "", b"", {400}),
    ("PATCH body list", "PATCH", "runs/{run}", "", b'["name"]', {400}),
    ("PATCH unknown field", "PATCH", "runs/{run}", "", b'{"status": "finished"}', {400}),
    ("PATCH config", "PATCH", "runs/{run}", "", b'{"config": {"lr": 1}}', {400}),
    ("PATCH name number", "PATCH", "runs/{run}", "", b'{"name": 1}', {400}),
    ("PATCH name null", "PATCH", "runs/{run}", "", b'{"name": null}', {400}),
    ("PATCH name blank", "PATCH", "runs/{run}", "", b'{"name": "   "}', {400}),
    ("PATCH name 201 chars", "PATCH", "runs/{run}", "", b'{"name": "' + b"x" * 201 + b'"}',
     {400}),
    ("PATCH name escape", "PATCH", "runs/{run}", "", b'{"name": "a\\u001b[2Jb"}', {400}),
    ("PATCH name bidi", "PATCH", "runs/{run}", "", b'{"name": "a\\u202eb"}', {400}),
    ("PATCH name twice", "PATCH", "runs/{run}", "", b'{"name": "a", "name": "b"}', {400}),
    ("PATCH tags string", "PATCH", "runs/{run}", "", b'{"tags": "a,b"}', {400}),
    ("PATCH tags object", "PATCH", "runs/{run}", "", b'{"tags": {"a": 1}}', {400}),
    ("PATCH tag number", "PATCH", "runs/{run}", "", b'{"tags": [1]}', {400}),
    ("PATCH tag space", "PATCH", "runs/{run}", "", b'{"tags": ["a b"]}', {400}),
    ("PATCH tag markup", "PATCH", "runs/{run}", "", b'{"tags": ["<b>"]}', {400}),
    ("PATCH tag empty", "PATCH", "runs/{run}", "", b'{"tags": [""]}', {400}),
    ("PATCH tag 41 chars", "PATCH", "runs/{run}", "", b'{"tags": ["' + b"t" * 41 + b'"]}',
     {400}),
    ("PATCH 33 tags", "PATCH", "runs/{run}", "", json.dumps(
        {"tags": [f"t{i}" for i in range(33)]}).encode(), {400}),
    ("PATCH note number", "PATCH", "runs/{run}", "", b'{"note": 5}', {400}),
    ("PATCH note control", "PATCH", "runs/{run}", "", b'{"note": "a\\u0007"}', {400}),
    ("PATCH note 10,001", "PATCH", "runs/{run}", "", b'{"note": "' + b"n" * 10_001 + b'"}',
     {400}),
    ("PATCH good name, bad tag", "PATCH", "runs/{run}", "", b'{"name": "ok", "tags": ["a b"]}',
     {400}),
    ("PATCH no run", "PATCH", "runs/{absent}", "", b'{"name": "x"}', {404}),
    ("POST run", "POST", "runs/{run}", "", b"{}", {405}),
    ("PUT run", "PUT", "runs/{run}", "", b"{}", {405}),
    ("GET fork", "GET", FORK, "", None, {405}),
    ("DELETE fork", "DELETE", FORK, "", None, {405}),
    ("POST metrics", "POST", "runs/{run}/metrics", "", b"{}", {405}),
    ("DELETE metrics", "DELETE", "runs/{run}/metrics", "", None, {405}),
    ("POST checkpoints", "POST", "runs/{run}/checkpoints", "", b"{}", {405}),
    ("GET checkpoint", "GET", "runs/{run}/checkpoints/{ck}", "", None, {405}),
    ("PUT checkpoint", "PUT", "runs/{run}/checkpoints/{ck}", "", b"{}", {405}),
    # paths
    ("unknown endpoint", "GET", "runs/{run}/nope", "", None, {404}),
    ("not an id", "GET", "runs/not-a-run", "", None, {400}),
    ("upper-case id", "GET", "runs/20261203-000000-ABCDEF", "", None, {400}),
    ("id with a suffix", "GET", "runs/{run}x", "", None, {400}),
    ("id of 17 hex digits", "GET", "runs/20261203-000000-0123456789abcdef0", "", None, {400}),
    ("encoded traversal", "GET", "runs/..%2F..%2Fetc%2Fpasswd", "", None, {400, 404}),
    ("encoded NUL", "GET", "runs/%00", "", None, {400}),
    ("encoded newline after id", "GET", "runs/{run}%0A", "", None, {400}),
    ("absent run", "GET", "runs/{absent}", "", None, {404}),
    ("delete absent run", "DELETE", "runs/{absent}", "", None, {404}),
    ("checkpoint id text", "DELETE", "runs/{run}/checkpoints/abc", "", None, {404}),
    ("checkpoint id negative", "DELETE", "runs/{run}/checkpoints/-1", "", None, {404}),
    ("checkpoint id 19 digits", "DELETE", "runs/{run}/checkpoints/9223372036854775808", "",
     None, {404}),
    ("checkpoint of another run", "DELETE", "runs/{run}/checkpoints/{other_ck}", "", None,
     {404}),
    ("checkpoint absent", "DELETE", "runs/{run}/checkpoints/987654", "", None, {404}),
    # sweeps: ids checked like run ids, then against the store
    ("sweeps limit 0", "GET", "sweeps", "limit=0", None, {400}),
    ("sweeps limit 201", "GET", "sweeps", "limit=201", None, {400}),
    ("sweeps limit text", "GET", "sweeps", "limit=all", None, {400}),
    ("sweep traversal", "GET", "sweeps/..%2F..%2Fetc%2Fpasswd", "", None, {400, 404}),
    ("sweep id markup", "GET", "sweeps/%3Cimg%20src%3Dx%3E", "", None, {400}),
    ("sweep id too short", "GET", "sweeps/20200101-000000-0123", "", None, {400}),
    ("sweep absent", "GET", "sweeps/{absent}", "", None, {404}),
    ("sweep a run's id", "GET", "sweeps/{run}", "", None, {404}),
    ("sweep trials limit 0", "GET", "sweeps/{absent}", "limit=0", None, {400, 404}),
    ("sweep best 0", "GET", "sweeps/{absent}", "best=0", None, {400, 404}),
    ("sweep best text", "GET", "sweeps/{absent}", "best=all", None, {400, 404}),
    ("sweep unknown endpoint", "GET", "sweeps/{absent}/trials", "", None, {404}),
    ("stop absent sweep", "POST", "sweeps/{absent}/stop", "", b"{}", {404}),
    ("stop bad id", "POST", "sweeps/nope/stop", "", b"{}", {400}),
    ("stop with GET", "GET", "sweeps/{absent}/stop", "", None, {404, 405}),
    ("pause absent sweep", "POST", "sweeps/{absent}/pause", "", b"{}", {404}),
    ("resume bad id", "POST", "sweeps/nope/resume", "", b"{}", {400}),
    ("unknown sweep request", "POST", "sweeps/{absent}/restart", "", b"{}", {404, 405}),
    ("sweeps DELETE", "DELETE", "sweeps", "", None, {405}),
]


def seed(store, home):
    """Two runs with real checkpoints in their folders, without training."""
    out = {}
    for name in ("run", "other"):
        rid = store.create_run(name, config={"lr": 0.1, "epochs": 2}, source="/src/train.py",
                               factory="/src/train.py:make_loop")
        folder = home / "runs" / rid
        store.update_run(rid, directory=str(folder), status="finished")
        p = ckpt.save(folder / "checkpoints", {"w": np.arange(4.0)}, name="ckpt-00000004")
        out[name], out[f"{name}_ck"] = rid, store.add_checkpoint(rid, 4, 1, p, 100,
                                                                 {"loss": 0.5})
        store.add_metrics(rid, [(i, i // 2, "loss", 1.0 / i, 0.0) for i in range(1, 5)])
    out["ck"], out["absent"] = out.pop("run_ck"), "20200101-000000-0123456789abcdef"
    return out


async def raw(http_server_client, jp_base_url, jp_auth_header, method, path, query="",
              body=None):
    sep = "&" if "?" in path else "?"  # compare's rows carry ids in the path's query
    url = f"{jp_base_url}labkit/api/{path}" + (f"{sep}{query}" if query else "")
    return await http_server_client.fetch(url, method=method, body=body, raise_error=False,
                                          headers=dict(jp_auth_header), request_timeout=60,
                                          allow_nonstandard_methods=True)


def secrets_in(text: str, tmp_path) -> list[str]:
    """The filesystem paths a response must not carry."""
    homes = [str(tmp_path), os.environ["LABKIT_HOME"], str(lk.config.home())]
    return [h for h in homes if h in text] + (["/src/"] if "/src/" in text else [])


async def test_hostile_requests_get_4xx_json_and_change_nothing(
        http_server_client, jp_base_url, jp_auth_header, fresh_store, tmp_path):
    ids = seed(fresh_store, tmp_path)
    before = sorted(r["id"] for r in lk.runs.list())
    written = [(r["name"], r["tags"], r["note"]) for r in map(lk.runs.get, before)]
    t0, failures = time.perf_counter(), []
    for what, method, path, query, body, statuses in TABLE:
        path = path.format(**ids)
        if body is not None:
            body = body.replace(b"{other_ck}", str(ids["other_ck"]).encode())
        r = await raw(http_server_client, jp_base_url, jp_auth_header, method, path, query, body)
        text = r.body.decode("utf-8", "replace")
        try:
            message = json.loads(text)["message"]
        except (ValueError, KeyError, TypeError):
            message = None
        problems = []
        if r.code not in statuses:
            problems.append(f"status {r.code}, expected {sorted(statuses)}")
        if not isinstance(message, str) or not message:
            problems.append("no JSON message")
        if not r.headers.get("Content-Type", "").startswith("application/json"):
            problems.append(f"Content-Type {r.headers.get('Content-Type')}")
        if secrets_in(text, tmp_path):
            problems.append(f"a path in the response: {secrets_in(text, tmp_path)}")
        if problems:
            failures.append(f"{what} ({method} {path[:60]}?{query[:30]}): {'; '.join(problems)}"
                            f" -- {text[:160]}")
    after = sorted(r["id"] for r in lk.runs.list())
    held = len(TABLE) - len(failures)
    print(f"\nhostile requests: {len(TABLE)} tried, {held} held, "
          f"{time.perf_counter() - t0:.1f} s")
    assert failures == [], "\n".join(failures)
    assert after == before, "a hostile request created or deleted a run"
    assert [(r["name"], r["tags"], r["note"]) for r in map(lk.runs.get, after)] == written, \
        "a hostile PATCH changed a run's name, tags or note"
    assert [c["id"] for c in lk.runs.checkpoints(ids["run"])] == [ids["ck"]]
    assert [c["id"] for c in lk.runs.checkpoints(ids["other"])] == [ids["other_ck"]]


async def test_no_response_carries_a_path(http_server_client, jp_base_url, jp_auth_header,
                                          fresh_store, tmp_path):
    ids = seed(fresh_store, tmp_path)
    run = ids["run"]
    fresh_store.update_run(run, error=f'Traceback:\n  File "{tmp_path}/train.py", line 3\n'
                                      f"OSError: cannot read {tmp_path / 'data.h5'}")
    # a checkpoint that fails verification: fork's error names it
    bad = fresh_store.checkpoint(ids["other_ck"])["path"]
    with open(os.path.join(bad, "manifest.json"), "a") as f:
        f.write("garbage")
    responses = []
    calls = [("GET", "runs", ""), ("GET", f"runs/{run}", ""), ("GET", f"runs/{run}/metrics", ""),
             ("GET", f"runs/{run}/checkpoints", ""), ("GET", f"runs/{ids['absent']}", ""),
             ("POST", f"runs/{ids['other']}/fork", json.dumps({"checkpoint": ids["other_ck"]})),
             ("POST", f"runs/{ids['other']}/fork", "{}"),
             ("POST", f"runs/{run}/fork", json.dumps({"checkpoint": ids["ck"],
                                                      "changes": {"lr": 0.2}}))]
    for method, path, body in calls:
        r = await raw(http_server_client, jp_base_url, jp_auth_header, method, path,
                      body=body.encode() if method == "POST" else None)
        responses.append((method, path, r.code, r.body.decode()))
    child = json.loads(responses[-1][3])["run"]
    assert responses[-1][2] == 201 and child["parent_checkpoint"] == ids["ck"]
    assert child["parent_run"] == run and "directory" not in child
    assert child["source"] == "train.py" and child["factory"] == "train.py:make_loop"
    assert responses[5][2] == 400 and "cannot be used" in responses[5][3]
    r = await raw(http_server_client, jp_base_url, jp_auth_header, "GET", f"runs/{child['id']}")
    responses.append(("GET", "child", r.code, r.body.decode()))
    r = await raw(http_server_client, jp_base_url, jp_auth_header, "DELETE",
                  f"runs/{run}/checkpoints/{ids['ck']}")
    responses.append(("DELETE", "checkpoint", r.code, r.body.decode()))
    leaks = [(m, p, c, secrets_in(b, tmp_path), b[:200]) for m, p, c, b in responses
             if secrets_in(b, tmp_path)]
    assert leaks == []
    run_json = json.loads(responses[1][3])
    assert "<path>" in run_json["error"] and "directory" not in run_json


async def test_a_run_the_api_cannot_address_is_not_listed(jp_fetch, fresh_store):
    good = fresh_store.create_run("good")
    for bad in ["../../etc", "20261203-000000-ABCDEF", "x" * 500, "20261203-000000-abcdef\n"]:
        fresh_store._conn().execute("INSERT INTO runs (id, name, status, created) VALUES "
                                    "(?,?,?,?)", (bad, "bad", "created", time.time()))
    r = await jp_fetch("labkit", "api", "runs")
    assert [x["id"] for x in json.loads(r.body)["runs"]] == [good]


async def test_deleting_a_training_run_is_refused_unless_forced(jp_fetch, fresh_store):
    from tornado.httpclient import HTTPClientError

    rid = fresh_store.create_run("training")
    fresh_store.update_run(rid, status="running", heartbeat=time.time(), pid=os.getpid())
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("labkit", "api", "runs", rid, method="DELETE")
    assert e.value.code == 409 and "is training" in json.loads(e.value.response.body)["message"]
    assert lk.runs.get(rid)
    r = await jp_fetch("labkit", "api", "runs", rid, method="DELETE", params={"force": "1"})
    assert r.code == 200 and not fresh_store.exists(rid)


async def test_a_damaged_store_is_a_503_with_a_message(jp_fetch, fresh_store, tmp_path):
    from tornado.httpclient import HTTPClientError

    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    lk.runs._override.append(broken)  # the next store() opens the damaged file
    try:
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("labkit", "api", "runs")
    finally:
        lk.runs._override.pop()
    body = json.loads(e.value.response.body)
    assert e.value.code == 503 and "damaged" in body["message"]
    assert str(tmp_path) not in body["message"] and "the run store" in body["message"]


def test_the_table_is_large_and_every_path_is_urlsafe():
    assert len(TABLE) >= 80
    for _, _, path, query, _, _ in TABLE:
        assert " " not in path and (not query or urllib.parse.parse_qs(query) is not None)


async def test_a_damaged_sweep_row_is_a_503_not_a_500(jp_fetch, fresh_store):
    """A sweep whose settings, space or trial params are not JSON objects (a damaged store):
    the sweep's routes answer 503 naming the damage; the sweep list shows it as damaged
    (tests/server/test_damaged_rows.py)."""
    from tornado.httpclient import HTTPClientError

    sid = fresh_store.create_sweep("s", None, "{}", {"metric": "loss", "mode": "min",
                                                     "trials": 1}, [{"lr": 0.1}])
    conn = fresh_store._conn()
    for column, value in (("settings", "{not json"), ("settings", "[1, 2]")):
        conn.execute(f"UPDATE sweeps SET {column} = ? WHERE id = ?", (value, sid))  # noqa: S608
        conn.commit()
        (listed,) = json.loads((await jp_fetch("labkit", "api", "sweeps")).body)["sweeps"]
        assert listed["status"] == "damaged" and "its settings" in listed["damaged"]
        for path, method in ((("sweeps", sid), "GET"), (("sweeps", sid, "stop"), "POST")):
            with pytest.raises(HTTPClientError) as e:
                await jp_fetch("labkit", "api", *path, method=method,
                               **({"body": b"{}"} if method == "POST" else {}))
            assert e.value.code == 503, (column, value, path, e.value.code)
            assert "damaged" in json.loads(e.value.response.body)["message"]


def test_paths_glued_to_a_word_are_scrubbed():
    from labkit.server.handlers import scrub

    assert scrub("checkpoint-/tmp/x/ckpt-1 failed") == "checkpoint-<path> failed"
    assert scrub("3/home/u/a.h5") == "3<path>"
    assert scrub("ratio 3/4, valid/loss") == "ratio 3/4, valid/loss"


def test_metrics_since_the_largest_iteration_is_empty_not_an_overflow(fresh_store):
    rid = fresh_store.create_run("r", {})
    fresh_store.add_metrics(rid, [(i, 0, "loss", float(i), 0.0) for i in range(300)])
    for since in (2**63 - 1, 2**63 - 2, 2**62):
        got = fresh_store.metrics(rid, ["loss"], since, 10)["loss"]
        assert not got["iteration"], since


async def test_metrics_are_capped_in_all_without_max_points(jp_fetch, fresh_store, monkeypatch):
    from labkit.server import handlers

    monkeypatch.setattr(handlers, "MAX_METRIC_POINTS", 40)
    rid = fresh_store.create_run("r", {})
    fresh_store.add_metrics(rid, [(i, 0, k, float(i), 0.0) for i in range(500)
                                  for k in ("a", "b")])
    r = await jp_fetch("labkit", "api", "runs", rid, "metrics")
    body = json.loads(r.body)
    assert body["max_points"] == 20
    assert all(0 < len(s["iteration"]) <= 20 for s in body["metrics"].values())
