"""Checkpoints: a directory of safetensors and JSON, written atomically, loaded without code.

A checkpoint directory holds

- ``tensors.safetensors`` — every array of the state, in the safetensors format (an 8-byte
  header length, a JSON header of dtypes, shapes and offsets, then the raw little-endian bytes);
  any safetensors reader can open it;
- ``state.json`` — everything else: a JSON object, the nested state with each array replaced by
  ``{"__tensor__": key}``;
- ``manifest.json`` — written last: the format name and version, the step, epoch and metrics,
  each file's size and CRC-32, and ``fields_crc32``, a CRC-32 of the manifest's other fields
  (everything but ``files``, whose entries are checked against the files themselves), so a
  damaged step, metric or run id is caught instead of believed.

``save`` writes into a hidden temporary directory, fsyncs every file, renames the directory into
place and fsyncs its parent, so a process killed at any instant leaves either the new checkpoint
or none — never half of one — and the previous checkpoints untouched. The hidden directory's
name carries the writer's host, pid and process start time, and the writer holds an advisory
lock on it, so the next ``save`` into the same directory removes what killed writers left
(``cleanup``) and never what a live writer is still writing.

``load`` reads only regular files inside the checkpoint directory (no links, FIFOs or paths),
checks sizes and checksums before parsing anything, validates the safetensors header, the
manifest and the state field by field, and parses only JSON and raw bytes (no pickle, no code).
Whatever is damaged or crafted raises ``CheckpointError`` naming the file and the field;
``latest`` skips such checkpoints with a warning. Non-finite floats in the state (a diverged
loss in the log) are written as JSON's common ``NaN``/``Infinity`` extension and read back as
floats; everywhere a manifest or header needs an integer, they are refused.

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

import errno
import itertools
import json
import math
import mmap
import operator
import os
import re
import shutil
import socket
import stat
import struct
import threading
import time
import warnings
import zlib
from pathlib import Path

import numpy as np

from ._fs import fsync_dir
from .errors import CheckpointError

FORMAT = "labkit-checkpoint"
VERSION = 1
MANIFEST = "manifest.json"
#: the files a manifest lists (exactly these; it never names a path)
FILES = ("tensors.safetensors", "state.json")
_CHUNK = 8 << 20
_MANIFEST_LIMIT = 4 << 20  # labkit's manifests are < 1 KB plus the metrics
_INT64 = 1 << 63
_MAX_DIMS = 64  # NumPy 2's limit

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
           "I32": np.int32, "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32,
           "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_}
_CODES = {np.dtype(v): k for k, v in _DTYPES.items()}


# ---- reading and checking values ------------------------------------------------------------
class _Duplicate(ValueError):
    pass


def _unique_keys(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


def _small_int(text: str) -> int:
    # NOTE: headers and manifests hold sizes, offsets, steps and CRCs (< 2**64); refusing longer
    # digit strings keeps a crafted file from making int() (quadratic in the digits) stall
    if len(text.lstrip("-")) > 40:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)
_STRICT = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_int=_small_int)


def _json(raw, where: str, strict: bool = True):
    """Parse JSON: UTF-8 only, no duplicate keys, (``strict``) no integers of more than 40
    digits; every failure is a CheckpointError."""
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{where}: not UTF-8 text ({e}); the file is corrupted") from None
    try:
        return (_STRICT if strict else _DECODER).decode(text)
    except _Duplicate as e:
        raise CheckpointError(f"{where}: the key {e.args[0]!r} appears twice in one object; labkit "
                              "never writes that, so the file was corrupted or edited") from None
    except RecursionError:
        raise CheckpointError(f"{where}: JSON nested too deeply to read") from None
    except ValueError as e:
        raise CheckpointError(f"{where}: not valid JSON ({e}); the file is corrupted") from None


def _is_int(v) -> bool:
    return type(v) is int  # NOTE: not isinstance: True and False are ints too


def _kind(v) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _brief(v, n=60) -> str:
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def _check_keys(obj, required, optional, where):
    missing = [k for k in required if k not in obj]
    unknown = sorted(set(obj) - set(required) - set(optional))
    if missing or unknown:
        parts = ([f"lacks {missing}"] if missing else []) + \
            ([f"has unknown {', '.join(_brief(k, 30) for k in unknown[:5])}"] if unknown else [])
        raise CheckpointError(f"{where} {' and '.join(parts)}; expected the keys "
                              f"{list(required) + list(optional)}")


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
    try:
        with open(path, "wb") as f:
            for piece in pieces:
                for chunk in _chunks(memoryview(piece).cast("B")):
                    f.write(chunk)
                    crc.add(chunk)
                    size += len(chunk)
            f.flush()
            os.fsync(f.fileno())
    finally:
        value = crc.result()  # NOTE: also on an error, so the helper thread always ends
    return size, value


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_DIR_FD = os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd


def _what(mode) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _os_problem(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "a symbolic link (labkit does not follow links in checkpoints)"
    return f"cannot be read ({e.strerror or e})"


class _Dir:
    """One checkpoint directory, opened once (not through a link); its members are read only
    as regular files inside it, each checked with lstat before it is opened (so a FIFO cannot
    block) and opened with O_NOFOLLOW|O_NONBLOCK relative to the directory's descriptor."""

    def __init__(self, path):
        # NOTE: a str (Path joins cost more than the reads here), without trailing slashes:
        # lstat("link/") would follow the link
        self.path = os.fsdecode(path).rstrip("/") or "/"
        self.fd = None
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            raise CheckpointError(f"{self.path}: no such checkpoint directory") from None
        except OSError as e:
            raise CheckpointError(f"{self.path}: {_os_problem(e)}") from None
        if stat.S_ISLNK(st.st_mode):
            raise CheckpointError(f"{self.path}: a symbolic link; labkit loads checkpoints from "
                                  "real directories only, not through links (pass the target)")
        if not stat.S_ISDIR(st.st_mode):
            raise CheckpointError(f"{self.path}: {_what(st.st_mode)}, not a checkpoint "
                                  "directory")
        if _DIR_FD:
            try:
                self.fd = os.open(self.path, os.O_RDONLY | _NOFOLLOW
                                  | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
            except OSError as e:
                raise CheckpointError(f"{self.path}: {_os_problem(e)}") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def read(self, name: str, size: int | None = None, crc: int | None = None,
             limit: int | None = None):
        """The bytes of member ``name``, checked against ``size`` and ``crc`` when given."""
        where = os.path.join(self.path, name)
        if name in ("", ".", "..") or "/" in name or os.sep in name:
            raise CheckpointError(f"{where}: not a file name inside the checkpoint directory")
        target = name if self.fd is not None else where
        try:
            st = os.stat(target, dir_fd=self.fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise CheckpointError(f"{where}: {_what(st.st_mode)}; labkit reads only regular "
                                      "files inside a checkpoint directory")
            fd = os.open(target, _READ_FLAGS, dir_fd=self.fd)
            try:
                fst = os.fstat(fd)
                if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev,
                                                                                   st.st_ino):
                    raise CheckpointError(f"{where}: replaced while it was being opened")
                n = fst.st_size
                if size is not None and n != size:
                    raise CheckpointError(f"{where}: {n} bytes, the manifest says {size}; the "
                                          "file is truncated, extended or was changed")
                if limit is not None and n > limit:
                    raise CheckpointError(f"{where}: {n} bytes, more than the {limit} a labkit "
                                          "checkpoint's file of this kind can hold")
                return _read_exact(fd, n, crc, where)
            finally:
                os.close(fd)
        except FileNotFoundError:
            raise _Missing(f"{where}: missing; the checkpoint is incomplete") from None
        except OSError as e:
            raise CheckpointError(f"{where}: {_os_problem(e)}") from None


class _Missing(CheckpointError):
    pass


def _read_exact(fd: int, size: int, crc: int | None, where):
    """Read exactly ``size`` bytes from ``fd`` (then expect the end of the file), checking the
    CRC-32 when given (overlapped with the reads for large files)."""
    # NOTE: an anonymous mmap for large files, not bytearray (which zero-fills 100 MB first) or
    # np.empty (whose huge-page advice makes the first touch of fresh memory 4x slower here).
    buf = mmap.mmap(-1, size) if size > _CHUNK else bytearray(size)
    mv = memoryview(buf)
    check = _Crc() if crc is not None and size > _CHUNK else None
    value = 0
    try:
        for chunk in _chunks(mv):
            got = 0
            while got < len(chunk):
                n = os.readv(fd, [chunk[got:]])
                if not n:
                    raise CheckpointError(f"{where}: short read; the file is truncated")
                got += n
            if check is not None:
                check.add(chunk)
            elif crc is not None:
                value = zlib.crc32(chunk, value)
    finally:
        if check is not None:
            value = check.result()  # NOTE: also on an error, so the helper thread always ends
    if os.read(fd, 1):
        raise CheckpointError(f"{where}: longer than {size} bytes; the file was changed")
    if crc is not None and value != crc:
        raise CheckpointError(f"{where}: the CRC-32 does not match the manifest; the file is "
                              "corrupted")
    return buf


# ---- the safetensors encoding ---------------------------------------------------------------
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


def _tensor_entry(key, info, where: str, size: int):
    """(dtype, shape, begin, end) of one header entry, every field checked."""
    what = f"{where}: tensor {_brief(key, 80)}"
    if not isinstance(info, dict):
        raise CheckpointError(f"{what}: the header entry is {_kind(info)}, expected an object "
                              "with dtype, shape and data_offsets")
    _check_keys(info, ("dtype", "shape", "data_offsets"), (), f"{what}: the header entry")
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(code, str) or code not in _DTYPES:
        raise CheckpointError(f"{what}: dtype {_brief(code)} is not one labkit reads "
                              f"({', '.join(_DTYPES)})")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise CheckpointError(f"{what}: shape {_brief(shape)} is not a list of non-negative "
                              "integers")
    if len(shape) > _MAX_DIMS:
        raise CheckpointError(f"{what}: shape has {len(shape)} dimensions; NumPy supports at "
                              f"most {_MAX_DIMS}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_int, offsets))):
        raise CheckpointError(f"{what}: data_offsets {_brief(offsets)} is not a list of two "
                              "integers [begin, end]")
    begin, end = offsets
    if not 0 <= begin <= end <= size:
        raise CheckpointError(f"{what}: data_offsets {_brief(offsets)} do not lie inside the "
                              f"data region of {size} bytes (need 0 <= begin <= end <= {size}); "
                              "the file is truncated or corrupted")
    dt = np.dtype(_DTYPES[code]).newbyteorder("<")
    # NOTE: Python ints (np.prod would overflow silently), cut short past the file's size
    count = 0 if 0 in shape else 1
    for d in shape:
        count *= d
        if count > size:
            break
    if end - begin != count * dt.itemsize:
        need = count * dt.itemsize if count <= size else f"more than {size}"
        raise CheckpointError(f"{what}: data_offsets [{begin}, {end}] hold {end - begin} bytes "
                              f"but shape {_brief(shape)} of {code} needs {need}")
    return dt, tuple(shape), begin, end


def _check_layout(entries, size: int, where: str) -> None:
    """The tensors must tile the data region exactly: no overlaps, no gaps, nothing after the
    last one (as the safetensors library requires)."""
    at, prev = 0, None
    for key, _, _, begin, end in sorted(entries, key=lambda e: (e[3], e[4])):
        if begin < at:
            raise CheckpointError(f"{where}: tensor {_brief(key, 80)} at [{begin}, {end}] "
                                  f"overlaps tensor {_brief(prev, 80)}, which ends at {at}; "
                                  "each tensor needs bytes of its own")
        if begin > at:
            raise CheckpointError(f"{where}: bytes [{at}, {begin}] of the data region belong to "
                                  "no tensor; the header is corrupted")
        at, prev = end, key
    if at != size:
        raise CheckpointError(f"{where}: {size - at} bytes after the last tensor belong to no "
                              "tensor; the file is corrupted or has data appended")


def tensors_from_bytes(buf, where: str = "tensors") -> dict[str, np.ndarray]:
    """Arrays (views into ``buf``) from a safetensors encoding, after checking the whole header:
    its length, that it is a JSON object without duplicate keys, ``__metadata__`` (str to str),
    each tensor's dtype, shape and offsets, and that the tensors tile the data region exactly.

    Raises
    ------
    CheckpointError
        naming ``where``, the tensor and the field for anything that is not so.
    """
    mv = memoryview(buf).cast("B")
    total = mv.nbytes
    if total < 8:
        raise CheckpointError(f"{where}: {total} bytes; a safetensors file starts with an 8-byte "
                              "header length")
    (n,) = struct.unpack_from("<Q", mv, 0)
    if n > total - 8:
        raise CheckpointError(f"{where}: the header length field says {n} bytes but the file "
                              f"has {total - 8} after it; the file is truncated or corrupted")
    header = _json(mv[8:8 + n], f"{where} (header)")
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}: the header is {_kind(header)}, expected a JSON object "
                              "of tensor entries")
    base, size = 8 + n, total - 8 - n
    entries = []
    for key, info in header.items():
        if key == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise CheckpointError(f"{where}: __metadata__ is {_brief(info)}, expected an "
                                      "object of strings")
            continue
        entries.append((key, *_tensor_entry(key, info, where, size)))
    _check_layout(entries, size, where)
    out = {}
    for key, dt, shape, begin, end in entries:
        try:
            if end == begin:
                out[key] = np.zeros(shape, dt)
            else:
                out[key] = np.frombuffer(buf, dtype=dt, count=(end - begin) // dt.itemsize,
                                         offset=base + begin).reshape(shape)
        except ValueError as e:
            raise CheckpointError(f"{where}: tensor {_brief(key, 80)}: {e}") from None
        # NOTE: a BOOL byte other than 0 or 1 is no bool: NumPy would carry it along silently
        if dt == np.bool_ and end > begin and out[key].view(np.uint8).max() > 1:
            raise CheckpointError(f"{where}: tensor {_brief(key, 80)}: BOOL bytes other than 0 "
                                  "and 1")
    return out


