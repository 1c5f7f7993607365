"""What the zoo's training scripts share: the digits as streams and arrays, predictions and
test accuracy, the command line."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def digits(split, batch_size=64, shuffle=False, seed=0, scale=1 / 16, shift=0.0):
    """A stream of the shipped 8x8 digits (features scaled to [0, 1] by default)."""
    from .. import data
    from ..data import DataStream, ScaleAndShift

    ds = data.get("digits", split=split, load_in_memory=True)
    s = DataStream(ds, batch_size=batch_size, shuffle=shuffle, seed=seed)
    return ScaleAndShift(s, scale, shift, which_sources="features")


def predict(model, x, batch_size=500):
    """Class probabilities (N, 10) of images ``x`` (N, 1, 8, 8) scaled as in training."""
    from .. import functions as F
    from ..autograd import no_grad, tensor

    was, out = model.training, []
    model.eval()
    with no_grad():
        for i in range(0, len(x), batch_size):
            xb = tensor(np.asarray(x[i:i + batch_size], np.float32), device=model.device)
            out.append(F.softmax(model(xb)).numpy())
    model.train(was)
    return np.concatenate(out)


def split_arrays(split, scale=1 / 16, shift=0.0):
    """(features as float32 scaled like ``digits``, targets) of a whole split."""
    from .. import data

    ds = data.get("digits", split=split, load_in_memory=True)
    b = ds.get_data(slice(0, ds.num_examples))
    return b["features"].astype(np.float32) * scale + shift, b["targets"]


def accuracy(model, split="test", scale=1 / 16, shift=0.0) -> float:
    x, y = split_arrays(split, scale, shift)
    return float((predict(model, x).argmax(1) == y).mean())


def main(module, train, defaults: dict, argv=None, name=None) -> int:
    """``python -m labkit.models.NAME [--device cl] [--epochs N] [--save]``: train with
    ``train(config) -> (model, results)``, print the results and the time, and with ``--save``
    write the shipped weights (``labkit/models/weights/``)."""
    from . import _weights

    p = argparse.ArgumentParser(prog=f"python -m labkit.models.{module}")
    p.add_argument("--device", default=defaults.get("device", "cpu"))
    for k, v in defaults.items():
        if k != "device" and isinstance(v, (int, float)) and not isinstance(v, bool):
            p.add_argument(f"--{k.replace('_', '-')}", type=type(v), default=v)
    p.add_argument("--save", action="store_true", help="write labkit/models/weights/")
    args = vars(p.parse_args(argv))
    save = args.pop("save")
    config = {**defaults, **{k: v for k, v in args.items()}}
    t = time.perf_counter()
    model, results = train(config)
    secs = time.perf_counter() - t
    results = {**results, "train_seconds": round(secs, 1), "device": str(config["device"])}
    print(json.dumps(results))
    if save:
        argv = sys.argv[1:] if argv is None else argv
        cmd = " ".join(["python -m labkit.models." + module] + list(argv))
        path = _weights.save(model.to("cpu"), name or f"{module}-digits", module,
                             {k: v for k, v in config.items() if k != "device"}, results, cmd)
        print("saved", path)
    return 0
