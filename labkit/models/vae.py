"""A variational autoencoder (Kingma & Welling, 2014) on the 8x8 digits, binarized (a pixel
is on when its intensity is at least half): MLP encoder 64-256-(mu, log var) of 16 latents,
MLP decoder 16-256-64 Bernoulli logits.

    python -m labkit.models.vae [--device cl] [--epochs 100] [--save]

reports the test negative ELBO in nats per image (lower is better; an upper bound on
-log p(x)); ``lk.models.load("vae-digits")`` gives the shipped weights.
"""

from __future__ import annotations

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import training as T

from . import common

DEFAULTS = {"latent": 16, "hidden": 256, "lr": 0.002, "epochs": 100, "batch_size": 64,
            "seed": 0, "device": "cpu"}


def binarize(x):
    """Digits features (N, 1, 8, 8) as float32 0/1, a pixel on when its intensity >= 8 of 16.
    In a compiled step (``MainLoop(compile=True)``) a host function: each call's batch is
    binarized again (NumPy code on it in the step was the traced calls' batches at every
    replay)."""
    return lk.compile.host(lambda a: (np.asarray(a) >= 8).astype(np.float32), x,
                           name="vae.binarize")


class VAE(B.Brick):
    def __init__(self, latent=16, hidden=256, seed=0, name="vae"):
        super().__init__(name)
        self.latent = latent
        self.encoder = B.MLP([64, hidden, 2 * latent], activation=F.relu)
        self.decoder = B.MLP([latent, hidden, 64], activation=F.relu)
        self.generator = lk.Generator(seed, "cpu")  # the reparameterisation noise
        self.built = True

    def noise(self, shape, device, generator=None):
        """Standard normal noise from ``generator``, by default the model's own stream."""
        g = self.generator if generator is None else generator
        if g.device != device:
            g.device = device
        # NOTE: host: a compiled step draws new noise at each replay
        return lk.Tensor(lk.compile.host(lambda: g.normal(shape), name="vae.noise"))

    def forward(self, x, generator=None):
        """Bernoulli logits (N, 64) of the reconstruction from a sample of q(z|x), and the
        posterior's mu and log var; the sample's noise from ``generator`` (an
        ``lk.Generator``), by default the model's own stream."""
        mu, logvar = F.split(self.encoder(F.flatten(x)), 2, axis=1)
        z = mu + F.exp(0.5 * logvar) * self.noise(mu.shape, x.device, generator)
        return self.decoder(z), mu, logvar

    def reconstruct(self, x):
        """Pixel probabilities (N, 1, 8, 8) decoded from the posterior mean of ``x``."""
        with lk.no_grad():
            mu, _ = F.split(self.encoder(F.flatten(x)), 2, axis=1)
            return F.sigmoid(self.decoder(mu)).numpy().reshape(x.shape[0], 1, 8, 8)

    def sample(self, n, device=None):
        """Pixel probabilities (n, 1, 8, 8) of images decoded from the prior N(0, I)."""
        with lk.no_grad():
            z = self.noise((n, self.latent), lk.device(device) if device else self.device)
            return F.sigmoid(self.decoder(z)).numpy().reshape(n, 1, 8, 8)


def build(config=None):
    cfg = {**DEFAULTS, **(config or {})}
    return VAE(cfg["latent"], cfg["hidden"], cfg["seed"])


def neg_elbo(model, x, generator=None):
    """-ELBO per image, averaged: reconstruction cross-entropy + KL(q(z|x) || N(0, I))."""
    logits, mu, logvar = model(x, generator=generator)
    n = x.shape[0]
    rec = F.sigmoid_cross_entropy(logits, F.flatten(x), reduce="sum") / n
    kl = -0.5 * F.sum(1 + logvar - mu * mu - F.exp(logvar)) / n
    return {"loss": rec + kl, "reconstruction": rec, "kl": kl}


def loss_fn(model, batch):
    return neg_elbo(model, lk.tensor(binarize(batch["features"]), device=model.device))


def make_loop(config=None, extensions=()):
    cfg = {**DEFAULTS, **(config or {})}
    lk.bricks.set_seed(cfg["seed"])
    model = build(cfg).to(cfg["device"])
    opt = lk.optimizers.Adam(lr=cfg["lr"]).setup(model)
    train = common.digits("train", cfg["batch_size"], shuffle=True, seed=cfg["seed"], scale=1)
    return T.MainLoop(model, opt, train, loss_fn, name="vae-digits", config=cfg, extensions=[
        T.TrainingDataMonitoring(), T.DataStreamMonitoring(common.digits("valid", 200, scale=1)),
        T.FinishAfter(epochs=cfg["epochs"]), *extensions])


#: the noise seed of ``test_elbo``'s posterior samples: its answer is a function of the
#: weights alone, so the shipped record is what ``test_elbo(lk.models.load("vae-digits"))`` gives
EVAL_SEED = 12345


def test_elbo(model, split="test", samples=10):
    """-ELBO on ``split`` in nats per image, the posterior sampled ``samples`` times (with
    noise of its own, ``EVAL_SEED``: the model's stream is left as it was)."""
    x, _ = common.split_arrays(split, scale=1)
    xt = lk.tensor(binarize(x), device=model.device)
    g = lk.Generator(EVAL_SEED, model.device)
    with lk.no_grad():
        return float(np.mean([neg_elbo(model, xt, g)["loss"].item() for _ in range(samples)]))


def train(config=None):
    loop = make_loop(config, extensions=[T.Printing(every=25)])
    loop.run()
    loop.close()
    return loop.model, {"test_neg_elbo": round(test_elbo(loop.model), 3)}


if __name__ == "__main__":
    raise SystemExit(common.main("vae", train, DEFAULTS))
