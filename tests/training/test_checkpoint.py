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
    path = checkpoint.save(tmp_path, state, iteration=12, epoch=1, metrics={"loss": 0.5})
    assert path.name == "ckpt-00000012"
    assert sorted(p.name for p in path.iterdir()) == ["manifest.json", "state.json",
                                                      "tensors.safetensors"]
    m = json.loads((path / "manifest.json").read_text())
    assert m["format"] == "labkit-checkpoint" and m["version"] == 2 and m["iteration"] == 12
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
    good = checkpoint.save(tmp_path, state, iteration=1)
    calls = {"n": 0}
    real = checkpoint._files.write_file

    def dying(path, pieces):
        calls["n"] += 1
        if calls["n"] == 2:  # after the tensors, before the manifest
            raise OSError("disk full (simulated)")
        return real(path, pieces)

    monkeypatch.setattr(checkpoint._files, "write_file", dying)
    with pytest.raises(OSError, match="simulated"):
        checkpoint.save(tmp_path, state, iteration=2)
    monkeypatch.undo()
    assert checkpoint.list_checkpoints(tmp_path) == [good]
    assert checkpoint.latest(tmp_path) == good
    assert same(checkpoint.load(good), state)
    # a temp directory left by a killed process is ignored by autoload
    (tmp_path / ".ckpt-00000003.tmp-999-1").mkdir()
    assert checkpoint.latest(tmp_path) == good


@pytest.mark.parametrize("damage", ["flip", "truncate", "no-manifest", "bad-json", "missing"])
def test_corrupted_checkpoints_are_reported_and_skipped(tmp_path, state, damage):
    older = checkpoint.save(tmp_path, state, iteration=1)
    newer = checkpoint.save(tmp_path, state, iteration=2)
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
    p = checkpoint.save(tmp_path, state, iteration=4)
    q = checkpoint.save(tmp_path, {"x": np.ones(1)}, iteration=4)  # the same step again replaces it
    assert p == q and list(checkpoint.load(q)) == ["x"]
    checkpoint.remove(q)
    assert not q.exists() and not os.listdir(tmp_path)


def test_non_finite_floats_and_colliding_keys_round_trip(tmp_path):
    """The rule for non-finite numbers: floats in the state are written as NaN/Infinity and read
    back as floats. Arrays whose paths spell the same key keep their own tensors."""
    state = {"log": [float("nan"), float("inf"), -float("inf")],
             "a/b": np.zeros(2), "a": {"b": np.ones(3)}}
    got = checkpoint.load(checkpoint.save(tmp_path, state))
    assert np.isnan(got["log"][0]) and got["log"][1:] == [float("inf"), -float("inf")]
    assert np.array_equal(got["a/b"], np.zeros(2)) and np.array_equal(got["a"]["b"], np.ones(3))
    with pytest.raises(CheckpointError, match=r"state\['x'\] has the key '__tensor__'"):
        checkpoint.save(tmp_path, {"x": {"__tensor__": "a"}})


def reseal(path):
    """Make the manifest's sizes and CRC-32s match the files again (a crafted checkpoint)."""
    import zlib

    m = json.loads((path / "manifest.json").read_text())
    for name in m["files"]:
        raw = (path / name).read_bytes()
        m["files"][name] = {"size": len(raw), "crc32": zlib.crc32(raw)}
    (path / "manifest.json").write_text(json.dumps(m))


def crafted(header, data=b""):
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + data


@pytest.mark.parametrize("header, data, expect", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(8), "overlaps"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}}, bytes(8),
     r"data_offsets \[-8, 0\] do not lie inside"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8), "belong to no"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, bytes(8), "after the last"),
    ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, bytes(8), "non-negative"),
    ({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, bytes(8), "non-negative"),
    ({"a": {"dtype": "F32", "shape": [True, 2], "data_offsets": [0, 8]}}, bytes(8), "integers"),
    ({"a": {"dtype": "F32", "shape": [2 ** 62, 4], "data_offsets": [0, 8]}}, bytes(8), "needs"),
    ({"a": {"dtype": "X", "shape": [2], "data_offsets": [0, 8]}}, bytes(8), "dtype 'X'"),
    ({"a": None}, b"", "header entry is null"), ({"a": []}, b"", "header entry is a list"),
    ({"__metadata__": {"k": 1}}, b"", "__metadata__"), ([], b"", "header is a list"),
])
def test_crafted_tensor_headers_are_refused_by_name(tmp_path, header, data, expect):
    """Headers the safetensors library refuses (and more), even when the checksums match."""
    with pytest.raises(CheckpointError, match=expect):
        checkpoint.tensors_from_bytes(bytearray(crafted(header, data)), "x.safetensors")
    older = checkpoint.save(tmp_path, {"w": np.ones(2)}, iteration=1)
    newer = checkpoint.save(tmp_path, {"w": np.ones(2)}, iteration=2)
    (newer / "tensors.safetensors").write_bytes(crafted(header, data))
    reseal(newer)
    with pytest.raises(CheckpointError, match=f"tensors.safetensors: .*{expect}"):
        checkpoint.load(newer)
    with pytest.warns(UserWarning, match="skipping checkpoint .*ckpt-00000002"):
        assert checkpoint.latest(tmp_path) == older


