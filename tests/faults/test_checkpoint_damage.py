"""Fault injection for checkpoint files: every file of a real checkpoint damaged (bit flips,
truncations, appended bytes), every header, manifest and state field crafted hostile (with the
checksums made to match, so the parsers are reached), and links, FIFOs and I/O errors in place
of files. For each case: ``load`` raises ``CheckpointError`` or returns exactly the saved state,
``manifest`` raises or returns exactly the saved fields, ``latest`` returns the newest intact
checkpoint with a warning for each one skipped, and nothing else is raised or hangs.

Each test counts its cases in a ``Tally`` (printed at the end of the session); the last test
shows the same checks failing on deliberately broken readers.
"""

from __future__ import annotations

import errno
import json
import math
import os
import tempfile
import warnings
import zlib
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from safetensors.numpy import load as st_load

from labkit import checkpoint as C
from labkit.errors import CheckpointError

from . import damage as D

pytestmark = pytest.mark.timeout(120)
SEED = 14


# ---- a pair of real checkpoints, the newer one damaged case by case -------------------------
class Pair:
    """``older`` and ``newer`` checkpoints of ``D.sample_state()`` in ``work``; ``damaged``
    writes one case into ``newer`` and puts the original files back afterwards."""

    def __init__(self, work: Path):
        self.work = work
        self.state = D.sample_state()
        # small: latest() falls back to it
        self.older = C.save(work, {"x": np.ones(1)}, iteration=1)
        # NOTE: a fixed time stamp, so that the same bytes are damaged in every run
        with mock.patch.object(C._directory.time, "time", return_value=1700000000.25):
            self.newer = C.save(work, self.state, iteration=2, epoch=1, metrics={"loss": 1e-05},
                                run_id="r1")
        self.files = {n: (self.newer / n).read_bytes() for n in (*C.FILES, C.MANIFEST)}
        self.manifest = C.manifest(self.newer)
        self.header, self.data = D.split_safetensors(self.files["tensors.safetensors"])
        self.dirty: set[str] = set()

    def restore(self):
        for name in self.dirty:
            p = self.newer / name
            if p.is_symlink() or not p.is_file():
                if p.is_dir() and not p.is_symlink():
                    p.rmdir()
                elif os.path.lexists(p):
                    p.unlink()
            # NOTE: rewritten in place: unlinking costs ~1.5 ms per file on this file system
            p.write_bytes(self.files[name])
        self.dirty = set()

    def put(self, name: str, raw: bytes, reseal: bool = False, **fields):
        self.dirty.add(name)
        (self.newer / name).write_bytes(raw)
        if reseal or fields:
            self.dirty.add(C.MANIFEST)
            D.reseal(self.newer, **fields)

    def touch(self, name: str) -> Path:
        """The path of file ``name`` of ``newer``, to be damaged by the caller and restored."""
        self.dirty.add(name)
        return self.newer / name


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    # NOTE: in memory where there is /dev/shm: each case rewrites files, 5x faster there
    if os.access("/dev/shm", os.W_OK):
        with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="labkit-faults-") as d:
            yield Pair(Path(d))
    else:
        yield Pair(tmp_path_factory.mktemp("pair"))


def check(p: Pair, exact: bool = True, listing: bool = True) -> str | None:
    """None if the damaged ``p.newer`` is handled as the rules say, else what went wrong.

    ``exact``: a load that succeeds must return the saved state (damage); with ``exact=False``
    (crafted files whose checksums match) it may return what the crafted bytes hold, which
    ``check_crafted`` compares with the safetensors library instead."""
    try:
        got = C.load(p.newer)
        loaded = True
    except CheckpointError as e:
        loaded = False
        if str(p.newer) not in str(e):
            return f"the error does not name the checkpoint: {e}"
    except Exception as e:  # noqa: BLE001 - anything else is the failure being looked for
        return f"load raised {type(e).__name__}: {e}"
    if loaded and exact and not D.same(got, p.state):
        return "load returned a different state"
    try:
        m = C.manifest(p.newer)
        # NOTE: files entries are checked against the files by load, not by manifest()
        if exact and not D.same({**m, "files": 0}, {**p.manifest, "files": 0}):
            return f"manifest() returned different fields: {m}"
    except CheckpointError:
        pass
    except Exception as e:  # noqa: BLE001
        return f"manifest raised {type(e).__name__}: {e}"
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            best = C.latest(p.work)
        listed = C.list_checkpoints(p.work) if listing else [p.older, p.newer]
    except Exception as e:  # noqa: BLE001
        return f"latest/list_checkpoints raised {type(e).__name__}: {e}"
    if best != (p.newer if loaded else p.older):
        return f"latest gave {best}, load {'succeeded' if loaded else 'failed'}"
    if not loaded and not any(f"skipping checkpoint {p.newer}" in str(x.message) for x in w):
        return "latest skipped the damaged checkpoint without a warning"
    if listed != [p.older, p.newer]:
        return f"list_checkpoints gave {listed}"
    return None


