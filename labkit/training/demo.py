"""``labkit demo``: an MLP trained on the shipped digits set, end to end.

``make_loop(config)`` is an ordinary factory, importable as ``labkit.training.demo:make_loop``,
so a demo run can be resumed (``labkit resume ID``) and forked like any other.
"""

from __future__ import annotations

import time

import numpy as np

DEFAULTS = {"lr": 0.005, "hidden": 128, "dropout": 0.1, "batch_size": 64, "epochs": 30,
            "seed": 0, "device": None, "workers": 0}


def _stream(split, batch_size, shuffle, seed, workers=0):
    import labkit as lk
    from labkit.data import DataStream, Parallel, ScaleAndShift

    ds = lk.data.get("digits", split=split, load_in_memory=True)
    s = DataStream(ds, batch_size=batch_size, shuffle=shuffle, seed=seed)
    s = ScaleAndShift(s, 1 / 16, -0.5, which_sources="features")
    return Parallel(s, workers=workers) if workers else s


def make_loop(config=None, progress=True, verbose=True):
    """The demo's loop: MLP 64-hidden-10 with dropout, Adam, validation each epoch, checkpoints
    (newest 2 and the best by validation accuracy), early stopping."""
    import labkit as lk
    import labkit.bricks as B
    import labkit.functions as F
    from labkit import training as T

    cfg = {**DEFAULTS, **(config or {})}
    device = lk.device(cfg["device"]) if cfg["device"] else lk.best_device()
    lk.bricks.set_seed(cfg["seed"])
    model = B.Sequence(B.Flatten(), B.Linear(64, cfg["hidden"]), B.ReLU(),
                       B.Dropout(cfg["dropout"]), B.Linear(cfg["hidden"], 10)).to(device)
    opt = lk.optimizers.Adam(lr=cfg["lr"]).setup(model)

    def loss_fn(model, batch):
        logits = model(lk.tensor(batch["features"], device=device))
        y = batch["targets"]
        return {"loss": F.softmax_cross_entropy(logits, y), "accuracy": F.accuracy(logits, y)}

    train = _stream("train", cfg["batch_size"], True, cfg["seed"], cfg["workers"])
    valid = _stream("valid", 500, False, None)
    ext = [T.TrainingDataMonitoring(), T.DataStreamMonitoring(valid),
           T.EarlyStopping("valid_loss", patience=8),
           T.Checkpoint(keep_last=2, keep_best="valid_accuracy", mode="max"),
           T.FinishAfter(epochs=cfg["epochs"])]
    if verbose:
        ext.append(T.Printing(every=5))
    if progress:
        ext.append(T.ProgressBar())
    return T.MainLoop(model, opt, train, loss_fn, extensions=ext, name="digits-mlp",
                      config=cfg)


def test_accuracy(loop) -> float:
    import labkit as lk
    import labkit.functions as F

    test = _stream("test", 300, False, None)
    loop.model.eval()
    correct = total = 0
    with lk.no_grad():
        for batch in test:
            logits = loop.model(lk.tensor(batch["features"], device=loop.device))
            correct += F.accuracy(logits, batch["targets"]) * len(batch["targets"])
            total += len(batch["targets"])
    loop.model.train()
    return correct / total


def main(config=None) -> int:
    import labkit as lk
    from labkit import training as T

    cfg = {**DEFAULTS, **(config or {})}
    device = lk.device(cfg["device"]) if cfg["device"] else lk.best_device()
    print(f"labkit demo: an MLP on the 8x8 handwritten digits (1,297 train / 200 valid / 300 "
          f"test images) on {device}\n")
    t = time.perf_counter()
    loop = T.build(make_loop, cfg)
    loop.run()
    acc = test_accuracy(loop)
    secs = time.perf_counter() - t
    st = loop.status
    best = loop.find(T.Checkpoint)[0].best()
    print(f"\ntest accuracy {acc:.1%} after {st['epoch']} epochs ({st['iteration']} batches) in "
          f"{secs:.1f} s on {device}")
    print(f"run {loop.run_id}: checkpoints in {loop.directory / 'checkpoints'}"
          + (f" (best: {best.name})" if best else ""))
    print(f"  labkit runs show {loop.run_id}     # its config, metrics and checkpoints")
    print(f"  labkit resume {loop.run_id}        # continue it from its newest checkpoint")
    loop.close()
    return 0 if acc >= 0.9 and np.isfinite(loop.log.last("loss")) else 1
