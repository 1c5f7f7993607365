"""A DCGAN (Radford et al., 2016) on the 8x8 digits: a generator of transposed convolutions
with batch norm (noise 32 -> 64x2x2 -> 32x4x4 -> 1x8x8) against a convolutional
discriminator (1x8x8 -> 32x4x4 -> 64x2x2 -> 1 logit), non-saturating losses.

    python -m labkit.models.dcgan [--device cl] [--epochs 30] [--save]

reports how confidently the CNN (``lk.models.load("cnn-digits")``) classifies 500 samples
and how many digit classes they cover; ``lk.models.load("dcgan-digits")`` gives the weights.
"""

from __future__ import annotations

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import training as T

from . import common

DEFAULTS = {"noise": 32, "lr": 0.002, "beta1": 0.5, "epochs": 30, "batch_size": 64,
            "seed": 0, "device": "cpu"}


def leaky(x):
    return F.leaky_relu(x, 0.2)


def to_maps(x):
    return F.reshape(x, (x.shape[0], 64, 2, 2))


class DCGAN(B.Brick):
    def __init__(self, noise=32, seed=0, name="dcgan"):
        super().__init__(name)
        self.noise_size = noise
        self.generator_net = B.Sequence(
            B.Linear(noise, 64 * 4), to_maps, B.BatchNorm(64), B.ReLU(),
            B.ConvTranspose2D(64, 32, 4, stride=2, pad=1), B.BatchNorm(32), B.ReLU(),  # 4x4
            B.ConvTranspose2D(32, 1, 4, stride=2, pad=1), B.Sigmoid())                # 8x8
        self.discriminator = B.Sequence(
            B.Conv2D(1, 32, 3, stride=2, pad=1), leaky,                                # 4x4
            B.Conv2D(32, 64, 3, stride=2, pad=1), B.BatchNorm(64), leaky,              # 2x2
            B.Flatten(), B.Linear(64 * 4, 1))
        self.generator = lk.Generator(seed, "cpu")  # the noise
        self.built = True

    def forward(self, n, generator=None):
        """``n`` images (n, 1, 8, 8) in [0, 1] from fresh noise, drawn from ``generator`` (an
        ``lk.Generator``), by default the model's own stream."""
        g = self.generator if generator is None else generator
        if g.device != self.device:
            g.device = self.device
        # NOTE: host: a compiled step draws new noise at each replay
        z = lk.compile.host(lambda: g.normal((n, self.noise_size)), name="noise")
        return self.generator_net(lk.Tensor(z))

    def sample(self, n, seed=None):
        """``n`` images as a NumPy array: from the model's own noise stream (new images at each
        call), or with ``seed`` from a stream of their own (the same images for the same
        weights, whatever the model drew before)."""
        g = None if seed is None else lk.Generator(seed, self.device)
        with lk.no_grad():
            return self(n, generator=g).numpy()


def build(config=None):
    cfg = {**DEFAULTS, **(config or {})}
    return DCGAN(cfg["noise"], cfg["seed"])


def step(loop, batch):
    """One discriminator update, then one generator update.

    NOTE: one optimizer holds both nets (so a checkpoint has all of its state): each update
    sees only one net's gradients, and both advance Adam's step count, which only changes its
    bias correction in the first steps."""
    gan, opt = loop.model, loop.optimizer
    real = lk.tensor(batch["features"], device=gan.device)
    n = real.shape[0]
    ones, zeros = np.ones((n, 1), np.float32), np.zeros((n, 1), np.float32)
    fake = gan(n)
    d_loss = (F.sigmoid_cross_entropy(gan.discriminator(real), ones)
              + F.sigmoid_cross_entropy(gan.discriminator(fake.detach()), zeros))
    opt.zero_grad()
    d_loss.backward()
    opt.update()
    g_loss = F.sigmoid_cross_entropy(gan.discriminator(fake), ones)
    opt.zero_grad()
    g_loss.backward()
    for p in gan.discriminator.params().values():
        p.grad = None
    opt.update()
    return {"loss": g_loss.item(), "d_loss": d_loss.item()}


def make_loop(config=None, extensions=()):
    cfg = {**DEFAULTS, **(config or {})}
    lk.bricks.set_seed(cfg["seed"])
    model = build(cfg).to(cfg["device"])
    opt = lk.optimizers.Adam(lr=cfg["lr"], beta1=cfg["beta1"]).setup(model)
    train = common.digits("train", cfg["batch_size"], shuffle=True, seed=cfg["seed"])
    return T.MainLoop(model, opt, train, step=step, name="dcgan-digits", config=cfg,
                      extensions=[T.TrainingDataMonitoring(), T.FinishAfter(epochs=cfg["epochs"]),
                                  *extensions])


#: the noise seed of the samples ``judge`` scores: a function of the weights alone, so the
#: shipped record is what ``judge(lk.models.load("dcgan-digits"))`` gives
JUDGE_SEED = 12345


def judge(gan, n=500, classifier="cnn-digits"):
    """The classifier's mean confidence (highest class probability) on ``n`` samples, and how
    many classes are its most likely answer for at least 2% of them."""
    probs = common.predict(lk.models.load(classifier, device=gan.device),
                           gan.sample(n, seed=JUDGE_SEED))
    counts = np.bincount(probs.argmax(1), minlength=10)
    return {"cnn_confidence": round(float(probs.max(1).mean()), 4),
            "classes_covered": int((counts >= 0.02 * n).sum())}


def train(config=None):
    loop = make_loop(config, extensions=[T.Printing(every=10)])
    loop.run()
    loop.close()
    loop.model.eval()
    return loop.model, judge(loop.model)


if __name__ == "__main__":
    raise SystemExit(common.main("dcgan", train, DEFAULTS))