def run_cases(p: Pair, tally: D.Tally, cases, exact=True):
    """cases: (label, file name, bytes, reseal) — each written, checked and undone."""
    for i, (label, name, raw, reseal) in enumerate(cases):
        try:
            p.put(name, raw, reseal)
            # NOTE: latest() lists too; the order itself is checked on every 8th case, for time
            tally.record(label, check(p, exact, listing=i % 8 == 0))
        finally:
            p.restore()


def flip_cases(p: Pair, rng):
    """Every bit of the manifest (nothing else protects it but its own fields_crc32); every byte
    of state.json and of the safetensors header in one sampled bit position, and 100 sampled
    bytes of the tensor data (their CRC-32 catches every single-bit flip, so these cases show
    that nothing is parsed before the check)."""
    for name in C.FILES + (C.MANIFEST,):
        raw = p.files[name]
        if name == C.MANIFEST:
            flips = D.bit_flips(raw)
        elif name == "state.json":
            flips = D.bit_flips(raw, bits=1, rng=rng)
        else:
            head = len(raw) - len(p.data)
            data = [head + i for i in D.sample(len(raw) - head, 100, rng)]
            flips = [*D.bit_flips(raw, range(head), bits=1, rng=rng),
                     *D.bit_flips(raw, data, bits=1, rng=rng)]
        for i, bit, damaged in flips:
            yield f"{name} byte {i} bit {bit}", name, damaged, False


def test_bit_flips_in_every_file(pair):
    tally = D.Tally("checkpoint: single-bit flips")
    run_cases(pair, tally, flip_cases(pair, np.random.default_rng(SEED)))
    assert tally.held == tally.tried > 3500, tally.report()


def test_truncations_and_appended_bytes(pair):
    tally = D.Tally("checkpoint: truncations and appended bytes")
    rng = np.random.default_rng(SEED)

    def cases():
        for name, raw in pair.files.items():
            head = len(raw) - len(pair.data) if name == "tensors.safetensors" else len(raw)
            lengths = [*range(head), *(head + i for i in D.sample(len(raw) - head, 50, rng))]
            for n, cut in D.truncations(raw, lengths):
                yield f"{name} cut to {n}", name, cut, False
            for label, longer in D.garbage_tails(raw, rng):
                yield f"{name} + {label}", name, longer, False

    run_cases(pair, tally, cases())
    assert tally.held == tally.tried > 1000, tally.report()


