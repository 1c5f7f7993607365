"""``GET runs/ID/lineage``: the chain of runs a run was forked from and the tree forked from it,
with names, statuses and the parent checkpoint's iteration, bounded by caps."""

import json

import pytest
from tornado.httpclient import HTTPClientError


def tree(store):
    """root -> a (at checkpoint 10) -> a1, a2; root -> b; a1 -> a1x."""
    root = store.create_run("root")
    ck = store.add_checkpoint(root, 10, 1, "/nowhere/ck10", 1)
    a = store.create_run("a", parent_run=root, parent_checkpoint_id=ck)
    b = store.create_run("b", parent_run=root)
    a1 = store.create_run("a1", parent_run=a)
    a2 = store.create_run("a2", parent_run=a)
    a1x = store.create_run("a1x", parent_run=a1)
    store.update_run(a1x, status="failed")
    return root, ck, a, b, a1, a2, a1x


async def get(jp_fetch, rid):
    return json.loads((await jp_fetch("labkit", "api", "runs", rid, "lineage")).body)


def shape(nodes):
    return [(n["name"], shape(n["children"])) for n in nodes]


async def test_lineage_is_the_ancestors_and_the_subtree(jp_fetch, fresh_store):
    root, ck, a, b, a1, a2, a1x = tree(fresh_store)
    body = await get(jp_fetch, a1)
    assert [x["id"] for x in body["ancestors"]] == [a, root]  # the parent first
    assert body["ancestors"][0]["checkpoint"] == {"id": ck, "iteration": 10}
    assert body["run"]["name"] == "a1" and body["run"]["checkpoint"] is None
    assert shape(body["children"]) == [("a1x", [])]
    assert body["children"][0]["status"] == "failed"
    body = await get(jp_fetch, root)
    assert body["ancestors"] == [] and body["truncated"] is False
    assert shape(body["children"]) == [("a", [("a1", [("a1x", [])]), ("a2", [])]), ("b", [])]
    assert body["descendants"] == 5
    assert "/nowhere" not in json.dumps(body)  # ids, never paths


async def test_lineage_caps_say_truncated(jp_fetch, fresh_store, monkeypatch):
    from labkit.runs import lineage

    root, *_ = tree(fresh_store)
    monkeypatch.setattr(lineage.lineage, "__kwdefaults__",
                        {"max_ancestors": 1, "max_depth": 20, "max_descendants": 3})
    body = await get(jp_fetch, root)
    assert body["descendants"] == 3 and body["truncated"] is True
    chain = fresh_store.create_run("c3", parent_run=fresh_store.create_run(
        "c2", parent_run=fresh_store.create_run("c1")))
    body = await get(jp_fetch, chain)
    assert [x["name"] for x in body["ancestors"]] == ["c2"] and body["truncated"] is True


async def test_lineage_of_an_unknown_run_is_a_404(jp_fetch, fresh_store):
    with pytest.raises(HTTPClientError) as e:
        await get(jp_fetch, "20200101-000000-0123456789abcdef")
    assert e.value.code == 404
