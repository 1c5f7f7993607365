"""``GET runs`` as the sidebar asks for it: a window (limit, offset) in an order (sort), the
total, the counts per status, the matching ids, and each run's sparkline of one metric (at most
``points`` points, downsampled in SQLite) with its last value; the old form still lists every
run."""

import json
import math
import os
import socket
import time

from tornado.httpclient import HTTPClientError

from labkit.runs import blocks


async def call(jp_fetch, **params):
    try:
        r = await jp_fetch("labkit", "api", "runs", params=params)
    except HTTPClientError as e:
        return e.code, json.loads(e.response.body)
    return r.code, json.loads(r.body)


def seed(store, n=30):
    """``n`` runs, a minute apart, oldest first: every 5th failed, the newest one live, every
    3rd with a ``loss`` series (run 0's long enough for block summaries, with a spike)."""
    ids = []
    now = time.time()
    for i in range(n):
        rid = store.create_run(f"run-{i:02d}", config={"i": i})
        store.update_run(rid, status="failed" if i % 5 == 4 else "finished")
        ids.append(rid)
    c = store._conn()
    with c:  # NOTE: create_run stamps the clock; the order must not depend on its resolution
        for i, rid in enumerate(ids):
            c.execute("UPDATE runs SET created = ? WHERE id = ?", (now - (n - i) * 60, rid))
    store.update_run(ids[-1], status="running", heartbeat=time.time(), pid=os.getpid(),
                     host=socket.gethostname())
    store.update_run(ids[-2], status="running", heartbeat=0.0)  # dead: no heartbeat
    for i in range(0, n, 3):
        m = 60 * blocks.BLOCK if i == 0 else 5 + i
        rows = [(it, 0, "loss", 1.0 / (1 + it), 0.0) for it in range(m)]
        if i == 0:
            rows[7777] = (7777, 0, "loss", 50.0, 0.0)
        store.add_metrics(ids[i], rows)
    if n > 3:
        store.add_metrics(ids[3], [(99, 0, "loss", math.nan, 0.0)])
    return ids


async def test_window_total_counts_and_order(jp_fetch, fresh_store):
    ids = seed(fresh_store)
    code, body = await call(jp_fetch, limit="10", offset="5")
    assert code == 200
    newest = ids[::-1]
    assert [r["id"] for r in body["runs"]] == newest[5:15]
    assert body["total"] == 30 and body["offset"] == 5 and body["limit"] == 10
    assert body["counts"] == {"finished": 23, "failed": 5, "running": 1, "dead": 1, "live": 1}
    assert "ids" not in body
    code, body = await call(jp_fetch, limit="3", offset="28")
    assert [r["id"] for r in body["runs"]] == newest[28:]  # the end: two left
    code, body = await call(jp_fetch, limit="3", offset="300")
    assert body["runs"] == [] and body["total"] == 30
    code, body = await call(jp_fetch, limit="4", sort="oldest")
    assert [r["id"] for r in body["runs"]] == ids[:4]
    code, body = await call(jp_fetch, limit="2", sort="name", name="run-1")
    assert [r["name"] for r in body["runs"]] == ["run-10", "run-11"] and body["total"] == 10
    # the old form: every run, newest first, with the old fields
    code, body = await call(jp_fetch)
    assert [r["id"] for r in body["runs"]] == newest
    assert {"id", "name", "status", "created", "config", "progress"} <= set(body["runs"][0])


