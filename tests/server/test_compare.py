"""``GET compare?ids=``: the compare page's runs and their downsampled metrics in one request
(the hostile requests are rows of test_hostile.py)."""

import json

import pytest
from tornado.httpclient import HTTPClientError


def seed(store, n=3, points=2000):
    ids = []
    for k in range(n):
        rid = store.create_run(f"run{k}", config={"lr": 0.1 * (k + 1), "model": {"depth": 2}})
        store.add_metrics(rid, [(i, i // 100, "loss", 1.0 / (i + k), float(i))
                                for i in range(1, points + 1)])
        store.update_run(rid, status="finished")
        ids.append(rid)
    return ids


async def test_compare_gives_each_run_and_its_metrics_in_the_order_asked(jp_fetch, fresh_store):
    ids = seed(fresh_store)
    asked = [ids[2], ids[0]]
    r = await jp_fetch("labkit", "api", "compare",
                       params={"ids": ",".join(asked), "max_points": "100"})
    body = json.loads(r.body)
    assert [run["id"] for run in body["runs"]] == asked
    first = body["runs"][0]
    assert first["config"] == {"lr": pytest.approx(0.3), "model": {"depth": 2}}
    assert first["status"] == "finished" and "directory" not in first
    loss = first["metrics"]["loss"]
    assert 2 <= len(loss["iteration"]) <= 100
    assert loss["iteration"][0] == 1 and loss["iteration"][-1] == 2000
    # the downsampling keeps each series' extremes: a best value read from it is exact
    assert min(loss["value"]) == pytest.approx(1.0 / 2002)
    assert max(loss["value"]) == pytest.approx(1.0 / 3)


async def test_compare_default_max_points_is_500(jp_fetch, fresh_store):
    ids = seed(fresh_store, n=1, points=5000)
    r = await jp_fetch("labkit", "api", "compare", params={"ids": ids[0]})
    assert 250 <= len(json.loads(r.body)["runs"][0]["metrics"]["loss"]["value"]) <= 500


async def test_compare_lists_every_unknown_id(jp_fetch, fresh_store):
    ids = seed(fresh_store, n=1)
    absent = ["20200101-000000-0123456789abcdef", "20200101-000000-abcdef"]
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("labkit", "api", "compare", params={"ids": ",".join([ids[0], *absent])})
    assert e.value.code == 404
    body = json.loads(e.value.response.body)
    assert body["missing"] == absent
    assert absent[0] in body["message"] and absent[1] in body["message"]


async def test_compare_caps_the_points_of_the_whole_answer(jp_fetch, fresh_store, monkeypatch):
    from labkit.server import lists

    monkeypatch.setattr(lists, "MAX_COMPARE_POINTS", 900)
    ids = seed(fresh_store, n=3, points=2000)  # 3 runs x 1 key: 300 points each at most
    r = await jp_fetch("labkit", "api", "compare",
                       params={"ids": ",".join(ids), "max_points": "5000"})
    body = json.loads(r.body)
    assert body["max_points"] == 300
    for run in body["runs"]:
        assert 2 <= len(run["metrics"]["loss"]["value"]) <= 300


async def test_compare_reads_off_the_event_loop(jp_fetch, fresh_store, monkeypatch):
    import threading

    ids = seed(fresh_store, n=2, points=50)
    threads = []
    real = type(fresh_store).metrics

    def spy(self, *a, **kw):
        threads.append(threading.current_thread().name)
        return real(self, *a, **kw)

    monkeypatch.setattr(type(fresh_store), "metrics", spy)
    await jp_fetch("labkit", "api", "compare", params={"ids": ",".join(ids)})
    assert len(threads) == 2 and all(t.startswith("labkit-read") for t in threads), threads


async def test_compare_since_iteration_gives_only_new_points(jp_fetch, fresh_store):
    ids = seed(fresh_store, n=2, points=100)
    r = await jp_fetch("labkit", "api", "compare",
                       params={"ids": ",".join(ids), "since_iteration": "90,97"})
    a, b = json.loads(r.body)["runs"]
    assert a["metrics"]["loss"]["iteration"] == list(range(91, 101))
    assert b["metrics"]["loss"]["iteration"] == [98, 99, 100]
    # epoch and time come along (the page's x axis can be either)
    loss = b["metrics"]["loss"]
    assert loss["epoch"] == [0, 0, 1] and loss["time"] == [98.0, 99.0, 100.0]
    r = await jp_fetch("labkit", "api", "compare",
                       params={"ids": ",".join(ids), "since_iteration": "99"})
    assert [x["metrics"]["loss"]["iteration"] for x in json.loads(r.body)["runs"]] == [[100]] * 2
    for bad in ("1,2,3", "x", "1,"):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("labkit", "api", "compare",
                           params={"ids": ",".join(ids), "since_iteration": bad})
        assert e.value.code == 400
        assert "since_iteration must be one integer or one per id (2)" in \
            json.loads(e.value.response.body)["message"]
