"""A probe of converters and of resuming pipelines (/tmp/probe16): an IDX header of 65
dimensions, a text vocabulary too large for a dataset's metadata (a file written that labkit
then refused as damaged), a byte-order mark, min_count, CIFAR errors naming the archive,
Bucket on scalars, and a stream state loaded into a pipeline whose stages have other settings
(a crop of 3 went on from a crop of 4's state: other data, silently)."""

from __future__ import annotations

import io
import struct
import tarfile

import numpy as np
import pytest

import labkit.data.converters as converters
import labkit.data.layout as layout
from labkit.data import (
    Bucket,
    Cast,
    DataStream,
    Filter,
    H5Dataset,
    IndexableDataset,
    Mapping,
    Normalize,
    OneHot,
    Padding,
    RandomCrop,
    RandomFlip,
    ScaleAndShift,
    convert_cifar10,
    convert_text,
    read_idx,
    write_h5,
)
from labkit.errors import DataError


# ---- converters ------------------------------------------------------------------------------
def test_an_idx_header_of_too_many_dimensions_is_refused_by_name(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(b"\0\0\x08\x41" + struct.pack(">65I", *[1] * 65) + b"\0")
    with pytest.raises(DataError, match="train-images-idx3-ubyte: the header declares 65 "
                                        "dimensions; an IDX file of images or labels has 1 to 4"):
        read_idx(path)


def test_metadata_too_large_for_a_reader_is_refused_before_anything_is_written(tmp_path,
                                                                               monkeypatch):
    monkeypatch.setattr(layout, "MAX_META", 100)
    with pytest.raises(DataError, match="metadata 'vocabulary' is .* bytes as JSON; .* at most "
                                        "100"):
        write_h5(tmp_path / "d.h5", {"x": np.arange(4)}, metadata={"vocabulary": ["w"] * 50})
    assert list(tmp_path.iterdir()) == []


def test_a_text_vocabulary_too_large_names_the_fix_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(converters, "MAX_META", 100)
    (tmp_path / "t.txt").write_text(" ".join(f"word{i}" for i in range(40)) + "\n")
    with pytest.raises(DataError, match=r"t.txt: its vocabulary of 41 tokens is .* bytes as "
                                        r"JSON, .*\(min_count=1 now: raise it\) or use "
                                        r"level='char'"):
        convert_text(tmp_path / "t.txt", tmp_path / "t.h5", level="word")
    assert not (tmp_path / "t.h5").exists()


def test_a_byte_order_mark_is_not_part_of_the_first_token(tmp_path):
    (tmp_path / "t.txt").write_bytes("\ufeffhello world\nhello\n".encode())
    ds = H5Dataset(convert_text(tmp_path / "t.txt", tmp_path / "t.h5", level="word",
                                valid_fraction=0, test_fraction=0))
    assert ds.metadata("vocabulary") == ["<unk>", "hello", "world"]


@pytest.mark.parametrize("bad", [0, -5, 2.5, "2", True])
def test_min_count_must_be_a_whole_number_of_at_least_one(tmp_path, bad):
    (tmp_path / "t.txt").write_text("a b\n")
    with pytest.raises(DataError, match="min_count must be a whole number >= 1"):
        convert_text(tmp_path / "t.txt", tmp_path / "t.h5", min_count=bad)


def test_a_cifar_member_of_a_wrong_length_is_named_with_its_archive(tmp_path):
    archive = tmp_path / "c.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for i, name in enumerate([f"data_batch_{i}.bin" for i in range(1, 6)]
                                 + ["test_batch.bin"]):
            data = bytes(3073 * 2 + (1 if i == 2 else 0))
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(DataError, match=r"c.tar.gz: data_batch_3.bin: 6147 bytes is not a whole "
                                        r"number of CIFAR-10 records"):
        convert_cifar10(archive, tmp_path / "c.h5")


def test_bucket_on_a_source_of_scalars_says_so():
    ds = IndexableDataset({"x": np.arange(8)})
    with pytest.raises(DataError, match="Bucket: source 'x' holds values without a length"):
        next(iter(Bucket(DataStream(ds), "x", batch_size=2)))


# ---- a state loaded into a pipeline with other settings --------------------------------------
def _images():
    rng = np.random.default_rng(0)
    return IndexableDataset({"features": rng.random((20, 1, 6, 6)).astype(np.float32),
                             "targets": rng.integers(0, 5, 20)})


def _add_one(item):
    return {**item, "features": item["features"] + 1}


def _add_two(item):
    return {**item, "features": item["features"] + 2}


def _short(item):
    return True


def _long(item):
    return False


STAGES = {
    "RandomCrop shape": (lambda s: RandomCrop(s, 4, seed=1), lambda s: RandomCrop(s, 3, seed=1)),
    "RandomFlip p": (lambda s: RandomFlip(s, p=0.5, seed=1), lambda s: RandomFlip(s, p=0.9,
                                                                                 seed=1)),
    "OneHot classes": (lambda s: OneHot(s, 5), lambda s: OneHot(s, 7)),
    "ScaleAndShift": (lambda s: ScaleAndShift(s, 0.5, which_sources="features"),
                      lambda s: ScaleAndShift(s, 2.0, which_sources="features")),
    "Normalize": (lambda s: Normalize(s, 0.5, 1.0, which_sources="features"),
                  lambda s: Normalize(s, 0.5, 2.0, which_sources="features")),
    "Cast": (lambda s: Cast(s, np.float32, "features"), lambda s: Cast(s, np.float64,
                                                                      "features")),
    "Mapping fn": (lambda s: Mapping(s, _add_one), lambda s: Mapping(s, _add_two)),
    "Filter predicate": (lambda s: Filter(s, _short), lambda s: Filter(s, _long)),
}


@pytest.mark.parametrize("case", list(STAGES))
def test_a_state_from_a_stage_with_other_settings_is_refused(case):
    saved_with, loaded_into = STAGES[case]
    a = saved_with(DataStream(_images(), batch_size=4, shuffle=True, seed=3))
    it = iter(a)
    next(it)
    state = a.state_dict()
    b = loaded_into(DataStream(_images(), batch_size=4, shuffle=True, seed=3))
    before = b.state_dict()
    with pytest.raises(DataError, match="the state was saved from a .* this one has .*; build "
                                        "the pipeline as it was when the state was saved"):
        b.load_state_dict(state)
    assert b.state_dict() == before  # left as it was
    same = saved_with(DataStream(_images(), batch_size=4, shuffle=True, seed=3))
    same.load_state_dict(state)  # the same settings load, and go on where it was
    np.testing.assert_array_equal(next(iter(same))["features"], next(it)["features"])


def test_a_state_saved_before_settings_were_recorded_still_loads():
    s = RandomCrop(DataStream(_images(), batch_size=4, shuffle=True, seed=3), 4, seed=1)
    state = s.state_dict()
    for stage in state["stages"]:
        stage.pop("settings", None)
    t = RandomCrop(DataStream(_images(), batch_size=4, shuffle=True, seed=3), 4, seed=1)
    t.load_state_dict(state)


def test_padding_settings_are_part_of_the_state():
    seqs = IndexableDataset({"text": np.array([np.arange(n) for n in (2, 3, 4, 5)],
                                              dtype=object)})
    a = Padding(DataStream(seqs, batch_size=2), pad_value=0)
    state = a.state_dict()
    with pytest.raises(DataError, match="pad_value"):
        Padding(DataStream(seqs, batch_size=2), pad_value=9).load_state_dict(state)