# ---- nested state <-> (JSON, tensors) -------------------------------------------------------
_REF = "__tensor__"


def split_state(state, path="state"):
    """(JSON-able structure, {key: array}); raises naming the first value that is neither."""
    tensors: dict[str, np.ndarray] = {}

    def walk(v, p):
        if isinstance(v, np.ndarray):
            key = base = p[len("state/"):] if p.startswith("state/") else p
            # NOTE: {"a/b": x} and {"a": {"b": y}} both give "a/b": each array keeps its own key
            for i in itertools.count(2):
                if key not in tensors:
                    break
                key = f"{base}#{i}"
            tensors[key] = v
            return {_REF: key}
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if not isinstance(k, str):
                    raise CheckpointError(f"{_show(p)} has key {k!r}: checkpoint state keys must "
                                          "be strings")
                if k == _REF:
                    raise CheckpointError(f"{_show(p)} has the key {_REF!r}, which checkpoints "
                                          "reserve for their references to arrays; rename it")
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

    try:
        return walk(state, path), tensors
    except RecursionError:
        raise CheckpointError(f"{path} is nested too deeply to save") from None


def join_state(tree, tensors, where: str = "state.json"):
    """The state from its JSON structure and its arrays: ``tree`` must be an object, every
    reference must name an existing tensor, and every tensor must be referenced exactly once."""
    if not isinstance(tree, dict):
        raise CheckpointError(f"{where}: {_kind(tree)}; a checkpoint's state is a JSON object")
    used: dict[str, str] = {}

    def walk(v, p):
        if isinstance(v, dict):
            if _REF in v:
                key = v[_REF]
                if len(v) != 1 or not isinstance(key, str):
                    raise CheckpointError(f"{where}: {_show(p)} is {_brief(v)}; a reference to "
                                          f'an array is exactly {{"{_REF}": "<tensor name>"}}')
                if key not in tensors:
                    raise CheckpointError(f"{where}: {_show(p)} refers to tensor {key!r}, which "
                                          "tensors.safetensors lacks")
                if key in used:
                    raise CheckpointError(f"{where}: tensor {key!r} is referenced twice ("
                                          f"{_show(used[key])} and {_show(p)}); labkit writes "
                                          "one reference per array")
                used[key] = p
                return tensors[key]
            return {k: walk(x, f"{p}/{k}") for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, f"{p}/{i}") for i, x in enumerate(v)]
        return v

    if _REF in tree:
        raise CheckpointError(f"{where}: the state itself is a reference to a tensor; a "
                              "checkpoint's state is an object of named values")
    try:
        out = walk(tree, "state")
    except RecursionError:
        raise CheckpointError(f"{where}: nested too deeply to load") from None
    unused = sorted(set(tensors) - set(used))
    if unused:
        raise CheckpointError(f"{where} never refers to the tensors {unused[:5]}"
                              f"{' ...' if len(unused) > 5 else ''} of tensors.safetensors, so "
                              "the two files do not belong together (one was replaced or edited)")
    return out


