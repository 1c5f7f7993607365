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