# ---- crafted safetensors headers ------------------------------------------------------------
def header_variants(header: dict, data: bytes, rng):
    """(label, bytes) of crafted safetensors files: each field of each tensor made hostile,
    tensors sharing or reusing bytes, the header itself of the wrong kind, wrong lengths."""
    keys = [k for k in header if k != "__metadata__"]
    n = len(json.dumps(header).encode())
    yield "valid", D.safetensors_bytes(header, data)

    def edited(key, field, value):
        h = json.loads(json.dumps(header))
        if field is None:
            h[key] = value
        elif value is D.DELETE:
            del h[key][field]
        else:
            h[key][field] = value
        return h

    for key in keys:
        info = header[key]
        b, e = info["data_offsets"]
        size = e - b
        for dt in ["F32", "F64", "F16", "I64", "I32", "I16", "I8", "U64", "U8", "BOOL", "BF16",
                   "F8_E4M3", "C64", "f32", "", None, 7, ["F32"]]:
            if dt != info["dtype"]:
                yield f"{key} dtype {dt!r}", D.safetensors_bytes(edited(key, "dtype", dt), data)
        shape = info["shape"]
        for s in [[-1], [1.0], [True], [2 ** 64], ["3"], None, {}, "3", [1] * 70, [],
                  shape + [1], shape[1:], shape[::-1], [0, *shape], [2 ** 62, 4],
                  [size], [size // 2, 2], [*shape[:-1], (shape[-1] if shape else 1) + 1],
                  [2 ** 62] * 64, [2 ** 62] * 5000, [10 ** 39], [0, 2 ** 62] * 32]:
            if s != shape:
                yield f"{key} shape {s!r}", D.safetensors_bytes(edited(key, "shape", s), data)
        for o in [[e, b], [b, b + 1], [b - 1, e - 1], [b + 1, e + 1], [-8, e - 8], [0, size],
                  [b, e, 0], [b], [float(b), e], [str(b), e], None, [2 ** 64, 2 ** 64 + size],
                  [b, e + len(data)], [b - n - 8, e - n - 8], [True, e], {"0": b, "1": e}]:
            if o != [b, e]:
                yield f"{key} offsets {o!r}", D.safetensors_bytes(edited(key, "data_offsets", o),
                                                                  data)
        for field in ("dtype", "shape", "data_offsets"):
            yield f"{key} without {field}", D.safetensors_bytes(edited(key, field, D.DELETE),
                                                                data)
        yield f"{key} extra field", D.safetensors_bytes(edited(key, "extra", 1), data)
        for v in [None, [], "x", 1, True]:
            yield f"{key} entry {v!r}", D.safetensors_bytes(edited(key, None, v), data)
        yield f"{key} twice", D.safetensors_bytes(D.with_duplicate_key(header, key, info), data)
    # every tensor on the same bytes, or on the first tensor's bytes
    first = header[keys[0]]
    for key in keys[1:]:
        h = json.loads(json.dumps(header))
        h[key] = {**first}
        yield f"{key} shares {keys[0]}'s bytes", D.safetensors_bytes(h, data)
    # offsets that point back into the header, with the data shifted to match the byte count
    h = json.loads(json.dumps(header))
    for k in keys:
        b, e = h[k]["data_offsets"]
        h[k]["data_offsets"] = [b - 16, e - 16]
    yield "all offsets 16 bytes into the header", D.safetensors_bytes(h, data)
    for meta in [{"a": 1}, [], "x", None, {"a": None}, {"a": {"b": "c"}}, {"a": ["b"]}]:
        yield f"__metadata__ {meta!r}", D.safetensors_bytes({**header, "__metadata__": meta},
                                                            data)
    yield "__metadata__ twice", D.safetensors_bytes(
        D.with_duplicate_key(header, "__metadata__", {"format": "x"}), data)
    for raw in [b"[]", b'"x"', b"1", b"null", b"true", b"{}", b"", b" ", b"{", b"\xff\xfe{}",
                "{}".encode("utf-16"), b"\xef\xbb\xbf{}", D.deeply_nested(100_000),
                b'{"a": NaN}', b'{"a": 1e999}', b'{"a": ' + b"9" * 5000 + b"}",
                json.dumps(header).encode() + b"\0", b"\t" + json.dumps(header).encode()]:
        yield f"header {raw[:20]!r}", D.safetensors_bytes(raw, data)
    raw = json.dumps(header).encode()
    for length in [0, 1, len(raw) - 1, len(raw) + 1, len(raw) + len(data) + 1, 2 ** 63,
                   2 ** 64 - 1, 2 ** 64 - 8]:
        yield f"length field {length}", D.safetensors_bytes(raw, data, length=length)
    yield "7 bytes", b"\x00" * 7
    yield "nothing", b""
    yield "data one short", D.safetensors_bytes(header, data[:-1])
    for key in keys:  # a BOOL byte that is neither 0 nor 1
        if header[key]["dtype"] == "BOOL":
            b = header[key]["data_offsets"][0]
            yield f"{key} holds the byte 2", D.safetensors_bytes(
                header, data[:b] + b"\2" + data[b + 1:])
    yield "data one long", D.safetensors_bytes(header, data + b"\0")
    # random compositions of small edits to the numbers, seeded
    for i in range(400):
        h = json.loads(json.dumps(header))
        for _ in range(int(rng.integers(1, 4))):
            k = keys[int(rng.integers(len(keys)))]
            field = ["shape", "data_offsets"][int(rng.integers(2))]
            vals = h[k][field]
            if vals:
                j = int(rng.integers(len(vals)))
                vals[j] = int(vals[j]) + int(rng.choice([-8, -4, -2, -1, 1, 2, 4, 8]))
        yield f"random edit {i}", D.safetensors_bytes(h, data)


def differential(raw: bytes) -> str | None:
    """None if labkit refuses ``raw`` with CheckpointError, or accepts it and the safetensors
    library reads the same arrays from it; else what is wrong."""
    try:
        theirs = st_load(raw)
    except Exception:  # noqa: BLE001 - the library raises several types
        theirs = None
    try:
        ours = C.tensors_from_bytes(bytearray(raw), "crafted.safetensors")
    except CheckpointError as e:
        return None if "crafted.safetensors" in str(e) else f"error without the file: {e}"
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    if theirs is None:
        return "labkit accepted a file the safetensors library refuses"
    if set(ours) != set(theirs) or not all(D.same(ours[k], theirs[k]) for k in ours):
        return "labkit read other arrays than the safetensors library"
    return None


def test_crafted_headers_against_the_safetensors_library(pair):
    """labkit refuses at least everything safetensors refuses, and reads the same arrays from
    what both accept: crafted headers, and every bit of the header flipped."""
    tally = D.Tally("safetensors: crafted headers vs the safetensors library")
    rng = np.random.default_rng(SEED)
    raw = pair.files["tensors.safetensors"]
    head = len(raw) - len(pair.data)
    cases = [*header_variants(pair.header, pair.data, rng),
             *((f"header byte {i} bit {b}", d) for i, b, d in D.bit_flips(raw, range(head)))]
    refused = 0
    for label, crafted in cases:
        tally.record(label, differential(crafted))
        refused += _refuses(crafted)
    assert tally.held == tally.tried > 3000, tally.report()
    assert refused > 0.8 * tally.tried  # the cases are hostile: nearly all must be refused


def _refuses(raw) -> bool:
    try:
        C.tensors_from_bytes(bytearray(raw))
    except CheckpointError:
        return True
    return False


def check_crafted(p: Pair) -> str | None:
    """For a crafted tensors file with matching checksums: load refuses, or returns arrays that
    are exactly what the safetensors library reads from the file; latest never raises."""
    problem = check(p, exact=False)
    if problem:
        return problem
    try:
        got = C.load(p.newer)
    except CheckpointError:
        return None
    theirs = st_load((p.newer / "tensors.safetensors").read_bytes())
    arrays = []

    def walk(v):
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, np.ndarray):
            arrays.append(v)

    walk(got)
    if len(arrays) != len(theirs) or not all(any(D.same(a, t) for t in theirs.values())
                                             for a in arrays):
        return "load returned arrays the file does not hold"
    return None


