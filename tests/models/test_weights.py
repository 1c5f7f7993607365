"""Weights files: a round trip, and damaged or crafted files refused with the file named."""

import json

import numpy as np
import pytest

import labkit as lk
from labkit.models import cnn


def test_every_shipped_name_loads_and_records_how_it_was_made():
    assert set(lk.models.available()) >= {"cnn-digits", "vae-digits", "resnet-digits",
                                          "dcgan-digits"}
    for name in lk.models.available():
        record = lk.models.info(name)
        assert record["command"].startswith(f"python -m labkit.models.{record['module']}")
        assert record["results"] and "device" in record["results"]
        assert not lk.models.load(name).training


def test_save_then_load_round_trip(tmp_path):
    lk.bricks.set_seed(3)
    model = cnn.build()
    lk.models.save(model, "mine", "cnn", {"channels": 32}, {"note": 1}, "by hand",
                   directory=tmp_path)
    back = lk.models.load("mine", directory=tmp_path)
    a, b = model.state_dict(), back.state_dict()
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert json.loads((tmp_path / "mine.json").read_text())["command"] == "by hand"


def test_damaged_or_crafted_files_are_refused(tmp_path):
    lk.models.save(cnn.build(), "w", "cnn", {}, {}, "x", directory=tmp_path)
    data = (tmp_path / "w.safetensors").read_bytes()
    (tmp_path / "w.safetensors").write_bytes(data[:-10])
    with pytest.raises(lk.CheckpointError, match="w.safetensors"):
        lk.models.load("w", directory=tmp_path)
    (tmp_path / "w.json").write_text(json.dumps({"module": "os.path", "config": {}}))
    with pytest.raises(lk.CheckpointError, match="w.json: expected a JSON object"):
        lk.models.load("w", directory=tmp_path)
    lk.models.save(cnn.build({"channels": 8}), "w", "cnn", {}, {}, "x", directory=tmp_path)
    with pytest.raises(lk.CheckpointError, match="shape mismatches"):
        lk.models.load("w", directory=tmp_path)
