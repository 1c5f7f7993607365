"""labkit.runs: every training run, its config, metrics, checkpoints and lineage, in SQLite.

::

    import labkit as lk
    lk.runs.list(status="running")          # newest first; "dead" = heartbeat stopped
    run = lk.runs.get(run_id)               # status, config, progress, parent_run, ...
    lk.runs.metrics(run_id, ["loss"], since_step=100, max_points=500)
    lk.runs.checkpoints(run_id)             # step, path, size, metrics, valid
    child = lk.runs.fork(run_id, lr=0.01)   # a new run from its newest checkpoint, config changed
    lk.resume(child)                        # trains it

The store is ``$LABKIT_HOME/runs.sqlite`` (default ``~/.labkit``); ``use_store(path)`` points
this process elsewhere for a while.
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path

from .store import DEAD_AFTER, STATUSES, RunStore, RunStoreError, default_path

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


def metrics(run_id: str, keys=None, since_step=None, max_points=None) -> dict:
    return store().metrics(run_id, keys, since_step, max_points)


def checkpoints(run_id: str) -> list[dict]:
    return store().checkpoints(run_id)


def fork(run_id: str, checkpoint=None, **changes) -> str:
    """A new run that starts from ``checkpoint`` of ``run_id`` (an id from ``checkpoints()``, a
    path, or None for the newest valid one) with its config updated by ``changes``. The lineage
    is recorded; ``lk.resume(new_id)`` trains it."""
    from .. import checkpoint as ckpt

    s = store()
    parent = s.get(run_id)
    if checkpoint is None:
        valid = [c for c in s.checkpoints(run_id) if c["valid"] and Path(c["path"]).exists()]
        path = next((Path(c["path"]) for c in reversed(valid)
                     if ckpt.verify(c["path"]) is None), None)
        if path is None:
            raise RunStoreError(f"fork: run {run_id!r} has no valid checkpoint to start from")
    elif isinstance(checkpoint, int):
        path = Path(s.checkpoint(checkpoint)["path"])
    else:
        path = Path(checkpoint)
    problem = ckpt.verify(path)
    if problem:
        raise RunStoreError(f"fork: checkpoint {path} cannot be used: {problem}")
    unknown = sorted(set(changes) - set(parent["config"]))
    if unknown and parent["config"]:
        raise RunStoreError(f"fork: {unknown} are not in the config of run {run_id!r} "
                            f"(its keys: {sorted(parent['config'])})")
    return s.create_run(name=parent["name"], config={**parent["config"], **changes},
                        source=parent["source"], factory=parent["factory"], parent_run=run_id,
                        parent_checkpoint=str(path))


def delete(run_id: str, files: bool = True) -> None:
    """Delete a run from the store and, with ``files``, its checkpoint directory."""
    s = store()
    run = s.get(run_id)
    s.delete(run_id)
    if files and run.get("directory"):
        shutil.rmtree(run["directory"], ignore_errors=True)


__all__ = ["DEAD_AFTER", "STATUSES", "RunStore", "RunStoreError", "checkpoints", "default_path",
           "delete", "fork", "get", "list", "metrics", "store", "use_store"]
