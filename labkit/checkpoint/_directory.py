"""Saving, loading, verifying, listing and removing checkpoint directories."""

from __future__ import annotations

import errno
import itertools
import json
import operator
import os
import shutil
import stat
import time
import warnings
from pathlib import Path

from .._fs import fsync_dir
from ..errors import CheckpointError
from . import _files, _writers
from ._common import FILES, FORMAT, INT64, MANIFEST, MANIFEST_LIMIT, VERSION, brief, read_json
from ._files import Dir
from ._manifest import fields_crc32, json_metrics, manifest, manifest_of
from ._state import join_state, split_state
from ._tensors import tensors_bytes, tensors_from_bytes


def _count(v, what: str) -> int:
    try:
        v = operator.index(v)
    except TypeError:
        raise CheckpointError(f"save: {what} is {brief(v)}, expected an integer") from None
    if not 0 <= v < INT64:
        raise CheckpointError(f"save: {what} is {v}, expected an integer >= 0")
    return v


def save(directory, state: dict, *, iteration: int | None = None, epoch: int = 0,
         metrics: dict | None = None, run_id: str | None = None, name: str | None = None,
         step: int | None = None) -> Path:
    """Write ``state`` (nested dicts/lists of arrays and JSON values) as a new checkpoint in
    ``directory``; returns its path, ``directory/ckpt-<iteration>`` unless ``name`` is given.
    (``step=`` is the older name of ``iteration=``.)

    A checkpoint of the same name is replaced (atomically). What writers killed earlier left in
    ``directory`` is cleaned up first (see ``cleanup``).
    """
    from .. import __version__

    if step is not None:
        warnings.warn("checkpoint.save(step=) is now save(iteration=)", DeprecationWarning,
                      stacklevel=2)
        if iteration is not None:
            raise CheckpointError("save: give iteration= (step= is its older name), not both")
        iteration = step
    iteration = _count(0 if iteration is None else iteration, "iteration")
    epoch = _count(epoch, "epoch")
    if not isinstance(state, dict):
        raise CheckpointError(f"save: the state is a {type(state).__name__}; a checkpoint holds "
                              "a dict")
    if run_id is not None and not isinstance(run_id, str):
        raise CheckpointError(f"save: run_id is {brief(run_id)}, expected a string or None")
    name = f"ckpt-{iteration:08d}" if name is None else name
    if not isinstance(name, str) or not name or name.startswith(".") or "/" in name or \
            os.sep in name or "\0" in name:
        raise CheckpointError(f"save: name {brief(name)} is not a plain directory name (not "
                              "empty, no '/' or NUL, not starting with '.')")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _writers.cleanup(directory)
    tree, tensors = split_state(state)
    final = directory / name
    tmp = directory / _writers.temp_name(name, "tmp")
    tmp.mkdir()
    lock = _writers.lock(tmp)
    olds: list[Path] = []
    try:
        files = {}
        files["tensors.safetensors"] = _files.write_file(tmp / "tensors.safetensors",
                                                   tensors_bytes(tensors))
        files["state.json"] = _files.write_file(tmp / "state.json", [json.dumps(tree).encode()])
        m = {"format": FORMAT, "version": VERSION, "labkit": __version__,
             "created": time.time(), "iteration": iteration, "epoch": epoch, "run_id": run_id,
             "metrics": json_metrics(metrics or {}),
             "files": {k: {"size": s, "crc32": c} for k, (s, c) in files.items()}}
        # NOTE: sealed as it will be read back, so float and key spellings cannot differ
        m["fields_crc32"] = fields_crc32(json.loads(json.dumps(m)))
        _files.write_file(tmp / MANIFEST, [json.dumps(m, indent=1).encode()])
        fsync_dir(tmp)
        _install(tmp, final, olds)
        fsync_dir(directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if olds and not os.path.lexists(final):
            os.replace(olds[-1], final)  # the replaced checkpoint stays
            olds.pop()
        raise
    finally:
        if lock is not None:
            os.close(lock)
        for old in olds:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _install(tmp: Path, final: Path, olds: list) -> None:
    """Rename ``tmp`` to ``final``, moving a checkpoint already there aside (into ``olds``)."""
    for attempt in itertools.count():
        if os.path.lexists(final):
            seen = _identity(final)
            if not is_checkpoint_dir(final):
                if attempt < 16 and _identity(final) != seen:
                    continue  # NOTE: moved aside or replaced by another writer as it was read
                raise CheckpointError(f"save: {final} exists and is not a labkit checkpoint; "
                                      "refusing to replace it (choose another name)")
            old = final.with_name(_writers.temp_name(final.name, "old"))
            try:
                os.replace(final, old)
                olds.append(old)
            except FileNotFoundError:
                pass  # another writer moved it first
        try:
            os.replace(tmp, final)
            return
        except OSError as e:
            # NOTE: another writer of the same name got its rename in between: replace it too
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST) or attempt >= 16:
                raise


