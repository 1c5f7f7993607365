"""The small ResNet reaches 98.5% with augmentation, its weights load on every device, and
the augmentation shifts images by at most one pixel."""

import numpy as np
import pytest

import labkit as lk
from labkit.models import common, resnet


def test_trains_to_98_5_percent_on_cpu():
    # the shipped recipe's cosine schedule over 20 epochs, not its 30 (about 15 s on 2 cores,
    # not 23): test accuracy over seeds 0-5, of 300 digits (98.5% is 296), 298 297 297 299
    # 298 297 with 20 epochs; 298 297 296 299 297 298 with 30
    model, results = resnet.train({"device": "cpu", "epochs": 20})
    assert results["test_accuracy"] >= 0.985, results


def test_shipped_weights_on_cpu_and_cl():
    record = lk.models.info("resnet-digits")
    x, y = common.split_arrays("test")
    p_cpu = common.predict(lk.models.load("resnet-digits", device="cpu"), x)
    p_cl = common.predict(lk.models.load("resnet-digits", device="cl"), x)
    acc = float((p_cpu.argmax(1) == y).mean())
    assert acc >= 0.985 and acc == pytest.approx(record["results"]["test_accuracy"])
    assert (p_cpu.argmax(1) == p_cl.argmax(1)).all()
    np.testing.assert_allclose(p_cl, p_cpu, atol=1e-4)


def test_augmentation_shifts_by_at_most_one_pixel():
    plain = next(iter(common.digits("train", 64, shuffle=True, seed=0)))["features"]
    shifted = next(iter(resnet.augmented(64, seed=0)))["features"]
    assert shifted.shape == plain.shape and not np.array_equal(shifted, plain)
    for a, b in zip(plain, shifted):
        padded = np.pad(a[0], 1)
        assert any(np.array_equal(padded[dy:dy + 8, dx:dx + 8], b[0])
                   for dy in range(3) for dx in range(3))


def test_training_script_runs_on_cl():
    loop = resnet.make_loop({"device": "cl", "epochs": 1})
    loop.run(max_iterations=8)
    _, loss = loop.log.series("loss")
    loop.close()
    assert len(loss) == 8 and np.isfinite(loss).all() and np.mean(loss[-3:]) < np.mean(loss[:3])
