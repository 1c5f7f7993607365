"""Damage and craft helpers for the fault-injection suites (any file labkit writes).

Generic: bit flips, truncations, appended garbage, FIFOs and links in place of files, JSON with
duplicate keys, injected ``OSError``s, a child process killed at a chosen instant, and a
``Tally`` of cases tried and held that the suite's conftest prints at the end of the session.
For checkpoints: crafting safetensors bytes and re-sealing a manifest after a file or field was
edited on purpose, so a crafted file passes the checksums and reaches the parsers.

Examples
--------
>>> list(truncations(b"abc"))
[(0, b''), (1, b'a'), (2, b'ab')]
>>> flip(b"\\x00", 0, 3)
b'\\x08'
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import signal
import struct
import time
import zlib
from pathlib import Path

import numpy as np

#: every Tally made in this session, printed by tests/faults/conftest.py
TALLIES: list[Tally] = []


class Tally:
    """Counts of fault cases tried and held, with the first failures kept for the message.

    ``check`` functions return None when a case held and a description when it did not.
    ``must_fail`` marks a tally of checks run against a deliberately broken copy (kept out of
    the session's totals).
    """

    def __init__(self, name: str, must_fail: bool = False):
        self.name, self.tried, self.held, self.failures = name, 0, 0, []
        self.must_fail = must_fail
        self.seconds = 0.0
        self._t = time.perf_counter()
        TALLIES.append(self)

    def record(self, case, problem: str | None) -> None:
        self.tried += 1
        if problem is None:
            self.held += 1
        elif len(self.failures) < 20:
            self.failures.append(f"{case}: {problem}")
        self.seconds = time.perf_counter() - self._t

    def __str__(self):
        return f"{self.name}: {self.tried} tried, {self.held} held, {self.seconds:.1f} s"

    def report(self) -> str:
        """The summary and the first failures, for an assertion message."""
        return "\n  ".join([str(self), *self.failures])


# ---- damage to bytes ------------------------------------------------------------------------
def flip(data: bytes, index: int, bit: int) -> bytes:
    """``data`` with bit ``bit`` of byte ``index`` inverted."""
    b = bytearray(data)
    b[index] ^= 1 << bit
    return bytes(b)


def bit_flips(data: bytes, positions=None, bits=None, rng=None):
    """(index, bit, damaged) for each byte index in ``positions`` (all by default) and each bit
    in ``bits`` (all 8 by default; an int k picks k distinct bits per byte with ``rng``)."""
    for i in range(len(data)) if positions is None else positions:
        chosen = range(8) if bits is None else sorted(rng.choice(8, bits, replace=False))
        for bit in chosen:
            yield i, int(bit), flip(data, i, int(bit))


def sample(n: int, k: int, rng) -> list[int]:
    """``k`` distinct sorted indices below ``n`` (all of them if ``k >= n``)."""
    return list(range(n)) if k >= n else sorted(int(i) for i in rng.choice(n, k, replace=False))


def truncations(data: bytes, lengths=None):
    """(n, data[:n]) for every shorter length (or each of ``lengths``)."""
    for n in range(len(data)) if lengths is None else lengths:
        yield n, data[:n]


def garbage_tails(data: bytes, rng):
    """(label, data + garbage) for a few kinds of appended bytes."""
    yield "nul", data + b"\0"
    yield "newline", data + b"\n"
    yield "space", data + b" "
    yield "8 zeros", data + bytes(8)
    yield "random 64", data + rng.bytes(64)
    yield "its own head", data + data[:16]
    yield "doubled", data + data


# ---- damage to files ------------------------------------------------------------------------
def make_fifo(path) -> None:
    """Replace ``path`` with a FIFO (opening it for reading blocks until a writer comes)."""
    path = Path(path)
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def link_in_place(path, target) -> None:
    """Replace ``path`` with a symbolic link to ``target``."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.symlink_to(target)


@contextlib.contextmanager
def oserror(module, name: str, code: int, when=lambda *a, **k: True):
    """Within the block, ``module.name(...)`` raises ``OSError(code)`` whenever ``when`` is true
    of its arguments (e.g. ``oserror(os, "open", errno.EACCES, lambda p, *a, **k: ...)``)."""
    real = getattr(module, name)

    def failing(*args, **kwargs):
        if when(*args, **kwargs):
            raise OSError(code, os.strerror(code), str(args[0]) if args else None)
        return real(*args, **kwargs)

    setattr(module, name, failing)
    try:
        yield
    finally:
        setattr(module, name, real)


ERRNOS = (errno.EACCES, errno.EIO, errno.EISDIR, errno.EMFILE, errno.ENOSPC, errno.EPERM,
          errno.ESTALE, errno.ENAMETOOLONG)


# ---- JSON -----------------------------------------------------------------------------------
#: values of the wrong type or range for typical fields: each must be refused, not believed
HOSTILE = [None, True, False, -1, -(2 ** 63), 2 ** 64, 10 ** 30, 1.5, float("nan"),
           float("inf"), "7", "", [], {}, [1, 2], {"a": 1}, "../../x", "/etc/passwd"]


def dumps(obj) -> bytes:
    """JSON bytes as labkit writes them (non-finite floats allowed)."""
    return json.dumps(obj).encode()


def with_duplicate_key(obj: dict, key: str, value) -> bytes:
    """JSON bytes of ``obj`` with ``key`` written a second time, holding ``value``."""
    text = json.dumps(obj)
    assert text.endswith("}")
    sep = ", " if obj else ""
    return (text[:-1] + f"{sep}{json.dumps(key)}: {json.dumps(value)}}}").encode()


def deeply_nested(depth: int) -> bytes:
    """A JSON object ``{"a": [[[...]]]}`` nested ``depth`` levels."""
    return b'{"a": ' + b"[" * depth + b"]" * depth + b"}"


# ---- a child process killed at a chosen instant ----------------------------------------------
def run_in_child(fn, timeout: float = 30.0) -> int:
    """Run ``fn()`` in a forked child and return its wait status as ``Popen.returncode`` would
    (``-signal.SIGKILL`` when it killed itself, 0 on success, 1 if it raised). The child never
    returns into the caller."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            fn()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise TimeoutError(f"child {pid} still ran after {timeout} s")
        time.sleep(0.002)


def die() -> None:
    """SIGKILL this process now: no cleanup, no finally blocks, no flushing."""
    os.kill(os.getpid(), signal.SIGKILL)


# ---- checkpoints ----------------------------------------------------------------------------
def safetensors_bytes(header, data: bytes = b"", length: int | None = None) -> bytes:
    """A safetensors encoding: ``header`` (a dict, or raw bytes used as they are), ``data``,
    and the 8-byte length (``length`` overrides it, to craft a wrong one)."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def split_safetensors(data: bytes) -> tuple[dict, bytes]:
    """(header, data region) of a valid safetensors encoding."""
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def reseal(ckpt, **changes) -> dict:
    """After files of checkpoint ``ckpt`` were edited on purpose: write its manifest again with
    each file's size and CRC-32, the fields in ``changes`` set (a value ``DELETE`` removes the
    field), and ``fields_crc32`` recomputed — so only the edited content can be refused."""
    from labkit import checkpoint

    ckpt = Path(ckpt)
    m = json.loads((ckpt / "manifest.json").read_text())
    for name in checkpoint.FILES:
        raw = (ckpt / name).read_bytes()
        m["files"][name] = {"size": len(raw), "crc32": zlib.crc32(raw)}
    for k, v in changes.items():
        if v is DELETE:
            m.pop(k, None)
        else:
            m[k] = v
    if "fields_crc32" in m:
        m["fields_crc32"] = checkpoint._manifest.fields_crc32(m)
    (ckpt / "manifest.json").write_bytes(dumps(m))
    return m


DELETE = object()


def same(a, b) -> bool:
    """Exactly the same state: equal types, array dtypes, shapes and bytes (NaN == NaN)."""
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and \
            a.tobytes() == b.tobytes()
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def sample_state(big: int = 4096) -> dict:
    """A small training-like state with every kind of value a checkpoint holds: arrays of
    several dtypes (strided, 0-d, empty, one of ``big`` floats), non-finite floats, unicode."""
    rng = np.random.default_rng(0)
    return {"model": {"w": rng.standard_normal((6, 5)).astype(np.float32)[:, ::2],
                      "b": np.arange(3, dtype=np.int64), "flag": np.array(True),
                      "empty": np.zeros((0, 4), np.float16), "u8": np.arange(5, dtype=np.uint8),
                      "big": rng.standard_normal(big).astype(np.float32)},
            "opt": {"t": 12, "lr": 0.5, "moments": [np.ones(3), None], "best": float("inf")},
            "log": {"loss": [1.5, float("nan"), 0.25]},
            "name": "x \u00fc", "nested": {"list": [1, 2.5, "s", None, True, -0.0]}}