def _show(p: str) -> str:
    parts = p.split("/")
    return parts[0] + "".join(f"[{x!r}]" if not x.isdigit() else f"[{x}]" for x in parts[1:])


# ---- the manifest ---------------------------------------------------------------------------
def _fields_crc32(m: dict) -> int:
    """CRC-32 of a canonical encoding of the manifest's fields other than ``files``."""
    rest = {k: v for k, v in m.items() if k not in ("files", "fields_crc32")}
    return zlib.crc32(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode())


def check_manifest(m, where="manifest.json") -> dict:
    """``m`` with defaults filled in, if it is a valid manifest; else a ``CheckpointError``
    naming the field and what it must be."""
    if not isinstance(m, dict):
        raise CheckpointError(f"{where}: {_kind(m)}, expected a JSON object")
    if m.get("format") != FORMAT:
        raise CheckpointError(f"{where}: format is {_brief(m.get('format'))}, expected "
                              f"{FORMAT!r}: not a labkit checkpoint manifest")
    v = m.get("version")
    if not _is_int(v) or v < 1:
        raise CheckpointError(f"{where}: version is {_brief(v)}, expected a positive integer")
    if v > VERSION:
        raise CheckpointError(f"{where}: version is {v}, a newer checkpoint format; this "
                              f"labkit reads format {VERSION} - upgrade labkit")
    _check_keys(m, ("format", "version", "step", "epoch", "files"),
                ("labkit", "created", "run_id", "metrics", "fields_crc32"), where)
    for k in ("step", "epoch"):
        if not _is_int(m[k]) or not 0 <= m[k] < _INT64:
            raise CheckpointError(f"{where}: {k} is {_brief(m[k])}, expected an integer >= 0")
    if not isinstance(m.get("labkit", ""), str):
        raise CheckpointError(f"{where}: labkit is {_brief(m['labkit'])}, expected a version "
                              "string")
    created = m.get("created", 0.0)
    if type(created) not in (int, float) or not math.isfinite(created):
        raise CheckpointError(f"{where}: created is {_brief(created)}, expected a time in "
                              "seconds")
    if m.get("run_id") is not None and not isinstance(m["run_id"], str):
        raise CheckpointError(f"{where}: run_id is {_brief(m['run_id'])}, expected a string or "
                              "null")
    metrics = m.get("metrics", {})
    if not isinstance(metrics, dict) or not all(type(x) in (int, float)
                                                for x in metrics.values()):
        raise CheckpointError(f"{where}: metrics is {_brief(metrics)}, expected an object of "
                              "numbers")
    files = m["files"]
    if not isinstance(files, dict):
        raise CheckpointError(f"{where}: files is {_kind(files)}, expected an object")
    _check_keys(files, FILES, (), f"{where}: files")  # NOTE: names only: never a path
    for name, info in files.items():
        if not isinstance(info, dict):
            raise CheckpointError(f"{where}: files[{name!r}] is {_kind(info)}, expected "
                                  '{"size": ..., "crc32": ...}')
        _check_keys(info, ("size", "crc32"), (), f"{where}: files[{name!r}]")
        if not _is_int(info["size"]) or not 0 <= info["size"] < _INT64:
            raise CheckpointError(f"{where}: files[{name!r}].size is {_brief(info['size'])}, "
                                  "expected an integer >= 0")
        if not _is_int(info["crc32"]) or not 0 <= info["crc32"] < 1 << 32:
            raise CheckpointError(f"{where}: files[{name!r}].crc32 is "
                                  f"{_brief(info['crc32'])}, expected an integer in [0, 2**32)")
    if "fields_crc32" in m and (not _is_int(m["fields_crc32"]) or
                                m["fields_crc32"] != _fields_crc32(m)):
        raise CheckpointError(f"{where}: fields_crc32 does not match the manifest's fields; the "
                              "manifest is corrupted or was edited")
    return {"run_id": None, "metrics": {}, **m}


