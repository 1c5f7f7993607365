"""labkit.runs: every training run, its config, metrics, checkpoints and lineage, in SQLite.

::

    import labkit as lk
    lk.runs.list(status="running")          # newest first; "dead" = heartbeat stopped
    run = lk.runs.get(run_id)               # status, config, progress, parent_run, ...
    lk.runs.metrics(run_id, ["loss"], since_iteration=100, max_points=500)
    lk.runs.checkpoints(run_id)             # id, iteration, epoch, path, size, metrics, valid
    child = lk.runs.fork(run_id, lr=0.01)   # a new run from its newest checkpoint, config changed
    child = lk.runs.fork(run_id, 12, {"checkpoint": "x"})   # from checkpoint 12; any key
    lk.resume(child)                        # trains it
    lk.runs.delete_checkpoint(12)           # its files (only inside its run's folder) and record
    lk.runs.delete(run_id)                  # refused while it trains (force=True to insist)
    lk.runs.send(run_id, "pause")           # pause/resume/stop/checkpoint a run training in
                                            # any process; returns the command's record
    lk.runs.rename(run_id, "wide-mlp")      # what people write about a run: its name,
    lk.runs.tag(run_id, add=["baseline"], remove="draft")   # tags (letters, digits, _.:+=@/-)
    lk.runs.note(run_id, "lr too high after epoch 3")        # and a free-text note

The store is ``$LABKIT_HOME/runs.sqlite`` (default ``~/.labkit``); ``use_store(path)`` points
this process elsewhere for a while. Every failure is a ``RunStoreError``; its ``reason`` says
which kind: ``"not_found"``, ``"deleted"`` (a write for a run deleted meanwhile), ``"invalid"``
(a value the store refuses), ``"live"`` (deleting a training run), ``"damaged"`` (the file),
``"failed"`` (locked, disk, newer schema), ``"not_training"`` (a command for a run that no loop
is training now). Configs are JSON objects of at most
``MAX_CONFIG_BYTES``; ``printable(text)`` makes a stored name safe for a terminal.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path

from ..errors import CheckpointError, RunStoreError
from . import listing
from ._db import explain
from .checks import MAX_CONFIG_BYTES, printable, refuse
from .ids import RUN_ID, is_run_id, new_run_id
from .notes import MAX_NAME, MAX_NOTE, MAX_TAG, MAX_TAGS, check_name, check_note
from .store import COMMANDS, DEAD_AFTER, STATUSES, RunStore, default_path

log = logging.getLogger("labkit.runs")

_override: list[Path] = []
_stores: dict[Path, RunStore] = {}


def store() -> RunStore:
    """The RunStore this process uses now."""
    path = (_override[-1] if _override else default_path()).resolve()
    if path not in _stores:
        _stores[path] = RunStore(path)
    return _stores[path]


@contextmanager
def use_store(path):
    """Use the store at ``path`` inside the block (e.g. a temporary one for tests)."""
    _override.append(Path(path))
    try:
        yield store()
    finally:
        _override.pop()


def list(status: str | None = None, name: str | None = None) -> list[dict]:  # noqa: A001
    return store().list(status=status, name=name)


def get(run_id: str) -> dict:
    return store().get(run_id)


def folders() -> list[str]:
    """The folders the store names: each run directory's folder and each sweep's directory
    (``listing.folders``)."""
    s = store()
    try:
        return listing.folders(s._conn())
    except (sqlite3.Error, UnicodeDecodeError) as e:
        raise explain(s.path, e) from e


def metrics(run_id: str, keys=None, since_iteration=None, max_points=None, *,
            since_step=None) -> dict:
    return store().metrics(run_id, keys, since_iteration, max_points, since_step=since_step)


def checkpoints(run_id: str) -> list[dict]:
    return store().checkpoints(run_id)


def _fork_point(s: RunStore, run_id: str, checkpoint):
    """(record or None, path, what is wrong with it or None) of the checkpoint a fork of
    ``run_id`` starts from; each candidate is checked once."""
    from .. import checkpoint as ckpt

    if checkpoint is None:
        for c in reversed(s.checkpoints(run_id)):
            if c["valid"] and Path(c["path"]).is_dir() and ckpt.verify(c["path"]) is None:
                return c, Path(c["path"]), None
        raise refuse(f"fork: run {run_id!r} has no valid checkpoint to start from", "invalid")
    if isinstance(checkpoint, bool) or not isinstance(checkpoint, (int, str, Path)):
        raise TypeError("fork: checkpoint must be a checkpoint id (int), a path or None, got "
                        f"{type(checkpoint).__name__}")
    if isinstance(checkpoint, int):
        rec = s.checkpoint(checkpoint)
        if rec["run_id"] != run_id:
            raise refuse(f"fork: checkpoint {checkpoint} belongs to run {rec['run_id']}, not "
                         f"to {run_id}", "invalid")
        path = Path(rec["path"])
    else:
        path = Path(checkpoint)
        rec = next((c for c in s.checkpoints(run_id) if c["path"] and Path(c["path"]) == path),
                   None)
    if rec is not None and not rec["valid"]:  # NOTE: its child could not resume from it
        return rec, path, (
            "the run store marks it invalid (a resume passed it over: damaged, its state "
            f"refused, or its files gone); fork from another, one whose valid is True in "
            f"lk.runs.checkpoints({run_id!r}), or from None: the newest valid one")
    return rec, path, ckpt.verify(path)


def fork(run_id: str, checkpoint=None, /, changes: dict | None = None, **kw) -> str:
    """A new run that starts from ``checkpoint`` of ``run_id`` (an id from ``checkpoints()``,
    a path, or None for the newest valid one) with its config updated by ``changes`` and the
    keyword arguments (``changes`` can hold any key, also ``"checkpoint"`` or ``"run_id"``).
    The lineage is recorded; ``lk.resume(new_id)`` trains it."""
    if changes is None:
        changes = {}
    elif not isinstance(changes, dict):
        raise TypeError(f"fork: changes must be a dict, got {type(changes).__name__}")
    twice = sorted(set(changes) & set(kw))
    if twice:
        raise TypeError(f"fork: {twice} given both in changes and as keyword arguments")
    changes = {**changes, **kw}
    s = store()
    parent = s.get(run_id)
    rec, path, problem = _fork_point(s, run_id, checkpoint)
    if problem:
        what = (f"checkpoint {rec['id']} (iteration {rec['iteration']}) of run {run_id}"
                if rec else f"checkpoint {path}")
        raise refuse(f"fork: {what} cannot be used: {problem}", "invalid")
    unknown = sorted(set(changes) - set(parent["config"]))
    if unknown and parent["config"]:
        raise refuse(f"fork: {unknown} are not in the config of run {run_id!r} "
                     f"(its keys: {sorted(parent['config'])})", "invalid")
    return s.create_run(name=parent["name"], config={**parent["config"], **changes},
                        source=parent["source"], factory=parent["factory"], parent_run=run_id,
                        parent_checkpoint=str(path),
                        parent_checkpoint_id=rec["id"] if rec else None)


def _kept(s: RunStore, rec: dict, inside=None) -> str | None:
    """None if the files of checkpoint ``rec`` are surely its run's to delete, else why they
    stay (no path in it: the REST API answers with it). The checkpoint's real directory must
    lie inside the real folder of its run (or of ``inside``: the folder a loop was told to
    write its checkpoints to) and not be a link itself; its manifest, if readable, must not
    name another run; and where either folder is a link (what it points to may be another
    run's), the manifest must name this run."""
    from .. import checkpoint as ckpt

    path = Path(rec["path"])
    try:
        run_folder = s.get(rec["run_id"]).get("directory")
    except RunStoreError:
        return "its run no longer exists"
    folder = inside if inside is not None else run_folder
    if not folder:
        return "its run has no folder"
    linked = any(Path(f).is_symlink() for f in (folder, run_folder) if f)
    if path.is_symlink():
        return "it is a symbolic link"
    try:
        if Path(folder).resolve() not in path.resolve().parents:
            return "it lies outside its run's folder"
    except (OSError, RuntimeError) as e:
        return f"its path cannot be resolved ({getattr(e, 'strerror', None) or e})"
    try:
        owner = ckpt.manifest(path).get("run_id") if path.is_dir() else None
    except CheckpointError:
        owner = None  # NOTE: damaged: checkpoint.remove decides whether it is a checkpoint
    except OSError as e:
        return f"its manifest cannot be read ({e.strerror or type(e).__name__})"
    if owner is not None and owner != rec["run_id"]:
        return f"it was written by {('run ' + owner) if is_run_id(owner) else 'another run'}"
    if linked and owner != rec["run_id"]:
        # NOTE: a run folder linked to scratch storage prunes the checkpoints its manifests
        # say are its own; through a link, one that does not say may be another run's
        return "its run's folder is a symbolic link and its manifest does not name the run"
    return None


def delete_checkpoint(checkpoint_id: int, *, run_id: str | None = None, files: bool = True,
                      inside=None, in_store: RunStore | None = None, explain: bool = False,
                      unless_forked: bool = False, force: bool = False):
    """Delete checkpoint ``checkpoint_id``: its directory, only if it is surely its run's,
    then its record. The files stay (a warning is logged) when its real directory lies
    outside its run's real folder (or outside ``inside``: the folder a loop was told to write
    its checkpoints to), when it is a link or not a checkpoint directory, when its manifest
    names another run, or when its run's folder is a symbolic link (to another run's folder,
    it may be) and its manifest does not name the run. With ``run_id``, a checkpoint of
    another run is refused. Returns whether files were removed; with ``explain``,
    ``(removed, kept)``: ``kept`` says why files that are there stayed (None if none did).
    The one way labkit deletes a checkpoint (the loop's pruning, the REST API and the
    CheckpointBrowser all call it). ``in_store``: the store the record is in (default: the
    one this process uses now). ``unless_forked`` (a loop's pruning): nothing is deleted while
    a run forked from the checkpoint has not finished and has no valid checkpoint of its own
    (it starts from this one); then None (``(None, why)`` with ``explain``). Asked by a user
    (the REST API, the CheckpointBrowser), such a checkpoint is refused (``RunStoreError``,
    reason ``"live"``: the fork could never start) unless ``force``."""
    s = in_store if in_store is not None else store()
    rec = s.checkpoint(checkpoint_id, listed=True)
    if run_id is not None and rec["run_id"] != run_id:
        raise refuse(f"run {run_id} has no checkpoint {checkpoint_id}", "not_found")
    removed, why = False, None
    if (unless_forked or not force) and "damaged" not in rec:
        # NOTE: the look for a fork and the record's removal are one transaction, and a fork
        # is made only while the record exists (RunStore.create_run): of a fork and a prune
        # at once, the fork keeps the checkpoint, or is refused. The files go after the record
        fork = s.remove_checkpoint_unless_forked(rec["id"], rec["path"])
        if fork is not None:
            why = f"run {fork} was forked from it and has no checkpoint of its own yet"
            if not unless_forked:
                raise refuse(f"checkpoint {checkpoint_id} of run {rec['run_id']} is where run "
                             f"{fork} starts: {why}, so it could never start without it. "
                             f"Delete run {fork} first, or delete the checkpoint with "
                             "force=True", "live")
            return (None, why) if explain else None
        path = Path(rec["path"])
        if files and (path.exists() or path.is_symlink()):
            removed, why = _remove_files(s, rec, inside)
        return (removed, why) if explain else removed
    if "damaged" in rec:  # NOTE: its path is not believed: only the record goes
        path = rec["path"]
        if files and path and os.path.lexists(path):
            why = f"its record is damaged ({rec['damaged'][:200]})"
            log.warning("labkit: kept the files of checkpoint %s at %s: %s", checkpoint_id,
                        path, why)
        s.remove_checkpoint(checkpoint_id)
        return (removed, why) if explain else removed
    path = Path(rec["path"])
    if files and (path.exists() or path.is_symlink()):
        removed, why = _remove_files(s, rec, inside)
    s.remove_checkpoint(rec["id"])
    return (removed, why) if explain else removed


def _remove_files(s: RunStore, rec: dict, inside) -> tuple:
    """``(removed, why kept)`` for the files of checkpoint ``rec`` (see ``_kept``)."""
    from .. import checkpoint as ckpt

    removed, why = False, _kept(s, rec, inside)
    if why is None:
        try:
            ckpt.remove(Path(rec["path"]))  # refuses what is not a checkpoint directory
            removed = True
        except CheckpointError as e:
            log.warning("labkit: %s", e)
            why = "it is not a labkit checkpoint directory"
    if why is not None:
        log.warning("labkit: kept the files of checkpoint %s at %s: %s", rec["id"],
                    rec["path"], why)
    return removed, why


def _own_folder(run: dict) -> Path | None:
    """The folder ``lk.runs.delete`` removes with ``run``: a real folder named after it;
    another one is kept (a warning)."""
    folder = run.get("directory")
    if not folder:
        return None
    p = Path(folder)
    # NOTE: only a run id names it: a crafted store's run "Documents" in ~/Documents is kept
    if p.is_dir() and not p.is_symlink() and p.name == run["id"] and is_run_id(run["id"]):
        return p
    if p.exists() or p.is_symlink():
        log.warning("labkit: kept %s (not a folder named after run %s)", p, run["id"])
    return None


def _remove(folder: Path, force: bool, attempts: int = 5) -> None:
    """``shutil.rmtree(folder)``; forced, a trainer still writing into it (a checkpoint
    appearing while the tree is walked: 'Directory not empty') is raced a few times."""
    for attempt in range(attempts):
        try:
            shutil.rmtree(folder)
            return
        except OSError as e:
            if not os.path.lexists(folder):
                return  # NOTE: removed meanwhile (by its trainer, or another delete)
            if not force or e.errno not in (errno.ENOTEMPTY, errno.ENOENT) or (
                    attempt == attempts - 1):
                raise
            time.sleep(0.05 * (attempt + 1))


def delete(run_id: str, files: bool = True, force: bool = False) -> None:
    """Delete a run from the store and, with ``files``, its folder (only a real folder named
    after the run). A run that is training is refused (``RunStoreError``, reason ``"live"``)
    unless ``force``: its trainer would then fail at its next write. The folder goes first: if
    it cannot be removed (permissions, a path the filesystem refuses), the run stays in the
    store and the ``RunStoreError`` (reason ``"failed"``) names the folder and the fix."""
    s = store()
    if not files:
        s.delete(run_id, force=force)
        return
    run = s.delete(run_id, force=force, check_only=True)
    folder = run.get("directory")
    try:
        p = _own_folder(run)
        if p is not None:
            _remove(p, force)
    except OSError as e:
        raise refuse(f"delete: the folder of run {run_id}, {folder!r}, cannot be read or removed "
                     f"({e.strerror or type(e).__name__}); the run is kept in the store. Fix "
                     f"the folder (its permissions, its path) and delete it again, or delete "
                     f"only its record with lk.runs.delete({run_id!r}, files=False)",
                     "failed") from e
    s.delete(run_id, force=force)
    if p is not None and force and os.path.lexists(p):
        shutil.rmtree(p, ignore_errors=True)  # NOTE: its trainer, forced off, wrote meanwhile


def listening(run: dict) -> bool:
    """Whether a loop is training ``run`` (a record from ``get``) now and takes commands:
    live (see ``RunStore.is_live``) and inside ``run()``. A sweep's trial takes none (its
    sweep is paused or stopped as a whole)."""
    return (not run.get("sweep_id") and store().is_live(run)
            and bool((run.get("progress") or {}).get("training")))


def send(run_id: str, command: str, wait: float | None = 5.0) -> dict:
    """Ask the loop training ``run_id`` — in this process or any other — to ``command``
    (``"pause"``, ``"resume"``, ``"stop"`` or ``"checkpoint"``) after its current batch. Waits up
    to ``wait`` seconds (None: not at all) for the loop to acknowledge, and returns the
    command's record: ``acked`` (a time, or None if it has not yet), ``result`` (what the loop
    did) and ``iteration``. A run that no loop is training is refused (``RunStoreError``,
    reason ``"not_training"``)."""
    import time

    s = store()
    run = s.get(run_id)
    if run.get("sweep_id") and s.is_live(run):
        raise refuse(f"run {run_id} is a trial of sweep {run['sweep_id']}, whose trials take "
                     f"no commands; pause or stop the sweep instead "
                     f"(lk.sweep.get({run['sweep_id']!r}).stop())", "not_training")
    if not listening(run):
        raise refuse(f"run {run_id} is not training now (status {run['status']}), so nothing "
                     f"would act on {command!r}; continue it with lk.resume({run_id!r})",
                     "not_training")
    cid = s.add_command(run_id, command)
    deadline = None if wait is None else time.monotonic() + float(wait)
    rec = s.command(cid)
    while rec["acked"] is None and deadline is not None and time.monotonic() < deadline:
        time.sleep(0.02)
        rec = s.command(cid)
    return rec


def rename(run_id: str, name: str) -> dict:
    """Give ``run_id`` a new name (1 to ``MAX_NAME`` visible characters); returns the run."""
    return store().annotate(run_id, name=check_name(name))


def tag(run_id: str, add=(), remove=(), *, tags=None) -> list[str]:
    """Add and remove tags of ``run_id`` (a tag or a list of them; ``tags=[...]`` replaces
    them all) in one transaction; returns its tags. A tag is 1 to ``MAX_TAG`` characters: a
    letter or digit, then letters, digits and ``_ . : + = @ / -``; at most ``MAX_TAGS``."""
    return store().annotate(run_id, tags=tags, add_tags=add, remove_tags=remove)["tags"]


def note(run_id: str, text: str) -> dict:
    """Set the free-text note of ``run_id`` (at most ``MAX_NOTE`` characters; ``""`` clears
    it); returns the run."""
    return store().annotate(run_id, note=check_note(text))


def remove_orphans() -> dict:
    """Delete metric and checkpoint rows whose run is gone (left by older labkit); returns
    ``{"metrics": n, "checkpoints": n}``."""
    return store().remove_orphans()


__all__ = ["COMMANDS", "DEAD_AFTER", "MAX_CONFIG_BYTES", "MAX_NAME", "MAX_NOTE", "MAX_TAG",
           "MAX_TAGS", "RUN_ID", "STATUSES", "RunStore", "RunStoreError", "checkpoints",
           "default_path", "delete", "delete_checkpoint", "folders", "fork", "get", "is_run_id",
           "list", "listening", "metrics", "new_run_id", "note", "printable", "remove_orphans",
           "rename", "send", "store", "tag", "use_store"]
