"""Fault injection for dataset files: single-bit flips in a small file's metadata and data, and
hostile values of every field of the layout (splits, ragged offsets, axis labels, metadata,
sources). Each case must end in a ``DataError`` at open or read, or read back exactly what was
written: never different data silently, never a hang. The flips here are a fixed-seed sample run
in process; ``python -m tests.data.flips`` runs the full measurement in child processes with a
hard timeout per case (it sees hangs, which a test in process could only die of).
"""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

from labkit.data import H5Dataset, layout
from labkit.errors import DataError
from tests.data import flips

from .damage import Tally, flip, sample, with_duplicate_key

# NOTE: a hang inside h5py holds the GIL, so the signal method would never fire.
pytestmark = pytest.mark.timeout(300, method="thread")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    path = flips.build(tmp_path_factory.mktemp("dataset-faults") / "pristine.h5")
    return path, path.read_bytes(), flips.snapshot(path)


def check(path, reference) -> str | None:
    """None when the damaged file raised DataError or read back exactly; else what went wrong."""
    kind, detail = flips.classify(path, reference)
    return None if kind in ("held", "DataError") else f"{kind}: {detail}"


def run_flips(name, pristine, positions, tmp_path, rng) -> Tally:
    path, data, reference = pristine
    tally = Tally(name)
    damaged = tmp_path / "damaged.h5"
    for byte in positions:
        bit = int(rng.integers(8))
        damaged.write_bytes(flip(data, int(byte), bit))
        tally.record(f"byte {byte} bit {bit}", check(damaged, reference))
    return tally


def test_metadata_bit_flips(pristine, tmp_path):
    path, data, _ = pristine
    rng = np.random.default_rng(20240)
    meta = flips.metadata_bytes(path)
    tally = run_flips("dataset metadata bit flips", pristine,
                      meta[sample(len(meta), 1000, rng)], tmp_path, rng)
    print(tally)
    assert tally.held == tally.tried, tally.report()


def test_data_bit_flips(pristine, tmp_path):
    path, data, _ = pristine
    rng = np.random.default_rng(7)
    chunks = np.concatenate([np.arange(a, b) for a, b in flips.data_ranges(path)])
    tally = run_flips("dataset chunk bit flips", pristine, chunks[sample(len(chunks), 200, rng)],
                      tmp_path, rng)
    print(tally)
    assert tally.held == tally.tried, tally.report()


# ---- hostile values of every field ----------------------------------------------------------
def _attr(where, key, value):
    def change(f):
        f[where].attrs[key] = value
    return change


def _del_attr(where, key):
    def change(f):
        del f[where].attrs[key]
    return change


def _dataset(name, make):
    """Replace dataset ``name`` by ``make(its data)``, keeping its attributes."""
    def change(f):
        old, attrs = f[name][()], dict(f[name].attrs)
        del f[name]
        f[name] = make(old)
        f[name].attrs.update(attrs)
    return change


def _offsets(make):
    return _dataset("_ragged/text", make)


def _swap_two(o):
    i = 1 + int(np.flatnonzero(o[2:] > o[1:-1])[0])
    o = o.copy()
    o[i], o[i + 1] = o[i + 1], o[i]
    return o


def _splits(value):
    return _attr("/", "splits", value if isinstance(value, str) else json.dumps(value))