def _manifest_of(d: _Dir) -> dict:
    where = os.path.join(d.path, MANIFEST)
    try:
        raw = d.read(MANIFEST, limit=_MANIFEST_LIMIT)
    except _Missing:
        raise CheckpointError(f"{d.path}: no manifest.json; the checkpoint is incomplete (a "
                              "save was interrupted) or this is not a labkit checkpoint") from None
    return check_manifest(_json(raw, where), where)


def manifest(path) -> dict:
    """The checked manifest of the checkpoint at ``path`` (raises ``CheckpointError``)."""
    with _Dir(path) as d:
        return _manifest_of(d)


def _json_metrics(metrics):
    out = {}
    for k, v in metrics.items():
        try:
            out[str(k)] = float(v)
        except (TypeError, ValueError):
            continue
    return out


# ---- save, load, verify ---------------------------------------------------------------------
def _count(v, what: str) -> int:
    try:
        v = operator.index(v)
    except TypeError:
        raise CheckpointError(f"save: {what} is {_brief(v)}, expected an integer") from None
    if not 0 <= v < _INT64:
        raise CheckpointError(f"save: {what} is {v}, expected an integer >= 0")
    return v


def save(directory, state: dict, *, step: int = 0, epoch: int = 0,
         metrics: dict | None = None, run_id: str | None = None, name: str | None = None) -> Path:
    """Write ``state`` (nested dicts/lists of arrays and JSON values) as a new checkpoint in
    ``directory``; returns its path, ``directory/ckpt-<step>`` unless ``name`` is given.

    A checkpoint of the same name is replaced (atomically). What writers killed earlier left in
    ``directory`` is cleaned up first (see ``cleanup``).
    """
    from . import __version__

    step, epoch = _count(step, "step"), _count(epoch, "epoch")
    if not isinstance(state, dict):
        raise CheckpointError(f"save: the state is a {type(state).__name__}; a checkpoint holds "
                              "a dict")
    if run_id is not None and not isinstance(run_id, str):
        raise CheckpointError(f"save: run_id is {_brief(run_id)}, expected a string or None")
    name = f"ckpt-{step:08d}" if name is None else name
    if not isinstance(name, str) or not name or name.startswith(".") or "/" in name or \
            os.sep in name or "\0" in name:
        raise CheckpointError(f"save: name {_brief(name)} is not a plain directory name (not "
                              "empty, no '/' or NUL, not starting with '.')")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cleanup(directory)
    tree, tensors = split_state(state)
    final = directory / name
    tmp = directory / _temp_name(name, "tmp")
    tmp.mkdir()
    lock = _lock(tmp)
    olds: list[Path] = []
    try:
        files = {}
        files["tensors.safetensors"] = _write_file(tmp / "tensors.safetensors",
                                                   tensors_bytes(tensors))
        files["state.json"] = _write_file(tmp / "state.json", [json.dumps(tree).encode()])
        m = {"format": FORMAT, "version": VERSION, "labkit": __version__,
             "created": time.time(), "step": step, "epoch": epoch, "run_id": run_id,
             "metrics": _json_metrics(metrics or {}),
             "files": {k: {"size": s, "crc32": c} for k, (s, c) in files.items()}}
        # NOTE: sealed as it will be read back, so float and key spellings cannot differ
        m["fields_crc32"] = _fields_crc32(json.loads(json.dumps(m)))
        _write_file(tmp / MANIFEST, [json.dumps(m, indent=1).encode()])
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
            if not _is_checkpoint_dir(final):
                raise CheckpointError(f"save: {final} exists and is not a labkit checkpoint; "
                                      "refusing to replace it (choose another name)")
            old = final.with_name(_temp_name(final.name, "old"))
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


