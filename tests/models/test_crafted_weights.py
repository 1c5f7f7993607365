"""Weights from elsewhere: crafted records and weights files given to ``lk.models.load`` are
refused with a CheckpointError naming the file and the culprit, before anything large is built,
and never hang (FIFOs, devices); what labkit writes still loads."""

import json
import os

import numpy as np
import pytest

import labkit as lk
from labkit.checkpoint import tensors_bytes
from labkit.models import _weights, charlstm, cnn, dcgan, resnet, vae

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("weights")
    lk.bricks.set_seed(0)
    lk.models.save(cnn.build({"channels": 4}), "w", "cnn", {"channels": 4}, {}, "x",
                   directory=d)
    return d, (d / "w.json").read_bytes(), (d / "w.safetensors").read_bytes()


@pytest.fixture
def w(saved):
    d, record, weights = saved
    yield d
    for name, raw in (("w.json", record), ("w.safetensors", weights)):
        p = d / name
        if p.is_dir() and not p.is_symlink():
            p.rmdir()
        elif os.path.lexists(p):
            p.unlink()
        p.write_bytes(raw)


def refused(d, match, name="w"):
    with pytest.raises(lk.CheckpointError, match=match):
        lk.models.load(name, directory=d)


def record(d, **fields):
    (d / "w.json").write_text(json.dumps({"module": "cnn", "config": {"channels": 4}, **fields}))


def weights(d, state):
    """``state`` as the weights file, the record's fingerprint made to match (so that what
    is tested is what the file holds, not that it was changed)."""
    data = b"".join(bytes(p) for p in tensors_bytes(state))
    (d / "w.safetensors").write_bytes(data)
    rec = json.loads((d / "w.json").read_text())
    if "weights" in rec:
        rec["weights"] = _weights.fingerprint(data)
        (d / "w.json").write_text(json.dumps(rec))


@pytest.mark.parametrize("raw, why", [
    (b"\xff\xfe{}", "utf-8"), (b"{nope", "Expecting"), (b"[" * 100_000, "nested too deeply"),
    (b'{"module": "cnn", "module": "vae", "config": {}}', "'module' appears twice"),
    (b'{"module": "cnn", "config": {"channels": 4, "channels": 8}}', "appears twice"),
])
def test_a_record_that_is_not_strict_json_is_refused(w, raw, why):
    (w / "w.json").write_bytes(raw)
    refused(w, rf"w\.json: not a weights record: .*{why}")


@pytest.mark.parametrize("module", ["common", "_weights", "texts", "_grid", "nothing"])
def test_only_the_zoos_modules_are_imported(w, module):
    record(w, module=module, config={})
    refused(w, rf"w\.json: module '{module}' is not one of the zoo's")


@pytest.mark.parametrize("key, value", [
    ("channels", "4"), ("channels", -1), ("channels", 0), ("channels", 2.5), ("channels", True),
    ("channels", None), ("dropout", "x"), ("dropout", float("nan")), ("seed", 2 ** 64),
    ("bogus", 1)])
def test_config_values_of_the_wrong_kind_are_refused_naming_the_key(w, key, value):
    record(w, config={"channels": 4, key: value})
    refused(w, rf"w\.json: config (key )?'{key}'")


def test_a_charlstm_vocabulary_must_be_distinct_characters(w):
    for vocab in (5, "", "aab"):
        record(w, module="charlstm", config={"vocab": vocab})
        refused(w, r"w\.json: config 'vocab'")


@pytest.mark.parametrize("config", [{"channels": 10 ** 9}, {"channels": 50_000}])
def test_a_config_far_larger_than_the_file_is_refused_before_building(w, config):
    record(w, config=config)
    refused(w, r"w\.json: its config builds a cnn of at least .* but w\.safetensors holds")


def test_every_floor_is_at_most_the_real_count():
    lk.bricks.set_seed(0)
    vocab = "abcdefg"
    for module, configs in ((cnn, [{"channels": 1}, {"channels": 5}]),
                            (resnet, [{"width": 1}, {"width": 3}]),
                            (vae, [{"latent": 1, "hidden": 1}, {"latent": 3, "hidden": 7}]),
                            (dcgan, [{"noise": 1}, {"noise": 5}]),
                            (charlstm, [{"vocab": vocab, "embed": 1, "hidden": 1},
                                        {"vocab": vocab, "embed": 3, "hidden": 5}])):
        name = module.__name__.rsplit(".", 1)[1]
        for config in configs:
            count = sum(a.size for a in module.build(config).state_dict().values())
            assert _weights.FLOORS[name]({**module.DEFAULTS, **config}) <= count, (name, config)


def test_a_config_a_little_off_names_each_key_and_both_shapes(w):
    record(w, config={"channels": 5})
    refused(w, r"w\.safetensors: .*shape mismatches: /sequence/conv2d_0\.W: checkpoint "
               r"\(4, 1, 3, 3\), model \(5, 1, 3, 3\).*another config")