def test_crafted_headers_inside_a_checkpoint(pair):
    """The same crafted files as tensors.safetensors of a checkpoint whose manifest matches
    them: refused by load (with the path), skipped by latest, never another exception."""
    tally = D.Tally("checkpoint: crafted headers with matching checksums")
    rng = np.random.default_rng(SEED)
    accepted = 0
    for label, crafted in header_variants(pair.header, pair.data, rng):
        if label.startswith("random edit") and int(label.split()[-1]) >= 40:
            continue
        try:
            pair.put("tensors.safetensors", crafted, reseal=True)
            tally.record(label, check_crafted(pair))
            accepted += C.verify(pair.newer) is None
        finally:
            pair.restore()
    assert tally.held == tally.tried > 250, tally.report()
    # accepted: only files that are valid in themselves (an I64 tensor retyped U64, an empty
    # tensor reshaped), which no checksum can tell from the original
    assert accepted < 0.1 * tally.tried


# ---- hostile manifest and state fields ------------------------------------------------------
def manifest_variants(m: dict):
    """(label, manifest bytes, what the error must name), each with fields_crc32 recomputed so
    that the field checks themselves are reached."""
    def sealed(x):
        if isinstance(x, dict) and "fields_crc32" in x:
            x = {**x, "fields_crc32": C._manifest.fields_crc32(x)}
        return D.dumps(x)

    for field in ("format", "version", "iteration", "epoch", "files", "labkit", "created", "run_id",
                  "metrics"):
        for v in D.HOSTILE:
            ok = (field == "run_id" and (v is None or isinstance(v, str))) or \
                (field == "labkit" and isinstance(v, str)) or \
                (field == "created" and type(v) in (int, float) and math.isfinite(v)) or \
                (field == "metrics" and isinstance(v, dict) and
                 all(type(x) in (int, float) for x in v.values()))
            if not ok:
                yield f"{field} = {v!r}", sealed({**m, field: v}), field
        if field in ("format", "version", "iteration", "epoch", "files"):
            yield f"no {field}", sealed({k: x for k, x in m.items() if k != field}), field
    for v in D.HOSTILE:
        if v != m["fields_crc32"]:
            yield f"fields_crc32 = {v!r}", D.dumps({**m, "fields_crc32": v}), "fields_crc32"
    for field, v in (("iteration", 3), ("run_id", "r2"), ("metrics", {"loss": 2.0})):
        yield f"{field} changed, seal kept", D.dumps({**m, field: v}), "fields_crc32"
    yield "unknown field", sealed({**m, "extra": 1}), "extra"
    files = m["files"]
    for name in ("../../x", "/etc/passwd", "sub/state.json", "manifest.json", "", ".",
                 "..", "state.json\0", "STATE.JSON"):
        named = {**files, name: files["state.json"]}
        yield f"files names {name!r}", sealed({**m, "files": named}), "files"
    for name in C.FILES:
        yield f"files lacks {name}", sealed({**m, "files": {k: v for k, v in files.items()
                                                            if k != name}}), name
        for key in ("size", "crc32"):
            for v in D.HOSTILE + [2 ** 32]:
                if key == "crc32" or v != 2 ** 32:
                    yield f"files[{name}].{key} = {v!r}", \
                        sealed({**m, "files": {**files, name: {**files[name], key: v}}}), key
        yield f"files[{name}] extra key", \
            sealed({**m, "files": {**files, name: {**files[name], "path": "/etc/passwd"}}}), "path"
        yield f"files[{name}] = []", sealed({**m, "files": {**files, name: []}}), name
    for v in ("x", None, [1], {"a": 1}, True):
        yield f"metrics value {v!r}", sealed({**m, "metrics": {"loss": v}}), "metrics"
    yield "duplicate iteration", D.with_duplicate_key(m, "iteration", m["iteration"]), "iteration"
    yield "duplicate files", D.with_duplicate_key(m, "files", files), "files"
    yield "a list", D.dumps([m]), "object"
    yield "deep", D.deeply_nested(100_000), "nested"
    yield "5 MB", b" " * (5 << 20) + D.dumps(m), "more than"
    yield "UTF-16", json.dumps(m).encode("utf-16"), "UTF-8"