def _read(path):
    """(manifest, tensors, JSON tree) of the checkpoint at ``path``, every file checked."""
    with _Dir(path) as d:
        m = _manifest_of(d)
        blobs = {name: d.read(name, m["files"][name]["size"], m["files"][name]["crc32"])
                 for name in FILES}
    tensors = tensors_from_bytes(blobs[FILES[0]], os.path.join(d.path, FILES[0]))
    tree = _json(blobs[FILES[1]], os.path.join(d.path, FILES[1]), strict=False)
    return m, tensors, tree


def load(path) -> dict:
    """The state saved at ``path``, after checking every file against the manifest.

    Raises
    ------
    CheckpointError
        for anything missing, damaged, crafted or unreadable, naming the file and the field.
    """
    _, tensors, tree = _read(path)
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
            step = manifest(p)["step"]
        except CheckpointError:  # unreadable: order by the name, so latest() reports it
            tail = e.name.rsplit("-", 1)[-1]
            step = int(tail) if tail.isdigit() and len(tail) < 19 else -1
        found.append((step, st.st_mtime_ns, e.name, p))
    return [p for *_, p in sorted(found)], refused


def list_checkpoints(directory) -> list[Path]:
    """The checkpoint directories in ``directory``, oldest step first (unchecked: damaged ones
    are listed too, ordered by their names). Hidden entries (what writers leave while they
    work) and symbolic links are not listed. Never raises for what it finds."""
    return _scan(directory)[0]


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


