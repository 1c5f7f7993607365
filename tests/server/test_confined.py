"""What DELETE and fork do with the files a run's records name: a checkpoint's files are
deleted only when they are surely the run's (not through a run folder that is a link, not a
checkpoint another run wrote); a checkpoint the store marks invalid is not forked from; a path
the filesystem refuses (a damaged record) is a 503 with a JSON message, not a 500."""

import json
import os

import numpy as np
import pytest

import labkit as lk
from labkit import checkpoint as ckpt

from .test_hostile import raw, secrets_in, seed


@pytest.fixture
def api(http_server_client, jp_base_url, jp_auth_header):
    async def call(method, path, body=None):
        r = await raw(http_server_client, jp_base_url, jp_auth_header, method, path, body=body)
        return r.code, json.loads(r.body)
    return call


def _run_with_checkpoint(store, folder, writer=None):
    rid = store.create_run("r", config={"lr": 0.1})
    store.update_run(rid, directory=str(folder), status="finished")
    p = ckpt.save(folder / "checkpoints", {"w": np.arange(4.0)}, name="ckpt-00000004",
                  run_id=writer)
    return rid, store.add_checkpoint(rid, 4, 1, p, 100, {}), p


async def test_a_checkpoint_through_a_linked_run_folder_keeps_its_files(api, fresh_store,
                                                                         tmp_path):
    # another run's folder, and a run whose folder is a link to it
    owner, _, files = _run_with_checkpoint(fresh_store, tmp_path / "elsewhere")
    linked = fresh_store.create_run("linked", config={"lr": 0.1})
    link = tmp_path / "runs" / linked
    link.parent.mkdir()
    os.symlink(tmp_path / "elsewhere", link)
    fresh_store.update_run(linked, directory=str(link), status="finished")
    ck = fresh_store.add_checkpoint(linked, 4, 1, link / "checkpoints" / files.name, 100, {})
    code, body = await api("DELETE", f"runs/{linked}/checkpoints/{ck}")
    assert code == 200 and body["files_removed"] is False, body
    assert "symbolic link" in body["kept"] and not secrets_in(json.dumps(body), tmp_path)
    assert ckpt.verify(files) is None  # the other run's checkpoint is whole
    assert lk.runs.checkpoints(linked) == [] and len(lk.runs.checkpoints(owner)) == 1
    code, body = await api("DELETE", f"runs/{linked}")
    assert code == 200 and ckpt.verify(files) is None and link.is_symlink()


async def test_a_checkpoint_another_run_wrote_keeps_its_files(api, fresh_store, tmp_path):
    other = fresh_store.create_run("other")
    folder = tmp_path / "runs" / "x"
    rid, ck, files = _run_with_checkpoint(fresh_store, folder, writer=other)
    code, body = await api("DELETE", f"runs/{rid}/checkpoints/{ck}")
    assert code == 200 and body["files_removed"] is False, body
    assert body["kept"] == f"it was written by run {other}"
    assert ckpt.verify(files) is None and lk.runs.checkpoints(rid) == []
    # its own: deleted, as before
    p = ckpt.save(folder / "checkpoints", {"w": np.arange(4.0)}, name="ckpt-00000008",
                  run_id=rid)
    ck = fresh_store.add_checkpoint(rid, 8, 1, p, 100, {})
    code, body = await api("DELETE", f"runs/{rid}/checkpoints/{ck}")
    assert code == 200 and body["files_removed"] is True and body["kept"] is None
    assert not p.exists()


async def test_a_checkpoint_marked_invalid_is_not_forked_and_says_why(api, fresh_store,
                                                                     tmp_path):
    ids = seed(fresh_store, tmp_path)
    fresh_store.set_checkpoint(ids["ck"], valid=0)  # as a resume that refused it marks it
    before = sorted(r["id"] for r in lk.runs.list())
    code, body = await api("POST", f"runs/{ids['run']}/fork",
                           json.dumps({"checkpoint": ids["ck"]}).encode())
    assert code == 400 and "marks it invalid" in body["message"], body
    assert sorted(r["id"] for r in lk.runs.list()) == before
    code, body = await api("GET", f"runs/{ids['run']}/checkpoints?verify=1")
    (c,) = body["checkpoints"]
    assert c["valid"] is False and "marks it invalid" in c["reason"]
    assert "written" not in c["reason"]  # a resume marked it, not its writer


async def test_paths_the_filesystem_refuses_are_a_503_not_a_500(api, fresh_store, tmp_path):
    """A record whose path has a part over 255 bytes (a damaged store): every file operation
    on it raises ENAMETOOLONG."""
    rid = fresh_store.create_run("long", config={"lr": 0.1})
    fresh_store.update_run(rid, directory=str(tmp_path / ("x" * 300)), status="finished")
    ck = fresh_store.add_checkpoint(rid, 4, 1, str(tmp_path / ("y" * 300) / "c"), 100, {})
    code, body = await api("GET", f"runs/{rid}/checkpoints?verify=1")
    assert code == 200 and "cannot be read" in body["checkpoints"][0]["reason"], body
    for method, path, payload in [("POST", f"runs/{rid}/fork", b"{}"),
                                  ("DELETE", f"runs/{rid}/checkpoints/{ck}", None),
                                  ("DELETE", f"runs/{rid}", None)]:
        code, body = await api(method, path, payload)
        assert code == 503 and "File name too long" in body["message"], (path, code, body)
        assert not secrets_in(json.dumps(body), tmp_path)


async def test_kept_says_why_for_every_reason_and_names_no_path(api, fresh_store, tmp_path):
    """The REST answer's kept comes from lk.runs.delete_checkpoint, the one home of these
    checks: a checkpoint outside its run's folder, and a folder that is not a checkpoint."""
    rid, _, _ = _run_with_checkpoint(fresh_store, tmp_path / "runs" / "mine")
    outside = ckpt.save(tmp_path / "elsewhere", {"w": np.arange(4.0)}, name="ckpt-00000009")
    (tmp_path / "runs" / "mine" / "notes").mkdir()
    (tmp_path / "runs" / "mine" / "notes" / "data.txt").write_text("keep me")
    for path, why in [(outside, "it lies outside its run's folder"),
                      (tmp_path / "runs" / "mine" / "notes",
                       "it is not a labkit checkpoint directory")]:
        ck = fresh_store.add_checkpoint(rid, 9, 1, path, 100, {})
        code, body = await api("DELETE", f"runs/{rid}/checkpoints/{ck}")
        assert code == 200 and body["files_removed"] is False and body["kept"] == why, body
        assert path.is_dir() and not secrets_in(json.dumps(body), tmp_path)
