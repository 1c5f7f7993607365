"""The CNN reaches its target, its shipped weights load offline and predict the same on every
device, and its training script runs."""

import json

import numpy as np
import pytest

import labkit as lk
from labkit.models import cnn, common


def test_trains_to_98_percent_on_cpu():
    # about 5 s on 2 cores: trained here in full, not only loaded
    model, results = cnn.train({"device": "cpu"})
    assert results["test_accuracy"] >= 0.98, results
    assert common.accuracy(model) == results["test_accuracy"]


def test_shipped_weights_reach_the_recorded_accuracy():
    record = lk.models.info("cnn-digits")
    assert record["module"] == "cnn" and record["command"].startswith("python -m labkit.models.cnn")
    acc = common.accuracy(lk.models.load("cnn-digits", device="cpu"))
    assert acc >= 0.98 and acc == pytest.approx(record["results"]["test_accuracy"], abs=1e-9)


def test_shipped_weights_predict_the_same_on_cl():
    x, _ = common.split_arrays("test")
    p_cpu = common.predict(lk.models.load("cnn-digits", device="cpu"), x)
    p_cl = common.predict(lk.models.load("cnn-digits", device="cl"), x)
    assert (p_cpu.argmax(1) == p_cl.argmax(1)).all()
    np.testing.assert_allclose(p_cl, p_cpu, atol=1e-4)


@pytest.mark.parametrize("device", ["cpu", "cl"])
def test_training_script_runs_and_loss_falls(device):
    loop = cnn.make_loop({"device": device, "epochs": 2})
    loop.run()
    _, loss = loop.log.series("loss")
    loop.close()
    assert len(loss) == 2 * 21 and np.mean(loss[-5:]) < 0.5 * np.mean(loss[:5])


def test_unknown_name_lists_what_is_shipped():
    with pytest.raises(lk.CheckpointError, match="available: .*cnn-digits"):
        lk.models.load("cnn-mnist")


def test_command_line_parses_the_config_and_prints_the_results(capsys):
    seen = {}

    def fake_train(config):
        seen.update(config)
        return cnn.build(config), {"test_accuracy": 0.5}

    assert common.main("cnn", fake_train, cnn.DEFAULTS,
                       argv=["--epochs", "3", "--lr", "0.01", "--device", "cl"]) == 0
    assert seen == {**cnn.DEFAULTS, "epochs": 3, "lr": 0.01, "device": "cl"}
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["test_accuracy"] == 0.5 and out["device"] == "cl" and out["train_seconds"] >= 0
    with pytest.raises(SystemExit):
        common.main("cnn", fake_train, cnn.DEFAULTS, argv=["--epochs", "many"])