def test_duplicate_keys_are_refused(tmp_path):
    raw = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},' \
          b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    with pytest.raises(CheckpointError, match="'a' appears twice"):
        checkpoint.tensors_from_bytes(bytearray(len(raw).to_bytes(8, "little") + raw + b"\1"))
    path = checkpoint.save(tmp_path, {"w": np.ones(2)})
    m = (path / "manifest.json").read_text()
    (path / "manifest.json").write_text(m[:-1] + ', "iteration": 5}')
    with pytest.raises(CheckpointError, match="'iteration' appears twice"):
        checkpoint.manifest(path)


def test_manifest_fields_are_checked_and_sealed(tmp_path):
    path = checkpoint.save(tmp_path, {"w": np.ones(2)}, iteration=3, metrics={"loss": 0.5})
    original = json.loads((path / "manifest.json").read_text())
    assert isinstance(original["fields_crc32"], int)

    def edited(**fields):
        (path / "manifest.json").write_text(json.dumps({**original, **fields}))

    edited(iteration=4)  # a changed field without a matching seal: damage, not a new value
    with pytest.raises(CheckpointError, match="fields_crc32 does not match"):
        checkpoint.manifest(path)
    edited(fields_crc32=None)
    with pytest.raises(CheckpointError, match="fields_crc32 does not match"):
        checkpoint.manifest(path)
    without = {k: v for k, v in original.items() if k != "fields_crc32"}
    for field, value, expect in [("iteration", -1, "iteration is -1"),
                                 ("iteration", "3", "iteration is '3'"),
                                 ("epoch", True, "epoch is True"),
                                 ("metrics", {"loss": "x"}, "metrics"),
                                 ("run_id", 7, "run_id is 7"), ("version", 3, "upgrade labkit"),
                                 ("files", {**original["files"], "../../x": {"size": 1,
                                                                              "crc32": 0}},
                                  "unknown ../../x"),
                                 # NOTE: a crafted key is shown escaped, not as lines
                                 ("files", {**original["files"], "x\nfiles lacks ['w']": 1},
                                  r"has unknown \"x\\nfiles lacks \['w'\]\"; expected")]:
        (path / "manifest.json").write_text(json.dumps({**without, field: value}))
        with pytest.raises(CheckpointError, match=expect):
            checkpoint.manifest(path)
    # a manifest of labkit before the seal (format 1, which said step): still read; one of
    # format 2 (every one of them was written sealed) without it: edited
    old = {k: v for k, v in without.items() if k != "iteration"}
    (path / "manifest.json").write_text(json.dumps({**old, "version": 1, "step": 3}))
    assert checkpoint.manifest(path)["iteration"] == 3
    assert checkpoint.verify(path) is None
    (path / "manifest.json").write_text(json.dumps(without))
    with pytest.raises(CheckpointError, match="no fields_crc32"):
        checkpoint.manifest(path)


def test_state_json_references_are_checked(tmp_path):
    path = checkpoint.save(tmp_path, {"w": np.ones(2), "v": np.zeros(1)})
    for tree, expect in [([1], "a list; a checkpoint's state is a JSON object"),
                         ({"w": {"__tensor__": "w"}}, r"never refers to the tensors \['v'\]"),
                         ({"w": {"__tensor__": "w"}, "v": {"__tensor__": "w"}},
                          "'w' is referenced twice"),
                         ({"w": {"__tensor__": "w", "x": 1}, "v": {"__tensor__": "v"}},
                          "a reference to an array is exactly"),
                         ({"w": {"__tensor__": "q"}, "v": {"__tensor__": "v"}}, "lacks")]:
        (path / "state.json").write_text(json.dumps(tree))
        reseal(path)
        with pytest.raises(CheckpointError, match=f"state.json.*{expect}"):
            checkpoint.load(path)