GOOD_SPLITS = {k: list(v) for k, v in flips.SPLITS.items()}
HOSTILE = {
    # splits
    "splits negative": (_splits({**GOOD_SPLITS, "train": [-10, -2]}), "split 'train'"),
    "splits float": (_splits({**GOOD_SPLITS, "train": [0, 7.5]}), "split 'train'"),
    "splits float 7.0": (_splits({**GOOD_SPLITS, "train": [0, 7.0]}), "split 'train'"),
    "splits exponent": (_splits('{"train": [0, 1e2]}'), "split 'train'"),
    "splits bool": (_splits({**GOOD_SPLITS, "test": [True, 3]}), "split 'test'"),
    "splits swapped": (_splits({**GOOD_SPLITS, "odd": [20, 10]}), "split 'odd'"),
    "splits past the end": (_splits({**GOOD_SPLITS, "test": [150, 201]}), "split 'test'"),
    "splits huge": (_splits({"train": [0, 10 ** 30]}), "split 'train'"),
    "splits one number": (_splits({"train": [0]}), "split 'train'"),
    "splits three numbers": (_splits({"train": [0, 1, 2]}), "split 'train'"),
    "splits string range": (_splits({"train": "0:150"}), "split 'train'"),
    "splits null": (_splits({"train": None}), "split 'train'"),
    "splits a list": (_splits([[0, 150]]), "attribute 'splits'"),
    "splits a number": (_splits("150"), "attribute 'splits'"),
    "splits not JSON": (_splits('{"train": [0, 150]'), "attribute 'splits'"),
    "splits NaN": (_splits('{"train": [0, NaN]}'), "attribute 'splits'"),
    "splits duplicate key": (_splits(with_duplicate_key(GOOD_SPLITS, "train", [0, 5]).decode()),
                             "attribute 'splits'"),
    "splits not text": (_attr("/", "splits", np.arange(4)), "attribute 'splits'"),
    "splits not UTF-8": (_attr("/", "splits", np.bytes_(b'{"\xff": [0, 1]}')),
                         "attribute 'splits'"),
    "splits missing": (_del_attr("/", "splits"), "attribute 'splits'"),
    # the format version
    "version 0": (_attr("/", "labkit_dataset", 0), "labkit_dataset"),
    "version 2": (_attr("/", "labkit_dataset", 2), "labkit dataset format 2"),
    "version text": (_attr("/", "labkit_dataset", "1"), "labkit_dataset"),
    "version float": (_attr("/", "labkit_dataset", 1.0), "labkit_dataset"),
    "version bool": (_attr("/", "labkit_dataset", np.bool_(True)), "labkit_dataset"),
    # ragged offsets
    "offsets swapped": (_offsets(_swap_two), "/_ragged/text"),
    "offsets negative": (_offsets(lambda o: np.r_[o[:5], -1, o[6:]]), "/_ragged/text"),
    "offsets not from 0": (_offsets(lambda o: o + 1), "/_ragged/text"),
    "offsets short of the end": (_offsets(lambda o: np.r_[o[:-1], o[-1] - 1]), "/_ragged/text"),
    "offsets past the end": (_offsets(lambda o: np.r_[o[:-1], o[-1] + 1]), "/_ragged/text"),
    "offsets one too many": (_offsets(lambda o: np.r_[o[:5], o[5], o[5:]]), "sources"),
    "offsets one too few": (_offsets(lambda o: np.delete(o, 5)), "sources"),
    "offsets float": (_offsets(lambda o: o.astype(np.float64)), "/_ragged/text"),
    "offsets 2-D": (_offsets(lambda o: np.stack([o, o])), "/_ragged/text"),
    "offsets empty": (_offsets(lambda o: o[:0]), "/_ragged/text"),
    "offsets uint64 wrapped": (_offsets(lambda o: np.r_[o[:5], -1, o[6:]].astype(np.uint64)),
                               "/_ragged/text"),
    "offsets missing": (lambda f: f.__delitem__("_ragged/text"), "/_ragged/text"),
    "ragged flag 2": (_attr("text", "ragged", 2), "'ragged'"),
    "ragged flag dropped": (_del_attr("text", "ragged"), "'text'"),
    "ragged flag float": (_attr("text", "ragged", 1.0), "'ragged'"),
    "ragged source 2-D": (_dataset("text", lambda d: np.stack([d, d], 1)), "ragged source 'text'"),
    # axis labels
    "labels not JSON": (_attr("features", "axis_labels", "[batch"), "axis_labels"),
    "labels too few": (_attr("features", "axis_labels", '["batch"]'), "axis_labels"),
    "labels too many": (_attr("text", "axis_labels", '["batch", "time", "x"]'), "axis_labels"),
    "labels numbers": (_attr("features", "axis_labels", "[1, 2]"), "axis_labels"),
    "labels an object": (_attr("features", "axis_labels", '{"batch": 0}'), "axis_labels"),
    # metadata
    "meta not JSON": (_dataset("_meta/level", lambda m: np.frombuffer(b'"cha', np.uint8)),
                      "/_meta/level"),
    "meta not UTF-8": (_dataset("_meta/level", lambda m: np.frombuffer(b'"\xff"', np.uint8)),
                       "/_meta/level"),
    "meta float": (_dataset("_meta/level", lambda m: m.astype(np.float32)), "/_meta/level"),
    "meta 2-D": (_dataset("_meta/level", lambda m: m.reshape(1, -1)), "/_meta/level"),
    "meta a group": (lambda f: f["_meta"].create_group("sub"), "/_meta/sub"),
    "_meta a dataset": (lambda f: (f.__delitem__("_meta"), f.create_dataset("_meta", data=[1])),
                        "/_meta"),
    # sources
    "source truncated": (_dataset("targets", lambda d: d[:-1]), "sources"),
    "source scalar": (lambda f: f.create_dataset("scalar", data=3), "source 'scalar'"),
    "source a group": (lambda f: f.create_group("extra"), "source 'extra'"),
    "source of strings": (lambda f: f.create_dataset("names", data=["a"] * 200,
                                                     dtype=h5py.string_dtype()), "source 'names'"),
    "unknown _member": (lambda f: f.create_dataset("_index", data=[1]), "'_index'"),
    "no sources": (lambda f: [f.__delitem__(k) for k in ("features", "targets", "text",
                                                        "_ragged")], "no sources"),
}