def test_hostile_manifest_fields(pair):
    tally = D.Tally("checkpoint: hostile manifest fields")
    for label, body, expect in manifest_variants(json.loads(pair.files[C.MANIFEST])):
        try:
            pair.put(C.MANIFEST, body)
            problem = check(pair)
            if problem is None:
                try:
                    C.manifest(pair.newer)
                    problem = "accepted"
                except CheckpointError as e:
                    if expect not in str(e) or C.MANIFEST not in str(e):
                        problem = f"the error does not name {expect!r}: {e}"
            tally.record(label, problem)
        finally:
            pair.restore()
    assert tally.held == tally.tried > 250, tally.report()


def state_variants(tree: dict):
    """(label, state.json bytes, expected message fragment or None if it must load)."""
    yield "a list", D.dumps([tree]), "JSON object"
    yield "a reference", D.dumps({"__tensor__": "model/w"}), "reference to a tensor"
    for v in ("x", 1, None, True):
        yield f"state {v!r}", D.dumps(v), "JSON object"
    t = json.loads(json.dumps(tree))
    t["model"]["w"] = {"__tensor__": "nope"}
    yield "missing tensor", D.dumps(t), "lacks"
    for ref in (1, None, ["model/w"], {"a": 1}):
        t = json.loads(json.dumps(tree))
        t["model"]["w"] = {"__tensor__": ref}
        yield f"reference {ref!r}", D.dumps(t), "reference"
    t = json.loads(json.dumps(tree))
    t["model"]["w"] = {"__tensor__": "model/w", "extra": 1}
    yield "reference with extra key", D.dumps(t), "reference"
    t = json.loads(json.dumps(tree))
    t["model"]["w"] = None
    yield "tensor never referenced", D.dumps(t), "never refers"
    t = json.loads(json.dumps(tree))
    t["copy"] = {"__tensor__": "model/w"}
    yield "tensor referenced twice", D.dumps(t), "twice"
    yield "duplicate key", D.with_duplicate_key(tree, "name", "y"), "twice"
    yield "deep", D.deeply_nested(100_000), "nested too deeply"
    t = json.loads(json.dumps(tree))
    t["nested"] = json.loads("[" * 900 + "]" * 900)
    yield "deep but parseable", D.dumps(t), "nested too deeply"
    yield "invalid UTF-8", D.dumps(tree)[:-1] + b"\xff}", "UTF-8"
    yield "huge integer", D.dumps(tree)[:-1] + b', "n": ' + b"9" * 5000 + b"}", "JSON"
    # the rule for non-finite numbers: they are floats in the state, read back as written
    t = json.loads(json.dumps(tree))
    t["opt"]["lr"] = float("nan")
    t["opt"]["t"] = float("-inf")
    yield "NaN and -Infinity literals", D.dumps(t), None