def _identity(path):
    """(device, inode) of ``path``, or None when nothing is there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _read(path):
    """(manifest, tensors, JSON tree) of the checkpoint at ``path``, every file checked."""
    with Dir(path) as d:
        m = manifest_of(d)
        blobs = {name: d.read(name, m["files"][name]["size"], m["files"][name]["crc32"])
                 for name in FILES}
    tensors = tensors_from_bytes(blobs[FILES[0]], os.path.join(d.path, FILES[0]))
    tree = read_json(blobs[FILES[1]], os.path.join(d.path, FILES[1]), strict=False)
    return m, tensors, tree


def load(path) -> dict:
    """The state saved at ``path``, after checking every file against the manifest.

    Raises
    ------
    CheckpointError
        for anything missing, damaged, crafted or unreadable, naming the file and the field.
    """
    _, tensors, tree = _read(path)
    # NOTE: the manifest's iteration and epoch are not compared with a loop state's status:
    # lk.checkpoint.save(dir, loop.state_dict(), iteration=...) leaves epoch 0 (and without
    # iteration=, both 0), and such a checkpoint must load (a review found the comparison
    # refusing them, and latest() skipping them)
    return join_state(tree, tensors, os.path.join(path, FILES[1]))


def verify(path) -> str | None:
    """None if the checkpoint at ``path`` is complete and intact (it would load), else what is
    wrong."""
    try:
        load(path)
    except CheckpointError as e:
        return str(e)
    return None


# ---- directories of checkpoints -------------------------------------------------------------
def _scan(directory):
    """(checkpoint directories oldest first, [(path, why)] of entries refused outright)."""
    directory = Path(directory)
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    except OSError as e:
        return [], [(directory, f"cannot be listed ({e.strerror or e})")]
    found, refused = [], []
    for e in entries:
        if e.name.startswith("."):  # temporary, replaced or deleting: never a checkpoint
            continue
        p = Path(e.path)
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            refused.append((p, "a symbolic link; labkit does not follow links to checkpoints"))
            continue
        if not stat.S_ISDIR(st.st_mode):
            continue
        try:
            it = manifest(p)["iteration"]
        except CheckpointError:  # unreadable: order by the name, so latest() reports it
            tail = e.name.rsplit("-", 1)[-1]
            # NOTE: ASCII digits only: str.isdigit() takes "²", which int() refuses
            it = int(tail) if tail.isascii() and tail.isdigit() and len(tail) < 19 else -1
        found.append((it, st.st_mtime_ns, e.name, p))
    return [p for *_, p in sorted(found)], refused


def list_checkpoints(directory) -> list[Path]:
    """The checkpoint directories in ``directory``, oldest iteration first (unchecked: damaged ones
    are listed too, ordered by their names). Hidden entries (what writers leave while they
    work) and symbolic links are not listed. Never raises for what it finds."""
    return _scan(directory)[0]


def load_latest(directory, *, warn: bool = True, accept=None):
    """``(path, state, skipped)``: the newest checkpoint in ``directory`` that loads, its state
    (read and checked once), and the newer ones skipped as damaged (each with a warning);
    ``(None, None, skipped)`` if none loads. Never raises for what it finds.

    ``accept(path, state)``, if given, is the caller's own check of a state that loaded (a
    loop's checks of its counters): a ``CheckpointError`` it raises skips that checkpoint as
    a damaged one is skipped; ``False`` passes it over as not the caller's (another run's: not
    in ``skipped``, no warning); anything else it raises propagates."""
    found, refused = _scan(directory)
    if warn:
        for p, why in refused:
            warnings.warn(f"skipping {p}: {why}", stacklevel=2)
    skipped = []
    for p in reversed(found):
        try:
            state = load(p)
            if accept is not None and accept(p, state) is False:
                continue
            return p, state, skipped
        except CheckpointError as e:
            skipped.append(p)
            if warn:
                warnings.warn(f"skipping checkpoint {p}: {e}", stacklevel=2)
    return None, None, skipped


def latest(directory, *, warn: bool = True) -> Path | None:
    """The newest *valid* checkpoint in ``directory`` (None if there is none); corrupted,
    incomplete or crafted ones are reported with a warning and skipped. Never raises for what
    it finds."""
    found, refused = _scan(directory)
    if warn:
        for p, why in refused:
            warnings.warn(f"skipping {p}: {why}", stacklevel=2)
    for p in reversed(found):
        problem = verify(p)
        if problem is None:
            return p
        if warn:
            warnings.warn(f"skipping checkpoint {p}: {problem}", stacklevel=2)
    return None


def is_checkpoint_dir(path: Path) -> bool:
    """Whether ``path`` is a real directory that labkit wrote: a labkit temporary directory,
    one whose manifest.json says it is a labkit checkpoint, or the remains of a checkpoint
    (nothing but checkpoint files)."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
        if _writers.TEMP.match(path.name) or _writers.LEGACY_TEMP.match(path.name):
            return True
        names = os.listdir(path)
        if names and set(names) <= {MANIFEST, *FILES}:
            return True
        if MANIFEST in names:
            with Dir(path) as d:
                m = read_json(d.read(MANIFEST, limit=MANIFEST_LIMIT), MANIFEST)
            return isinstance(m, dict) and m.get("format") == FORMAT
    except (OSError, CheckpointError):
        pass
    return False


def remove(path) -> None:
    """Delete the checkpoint directory ``path`` (renamed away first, so a crash leaves no
    half-deleted checkpoint that looks valid). Nothing happens if it does not exist.

    Raises
    ------
    CheckpointError
        if ``path`` is not a checkpoint directory (a link, a file, or a directory without a
        labkit manifest that holds more than checkpoint files): ``remove`` deletes nothing else.
    """
    path = Path(path)
    if not os.path.lexists(path):
        return
    if path.is_symlink():
        raise CheckpointError(f"remove: {path} is a symbolic link; remove() deletes checkpoint "
                              "directories only, never a link or what it points to")
    seen = _identity(path)
    if not is_checkpoint_dir(path):
        if _identity(path) != seen:
            return  # NOTE: moved aside or removed by another process as it was read
        raise CheckpointError(f"remove: {path} is not a labkit checkpoint directory (a link, a "
                              "file, or a directory without a labkit manifest.json); refusing "
                              "to delete it")
    gone = path.with_name(_writers.temp_name(path.name, "deleting"))
    try:
        os.replace(path, gone)
    except FileNotFoundError:
        return  # NOTE: another process removed it first
    shutil.rmtree(gone, ignore_errors=True)