def _is_checkpoint_dir(path: Path) -> bool:
    """Whether ``path`` is a real directory that labkit wrote: a labkit temporary directory,
    one whose manifest.json says it is a labkit checkpoint, or the remains of a checkpoint
    (nothing but checkpoint files)."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
        if _TEMP.match(path.name) or _LEGACY_TEMP.match(path.name):
            return True
        names = os.listdir(path)
        if names and set(names) <= {MANIFEST, *FILES}:
            return True
        if MANIFEST in names:
            with _Dir(path) as d:
                m = _json(d.read(MANIFEST, limit=_MANIFEST_LIMIT), MANIFEST)
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
    if not _is_checkpoint_dir(path):
        raise CheckpointError(f"remove: {path} is not a labkit checkpoint directory (a link, a "
                              "file, or a directory without a labkit manifest.json); refusing "
                              "to delete it")
    gone = path.with_name(_temp_name(path.name, "deleting"))
    os.replace(path, gone)
    shutil.rmtree(gone, ignore_errors=True)


# ---- what killed writers leave --------------------------------------------------------------
# A writer works in ".<name>.<kind>-<pid>-<start>-<host>-<n>": kind is tmp (being written), old
# (the checkpoint it replaces) or deleting; start is its process's start time (so a reused pid
# is told apart), host a CRC of its host name (pids of other machines mean nothing here).
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old|deleting)-(?P<pid>\d{1,10})-"
                   r"(?P<start>\d{1,20})-(?P<host>[0-9a-f]{8})-\d{1,20}$")
# what labkit wrote before the start time and host were added
_LEGACY_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old|deleting)-(?P<pid>\d{1,10})"
                          r"(-\d{1,20})?$")
_SERIAL = itertools.count()


def _start_time(pid: int) -> int:
    """The start time of process ``pid`` in clock ticks since boot (Linux), or 0 if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


