"""Fault injection for checkpoint writers: a child process SIGKILLs itself at chosen instants
inside ``save`` and ``remove`` (after N bytes, before and between the renames, while deleting);
afterwards the directory must hold only complete checkpoints, ``latest`` must return the newest
complete one, and the next ``save`` must clean up what the killed writer left — but never what a
live writer is still writing, and ``remove`` never deletes anything but a checkpoint.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

from labkit import checkpoint as C
from labkit.errors import CheckpointError

from . import damage as D

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")]
SEED = 14


def hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def dying_writer(limit: int):
    """A stand-in for ``C._files.write_file`` that writes only the first ``limit`` bytes of the save
    (across its files) and then SIGKILLs the process."""
    real, written = C._files.write_file, [0]

    def write(path, pieces):
        data = b"".join(bytes(memoryview(p).cast("B")) for p in pieces)
        if written[0] + len(data) > limit:
            with open(path, "wb") as f:
                f.write(data[:limit - written[0]])
            D.die()
        written[0] += len(data)
        return real(path, [data])

    return write


def dying_at(module, name: str, call: int):
    """Make ``module.name`` SIGKILL the process at its ``call``-th call (1-based)."""
    real, calls = getattr(module, name), [0]

    def fn(*args, **kwargs):
        calls[0] += 1
        if calls[0] == call:
            D.die()
        return real(*args, **kwargs)

    setattr(module, name, fn)


def kill_points(total: int, rng):
    """(label, how to die, whether the new checkpoint is complete afterwards, overwrite?)"""
    # NOTE: total - 40 is inside the manifest, whatever the length of its time stamp
    for n in sorted(set(int(x) for x in rng.integers(0, total - 40, 14)) | {0, total - 40}):
        yield f"after {n} of {total} bytes", lambda n=n: setattr(C._files, "write_file",
                                                                  dying_writer(n)), False, False
    yield "before the rename", lambda: dying_at(os, "replace", 1), False, False
    yield "after the rename, before the fsync", \
        lambda: dying_at(C._directory, "fsync_dir", 2), True, False
    yield "overwrite: before moving the old one away", lambda: dying_at(os, "replace", 1), \
        False, True
    yield "overwrite: between the renames", lambda: dying_at(os, "replace", 2), False, True
    yield "overwrite: while deleting the old one", \
        lambda: dying_at(C._directory.shutil, "rmtree", 1), True, True


def test_killed_saves_leave_only_complete_checkpoints(tmp_path):
    tally = D.Tally("checkpoint: saves killed at chosen instants")
    state, new = D.sample_state(), D.sample_state(big=300)
    new["opt"]["t"] = 99
    probe = C.save(tmp_path / "probe", new, iteration=2, epoch=1)
    total = sum(f.stat().st_size for f in probe.iterdir())
    for i, (label, arm, complete, overwrite) in enumerate(kill_points(total, np.random.default_rng(
            SEED))):
        d = tmp_path / f"k{i}"
        first = C.save(d, state, iteration=1)
        if overwrite:
            C.save(d, state, iteration=2)

        def child(arm=arm, d=d):
            arm()
            C.save(d, new, iteration=2, epoch=1)

        status = D.run_in_child(child)
        tally.record(label, _after_kill(d, first, status, complete, overwrite, state, new))
    assert tally.held == tally.tried >= 18, tally.report()


def _after_kill(d, first, status, complete, overwrite, state, new) -> str | None:
    if status != -9:
        return f"the child was not killed (status {status})"
    second = d / "ckpt-00000002"
    listed = C.list_checkpoints(d)
    if any(C.verify(c) is not None for c in listed):
        return f"an incomplete checkpoint is visible: {[C.verify(c) for c in listed]}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing visible may be damaged
        best = C.latest(d)
    if complete:
        if best != second or not D.same(C.load(second), new):
            return f"latest gave {best}, expected the new checkpoint"
    elif overwrite and second.exists():
        if best != second or not D.same(C.load(second), state):
            return "the replaced checkpoint changed"
    elif best != (second if overwrite and second.exists() else first):
        return f"latest gave {best}"
    left = hidden(d)
    C.save(d, {"x": np.ones(2)}, iteration=3)  # the next save cleans up
    if hidden(d):
        return f"the next save left {hidden(d)} (was {left})"
    if overwrite and (not second.exists() or not D.same(C.load(second), new if complete
                                                          else state)):
        return "the replaced checkpoint was not restored"
    return None if C.verify(first) is None else "the first checkpoint was damaged"


def test_killed_removes_are_finished_by_the_next_save(tmp_path):
    tally = D.Tally("checkpoint: removes killed at chosen instants")
    sh = C._directory.shutil  # the module whose rmtree the child dies in
    for label, arm, gone in (("before the rename", lambda: dying_at(os, "replace", 1), False),
                             ("while deleting", lambda: dying_at(sh, "rmtree", 1), True)):
        d = tmp_path / label.replace(" ", "-")
        first = C.save(d, {"a": np.ones(3)}, iteration=1)
        second = C.save(d, {"a": np.ones(3)}, iteration=2)

        def child(arm=arm, second=second):
            arm()
            C.remove(second)

        status = D.run_in_child(child)
        problem = None if status == -9 else f"status {status}"
        if (C.latest(d) == first) != gone or C.verify(first) is not None:
            problem = f"latest gave {C.latest(d)}"
        C.save(d, {"a": np.ones(3)}, iteration=3)
        if hidden(d):
            problem = f"left {hidden(d)}"
        tally.record(label, problem)
    assert tally.held == tally.tried == 2, tally.report()


# ---- live writers are never cleaned up ------------------------------------------------------
def test_a_live_writer_in_another_process_is_left_alone(tmp_path):
    """A child blocks in the middle of its save; the parent saves and cleans up into the same
    directory meanwhile; the child then finishes its checkpoint."""
    d = tmp_path / "ck"
    C.save(d, {"a": np.ones(2)}, iteration=1)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()

    def child():
        real = C._files.write_file

        def slow(path, pieces):
            out = real(path, pieces)
            if path.name == "state.json":
                os.write(ready_w, b"1")
                os.read(go_r, 1)
            return out

        C._files.write_file = slow
        C.save(d, {"a": np.full(2, 7.0)}, iteration=2)

    pid_status = {}
    t = threading.Thread(target=lambda: pid_status.update(s=D.run_in_child(child)))
    t.start()
    try:
        assert os.read(ready_r, 1) == b"1"
        (tmp,) = hidden(d)
        C.save(d, {"a": np.zeros(2)}, iteration=3)
        assert C.cleanup(d) == []
        assert hidden(d) == [tmp], "a live writer's temporary directory was removed"
    finally:
        os.write(go_w, b"1")
        t.join(30)
    assert pid_status["s"] == 0
    assert np.array_equal(C.load(d / "ckpt-00000002")["a"], [7.0, 7.0])
    assert hidden(d) == []


def test_a_live_writer_in_another_thread_is_left_alone(tmp_path, monkeypatch):
    d = tmp_path / "ck"
    inside, go = threading.Event(), threading.Event()
    real = C._files.write_file

    def slow(path, pieces):
        out = real(path, pieces)
        if threading.current_thread().name == "writer" and path.name == "state.json":
            inside.set()
            go.wait(30)
        return out

    monkeypatch.setattr(C._files, "write_file", slow)
    t = threading.Thread(target=C.save, args=(d, {"a": np.ones(2)}), kwargs={"iteration": 2},
                         name="writer")
    t.start()
    try:
        assert inside.wait(30)
        (tmp,) = hidden(d)
        C.save(d, {"a": np.zeros(2)}, iteration=1)
        assert hidden(d) == [tmp]
    finally:
        go.set()
        t.join(30)
    assert [p.name for p in C.list_checkpoints(d)] == ["ckpt-00000001", "ckpt-00000002"]
    assert hidden(d) == []


def dead_pid() -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_cleanup_judges_each_leftover_by_its_writer(tmp_path):
    """Removed: a dead writer's leftovers, also of older labkit versions, and one whose pid now
    belongs to a later process. Kept: a live writer's (before it even took its lock), one
    whose lock is held, other hosts' and other programs' entries, links. Put back: a replaced
    checkpoint whose replacement never arrived."""
    d = tmp_path / "ck"
    keep_old = C.save(d, {"a": np.ones(1)}, iteration=1)
    me, start, host = os.getpid(), C._writers.start_time(os.getpid()), C._writers.HOST
    dead = dead_pid()
    names = {
        f".ckpt-00000002.tmp-{dead}-{start}-{host}-0": "removed",
        f".ckpt-00000002.tmp-{me}-{start + 1}-{host}-0": "removed",  # pid reused
        f".ckpt-00000002.deleting-{dead}-1-{host}-0": "removed",
        f".ckpt-00000002.tmp-{dead}-1": "removed",  # the name labkit used before
        f".ckpt-00000003.tmp-{dead}-1": "kept",  # ... but holding what a checkpoint never does
        f".ckpt-00000002.old-{dead}": "removed",  # ckpt-00000002 is absent: put back
        f".ckpt-00000001.old-{dead}-1-{host}-3": "removed",  # ckpt-00000001 is there
        f".ckpt-00000002.tmp-{me}-{start}-{host}-9": "kept",  # alive, lock not yet taken
        f".ckpt-00000002.tmp-{dead}-{start}-{host}-8": "locked",
        f".ckpt-00000002.tmp-{dead}-{start}-0badf00d-0": "kept",  # another host
        ".ckpt-00000002.tmp-x": "kept", ".git": "kept", ".ckpt-2.tmp-12-a": "kept",
    }
    for name in names:
        if ".old-" in name and name.startswith(".ckpt-00000002"):  # a real replaced checkpoint
            os.rename(C.save(tmp_path / "src", {"b": np.ones(1)}, iteration=2), d / name)
        else:
            (d / name).mkdir()
            (d / name / ("notes.txt" if "00000003" in name else "state.json")).write_bytes(b"x")
    link = d / f".ckpt-00000004.tmp-{dead}-{start}-{host}-0"
    link.symlink_to(keep_old)
    lock = C._writers.lock(d / f".ckpt-00000002.tmp-{dead}-{start}-{host}-8")
    try:
        done = C.cleanup(d)
    finally:
        os.close(lock)
    for name, fate in names.items():
        assert (d / name).exists() == (fate in ("kept", "locked")), (name, fate, done)
    assert link.is_symlink() and keep_old.is_dir()
    restored = d / "ckpt-00000002"
    assert np.array_equal(C.load(restored)["b"], [1.0])
    assert any("restored" in x for x in done)
    # the lock is gone now: the next cleanup removes that one too
    C.cleanup(d)
    assert not (d / f".ckpt-00000002.tmp-{dead}-{start}-{host}-8").exists()


def test_remove_deletes_only_checkpoints(tmp_path):
    tally = D.Tally("checkpoint: remove() on what is not a checkpoint")
    d = tmp_path / "ck"
    ck = C.save(d, {"a": np.ones(1)}, iteration=1)
    victims = {}
    victims["user directory"] = tmp_path / "mine"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    victims["empty directory"] = tmp_path / "empty"
    (tmp_path / "empty").mkdir()
    victims["file"] = tmp_path / "file.txt"
    (tmp_path / "file.txt").write_text("keep me")
    victims["link to a checkpoint"] = tmp_path / "link"
    (tmp_path / "link").symlink_to(ck)
    victims["foreign manifest"] = tmp_path / "other"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text('{"format": "npm"}')
    (tmp_path / "other" / "index.js").write_text("keep me")
    victims["run directory"] = d
    for label, path in victims.items():
        try:
            C.remove(path)
            tally.record(label, "removed")
        except CheckpointError as e:
            tally.record(label, None if str(path) in str(e) and os.path.lexists(path)
                         else f"gone, or the error does not name it: {e}")
    assert ck.is_dir() and C.verify(ck) is None
    # what remove() does delete: checkpoints, their remains, leftovers of writers
    damaged = C.save(d, {"a": np.ones(1)}, iteration=2)
    (damaged / "manifest.json").unlink()
    leftover = d / f".ckpt-00000003.tmp-{dead_pid()}-1-{C._writers.HOST}-0"
    leftover.mkdir()
    for label, path in (("checkpoint", ck), ("checkpoint without manifest", damaged),
                        ("leftover", leftover)):
        C.remove(path)
        tally.record(f"remove {label}", None if not path.exists() else "still there")
    assert hidden(d) == [] and list(d.iterdir()) == []
    C.remove(tmp_path / "never-existed")  # nothing to do
    assert tally.held == tally.tried == 9, tally.report()


def test_save_never_replaces_what_is_not_a_checkpoint(tmp_path):
    (tmp_path / "best").mkdir()
    (tmp_path / "best" / "notes.txt").write_text("keep me")
    with pytest.raises(CheckpointError, match="best exists and is not a labkit checkpoint"):
        C.save(tmp_path, {"a": np.ones(1)}, name="best")
    assert (tmp_path / "best" / "notes.txt").read_text() == "keep me"
    assert hidden(tmp_path) == []
    for bad in ("", ".hidden", "a/b", "..", 7):
        with pytest.raises(CheckpointError, match="name"):
            C.save(tmp_path, {"a": np.ones(1)}, name=bad)
    for kwargs, what in (({"iteration": -1}, "iteration"), ({"iteration": 1.5}, "iteration"),
                         ({"epoch": "3"}, "epoch"), ({"run_id": 3}, "run_id")):
        with pytest.raises(CheckpointError, match=what):
            C.save(tmp_path, {"a": np.ones(1)}, **kwargs)
    with pytest.raises(CheckpointError, match="holds a dict"):
        C.save(tmp_path, [np.ones(1)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]


# ---- concurrent writers, readers and deleters -----------------------------------------------
def _writer(d: Path, who: int, out: Path):
    for k in range(12):
        C.save(d, {"a": np.full(500, float(who)), "who": who, "k": k}, iteration=k % 3)


def _reader(d: Path, who: int, out: Path):
    # NOTE: at least 40 attempts and one that read a checkpoint (else every attempt can come
    # before the first save; the newest checkpoint stays once the others end; run_in_child's
    # timeout bounds the loop)
    seen = attempts = 0
    while attempts < 40 or not seen:
        attempts += 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a checkpoint removed while it is checked
            p = C.latest(d)
        if p is None:
            continue
        try:
            s = C.load(p)
        except CheckpointError:
            continue  # removed or replaced between latest() and load(): said so, not wrong
        if not (s["a"] == s["who"]).all():
            raise AssertionError(f"{p}: tensors of writer {s['a'][0]}, state of {s['who']}")
        seen += 1
    out.write_text(str(seen))


def _deleter(d: Path, who: int, out: Path):
    for _ in range(30):
        for p in C.list_checkpoints(d)[:-1]:
            C.remove(p)


def test_concurrent_writers_readers_and_deleters(tmp_path):
    """Processes saving the same names, reading the newest and removing older ones at once:
    nobody gets an error but CheckpointError for a checkpoint that went away, no load mixes two
    writers' files, and afterwards everything visible is intact and nothing is left over."""
    tally = D.Tally("checkpoint: concurrent writers, readers, deleters (processes)")
    d = tmp_path / "ck"
    C.save(d, {"a": np.full(500, -1.0), "who": -1, "k": 0}, iteration=0)  # read from the start
    roles = [_writer] * 3 + [_reader] * 2 + [_deleter]
    threads, status = [], {}
    for i, role in enumerate(roles):
        out = tmp_path / f"out{i}"

        def run(i=i, role=role, out=out):
            status[i] = D.run_in_child(lambda: role(d, i, out), timeout=100)

        threads.append(threading.Thread(target=run))
    for t in threads:
        t.start()
    for t in threads:
        t.join(110)
    for i, role in enumerate(roles):
        tally.record(f"{role.__name__} {i}", None if status.get(i) == 0 else
                     f"exit status {status.get(i)}")
    listed = C.list_checkpoints(d)
    tally.record("all visible intact", None if listed and all(C.verify(p) is None
                                                              for p in listed) else "damaged")
    C.save(d, {"a": np.ones(1)}, iteration=7)
    tally.record("nothing left over", None if hidden(d) == [] else str(hidden(d)))
    assert tally.held == tally.tried, tally.report()
    assert sum(int((tmp_path / f"out{i}").read_text()) for i in (3, 4)) > 0  # reads happened


