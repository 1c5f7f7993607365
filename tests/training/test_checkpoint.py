"""The checkpoint format: round trips, safetensors interop, atomicity and corruption."""

import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from labkit import checkpoint
from labkit.errors import CheckpointError


@pytest.fixture
def state(rng):
    return {"model": {"w": rng.standard_normal((5, 7)).astype(np.float32)[:, ::2],  # strided
                      "b": np.arange(3, dtype=np.int64), "flag": np.array(True),
                      "h": np.zeros((0, 4), np.float16)},
            "opt": {"t": 12, "lr": 0.5, "state": [np.ones(2), None]},
            "name": "x", "nested": {"list": [1, 2.5, "s", None, True]}}


def same(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and \
            np.array_equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b and type(a) is type(b)


def test_round_trip_and_layout(tmp_path, state):
    path = checkpoint.save(tmp_path, state, step=12, epoch=1, metrics={"loss": 0.5})
    assert path.name == "ckpt-00000012"
    assert sorted(p.name for p in path.iterdir()) == ["manifest.json", "state.json",
                                                      "tensors.safetensors"]
    m = json.loads((path / "manifest.json").read_text())
    assert m["format"] == "labkit-checkpoint" and m["version"] == 1 and m["step"] == 12
    assert m["metrics"] == {"loss": 0.5}
    assert set(m["files"]) == {"tensors.safetensors", "state.json"}
    assert same(checkpoint.load(path), state)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_safetensors_files_both_ways(tmp_path, state):
    path = checkpoint.save(tmp_path, state)
    theirs = load_file(str(path / "tensors.safetensors"))
    assert np.array_equal(theirs["model/w"], state["model"]["w"])  # strided input, right bytes
    assert theirs["model/flag"].shape == () and theirs["opt/state/0"].dtype == np.float64
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, 2], np.int8)}
    save_file(arrays, str(tmp_path / "lib.safetensors"))
    ours = checkpoint.tensors_from_bytes(bytearray((tmp_path / "lib.safetensors").read_bytes()))
    assert same(ours, arrays)


def test_values_a_checkpoint_cannot_hold_are_named(tmp_path):
    with pytest.raises(CheckpointError, match=r"state\['opt'\]\['fn'\] is a "
                                              r"builtin_function_or_method.*JSON values"):
        checkpoint.save(tmp_path, {"opt": {"fn": print}})
    with pytest.raises(CheckpointError, match="keys must be strings"):
        checkpoint.save(tmp_path, {"a": {1: 2}})
    with pytest.raises(CheckpointError, match="complex64"):
        checkpoint.save(tmp_path, {"a": np.zeros(2, np.complex64)})
    assert checkpoint.list_checkpoints(tmp_path) == []


def test_crash_during_save_leaves_the_previous_checkpoint(tmp_path, state, monkeypatch):
    good = checkpoint.save(tmp_path, state, step=1)
    calls = {"n": 0}
    real = checkpoint._write_file

    def dying(path, pieces):
        calls["n"] += 1
        if calls["n"] == 2:  # after the tensors, before the manifest
            raise OSError("disk full (simulated)")
        return real(path, pieces)

    monkeypatch.setattr(checkpoint, "_write_file", dying)
    with pytest.raises(OSError, match="simulated"):
        checkpoint.save(tmp_path, state, step=2)
    monkeypatch.undo()
    assert checkpoint.list_checkpoints(tmp_path) == [good]
    assert checkpoint.latest(tmp_path) == good
    assert same(checkpoint.load(good), state)
    # a temp directory left by a killed process is ignored by autoload
    (tmp_path / ".ckpt-00000003.tmp-999-1").mkdir()
    assert checkpoint.latest(tmp_path) == good


@pytest.mark.parametrize("damage", ["flip", "truncate", "no-manifest", "bad-json", "missing"])
def test_corrupted_checkpoints_are_reported_and_skipped(tmp_path, state, damage):
    older = checkpoint.save(tmp_path, state, step=1)
    newer = checkpoint.save(tmp_path, state, step=2)
    f = newer / "tensors.safetensors"
    if damage == "flip":
        raw = bytearray(f.read_bytes())
        raw[-3] ^= 0x10
        f.write_bytes(bytes(raw))
        expect = "CRC-32 does not match"
    elif damage == "truncate":
        f.write_bytes(f.read_bytes()[:-5])
        expect = "truncated"
    elif damage == "no-manifest":
        (newer / "manifest.json").unlink()
        expect = "no manifest.json; the checkpoint is incomplete"
    elif damage == "bad-json":
        (newer / "manifest.json").write_text("{nope")
        expect = "not valid JSON"
    else:
        f.unlink()
        expect = "missing|no such file|No such file"
    with pytest.raises(CheckpointError, match=expect):
        checkpoint.load(newer)
    with pytest.warns(UserWarning, match=f"skipping checkpoint .*ckpt-00000002: .*({expect})"):
        assert checkpoint.latest(tmp_path) == older


def test_remove_and_overwrite(tmp_path, state):
    p = checkpoint.save(tmp_path, state, step=4)
    q = checkpoint.save(tmp_path, {"x": np.ones(1)}, step=4)  # the same step again replaces it
    assert p == q and list(checkpoint.load(q)) == ["x"]
    checkpoint.remove(q)
    assert not q.exists() and not os.listdir(tmp_path)
