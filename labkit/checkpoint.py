"""Checkpoints: a directory of safetensors and JSON, written atomically, loaded without code.

A checkpoint directory holds

- ``tensors.safetensors`` — every array of the state, in the safetensors format (an 8-byte
  header length, a JSON header of dtypes, shapes and offsets, then the raw little-endian bytes);
  any safetensors reader can open it;
- ``state.json`` — everything else: the nested state with each array replaced by
  ``{"__tensor__": key}``;
- ``manifest.json`` — written last: the format name and version, the step, epoch and metrics,
  and each file's size and CRC-32.

``save`` writes into a hidden temporary directory, fsyncs every file, renames the directory into
place and fsyncs its parent, so a process killed at any instant leaves either the new checkpoint
or none — never half of one — and the previous checkpoints untouched. ``load`` checks the sizes
and checksums before returning anything and parses only JSON and raw bytes (no pickle, no code).

Examples
--------
>>> import numpy as np, tempfile
>>> from labkit import checkpoint
>>> root = tempfile.mkdtemp()
>>> path = checkpoint.save(root, {"w": np.arange(3.0), "step": 7, "note": "hi"}, step=7)
>>> path.name
'ckpt-00000007'
>>> state = checkpoint.load(checkpoint.latest(root))
>>> state["w"], state["step"], state["note"]
(array([0., 1., 2.]), 7, 'hi')
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import struct
import threading
import time
import warnings
import zlib
from pathlib import Path

import numpy as np

from .errors import CheckpointError

FORMAT = "labkit-checkpoint"
VERSION = 1
_CHUNK = 8 << 20

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
           "I32": np.int32, "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32,
           "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_}
_CODES = {np.dtype(v): k for k, v in _DTYPES.items()}


# ---- files ----------------------------------------------------------------------------------
class _Crc:
    """CRC-32 of a sequence of buffers, computed on a helper thread (zlib releases the GIL), so
    checksumming overlaps the disk I/O instead of adding to it."""

    def __init__(self):
        self.value = 0
        self._jobs: list = []
        self._cv = threading.Condition()
        self._done = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="labkit-crc")
        self._thread.start()

    def _run(self):
        while True:
            with self._cv:
                while not self._jobs and not self._done:
                    self._cv.wait()
                if not self._jobs:
                    return
                buf = self._jobs.pop(0)
            self.value = zlib.crc32(buf, self.value)

    def add(self, buf):
        with self._cv:
            self._jobs.append(buf)
            self._cv.notify()

    def result(self) -> int:
        with self._cv:
            self._done = True
            self._cv.notify()
        self._thread.join()
        return self.value


def _chunks(mv: memoryview):
    for i in range(0, len(mv), _CHUNK):
        yield mv[i:i + _CHUNK]


def _write_file(path: Path, pieces) -> tuple[int, int]:
    """Write byte buffers to ``path`` and fsync; returns (size, crc32)."""
    crc = _Crc()
    size = 0
    with open(path, "wb") as f:
        for piece in pieces:
            for chunk in _chunks(memoryview(piece).cast("B")):
                f.write(chunk)
                crc.add(chunk)
                size += len(chunk)
        f.flush()
        os.fsync(f.fileno())
    return size, crc.result()


def _read_file(path: Path, size: int, crc: int):
    """Read ``path`` whole, checking its size and CRC-32 (overlapped with the reads)."""
    actual = path.stat().st_size
    if actual != size:
        raise CheckpointError(f"{path}: {actual} bytes, the manifest says {size}; the file is "
                              "truncated or was changed")
    # NOTE: an anonymous mmap, not bytearray (which zero-fills 100 MB first) or np.empty (whose
    # huge-page advice makes the first touch of fresh memory 4x slower here).
    buf = mmap.mmap(-1, size) if size else bytearray()
    mv = memoryview(buf)
    check = _Crc()
    with open(path, "rb", buffering=0) as f:
        for chunk in _chunks(mv):
            n = f.readinto(chunk)
            if n != len(chunk):
                raise CheckpointError(f"{path}: short read; the file is truncated")
            check.add(chunk)
    if check.result() != crc:
        raise CheckpointError(f"{path}: the CRC-32 does not match the manifest; the file is "
                              "corrupted")
    return buf


def tensors_bytes(tensors: dict[str, np.ndarray]) -> list:
    """The safetensors encoding of ``tensors`` as a list of buffers (header, then each array)."""
    header, offset, arrays = {}, 0, []
    for key in sorted(tensors):
        # NOTE: contiguous first: safetensors 0.8 itself writes wrong bytes for strided arrays.
        a = np.asarray(tensors[key])
        # (not np.ascontiguousarray: it turns a 0-d array into shape (1,))
        a = a if a.flags.c_contiguous else a.copy(order="C")
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        code = _CODES.get(a.dtype.newbyteorder("=") if a.dtype.byteorder != "|" else a.dtype)
        if code is None:
            known = sorted(str(np.dtype(d)) for d in _DTYPES.values())
            raise CheckpointError(f"tensor {key!r} has dtype {a.dtype}, which safetensors cannot "
                                  f"store; use one of {known}")
        header[key] = {"dtype": code, "shape": list(a.shape),
                       "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        arrays.append(a)
    header["__metadata__"] = {"format": FORMAT}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return [struct.pack("<Q", len(raw)) + raw] + [a.reshape(-1).view(np.uint8) for a in arrays
                                                   if a.nbytes]


def tensors_from_bytes(buf, where: str = "tensors") -> dict[str, np.ndarray]:
    """Arrays (views into ``buf``) from a safetensors encoding."""
    try:
        (n,) = struct.unpack("<Q", bytes(memoryview(buf)[:8]))
        header = json.loads(bytes(memoryview(buf)[8:8 + n]))
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{where}: not a safetensors file ({e})") from None
    base = 8 + n
    out = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            dt = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
            a, b = info["data_offsets"]
            shape = tuple(info["shape"])
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{where}: tensor {key!r} has an unreadable header entry "
                                  f"{info!r}") from None
        if base + b > len(buf) or b - a != int(np.prod(shape, dtype=np.int64)) * dt.itemsize:
            raise CheckpointError(f"{where}: tensor {key!r} lies outside the file or does not "
                                  "match its shape; the file is truncated or corrupted")
        out[key] = np.frombuffer(buf, dtype=dt, count=(b - a) // dt.itemsize,
                                 offset=base + a).reshape(shape)
    return out


# ---- nested state <-> (JSON, tensors) -------------------------------------------------------
def split_state(state, path="state"):
    """(JSON-able structure, {key: array}); raises naming the first value that is neither."""
    tensors: dict[str, np.ndarray] = {}

    def walk(v, p):
        if isinstance(v, np.ndarray):
            key = p[len("state/"):] if p.startswith("state/") else p
            tensors[key] = v
            return {"__tensor__": key}
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if not isinstance(k, str):
                    raise CheckpointError(f"{_show(p)} has key {k!r}: checkpoint state keys must "
                                          "be strings")
                out[k] = walk(x, f"{p}/{k}")
            return out
        if isinstance(v, (list, tuple)):
            return [walk(x, f"{p}/{i}") for i, x in enumerate(v)]
        if isinstance(v, np.generic):
            return v.item()
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if hasattr(v, "get") and hasattr(v, "shape") and hasattr(v, "dtype"):  # a cl array
            return walk(np.asarray(v.get()), p)
        raise CheckpointError(f"{_show(p)} is a {type(v).__name__}: a checkpoint holds arrays and "
                              "JSON values (dict, list, str, int, float, bool, None) only; give "
                              "the object a state_dict() of those")

    return walk(state, path), tensors


def join_state(tree, tensors):
    def walk(v):
        if isinstance(v, dict):
            if set(v) == {"__tensor__"}:
                try:
                    return tensors[v["__tensor__"]]
                except KeyError:
                    raise CheckpointError(f"state.json refers to tensor {v['__tensor__']!r}, "
                                          "which tensors.safetensors lacks") from None
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(tree)


def _show(p: str) -> str:
    parts = p.split("/")
    return parts[0] + "".join(f"[{x!r}]" if not x.isdigit() else f"[{x}]" for x in parts[1:])


# ---- directories ----------------------------------------------------------------------------
def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - not on POSIX
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(directory, state: dict, *, step: int = 0, epoch: int = 0,
         metrics: dict | None = None, run_id: str | None = None, name: str | None = None) -> Path:
    """Write ``state`` (nested dicts/lists of arrays and JSON values) as a new checkpoint in
    ``directory``; returns its path, ``directory/ckpt-<step>`` unless ``name`` is given."""
    from . import __version__

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tree, tensors = split_state(state)
    final = directory / (name or f"ckpt-{int(step):08d}")
    tmp = directory / f".{final.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        files = {}
        files["tensors.safetensors"] = _write_file(tmp / "tensors.safetensors",
                                                   tensors_bytes(tensors))
        files["state.json"] = _write_file(tmp / "state.json", [json.dumps(tree).encode()])
        manifest = {"format": FORMAT, "version": VERSION, "labkit": __version__,
                    "created": time.time(), "step": int(step), "epoch": int(epoch),
                    "run_id": run_id, "metrics": _json_metrics(metrics or {}),
                    "files": {k: {"size": s, "crc32": c} for k, (s, c) in files.items()}}
        _write_file(tmp / "manifest.json", [json.dumps(manifest, indent=1).encode()])
        _fsync_dir(tmp)
        old = None
        if final.exists():
            old = directory / f".{final.name}.old-{os.getpid()}"
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync_dir(directory)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _json_metrics(metrics):
    out = {}
    for k, v in metrics.items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            continue
    return out


def manifest(path) -> dict:
    """The checked manifest of the checkpoint at ``path`` (raises ``CheckpointError``)."""
    path = Path(path)
    mf = path / "manifest.json"
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint directory")
    if not mf.exists():
        raise CheckpointError(f"{path}: no manifest.json; the checkpoint is incomplete (a save "
                              "was interrupted) or this is not a labkit checkpoint")
    try:
        m = json.loads(mf.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{mf}: not valid JSON ({e}); the checkpoint is corrupted") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise CheckpointError(f"{path}: manifest.json is not a labkit checkpoint manifest")
    if int(m.get("version", 0)) > VERSION:
        raise CheckpointError(f"{path}: checkpoint format {m['version']}; this labkit reads "
                              f"format {VERSION} - upgrade labkit")
    for name in ("tensors.safetensors", "state.json"):
        if name not in m.get("files", {}):
            raise CheckpointError(f"{path}: the manifest lists no {name}")
    return m


def load(path) -> dict:
    """The state saved at ``path``, after checking every file against the manifest."""
    path = Path(path)
    m = manifest(path)
    blobs = {}
    for name, info in m["files"].items():
        f = path / name
        if not f.exists():
            raise CheckpointError(f"{path}: {name} is missing")
        blobs[name] = _read_file(f, int(info["size"]), int(info["crc32"]))
    tensors = tensors_from_bytes(blobs["tensors.safetensors"], str(path / "tensors.safetensors"))
    try:
        tree = json.loads(bytes(blobs["state.json"]))
    except ValueError as e:
        raise CheckpointError(f"{path}/state.json: not valid JSON ({e})") from None
    return join_state(tree, tensors)


def verify(path) -> str | None:
    """None if the checkpoint at ``path`` is complete and intact, else what is wrong."""
    try:
        m = manifest(path)
        for name, info in m["files"].items():
            _read_file(Path(path) / name, int(info["size"]), int(info["crc32"]))
    except (CheckpointError, OSError) as e:
        return str(e)
    return None


def list_checkpoints(directory) -> list[Path]:
    """The checkpoint directories in ``directory``, oldest step first (unchecked)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for p in directory.iterdir():
        if p.is_dir() and not p.name.startswith("."):
            try:
                step = json.loads((p / "manifest.json").read_text()).get("step", -1)
            except (OSError, ValueError, UnicodeDecodeError, AttributeError):
                # an unreadable manifest: order by the name, so latest() reports it
                tail = p.name.rsplit("-", 1)[-1]
                step = int(tail) if tail.isdigit() else -1
            found.append((int(step) if isinstance(step, int) else -1, p.stat().st_mtime, p))
    return [p for _, _, p in sorted(found)]


def latest(directory, *, warn: bool = True) -> Path | None:
    """The newest *valid* checkpoint in ``directory`` (None if there is none); corrupted or
    incomplete ones are reported with a warning and skipped."""
    for p in reversed(list_checkpoints(directory)):
        problem = verify(p)
        if problem is None:
            return p
        if warn:
            warnings.warn(f"skipping checkpoint {p}: {problem}", stacklevel=2)
    return None


def remove(path) -> None:
    """Delete a checkpoint directory (renamed away first, so a crash leaves no half-deleted
    checkpoint that looks valid)."""
    path = Path(path)
    if not path.exists():
        return
    gone = path.with_name(f".{path.name}.deleting-{os.getpid()}")
    os.replace(path, gone)
    shutil.rmtree(gone, ignore_errors=True)