def test_a_writer_that_loses_the_rename_race_replaces_the_winner(tmp_path, monkeypatch):
    """Another writer's checkpoint of the same name appears just before our rename: the save
    moves it aside and installs its own, as if it had come a moment later."""
    d = tmp_path / "ck"
    real = os.replace
    raced = []

    def replace(src, dst):
        if ".tmp-" in str(src) and not raced and Path(dst).parent == d:
            raced.append(dst)
            other = C.save(tmp_path / "other", {"a": np.zeros(2)}, iteration=5)
            real(other, dst)  # the other writer wins the race to the name
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    path = C.save(d, {"a": np.ones(2)}, iteration=5)
    monkeypatch.undo()
    assert raced == [path]
    assert np.array_equal(C.load(path)["a"], [1.0, 1.0])
    assert hidden(d) == []


def test_a_checkpoint_moved_aside_while_a_save_looks_at_it(tmp_path, monkeypatch):
    """Another writer of the same name moves the existing checkpoint aside (or a deleter
    removes it) just as a save checks what is there: the save looks again and installs, where
    it said "exists and is not a labkit checkpoint" (a writer failed this way in the
    concurrency test about one run in twenty)."""
    from labkit.checkpoint import _directory

    d = tmp_path / "ck"
    C.save(d, {"a": np.ones(3)}, iteration=1)
    real = _directory.is_checkpoint_dir
    moved = []

    def racing(path):
        if not moved and path.name == "ckpt-00000001":
            moved.append(path.with_name(".elsewhere"))
            os.replace(path, moved[0])  # NOTE: another writer's rename, between the two looks
            return False
        return real(path)
    monkeypatch.setattr(_directory, "is_checkpoint_dir", racing)
    p = C.save(d, {"a": np.full(3, 2.0)}, iteration=1)
    monkeypatch.setattr(_directory, "is_checkpoint_dir", real)
    assert moved and (C.load(p)["a"] == 2).all()
    not_ours = d / "ckpt-00000002"
    not_ours.mkdir()
    (not_ours / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="exists and is not a labkit checkpoint"):
        C.save(d, {"a": np.ones(3)}, iteration=2)
    assert (not_ours / "notes.txt").read_text() == "mine"


def test_a_checkpoint_removed_by_another_process_while_remove_looks_at_it(tmp_path,
                                                                           monkeypatch):
    """remove() of a checkpoint that another process moves away as it is checked does
    nothing, as for one already gone; a directory that stays and is not ours is refused."""
    from labkit.checkpoint import _directory

    d = tmp_path / "ck"
    p = C.save(d, {"a": np.ones(3)}, iteration=1)
    real = _directory.is_checkpoint_dir

    def racing(path):
        os.replace(path, path.with_name(".taken"))
        return False
    monkeypatch.setattr(_directory, "is_checkpoint_dir", racing)
    C.remove(p)
    monkeypatch.setattr(_directory, "is_checkpoint_dir", real)
    assert (d / ".taken" / "manifest.json").exists()
    mine = d / "ckpt-00000009"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="not a labkit checkpoint directory"):
        C.remove(mine)
    assert (mine / "notes.txt").read_text() == "mine"