def test_hostile_state_json(pair):
    tally = D.Tally("checkpoint: hostile state.json")
    tree = json.loads(pair.files["state.json"])
    for label, body, expect in state_variants(tree):
        try:
            pair.put("state.json", body, reseal=True)
            problem = check(pair, exact=False)
            if problem is None:
                try:
                    got = C.load(pair.newer)
                    if expect is not None:
                        problem = "accepted"
                    elif not (np.isnan(got["opt"]["lr"]) and got["opt"]["t"] == -np.inf and
                              D.same(got["model"], pair.state["model"])):
                        problem = "non-finite numbers did not load as floats"
                except CheckpointError as e:
                    if expect is None or expect not in str(e) or "state.json" not in str(e):
                        problem = f"unexpected error: {e}"
            tally.record(label, problem)
        finally:
            pair.restore()
    assert tally.held == tally.tried >= 19, tally.report()


# ---- links, FIFOs, directories, paths and I/O errors ----------------------------------------
def test_only_regular_files_inside_the_directory_are_read(pair, tmp_path):
    tally = D.Tally("checkpoint: links, FIFOs, directories")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name, raw in pair.files.items():
        (elsewhere / name).write_bytes(raw)  # identical bytes: only the link itself is wrong
    for name in pair.files:
        for kind in ("fifo", "symlink", "dangling", "directory", "missing"):
            try:
                f = pair.touch(name)
                if kind == "fifo":
                    D.make_fifo(f)
                elif kind in ("symlink", "dangling"):
                    D.link_in_place(f, elsewhere / name if kind == "symlink" else tmp_path / "no")
                else:
                    f.unlink()
                    if kind == "directory":
                        f.mkdir()
                problem = check(pair)
                if problem is None and C.verify(pair.newer) is None:
                    problem = "accepted"
                tally.record(f"{name} as {kind}", problem)
            finally:
                pair.restore()
    # a link to a whole checkpoint: not listed, not loaded, not removed, skipped with a warning
    link = pair.work / "ckpt-00000009"
    link.symlink_to(pair.newer)
    try:
        with pytest.warns(UserWarning, match="ckpt-00000009: a symbolic link"):
            best = C.latest(pair.work)
        tally.record("linked checkpoint directory: latest", None if best == pair.newer
                     else f"latest gave {best}")
        tally.record("linked checkpoint directory: listed",
                     None if link not in C.list_checkpoints(pair.work) else "listed")
        for fn in (C.load, C.manifest, C.remove, lambda p: C.load(f"{p}/")):
            try:
                fn(link)
                tally.record(f"linked checkpoint directory: {fn.__name__}", "accepted")
            except CheckpointError as e:
                tally.record(f"linked checkpoint directory: {fn.__name__}",
                             None if "link" in str(e) else str(e))
            except Exception as e:  # noqa: BLE001
                tally.record(f"linked checkpoint directory: {fn.__name__}", repr(e))
    finally:
        link.unlink()
    assert pair.newer.is_dir() and C.verify(pair.newer) is None
    assert tally.held == tally.tried, tally.report()