_HOST = f"{zlib.crc32(socket.gethostname().encode()):08x}"


def _temp_name(name: str, kind: str) -> str:
    pid = os.getpid()
    return f".{name}.{kind}-{pid}-{_start_time(pid)}-{_HOST}-{next(_SERIAL)}"


def _alive(pid: int, start: int | None) -> bool:
    """Whether process ``pid`` (started at ``start``, if known) may still be running here."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0
    return not start or _start_time(pid) in (0, start)


def _lock(path: Path):
    """An open descriptor on ``path`` holding an exclusive advisory lock (None where there
    are no such locks): cleanup() leaves a directory alone while its writer holds this."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        return None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pass  # NOTE: a file system without locks: the pid and start time still protect it
    return fd


def _locked(path: Path) -> bool:
    """Whether another open descriptor holds the lock of ``_lock`` on ``path``."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        return False
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return True  # gone or unreadable: leave it alone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # releases the probe's own lock
    return False


def cleanup(directory) -> list[str]:
    """Remove what writers killed mid-save or mid-remove left in ``directory``; returns what
    was done. A temporary directory is removed only when its writer is gone (not running on
    this host, or its pid now belongs to a later process, and nobody holds its lock); a
    replaced checkpoint (``.old``) whose replacement never arrived is put back. Entries of
    other hosts and other programs are left alone. Never raises for what it finds."""
    done = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return done
    for e in entries:
        m = _TEMP.match(e.name)
        legacy = _LEGACY_TEMP.match(e.name) if m is None else None
        if m is None and legacy is None:
            continue
        g = (m or legacy).groupdict()
        if m is not None and g["host"] != _HOST:
            continue
        p = Path(e.path)
        try:
            if not e.is_dir(follow_symlinks=False):
                continue
            if _alive(int(g["pid"]), int(g["start"]) if m is not None else None) or \
                    (g["kind"] == "tmp" and _locked(p)):
                continue
            # NOTE: the old names are plainer: take only what holds nothing but checkpoint files
            if legacy is not None and not set(os.listdir(p)) <= {MANIFEST, *FILES}:
                continue
            final = p.with_name(g["name"])
            if g["kind"] == "old" and not os.path.lexists(final):
                os.replace(p, final)
                done.append(f"restored {final} (its replacement was interrupted)")
                continue
            shutil.rmtree(p)
            done.append(f"removed {p}")
        except OSError:
            continue  # another cleaner got there first, or no permission: not ours to fix
    return done