def test_remove_refuses_what_is_not_a_checkpoint(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(CheckpointError, match="not a labkit checkpoint directory"):
        checkpoint.remove(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_a_killed_writers_leftovers_are_named_for_it_and_cleaned_by_the_next_save(tmp_path):
    """The temporary directory carries pid, start time and host (tests/training/test_resume.py
    and cleanup() rely on the '.<name>.tmp-' prefix); the next save removes a dead writer's."""
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead = int(child.stdout)
    name = checkpoint._writers.temp_name("ckpt-00000002", "tmp").replace(f"-{os.getpid()}-", "-0-")
    assert name.startswith(".ckpt-00000002.tmp-")
    left = tmp_path / f".ckpt-00000002.tmp-{dead}-1-{checkpoint._writers.HOST}-0"
    left.mkdir()
    (left / "tensors.safetensors").write_bytes(b"half")
    checkpoint.save(tmp_path, {"w": np.ones(1)}, iteration=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-00000003"]


def test_format_1_manifests_are_still_read(tmp_path):
    """labkit 0.1 wrote format 1, whose manifest says ``step``: read as the iteration."""
    path = checkpoint.save(tmp_path, {"w": np.ones(2)}, iteration=3)
    m = json.loads((path / "manifest.json").read_text())
    m["version"], m["step"] = 1, m.pop("iteration")
    del m["fields_crc32"]
    (path / "manifest.json").write_text(json.dumps(m))
    assert checkpoint.manifest(path)["iteration"] == 3
    assert checkpoint.latest(tmp_path) == path
    m["iteration"] = 3  # format 1 has no iteration field: refused, not half-believed
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CheckpointError, match="has unknown iteration;"):
        checkpoint.manifest(path)


def test_load_latest_reads_each_checkpoint_once(tmp_path, monkeypatch):
    """``load_latest`` returns the newest checkpoint that loads with its state, and the newer
    ones it passed over: every file is read once (a resume does not load twice)."""
    good = checkpoint.save(tmp_path, {"w": np.ones(2)}, iteration=1)
    bad = checkpoint.save(tmp_path, {"w": np.ones(2)}, iteration=2)
    (bad / "state.json").write_text("{}")
    reads = []
    real = checkpoint._files.read_exact

    def counting(fd, size, crc, where):
        reads.append(where)
        return real(fd, size, crc, where)

    monkeypatch.setattr(checkpoint._files, "read_exact", counting)
    with pytest.warns(UserWarning, match="skipping checkpoint .*ckpt-00000002"):
        path, state, skipped = checkpoint.load_latest(tmp_path)
    assert path == good and skipped == [bad] and state["w"].tolist() == [1.0, 1.0]
    for name in ("tensors.safetensors", "state.json"):  # (the small manifest is also read
        assert sum(r.endswith(f"ckpt-00000001/{name}") for r in reads) == 1  # to sort by it)
    assert checkpoint.load_latest(tmp_path / "none") == (None, None, [])


def test_load_latest_passes_over_what_accept_refuses_like_damage(tmp_path):
    """``accept`` is the caller's own check of a state that loaded: its CheckpointError skips
    the checkpoint (with a warning naming it and why), anything else it raises propagates."""
    older = checkpoint.save(tmp_path, {"n": 1}, iteration=1)
    newer = checkpoint.save(tmp_path, {"n": -5}, iteration=2)

    def accept(path, state):
        if state["n"] < 0:
            raise CheckpointError(f"n is {state['n']}, expected >= 0")

    with pytest.warns(UserWarning, match=r"skipping checkpoint .*ckpt-00000002: n is -5"):
        path, state, skipped = checkpoint.load_latest(tmp_path, accept=accept)
    assert (path, state, skipped) == (older, {"n": 1}, [newer])

    def broken(path, state):
        raise RuntimeError("a bug in the caller")

    with pytest.raises(RuntimeError, match="a bug in the caller"):
        checkpoint.load_latest(tmp_path, accept=broken)
    assert newer.is_dir() and older.is_dir()


def test_a_manifest_edited_with_its_seal_dropped_is_refused_not_believed(tmp_path):
    """Every manifest labkit writes in format 2 is sealed (fields_crc32): one edited to say an
    older iteration, its seal dropped, sorted before the older checkpoints and latest() took
    one of those, silently. It is refused, ordered by its name, and reported. What the caller
    labels is still believed: a name and an iteration of its choosing (the manifest is the
    caller's label), and format 1 manifests, from before the seal."""
    for it in (5, 10, 15):
        checkpoint.save(tmp_path, {"w": np.full(2, float(it))}, iteration=it)
    edited = tmp_path / "ckpt-00000015"
    m = json.loads((edited / "manifest.json").read_text())
    del m["fields_crc32"]
    (edited / "manifest.json").write_text(json.dumps({**m, "iteration": 3}))
    with pytest.raises(CheckpointError, match=r"ckpt-00000015/manifest.json: no fields_crc32, "
                                              r"which labkit writes in every manifest of "
                                              r"format 2; the manifest was edited"):
        checkpoint.load(edited)
    assert checkpoint.list_checkpoints(tmp_path)[-1] == edited
    with pytest.warns(UserWarning, match="skipping checkpoint .*ckpt-00000015.*no fields_crc32"):
        assert checkpoint.latest(tmp_path).name == "ckpt-00000010"
    labelled = checkpoint.save(tmp_path / "b", {"w": np.ones(2)}, name="ckpt-00000015",
                               iteration=3)
    assert checkpoint.manifest(labelled)["iteration"] == 3
    assert checkpoint.latest(tmp_path / "b") == labelled