def test_io_errors_are_checkpoint_errors_naming_the_file(pair, monkeypatch):
    """Every OSError (permissions, EIO, EISDIR, ...) in stat, open or read of any file is a
    CheckpointError naming the file, and latest skips the checkpoint."""
    tally = D.Tally("checkpoint: injected I/O errors")
    real_read = C._files.read_exact
    for name in pair.files:
        for code in D.ERRNOS:
            for call in ("stat", "open", "read"):
                target = str(pair.newer / name)

                def hit(path, *a, dir_fd=None, _target=target, **k):
                    if dir_fd is not None:  # the file's full path, from its directory's fd
                        path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
                    return str(path) == _target

                def failing_read(fd, size, crc, where, _target=target, _code=code):
                    if str(where) == _target:
                        raise OSError(_code, os.strerror(_code))
                    return real_read(fd, size, crc, where)

                if call == "read":
                    with monkeypatch.context() as mp:
                        mp.setattr(C._files, "read_exact", failing_read)
                        problem = _io_case(pair, name)
                else:
                    with D.oserror(os, call, code, hit):
                        problem = _io_case(pair, name)
                tally.record(f"{call} {name}: {errno.errorcode[code]}", problem)
    assert tally.held == tally.tried, tally.report()


def _io_case(pair, name) -> str | None:
    try:
        C.load(pair.newer)
        return "load succeeded"
    except CheckpointError as e:
        if name not in str(e) and str(pair.newer) not in str(e):
            return f"the error does not name the file: {e}"
    except Exception as e:  # noqa: BLE001
        return f"load raised {type(e).__name__}: {e}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            best = C.latest(pair.work)
    except Exception as e:  # noqa: BLE001
        return f"latest raised {type(e).__name__}: {e}"
    return None if best == pair.older else f"latest gave {best}"


# ---- the suite can fail ---------------------------------------------------------------------
def test_the_checks_catch_broken_readers(pair, monkeypatch):
    """The same checks, run against deliberately broken copies of the reader, must report
    failures: without the layout check (overlaps, gaps, offsets into the header), without the
    CRC check, and with the manifest read unchecked as before."""
    rng = np.random.default_rng(SEED)
    caught = {}
    with monkeypatch.context() as mp:
        mp.setattr(C._tensors, "_check_layout", lambda *a: None)
        t = D.Tally("broken reader without the layout check (must fail)", must_fail=True)
        for label, crafted in header_variants(pair.header, pair.data, rng):
            if "shares" in label or "into the header" in label or "offsets" in label:
                t.record(label, differential(crafted))
        caught["layout"] = t
    with monkeypatch.context() as mp:
        real = C._files.read_exact
        mp.setattr(C._files, "read_exact",
                   lambda fd, size, crc, where: real(fd, size, None, where))
        t = D.Tally("broken reader without the CRC check (must fail)", must_fail=True)
        raw = pair.files["state.json"]
        run_cases(pair, t, ((f"state.json byte {i} bit {b}", "state.json", d, False)
                            for i, b, d in D.bit_flips(raw, D.sample(len(raw), 60, rng), 1,
                                                       rng)))
        caught["crc"] = t
    with monkeypatch.context() as mp:
        mp.setattr(C._manifest, "check_manifest", lambda m, where="": m)
        t = D.Tally("broken reader with the manifest unchecked (must fail)", must_fail=True)
        raw = pair.files[C.MANIFEST]
        run_cases(pair, t, ((f"manifest byte {i} bit {b}", C.MANIFEST, d, False)
                            for i, b, d in D.bit_flips(raw, D.sample(len(raw), 60, rng), 2,
                                                       rng)))
        caught["manifest"] = t
    for what, t in caught.items():
        assert t.held < t.tried, f"the suite did not notice the broken {what} check"
    print("\n" + "\n".join(t.report() for t in caught.values()))


def test_every_single_bit_flip_of_a_file_is_caught_by_its_crc(pair):
    """Why damage to tensors.safetensors and state.json can never load silently: CRC-32 detects
    every single-bit error (checked here for every bit of state.json)."""
    raw = pair.files["state.json"]
    crc = zlib.crc32(raw)
    assert all(zlib.crc32(d) != crc for _, _, d in D.bit_flips(raw))
