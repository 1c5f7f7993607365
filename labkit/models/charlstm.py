"""A character-level LSTM language model on 25 of Shakespeare's Sonnets (shipped, 7 KB
compressed; see ``texts/README.md``): embedding 32 - LSTM 128 - dropout - linear to the characters.

    python -m labkit.models.charlstm [--device cl] [--epochs 30] [--save]

reports the validation bits per character (the last 10% of the text, never trained on) and a
sample; ``lk.models.load("charlstm-sonnets")`` gives the shipped weights.
"""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import training as T
from labkit.data import DataStream, IndexableDataset

from . import common
from ._text import sample_text

TEXT = Path(__file__).parent / "texts" / "sonnets.txt.gz"
DEFAULTS = {"embed": 32, "hidden": 128, "dropout": 0.2, "seq_len": 32, "lr": 0.004,
            "epochs": 30, "batch_size": 32, "seed": 0, "device": "cpu"}


def corpus():
    """(train text, validation text, vocabulary): the split at 90% of the characters."""
    text = gzip.decompress(TEXT.read_bytes()).decode("ascii")
    cut = int(0.9 * len(text))
    return text[:cut], text[cut:], "".join(sorted(set(text)))


def windows(text, vocab, seq_len):
    """(N, seq_len + 1) character ids: consecutive windows that overlap by one character."""
    ids = np.array([vocab.index(c) for c in text], np.int64)
    n = (len(ids) - 1) // seq_len
    return np.stack([ids[i * seq_len:(i + 1) * seq_len + 1] for i in range(n)])


class CharLSTM(B.Brick):
    def __init__(self, vocab, embed=32, hidden=128, dropout=0.2, name="charlstm"):
        super().__init__(name)
        self.vocab = vocab
        self.embed = B.Embedding(len(vocab), embed)
        self.lstm = B.LSTM(embed, hidden)
        self.drop = B.Dropout(dropout)
        self.out = B.Linear(hidden, len(vocab))
        self.built = True

    def forward(self, ids):
        """Logits (N, T, V) of each next character, from ids (N, T)."""
        return self.out(self.drop(self.lstm(self.embed(ids))))

    def step(self, ids, state):
        """One character ids (N,) -> logits (N, V) and the new (c, h): for ``sample_text``."""
        x = self.embed(ids)
        if state is None:
            zero = lk.tensor(np.zeros((x.shape[0], self.lstm.hidden_size), np.float32),
                             device=x.device)
            state = (zero, zero)
        c, h = state
        z = F.linear(x, self.lstm.W, self.lstm.b) + F.matmul(h, F.transpose(self.lstm.U))
        c, h = F.lstm(c, z)
        return self.out(h), (c, h)

    def sample(self, prime="Shall I ", length=200, temperature=0.8, seed=0):
        return sample_text(self.step, self.vocab, prime, length, temperature, seed)


def build(config=None):
    cfg = {**DEFAULTS, **(config or {})}
    return CharLSTM(cfg.get("vocab") or corpus()[2], cfg["embed"], cfg["hidden"], cfg["dropout"])


def loss_fn(model, batch):
    # NOTE: host: a compiled step slices each call's batch again (a raw slice is refused)
    inputs, targets = lk.compile.host(lambda ids: (ids[:, :-1], ids[:, 1:].reshape(-1)),
                                      batch["text"], name="shift")
    logits = model(inputs)
    n, t, v = logits.shape
    return F.softmax_cross_entropy(F.reshape(logits, (n * t, v)), targets)


def make_loop(config=None, extensions=()):
    cfg = {**DEFAULTS, **(config or {})}
    train_text, valid_text, vocab = corpus()
    lk.bricks.set_seed(cfg["seed"])
    model = build({**cfg, "vocab": vocab}).to(cfg["device"])
    opt = lk.optimizers.chain(lk.optimizers.GradientClipping(5.0),
                              lk.optimizers.Adam(lr=cfg["lr"])).setup(model)

    def stream(text, **kw):
        return DataStream(IndexableDataset({"text": windows(text, vocab, cfg["seq_len"])}),
                          batch_size=cfg["batch_size"], **kw)
    return T.MainLoop(model, opt, stream(train_text, shuffle=True, seed=cfg["seed"]), loss_fn,
                      name="charlstm-sonnets", config=cfg, extensions=[
                          T.TrainingDataMonitoring(), T.DataStreamMonitoring(stream(valid_text)),
                          T.EarlyStopping("valid_loss", patience=4),  # keeps the best
                          T.FinishAfter(epochs=cfg["epochs"]), *extensions])


def valid_bpc(model, seq_len=32):
    """Bits per character of the validation text (each window from a zero state)."""
    _, valid_text, vocab = corpus()
    ids = windows(valid_text, vocab, seq_len)
    was = model.training
    with lk.no_grad():
        nats = loss_fn(model.eval(), {"text": ids}).item()
    model.train(was)
    return nats / math.log(2)


def train(config=None):
    loop = make_loop(config, extensions=[T.Printing(every=5)])
    loop.run()
    loop.close()
    model = loop.model.eval()
    return model, {"valid_bpc": round(valid_bpc(model, loop.config["seq_len"]), 4),
                   "sample": model.sample()}


if __name__ == "__main__":
    raise SystemExit(common.main("charlstm", train, DEFAULTS, name="charlstm-sonnets"))
