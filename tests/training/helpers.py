"""Loops the training tests build (importable, so subprocesses and resume can rebuild them)."""

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import training as T
from labkit.data import DataStream, IndexableDataset, Parallel, RandomFlip


def dataset(n=96, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 1, 4, 4)).astype(np.float32)
    y = (x[:, 0, :, :2].sum(axis=(1, 2)) > x[:, 0, :, 2:].sum(axis=(1, 2))).astype(np.int64)
    return IndexableDataset({"features": x, "targets": y})


def make_loop(config=None):
    """Shuffling, random flips in the pipeline, dropout in the model: everything random."""
    cfg = {"device": "cpu", "epochs": 3, "batch_size": 8, "lr": 0.01, "hidden": 32,
           "workers": 0, "checkpoint_every": 0, "width": 0, "compile": False,
           **(config or {})}
    dev = lk.device(cfg["device"])
    lk.bricks.set_seed(1)
    layers = [B.Flatten(), B.Linear(16, cfg["hidden"]), B.Tanh(), B.Dropout(0.2)]
    if cfg["width"]:  # a bigger model: checkpoint writes take a while
        layers += [B.Linear(cfg["hidden"], cfg["width"]), B.ReLU(),
                   B.Linear(cfg["width"], cfg["hidden"])]
    model = B.Sequence(*layers, B.Linear(cfg["hidden"], 2)).to(dev)
    opt = lk.optimizers.chain(lk.optimizers.GradientClipping(1.0),
                              lk.optimizers.Adam(lr=cfg["lr"])).setup(model)
    s = DataStream(dataset(), batch_size=cfg["batch_size"], shuffle=True, seed=5)
    s = RandomFlip(s, p=cfg.get("flip_p", 0.5), seed=6)
    if cfg["workers"]:
        s = Parallel(s, workers=cfg["workers"])

    def loss_fn(model, batch):
        logits = model(lk.tensor(batch["features"], device=dev))
        return {"loss": F.softmax_cross_entropy(logits, batch["targets"]),
                "accuracy": F.accuracy(logits, batch["targets"])}

    ext = [T.TrainingDataMonitoring(), T.FinishAfter(epochs=cfg["epochs"])]
    if cfg["checkpoint_every"]:
        ext.append(T.Checkpoint(every=cfg["checkpoint_every"], unit="iterations", keep_last=2))
    if cfg.get("early_stopping"):  # checks train_loss each epoch; never stops before the end
        ext.append(T.EarlyStopping("train_loss", patience=100))
    return T.MainLoop(model, opt, s, loss_fn, extensions=ext, name="helper", config=cfg,
                      compile=cfg["compile"])


def manifest_counters(state) -> dict:
    """``iteration=`` and ``epoch=`` for saving the loop ``state`` as the loop would: its
    status's, so that a crafted state is refused for what was crafted in it, not because the
    manifest says another iteration or epoch (0 where the status has no counter to give)."""
    from labkit.checkpoint import is_count

    status = state.get("status") if isinstance(state, dict) else None
    status = status if isinstance(status, dict) else {}
    return {k: status[k] if is_count(status.get(k)) else 0 for k in ("iteration", "epoch")}


def refused_checkpoint(tmp_path, state, config=None):
    """The CheckpointError message of loading the loop ``state`` (saved as a checkpoint, its
    manifest saying the state's own iteration and epoch) into a fresh
    ``make_loop({"epochs": 1, **config})``, which must be left as it was and the message name
    the checkpoint."""
    import pytest

    from labkit import checkpoint as ckpt
    from labkit.errors import CheckpointError

    path = ckpt.save(tmp_path / "c", state, **manifest_counters(state))
    fresh = make_loop({"epochs": 1, **(config or {})})
    before = fresh.state_dict()
    with pytest.raises(CheckpointError) as e:
        fresh.load_checkpoint(path)
    after = fresh.state_dict()
    assert after["status"] == before["status"] and after["optimizer"]["t"] == 0
    assert same_state(after, before), "a refused load changed the loop"
    assert str(path) in str(e.value)
    return str(e.value)


def same_state(a, b) -> bool:
    """Two loop states (nested dicts, lists, arrays and JSON values) equal bit for bit: the
    model, the optimizer, the stream, every generator, the log and the extensions."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(
            same_state(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same_state, a, b))
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and a.tobytes() == b.tobytes())
    return type(a) is type(b) and (a == b or a != a and b != b)