async def test_filters_and_ids(jp_fetch, fresh_store):
    ids = seed(fresh_store)
    code, body = await call(jp_fetch, status="failed", limit="2", ids="1")
    assert body["total"] == 5 and len(body["runs"]) == 2
    assert body["ids"] == [ids[i] for i in (24, 19, 14, 9, 4)]  # all of them, newest first
    assert all(r["status"] == "failed" for r in body["runs"])
    code, body = await call(jp_fetch, status="live", limit="50")
    assert [r["id"] for r in body["runs"]] == [ids[-1]] and body["total"] == 1
    code, body = await call(jp_fetch, status="dead", limit="50")
    assert [r["id"] for r in body["runs"]] == [ids[-2]] and body["runs"][0]["status"] == "dead"
    code, body = await call(jp_fetch, status="running", limit="50")
    assert [r["id"] for r in body["runs"]] == [ids[-1]]
    code, body = await call(jp_fetch, name="run-0", limit="50", ids="true")
    assert body["total"] == 10 and body["ids"] == ids[9::-1]
    code, body = await call(jp_fetch, name="%", limit="50")  # literal, not a wildcard
    assert body["total"] == 0 and body["runs"] == []
    # q: part of the name or of the id
    code, body = await call(jp_fetch, q=ids[7][-10:].upper(), limit="50")
    assert [r["id"] for r in body["runs"]] == [ids[7]]
    code, body = await call(jp_fetch, q="RUN-2", limit="50")
    assert body["total"] == 10


async def test_sparklines_downsampled_with_last_value(jp_fetch, fresh_store):
    ids = seed(fresh_store)
    code, body = await call(jp_fetch, limit="40", sort="oldest", metric="loss", points="40")
    assert code == 200
    by = {r["id"]: r["metric"] for r in body["runs"]}
    assert by[ids[1]] is None  # no loss: no sparkline
    # a long series: from its blocks, at most 40 points, the spike kept, the last point last
    long = by[ids[0]]
    n = 60 * blocks.BLOCK
    assert 10 <= len(long["iteration"]) <= 40
    assert long["iteration"] == sorted(long["iteration"])
    assert 7777 in long["iteration"] and 50.0 in long["value"]
    assert long["last_iteration"] == n - 1 and long["iteration"][-1] == n - 1
    assert long["last"] == long["value"][-1] == 1.0 / n
    # a short one: sampled at even iterations, every point a real one, first and last kept
    short = by[ids[6]]  # 11 points: all of them
    assert short["iteration"] == list(range(11))
    assert short["value"] == [1.0 / (1 + i) for i in range(11)]
    assert short["last"] == 1.0 / 11 and short["last_iteration"] == 10
    # a NaN is a gap (null), and a last NaN is a null last value
    gap = by[ids[3]]
    assert gap["last_iteration"] == 99 and gap["last"] is None and gap["value"][-1] is None
    code, body = await call(jp_fetch, limit="40", metric="loss", points="5")
    assert all(len(r["metric"]["iteration"]) <= 5 for r in body["runs"] if r["metric"])
    # a metric no run has: every sparkline null
    code, body = await call(jp_fetch, limit="5", metric="nope")
    assert code == 200 and all(r["metric"] is None for r in body["runs"])


async def test_bad_parameters_name_the_culprit(jp_fetch, fresh_store):
    seed(fresh_store, 3)
    for params, words in [({"limit": "0"}, "limit must be an integer from 1 to 1000"),
                          ({"sort": "size"}, "sort must be one of"),
                          ({"metric": "loss"}, "metric needs limit"),
                          ({"limit": "5", "metric": "loss", "points": "1"},
                           "points must be an integer from 2 to 200"),
                          ({"status": "alive"}, "status must be one of")]:
        code, body = await call(jp_fetch, **params)
        assert code == 400 and words in body["message"], (params, body)


async def test_ids_stop_after_one_more_than_compare_takes(jp_fetch, fresh_store):
    from labkit.server.lists import MAX_COMPARE

    made = [fresh_store.create_run(f"r{k}") for k in range(MAX_COMPARE + 5)]
    code, body = await call(jp_fetch, limit="1", ids="1")
    assert body["total"] == MAX_COMPARE + 5
    # enough to see "too many" (the total says how many), not every matching id
    assert body["ids"] == made[::-1][:MAX_COMPARE + 1]
