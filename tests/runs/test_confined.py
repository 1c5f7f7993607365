"""What ``lk.runs.delete_checkpoint``, ``delete`` and ``fork`` do with the files a run's records
name, for every caller (the REST API, the CheckpointBrowser, the loop's pruning): a
checkpoint's files go only when they are surely its run's (not through a run folder that is a
link, not a checkpoint another run wrote); a run's folder that cannot be removed keeps the run
in the store; a checkpoint the store marks invalid is not forked from."""

import os
import shutil

import numpy as np
import pytest

import labkit as lk
from labkit import checkpoint as ckpt
from labkit.runs import RunStoreError

from .test_store import live_run, run_with_checkpoints


@pytest.fixture
def home_store(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        yield store


def _owner_and_linked(store, tmp_path, writer=False):
    """A run with a checkpoint in its folder, and a run whose folder is a link to that folder
    with a record of the same checkpoint through the link."""
    owner = store.create_run("owner")
    folder = tmp_path / "runs" / owner
    store.update_run(owner, directory=str(folder), status="finished")
    files = ckpt.save(folder / "checkpoints", {"w": np.arange(4.0)}, name="ckpt-00000004",
                      run_id=owner if writer else None)
    store.add_checkpoint(owner, 4, 1, files, 100)
    linked = store.create_run("linked")
    link = tmp_path / "runs" / linked
    os.symlink(folder, link)
    store.update_run(linked, directory=str(link), status="finished")
    ck = store.add_checkpoint(linked, 4, 1, link / "checkpoints" / files.name, 100)
    return owner, linked, ck, files


@pytest.mark.parametrize("writer", [False, True])
def test_a_checkpoint_through_a_linked_run_folder_keeps_its_files(home_store, tmp_path,
                                                                  writer, caplog):
    owner, linked, ck, files = _owner_and_linked(home_store, tmp_path, writer)
    removed, kept = lk.runs.delete_checkpoint(ck, run_id=linked, explain=True)
    assert removed is False and ckpt.verify(files) is None  # the other run's is whole
    assert kept == (f"it was written by run {owner}" if writer else
                    "its run's folder is a symbolic link and its manifest does not name the run")
    assert kept in caplog.text and str(files.name) in caplog.text
    assert lk.runs.checkpoints(linked) == [] and len(lk.runs.checkpoints(owner)) == 1


def test_a_run_folder_linked_to_scratch_prunes_the_checkpoints_it_wrote(home_store, tmp_path):
    """A run folder that is a link to a folder of its own elsewhere (scratch storage): the
    checkpoints whose manifests name the run are its own, and go (keep_last works)."""
    run = home_store.create_run("scratch")
    target = tmp_path / "scratch" / run
    link = tmp_path / "runs" / run
    link.parent.mkdir(parents=True)
    target.mkdir(parents=True)
    os.symlink(target, link, target_is_directory=True)
    home_store.update_run(run, directory=str(link), status="finished")
    files = ckpt.save(link / "checkpoints", {"w": np.arange(4.0)}, name="ckpt-00000004",
                      run_id=run)
    ck = home_store.add_checkpoint(run, 4, 1, files, 100)
    assert lk.runs.delete_checkpoint(ck, run_id=run, inside=link / "checkpoints") is True
    assert not files.exists() and not (target / "checkpoints" / files.name).exists()


def test_the_loops_pruning_through_a_linked_run_folder_keeps_the_files(home_store,
                                                                       tmp_path):
    """The loop passes ``inside`` (the folder it writes its checkpoints to)."""
    _, linked, ck, files = _owner_and_linked(home_store, tmp_path)
    inside = tmp_path / "runs" / linked / "checkpoints"
    assert lk.runs.delete_checkpoint(ck, run_id=linked, inside=inside) is False
    assert ckpt.verify(files) is None


def test_a_checkpoint_another_run_wrote_keeps_its_files(home_store, tmp_path):
    rid, folder, _ = run_with_checkpoints(home_store, tmp_path, n=0)
    other = home_store.create_run("other")
    theirs = ckpt.save(folder / "checkpoints", {"w": np.arange(4.0)}, name="ckpt-00000004",
                       run_id=other)
    ck = home_store.add_checkpoint(rid, 4, 1, theirs, 100)
    assert lk.runs.delete_checkpoint(ck, explain=True) == (False,
                                                           f"it was written by run {other}")
    assert ckpt.verify(theirs) is None and lk.runs.checkpoints(rid) == []
    # its own (or one written before manifests named their run): deleted, as before
    for writer in (rid, None):
        mine = ckpt.save(folder / "checkpoints", {"w": np.arange(4.0)}, name="ckpt-00000008",
                         run_id=writer)
        ck = home_store.add_checkpoint(rid, 8, 1, mine, 100)
        assert lk.runs.delete_checkpoint(ck, explain=True) == (True, None)
        assert not mine.exists()
    # files already gone: nothing kept, nothing removed
    ck = home_store.add_checkpoint(rid, 9, 1, folder / "checkpoints" / "gone", 100)
    assert lk.runs.delete_checkpoint(ck, explain=True) == (False, None)


def test_a_run_whose_folder_cannot_be_removed_stays_in_the_store(home_store, tmp_path,
                                                                 monkeypatch):
    # a path the filesystem refuses (a part over 255 bytes: a damaged store)
    rid = home_store.create_run("long")
    home_store.update_run(rid, directory=str(tmp_path / ("x" * 300)), status="finished")
    with pytest.raises(RunStoreError, match="File name too long") as e:
        lk.runs.delete(rid)
    assert e.value.reason == "failed" and "x" * 300 in str(e.value)
    assert f"lk.runs.delete({rid!r}, files=False)" in str(e.value)
    assert home_store.exists(rid)
    lk.runs.delete(rid, files=False)  # the fix it names
    assert not home_store.exists(rid)
    # a folder whose files cannot be removed (a permission error)
    rid, folder, (ck,) = run_with_checkpoints(home_store, tmp_path, n=1)

    def refused(path, *a, **k):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(shutil, "rmtree", refused)
    with pytest.raises(RunStoreError, match="Permission denied") as e:
        lk.runs.delete(rid)
    assert str(folder) in str(e.value) and home_store.exists(rid)
    assert [c["id"] for c in lk.runs.checkpoints(rid)] == [ck]
    monkeypatch.undo()
    lk.runs.delete(rid)
    assert not folder.exists() and not home_store.exists(rid)


def test_a_live_run_keeps_its_folder_when_its_deletion_is_refused(home_store,
                                                                  tmp_path):
    rid = live_run(home_store)
    folder = tmp_path / "runs" / rid
    folder.mkdir(parents=True)
    home_store.update_run(rid, directory=str(folder))
    with pytest.raises(RunStoreError) as e:
        lk.runs.delete(rid)
    assert e.value.reason == "live" and folder.is_dir() and home_store.exists(rid)
    lk.runs.delete(rid, force=True)
    assert not folder.exists() and not home_store.exists(rid)


def test_a_checkpoint_marked_invalid_is_not_forked_from(home_store, tmp_path):
    rid, _, (first, second) = run_with_checkpoints(home_store, tmp_path)
    home_store.set_checkpoint(second, valid=0)  # as a resume that passed it over marks it
    before = [r["id"] for r in lk.runs.list()]
    path = home_store.checkpoint(second)["path"]
    for which in (second, path):
        with pytest.raises(RunStoreError, match="marks it invalid") as e:
            lk.runs.fork(rid, which)
        assert e.value.reason == "invalid"
        assert f"checkpoint {second} (iteration 1) of run {rid}" in str(e.value)
        assert f"lk.runs.checkpoints({rid!r})" in str(e.value)
    assert [r["id"] for r in lk.runs.list()] == before
    # the newest valid one, or the other by its id, still forks
    assert lk.runs.get(lk.runs.fork(rid))["parent_checkpoint_id"] == first
    assert lk.runs.get(lk.runs.fork(rid, first))["parent_checkpoint_id"] == first
