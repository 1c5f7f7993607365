"""What an attacker and a damaged disk tried on files (a probe of checkpoints, the HDF5 layout
and settings), each refused with a labkit error that names the culprit, or handled: data from
outside the file, a NaN best checkpoint, a checkpoint without a generator or with counters
past what the run store holds, a device this machine lacks, a directory named with a
superscript digit, and a data worker's error before the batches that precede it."""

import copy

import h5py
import numpy as np
import pytest

import labkit as lk
from labkit import checkpoint as ckpt
from labkit.data import DataStream, H5Dataset, Parallel
from labkit.errors import CheckpointError, ConfigError, DataError

from ..training.helpers import make_loop, refused_checkpoint


def _layout_file(path, make_x):
    """A labkit dataset file (the attributes write_h5 gives it) whose source ``x`` is made by
    ``make_x(file)``."""
    text = '{"train": [0, 4]}'
    with h5py.File(path, "w", libver=("v110", "v110")) as f:
        f.attrs["labkit_dataset"] = np.int64(1)
        f.attrs["splits"] = np.array(text.encode(), dtype=h5py.string_dtype("utf-8", len(text)))
        make_x(f)
    return path


@pytest.mark.parametrize("kind", ["external_raw", "external_link", "virtual", "soft_link"])
def test_sources_that_read_other_files_or_members_are_refused(tmp_path, kind):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = np.arange(4, dtype=np.float32)
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"root:x:0:0:secret" * 4)

    def make_x(f):
        if kind == "external_raw":
            f.create_dataset("x", shape=(4,), dtype=np.uint8, external=[(str(secret), 0, 4)])
        elif kind == "external_link":
            f["x"] = h5py.ExternalLink(str(other), "x")
        elif kind == "virtual":
            layout = h5py.VirtualLayout(shape=(4,), dtype=np.float32)
            layout[:] = h5py.VirtualSource(str(other), "x", shape=(4,))
            f.create_virtual_dataset("x", layout)
        else:
            f["y"] = np.arange(4, dtype=np.float32)
            f["x"] = h5py.SoftLink("/y")

    path = _layout_file(tmp_path / "d.h5", make_x)
    with pytest.raises(DataError, match="source 'x': expected (a dataset|data) stored in this"):
        H5Dataset(path, split="train")


@pytest.mark.parametrize("dtype", ["S4", "V8", [("a", "<f4"), ("b", "<i4")]])
def test_sources_that_are_not_numbers_are_refused(tmp_path, dtype):
    path = _layout_file(tmp_path / "d.h5", lambda f: f.create_dataset(
        "x", data=np.zeros(4, dtype=np.dtype(dtype))))
    with pytest.raises(DataError, match="expected numbers"):
        H5Dataset(path, split="train")


def test_keep_best_ignores_a_nan_metric(tmp_path):
    from labkit.training import Checkpoint

    c = Checkpoint(keep_last=1, keep_best="valid_loss")
    entries = [{"iteration": i, "metric": m, "name": f"ckpt-{i}"}
               for i, m in ((5, float("nan")), (10, 1.0), (15, 2.0), (20, float("inf")))]
    assert c._pick_best(entries)["iteration"] == 10


@pytest.fixture
def saved(tmp_path):
    loop = make_loop({"epochs": 1})
    loop.run()
    return loop.state_dict()


_load = refused_checkpoint


def test_a_checkpoint_without_a_generator_of_the_model_is_refused(tmp_path, saved):
    state = copy.deepcopy(saved)
    (name,) = list(state["rng"]["bricks"])
    del state["rng"]["bricks"][name]
    assert "no state for the model's random generators" in _load(tmp_path, state)


@pytest.mark.parametrize("key,value", [("epoch", 2 ** 64), ("iteration", 2 ** 63),
                                       ("time_total", float("inf"))])
def test_counters_the_run_store_cannot_hold_are_refused(tmp_path, saved, key, value):
    state = copy.deepcopy(saved)
    state["status"][key] = value
    assert f"status['{key}']" in _load(tmp_path, state)


def test_a_dropout_generator_of_a_device_this_machine_lacks_names_it(tmp_path, saved):
    state = copy.deepcopy(saved)
    state["rng"]["dropout"]["cl:99"] = {"seed": 1, "counter": 2}
    assert "dropout generator of cl:99" in _load(tmp_path, state)


def test_a_checkpoint_directory_named_with_a_superscript_digit(tmp_path):
    root = tmp_path / "checkpoints"
    (root / "ckpt-\u00b2").mkdir(parents=True)
    assert ckpt.latest(root) is None
    assert len(ckpt.list_checkpoints(root)) <= 1
    from labkit.server.lists import _is_int

    assert not _is_int("\u00b2") and _is_int("-12")


def fail_at_40(item):
    """A step that fails on the batch of rows 40:48 (importable: workers rebuild it)."""
    if item["x"][0] == 40:
        raise ValueError("bad rows 40:48")
    return item


def test_a_workers_error_comes_after_the_batches_before_it():
    """Batch 5 fails in a worker: the batches before it arrive first, as with workers=0."""
    from labkit.data import IndexableDataset, Mapping

    data = IndexableDataset({"x": np.arange(96, dtype=np.float32)})
    for workers in (0, 2):
        s = Mapping(DataStream(data, batch_size=8), fail_at_40)
        if workers:
            s = Parallel(s, workers=workers)
        got = []
        with pytest.raises(Exception, match="bad rows 40:48"):
            for b in s:
                got.append(int(b["x"][0]))
        assert got == [0, 8, 16, 24, 32], (workers, got)


def test_deeply_nested_junk_states_get_a_labkit_error():
    deep = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(CheckpointError):
        lk.Generator(0).load_state_dict({"seed": deep, "counter": 0})


def test_a_gemm_blocking_past_the_registers_is_a_config_error(monkeypatch):
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "99999999,2,16")
    with pytest.raises(ConfigError, match="rows per work-item 1-16"):
        lk.config.get("LABKIT_GEMM_CONFIG")


def test_labkit_home_that_is_a_file_is_a_data_error(monkeypatch):
    monkeypatch.setenv("LABKIT_HOME", "/dev/null")
    from labkit.data import converters

    monkeypatch.setattr(converters, "_VERIFIED", {})
    with pytest.raises(DataError, match="set LABKIT_HOME to a directory"):
        lk.data.get("digits")
