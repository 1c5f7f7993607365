"""Deleting a run with force while its trainer still writes into its folder: a file appearing
while the tree is removed ('Directory not empty') failed the delete (a sweep test caught it
by chance); forced, the removal is tried again. Unforced, the error names the folder."""

import errno
import shutil

import pytest

import labkit as lk
from labkit.errors import RunStoreError


@pytest.fixture
def run_with_folder(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        rid = store.create_run("r")
        folder = tmp_path / "runs" / rid
        (folder / "checkpoints").mkdir(parents=True)
        store.update_run(rid, directory=str(folder))
        yield store, rid, folder


def _racing(monkeypatch, times):
    real, calls = shutil.rmtree, []

    def rmtree(path, *a, **kw):
        calls.append(path)
        if len(calls) <= times and not kw.get("ignore_errors"):
            raise OSError(errno.ENOTEMPTY, "Directory not empty", "checkpoints")
        return real(path, *a, **kw)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    return calls


def test_a_forced_delete_races_a_trainer_writing_into_the_folder(run_with_folder, monkeypatch):
    store, rid, folder = run_with_folder
    calls = _racing(monkeypatch, times=2)
    lk.runs.delete(rid, force=True)
    assert not store.exists(rid) and not folder.exists() and len(calls) >= 3


def test_an_unforced_delete_names_the_folder_and_keeps_the_run(run_with_folder, monkeypatch):
    store, rid, folder = run_with_folder
    _racing(monkeypatch, times=1)
    with pytest.raises(RunStoreError, match="cannot be read or removed"):
        lk.runs.delete(rid)
    assert store.exists(rid) and folder.exists()


def test_a_folder_removed_meanwhile_is_no_error(run_with_folder, monkeypatch):
    store, rid, folder = run_with_folder
    real = shutil.rmtree

    def gone_meanwhile(path, *a, **kw):
        if not kw.get("ignore_errors"):
            real(path)  # another delete removed it first
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(shutil, "rmtree", gone_meanwhile)
    lk.runs.delete(rid, force=True)
    assert not store.exists(rid) and not folder.exists()
