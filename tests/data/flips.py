"""Single-bit flips in a small dataset file, and what reading the damaged file gives.

``python -m tests.data.flips [-n N] [--old]`` measures, for N flips sampled over the file's
metadata bytes (every byte that is not chunk data), how many read back exactly as written,
raise ``DataError``, raise something else, return different data silently, or hang. Each case
runs in a child process with a hard timeout, so a hang is seen and the sweep goes on. ``--old``
writes the file the way labkit did before the checksummed format (HDF5's default, old file
format; text attributes as variable-length strings); ``--all`` flips every metadata bit.
``tests/faults/test_dataset_faults.py`` runs a sample of the same cases in process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

SPLITS = {"train": (0, 150), "test": (150, 200), "odd": (10, 20)}


def arrays(seed=0):
    rng = np.random.default_rng(seed)
    n = 200
    return {"features": rng.standard_normal((n, 64)).astype(np.float32),  # 4 chunks
            "targets": rng.integers(0, 10, n),
            "text": [rng.integers(0, 50, rng.integers(0, 9)).astype(np.int32) for _ in range(n)]}


def build(path, old=False) -> Path:
    """The small file the sweeps damage: dense, ragged, several chunks, labels and metadata."""
    kw = dict(axis_labels={"features": ("batch", "feature"), "text": ("batch", "time")},
              metadata={"vocabulary": ["<unk>", "é", "b"], "level": "char"}, name="toy",
              description="flip me")
    if old:
        return _build_old(path, arrays(), SPLITS, **kw)
    from labkit.data import write_h5

    return write_h5(path, arrays(), SPLITS, **kw)


def _build_old(path, sources, splits, axis_labels, metadata, name, description):
    """What write_h5 wrote before the checksummed format (for the before/after measurement)."""
    import h5py

    with h5py.File(path, "w") as f:
        f.attrs["labkit_dataset"] = 1
        f.attrs["splits"] = json.dumps({k: list(v) for k, v in splits.items()})
        f.attrs["name"], f.attrs["description"] = name, description

        def create(group, key, arr):
            rows = max(1, min(arr.shape[0], 16384 // max(arr[:1].nbytes, 1)))
            return group.create_dataset(key, data=arr, chunks=(rows, *arr.shape[1:]),
                                        fletcher32=True)
        for src, value in sources.items():
            if isinstance(value, list):
                offsets = np.zeros(len(value) + 1, np.int64)
                np.cumsum([len(s) for s in value], out=offsets[1:])
                d = create(f, src, np.concatenate(value))
                d.attrs["ragged"] = 1
                create(f.require_group("_ragged"), src, offsets)
            else:
                d = create(f, src, value)
            if src in axis_labels:
                d.attrs["axis_labels"] = json.dumps(list(axis_labels[src]))
        for key, value in metadata.items():
            create(f.require_group("_meta"), key,
                   np.frombuffer(json.dumps(value).encode(), np.uint8))
    return Path(path)


def data_ranges(path) -> list[tuple[int, int]]:
    """The byte ranges of chunk (or contiguous) data: everything else is metadata."""
    import h5py

    out = []
    with h5py.File(path, "r") as f:
        def visit(_, obj):
            if not isinstance(obj, h5py.Dataset):
                return
            if obj.chunks is None:
                off = obj.id.get_offset()
                if off is not None:
                    out.append((off, off + obj.id.get_storage_size()))
                return
            for i in range(obj.id.get_num_chunks()):
                info = obj.id.get_chunk_info(i)
                out.append((info.byte_offset, info.byte_offset + info.size))
        f.visititems(visit)
    return sorted(out)


def metadata_bytes(path) -> np.ndarray:
    size = Path(path).stat().st_size
    mask = np.ones(size, bool)
    for a, b in data_ranges(path):
        mask[a:b] = False
    return np.flatnonzero(mask)


def snapshot(path) -> dict:
    """Everything a reader gets from the file, as plain values (to compare with ==)."""
    from labkit.data import H5Dataset

    out = {}
    # NOTE: one reader of every split the file was written with, in turn (a split that is gone
    # is a DataError, like a user asking for it; one added is seen in "splits").
    names = sorted(SPLITS)
    every = H5Dataset(path, split=names)
    out["sources"] = list(every.all_sources)
    out["splits"] = {k: list(v) for k, v in every.splits.items()}
    out["labels"] = {k: list(v) if v else None for k, v in every.axis_labels_all.items()}
    out["meta"] = {k: every.metadata(k) for k in every.metadata_keys}
    out["info"] = getattr(every, "info", None)
    got = every.get_data(slice(0, every.num_examples))
    at = 0
    for split in names:
        a, b = every.splits[split]
        for s, v in got.items():
            part = v[at:at + b - a]
            if s in every.ragged:
                part = [np.asarray(x).tolist() + [str(np.asarray(x).dtype)] for x in part]
            else:
                part = [str(part.dtype), list(part.shape), part.tobytes().hex()]
            out[f"{split}/{s}"] = part
        at += b - a
    every.close()
    return out


def classify(path, reference) -> tuple[str, str]:
    """("held" | "DataError" | "other" | "silent", detail) for one damaged file, in process."""
    from labkit.errors import DataError

    try:
        got = snapshot(path)
    except DataError as e:
        return "DataError", str(e).splitlines()[0][:200]
    except Exception as e:  # noqa: BLE001 - counted as an opaque error
        return "other", f"{type(e).__name__}: {e}"[:200]
    if got == reference:
        return "held", ""
    diff = sorted(k for k in set(got) | set(reference) if got.get(k) != reference.get(k))
    return "silent", ", ".join(diff)[:200]


def flipped(data: bytes, byte: int, bit: int) -> bytes:
    raw = bytearray(data)
    raw[byte] ^= 1 << bit
    return bytes(raw)


def cases(path, n, seed, everything=False) -> list[tuple[int, int]]:
    meta = metadata_bytes(path)
    allc = [(int(b), bit) for b in meta for bit in range(8)]
    if everything or n >= len(allc):
        return allc
    rng = np.random.default_rng(seed)
    return [allc[i] for i in sorted(rng.choice(len(allc), n, replace=False))]


# ---- the child process: one damaged file per line on stdin, one JSON answer per line --------
def _child(pristine):
    import warnings

    warnings.simplefilter("ignore")
    reference = snapshot(pristine)
    print("ready", flush=True)
    for line in sys.stdin:
        kind, detail = classify(line.strip(), reference)
        print(json.dumps([kind, detail]), flush=True)


class _Runner:
    def __init__(self, pristine, env):
        self.pristine, self.env, self.p = pristine, env, None

    def start(self):
        self.p = subprocess.Popen([sys.executable, "-m", "tests.data.flips", "--child",
                                   str(self.pristine)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=self.env,
                                  cwd=Path(__file__).resolve().parents[2])
        assert self.p.stdout.readline().strip() == "ready"

    def ask(self, path, timeout):
        import selectors

        if self.p is None:
            self.start()
        self.p.stdin.write(f"{path}\n")
        self.p.stdin.flush()
        sel = selectors.DefaultSelector()
        sel.register(self.p.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            self.p.kill()
            self.p.wait()
            self.p = None
            return "hang", f"no answer within {timeout} s"
        line = self.p.stdout.readline()
        if not line:
            code = self.p.wait()
            self.p = None
            return "other", f"the reader process died (exit code {code})"
        return tuple(json.loads(line))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--old", action="store_true")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--child")
    ap.add_argument("--show", type=int, default=8, help="cases of each outcome to list")
    a = ap.parse_args(argv)
    if a.child:
        return _child(a.child)
    tmp = Path(tempfile.mkdtemp(prefix="labkit-flips-"))
    pristine = build(tmp / "pristine.h5", old=a.old)
    data = pristine.read_bytes()
    todo = cases(pristine, a.n, a.seed, a.all)
    print(f"{'old' if a.old else 'new'} format: {len(data)} bytes, "
          f"{len(metadata_bytes(pristine))} of them metadata; {len(todo)} single-bit flips")
    runner = _Runner(pristine, {**os.environ, "OMP_NUM_THREADS": "1"})
    counts, examples = Counter(), {}
    t0 = time.monotonic()
    damaged = tmp / "damaged.h5"
    for i, (byte, bit) in enumerate(todo):
        damaged.write_bytes(flipped(data, byte, bit))
        kind, detail = runner.ask(damaged, a.timeout)
        counts[kind] += 1
        examples.setdefault(kind, []).append(f"byte {byte} bit {bit}: {detail}")
        if (i + 1) % 500 == 0:
            print(f"  {i + 1}: {dict(counts)} ({time.monotonic() - t0:.0f} s)", flush=True)
    if runner.p is not None:
        runner.p.stdin.close()
        runner.p.wait()
    print(f"done in {time.monotonic() - t0:.0f} s: " + ", ".join(
        f"{k} {counts[k]}" for k in ("held", "DataError", "other", "silent", "hang")))
    for kind in ("silent", "other", "hang", "DataError"):
        for line in examples.get(kind, [])[:a.show]:
            print(f"  {kind}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
