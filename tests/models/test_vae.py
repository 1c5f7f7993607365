"""The VAE's negative ELBO beats the independent-pixel model by a wide margin and reaches its
stated bound; samples and reconstructions are images."""

import numpy as np
import pytest

import labkit as lk
from labkit.models import common, vae

#: the stated target: test -ELBO in nats per binarized 8x8 image (measured 18.61)
TARGET = 19.5


def independent_pixels_nats():
    """The baseline: each pixel an independent Bernoulli with its training-set frequency."""
    x, _ = common.split_arrays("train", scale=1)
    t, _ = common.split_arrays("test", scale=1)
    p = vae.binarize(x).mean(0).reshape(-1).clip(1e-3, 1 - 1e-3)
    b = vae.binarize(t).reshape(len(t), -1)
    return float(-(b * np.log(p) + (1 - b) * np.log(1 - p)).sum(1).mean())


def test_trains_below_the_stated_elbo_on_cpu():
    # the shipped recipe over 60 epochs, not its 100 (about 2 s on 2 cores, not 4): over seeds
    # 0-5 the test -ELBO is 18.84-19.16 with 60 epochs (18.61-18.98 with 100)
    model, results = vae.train({"device": "cpu", "epochs": 60})
    assert results["test_neg_elbo"] <= TARGET < independent_pixels_nats() - 5, results


def test_shipped_weights_and_the_grids():
    record = lk.models.info("vae-digits")
    model = lk.models.load("vae-digits")
    # the record is what the shipped weights give (test_elbo draws noise of its own), on both
    got = vae.test_elbo(model)
    assert got <= TARGET and round(got, 3) == record["results"]["test_neg_elbo"]
    assert vae.test_elbo(lk.models.load("vae-digits", device="cl")) == pytest.approx(got, abs=1e-3)
    x, _ = common.split_arrays("test", scale=1)
    xt = lk.tensor(vae.binarize(x[:16]))
    rec = model.reconstruct(xt)
    assert rec.shape == (16, 1, 8, 8) and ((rec > 0.5) == vae.binarize(x[:16])).mean() > 0.9
    samples = model.sample(16)
    assert samples.shape == (16, 1, 8, 8) and 0 <= samples.min() and samples.max() <= 1
    grid = lk.models.image_grid(np.concatenate([vae.binarize(x[:16]), rec, samples]), ncols=16)
    assert grid.shape == (3, 16)


@pytest.mark.parametrize("device", ["cpu", "cl"])
def test_training_script_runs_and_loss_falls(device):
    loop = vae.make_loop({"device": device, "epochs": 3})
    loop.run()
    _, loss = loop.log.series("loss")
    loop.close()
    assert np.mean(loss[-5:]) < 0.7 * np.mean(loss[:5])


def test_cl_and_cpu_agree_on_the_shipped_weights():
    x, _ = common.split_arrays("test", scale=1)
    a = lk.models.load("vae-digits", device="cpu").reconstruct(lk.tensor(vae.binarize(x)))
    b = lk.models.load("vae-digits", device="cl").reconstruct(
        lk.tensor(vae.binarize(x), device="cl"))
    np.testing.assert_allclose(a, b, atol=1e-5)