def test_weights_files_that_are_not_regular_files_are_refused_without_waiting(w):
    os.unlink(w / "w.safetensors")
    os.mkfifo(w / "w.safetensors")
    refused(w, r"w\.safetensors: a FIFO")
    os.unlink(w / "w.safetensors")
    os.symlink("/dev/zero", w / "w.safetensors")
    refused(w, r"w\.safetensors: a character device")
    os.unlink(w / "w.safetensors")
    (w / "w.safetensors").mkdir()
    refused(w, r"w\.safetensors: a directory")
    (w / "w.safetensors").rmdir()
    refused(w, r"w\.safetensors: missing")
    os.unlink(w / "w.json")
    os.mkfifo(w / "w.json")
    refused(w, r"w\.json: a FIFO")


def test_a_huge_record_is_refused_unread(w):
    (w / "w.json").write_bytes(b" " * (_weights.RECORD_LIMIT + 1))
    refused(w, r"w\.json: .* bytes, more than")


def test_weights_reached_through_a_link_load(w, saved, tmp_path):
    (tmp_path / "real.safetensors").write_bytes(saved[2])
    os.unlink(w / "w.safetensors")
    os.symlink(tmp_path / "real.safetensors", w / "w.safetensors")
    assert lk.models.load("w", directory=w).state_dict().keys() == cnn.build(
        {"channels": 4}).state_dict().keys()


def test_tensor_names_are_quoted_and_counted_not_pasted(w):
    state = cnn.build({"channels": 4}).state_dict()
    weights(w, {**state, "evil\n\x1b[31mkey": np.zeros(1, np.float32),
                **{f"x{i}": np.zeros(0, np.float32) for i in range(1000)}})
    with pytest.raises(lk.CheckpointError) as e:
        lk.models.load("w", directory=w)
    msg = str(e.value)
    assert "w.safetensors" in msg and "'evil\\n\\x1b[31mkey'" in msg and "\x1b" not in msg
    assert "and 993 more" in msg and len(msg) < 1000


def test_non_finite_weights_are_values_and_load(w):
    state = cnn.build({"channels": 4}).state_dict()
    k = sorted(state)[0]
    state[k].flat[:2] = [np.nan, -np.inf]
    weights(w, state)
    got = lk.models.load("w", directory=w).state_dict()[k]
    assert np.isnan(got.flat[0]) and got.flat[1] == -np.inf


def test_a_bad_name_is_refused(w):
    for name in ("../w", "w\0", "", ".."):
        refused(w, "not a weights name", name=name)


def test_save_refuses_a_record_load_would_refuse(tmp_path):
    for module, config in (("common", {}), ("cnn", {"channels": "4"}), ("cnn", {"x": 1})):
        with pytest.raises(lk.CheckpointError, match="labkit.models.save 'w'"):
            lk.models.save(cnn.build(), "w", module, config, {}, "x", directory=tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_record_with_a_nan_result_saved_by_labkit_loads(tmp_path):
    lk.models.save(cnn.build({"channels": 2}), "w", "cnn", {"channels": 2},
                   {"loss": float("nan")}, "x", directory=tmp_path)
    assert np.isnan(lk.models.info("w", tmp_path)["results"]["loss"])
    lk.models.load("w", directory=tmp_path)


def test_a_record_with_a_giant_integer_is_refused_quickly(w):
    (w / "w.json").write_bytes(b'{"module": "cnn", "config": {"seed": ' + b"9" * 200_000 + b"}}")
    refused(w, r"w\.json: not a weights record: an integer of 200000 digits")


@pytest.mark.parametrize("how", ["flip", "cut", "grow"])
def test_a_damaged_weights_file_is_refused(w, how):
    """One flipped exponent bit of a tensor loaded silently (a weight of 1.9e38, the model at
    chance): the record holds the file's size and SHA-256."""
    raw = bytearray((w / "w.safetensors").read_bytes())
    n = int.from_bytes(raw[:8], "little")
    if how == "flip":
        raw[8 + n + 1003] ^= 0x40
    elif how == "cut":
        raw = raw[:-4]
    else:
        raw += b"\0" * 4
    (w / "w.safetensors").write_bytes(bytes(raw))
    refused(w, r"w.safetensors: damaged or replaced \(" + (
        "its SHA-256 is not the one w.json gives" if how == "flip" else
        "[0-9,]+ bytes where w.json says"))


@pytest.mark.parametrize("bad", [{"size": 1}, {"size": -1, "sha256": "0" * 64},
                                 {"size": 1, "sha256": "G" * 64}, [1, 2], "abc"])
def test_a_bad_fingerprint_in_the_record_is_refused(w, bad):
    rec = json.loads((w / "w.json").read_text())
    rec["weights"] = bad
    (w / "w.json").write_text(json.dumps(rec))
    refused(w, r"w.json: 'weights' must be")


def test_the_shipped_records_fingerprint_their_weights():
    for name in lk.models.available():
        rec = _weights.info(name)
        data = (_weights.WEIGHTS / f"{name}.safetensors").read_bytes()
        assert rec["weights"] == _weights.fingerprint(data), name