def apply(pristine, tmp_path, change):
    path = tmp_path / "crafted.h5"
    shutil.copyfile(pristine[0], path)
    with h5py.File(path, "r+") as f:
        change(f)
    return path


def test_hostile_field_values(pristine, tmp_path):
    tally = Tally("dataset hostile field values")
    for name, (change, field) in HOSTILE.items():
        path = apply(pristine, tmp_path, change)
        problem = check(path, pristine[2])
        if problem is None:
            try:
                flips.snapshot(path)
                problem = "read back without an error"
            except DataError as e:
                if field not in str(e) or "crafted.h5" not in str(e):
                    problem = f"the error does not name the file and {field!r}: {e}"
        tally.record(name, problem)
    print(tally)
    assert tally.held == tally.tried == len(HOSTILE), tally.report()


def test_splits_within_every_source_and_each_split_alone(pristine, tmp_path):
    """A valid edit of the splits is read as written (the checks refuse only what is wrong)."""
    path = apply(pristine, tmp_path, _splits({"a": [0, 0], "b": [3, 200], "c": [199, 200]}))
    assert H5Dataset(path, split="a").num_examples == 0
    assert H5Dataset(path, split=["c", "b"]).num_examples == 198


# ---- the suite can fail ---------------------------------------------------------------------
def _lax_splits(self, raw, n):
    """The check as it was: whatever the JSON holds, cast to int."""
    return {k: (int(v[0]), int(v[1])) for k, v in raw.items()}


def test_the_suite_sees_wrong_splits_when_the_split_check_is_off(pristine, tmp_path,
                                                                 monkeypatch):
    monkeypatch.setattr(layout._Reader, "splits", _lax_splits)
    path = apply(pristine, tmp_path, HOSTILE["splits float"][0])
    assert flips.classify(path, pristine[2])[0] == "silent"  # [0, 7.5] read as 7 rows
    path = apply(pristine, tmp_path, HOSTILE["splits negative"][0])
    assert check(path, pristine[2]) is not None  # an opaque IndexError, or rows from the end


def test_the_suite_sees_silent_flips_when_the_checksummed_format_is_off(tmp_path, monkeypatch):
    """The flips that the checksummed format turns into errors: the bits of the digits in the
    splits' text. Written the old way (HDF5's default format, text in the unchecksummed global
    heap), the same check finds data read silently wrong."""
    def run(label):
        path = flips.build(tmp_path / f"{label}.h5")
        data, reference = path.read_bytes(), flips.snapshot(path)
        text = json.dumps(GOOD_SPLITS).encode()
        at = data.find(text)
        assert at > 0
        damaged = tmp_path / "damaged.h5"
        outcomes = []
        digits = [at + i for i, c in enumerate(text) if chr(c).isdigit()]
        for byte in digits:
            for bit in range(8):
                damaged.write_bytes(flip(data, byte, bit))
                outcomes.append(flips.classify(damaged, reference)[0])
        return outcomes

    assert set(run("checksummed")) == {"DataError"}
    monkeypatch.setattr(layout, "LIBVER", ("earliest", "v110"))
    monkeypatch.setattr(layout, "_text_attr", str)  # variable-length: the global heap
    with pytest.warns(UserWarning, match="old file format"):
        outcomes = run("old")
    assert outcomes.count("silent") > 0, outcomes
