"""The extensions that ship with labkit: monitoring, stopping, schedules, guards, checkpoints,
printing and a progress bar (those two in ``printing``). Each is a small class; see
``Extension`` for writing your own."""

from __future__ import annotations

import math
import os
import re
import time
import warnings
from pathlib import Path

import numpy as np

from ..autograd import no_grad
from ..checkpoint import is_count
from ..errors import CheckpointError, NonFiniteError, TrainingError
from .events import Extension
from .log import is_metric, scalar
from .printing import Printing, ProgressBar

__all__ = ["Checkpoint", "DataStreamMonitoring", "EarlyStopping", "FinishAfter",
           "LearningRateSchedule", "NaNGuard", "NonFiniteError", "Printing", "ProgressBar",
           "Timing", "TrainingDataMonitoring"]


def _positive(value, what, kind=int):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int) \
            or not value > 0:
        raise TrainingError(f"{what} must be a positive {'number' if kind is float else 'integer'}"
                            f", got {value!r:.80}")
    return value


class FinishAfter(Extension):
    """Stop after ``epochs`` epochs, ``iterations`` iterations (batches) or ``seconds`` of
    training (whichever comes first; counted over the whole run, across resumes).
    ``batches=`` is an older name of ``iterations=``."""

    every = None
    stops_training = True

    def __init__(self, epochs: int | None = None, iterations: int | None = None,
                 seconds: float | None = None, *, batches: int | None = None):
        super().__init__()
        if batches is not None:
            warnings.warn("FinishAfter(batches=) is now FinishAfter(iterations=)",
                          DeprecationWarning, stacklevel=2)
            if iterations is not None:
                raise TrainingError("FinishAfter: give iterations= (batches= is its older name), "
                                    "not both")
            iterations = batches
        if epochs is None and iterations is None and seconds is None:
            raise TrainingError("FinishAfter: give epochs=, iterations= or seconds=")
        self.epochs = _positive(epochs, "FinishAfter: epochs")
        self.iterations = _positive(iterations, "FinishAfter: iterations")
        self.seconds = _positive(seconds, "FinishAfter: seconds", float)

    @property
    def batches(self):  # the older name
        return self.iterations

    def after_batch(self, loop):
        if self.iterations is not None and loop.status["iteration"] >= self.iterations:
            loop.stop(f"FinishAfter: {self.iterations} iterations")
        elif self.seconds is not None and loop.elapsed >= self.seconds:
            loop.stop(f"FinishAfter: {self.seconds:g} s")

    def after_epoch(self, loop):
        if self.epochs is not None and loop.status["epoch"] >= self.epochs:
            loop.stop(f"FinishAfter: {self.epochs} epochs")

    def on_resumption(self, loop):
        # a run resumed (or forked) past its end stops at once instead of training one more
        if self.epochs is not None and loop.status["epoch"] >= self.epochs:
            loop.stop(f"FinishAfter: {self.epochs} epochs")
        elif self.iterations is not None and loop.status["iteration"] >= self.iterations:
            loop.stop(f"FinishAfter: {self.iterations} iterations")


class Timing(Extension):
    """Report ``time_read`` (waiting for data) and ``time_step`` per batch, and ``time_epoch``
    and ``time_total`` per epoch."""

    every = None
    priority = 90

    def __init__(self):
        super().__init__()
        self._epoch_start = None

    def before_epoch(self, loop):
        self._epoch_start = time.perf_counter()

    def after_batch(self, loop):
        loop.log.report(time_read=loop.timing["read"], time_step=loop.timing["step"])

    def after_epoch(self, loop):
        start = self._epoch_start or time.perf_counter()
        loop.log.report(time_epoch=time.perf_counter() - start, time_total=loop.elapsed)


class TrainingDataMonitoring(Extension):
    """The mean of reported values over the batches since it last fired (default: each epoch),
    reported as ``train_<key>``. ``keys``: which values (default: every number the step reports
    except timings)."""

    priority = 100

    def __init__(self, keys=None, every=1, unit="epochs", prefix="train_"):
        super().__init__(every=every, unit=unit)
        self.keys = None if keys is None else list(keys)
        self.prefix = prefix
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def after_batch(self, loop):
        row = loop.log[-1]
        for k in (self.keys if self.keys is not None else loop.step_keys):
            v = row.get(k)
            if not is_metric(v):
                continue
            self.sums[k] = self.sums.get(k, 0.0) + float(v)
            self.counts[k] = self.counts.get(k, 0) + 1

    def __call__(self, loop):
        loop.log.report(**{self.prefix + k: self.sums[k] / self.counts[k] for k in self.sums})
        self.sums, self.counts = {}, {}

    def state_dict(self):
        return {"sums": self.sums, "counts": self.counts}

    def load_state_dict(self, state):
        sums, counts = (state.get("sums"), state.get("counts")) if isinstance(state, dict) \
            else (None, None)
        if not (isinstance(sums, dict) and isinstance(counts, dict) and set(sums) == set(counts)
                and all(map(is_metric, sums.values()))
                and all(is_count(c) and c > 0 for c in counts.values())):
            raise CheckpointError(f"{self.name}: the saved state must be {{'sums': {{key: "
                                  "number}, 'counts': {key: integer in [1, 2**63)}} with the "
                                  f"same keys, got {state!r:.120}")
        self.sums, self.counts = dict(sums), dict(counts)


class DataStreamMonitoring(Extension):
    """Evaluate on another stream (one full epoch of it, model in eval mode, no gradients) and
    report the example-weighted means as ``<prefix><key>``.

    ``metrics_fn(model, batch)`` returns a dict of scalars (Tensors or numbers); by default the
    loop's ``loss_fn`` (its loss and the other values it returns).
    """

    priority = 100

    def __init__(self, stream, metrics_fn=None, prefix="valid_", every=1, unit="epochs",
                 before_training=False):
        super().__init__(every=every, unit=unit)
        self.stream, self.metrics_fn, self.prefix = stream, metrics_fn, prefix
        self._before = before_training

    def before_training(self, loop):
        if self._before:
            self(loop)

    def evaluate(self, loop) -> dict:
        fn = self.metrics_fn or loop.loss_fn
        if fn is None:
            raise TrainingError("DataStreamMonitoring: the loop has a step, not a loss_fn; give "
                                "metrics_fn(model, batch)")
        was_training = loop.model.training
        loop.model.eval()
        sums, total = {}, 0
        try:
            with no_grad():
                for batch in self.stream:
                    out = fn(loop.model, batch)
                    out = out if isinstance(out, dict) else {"loss": out}
                    n = len(next(iter(batch.values())))
                    total += n
                    for k, v in out.items():
                        sums[k] = sums.get(k, 0.0) + float(scalar(v)) * n
        finally:
            loop.model.train(was_training)
        if not total:
            raise TrainingError("DataStreamMonitoring: the stream yielded no batches")
        return {self.prefix + k: v / total for k, v in sums.items()}

    def __call__(self, loop):
        loop.log.report(**self.evaluate(loop))

    def state_dict(self):
        return {"stream": self.stream.state_dict()}

    def load_state_dict(self, state):
        if not isinstance(state, dict) or set(state) != {"stream"}:
            raise CheckpointError(f"{self.name}: the saved state must be {{'stream': ...}}, got "
                                  f"{state!r:.120}")
        self.stream.load_state_dict(state["stream"])


class EarlyStopping(Extension):
    """Stop when ``metric`` has not improved by ``min_delta`` for ``patience`` checks (each
    epoch by default); keeps the best parameters and, with ``restore_best``, puts them back in
    the model when training ends. Reports ``best_<metric>``."""

    priority = -5
    stops_training = True

    def __init__(self, metric="valid_loss", patience=5, mode="min", min_delta=0.0,
                 restore_best=True, every=1, unit="epochs"):
        super().__init__(every=every, unit=unit)
        if mode not in ("min", "max"):
            raise TrainingError(f"EarlyStopping: mode must be 'min' or 'max', got {mode!r}")
        self.metric, self.patience, self.mode = metric, int(patience), mode
        self.min_delta, self.restore_best = float(min_delta), restore_best
        self.best, self.best_iteration, self.bad = None, None, 0
        self.best_params: dict | None = None

    def _better(self, v):
        if not math.isfinite(v):
            # NOTE: a NaN or infinite value is no score (as Checkpoint(keep_best=)'s): a NaN
            # first check was the best for ever (NaN compares false), the loop stopped while
            # the metric improved, and restore_best loaded the NaN epoch's parameters
            return False
        if self.best is None:
            return True
        return v < self.best - self.min_delta if self.mode == "min" else \
            v > self.best + self.min_delta

    def __call__(self, loop):
        row = loop.log[-1] if len(loop.log) else {}
        if self.metric not in row:
            raise TrainingError(f"EarlyStopping: no {self.metric!r} in the log when it checks "
                                f"(iteration {loop.status['iteration']}); report it first, e.g. "
                                "with DataStreamMonitoring(valid_stream), which reports valid_loss")
        v = float(row[self.metric])
        if self._better(v):
            self.best, self.best_iteration, self.bad = v, loop.status["iteration"], 0
            self.best_params = loop.model.state_dict()
        else:
            self.bad += 1
        loop.log.report(**{f"best_{self.metric}": self.best})
        if self.bad >= self.patience:
            best = ("no finite value yet" if self.best is None else
                    f"best {self.best:.6g} at iteration {self.best_iteration}")
            loop.stop(f"EarlyStopping: {self.metric} did not improve for {self.patience} checks "
                      f"({best})")

    def after_training(self, loop):
        if self.restore_best and self.best_params is not None:
            loop.model.load_state_dict(self.best_params)

    def state_dict(self):
        return {"best": self.best, "best_iteration": self.best_iteration, "bad": self.bad,
                "best_params": self.best_params}

    def check_saved(self, state, status):
        it = state.get("best_iteration") if isinstance(state, dict) else None
        if is_count(it) and it > status["iteration"]:
            raise CheckpointError(f"{self.name}: 'best_iteration' is {it}, after "
                                  f"status['iteration'] {status['iteration']} (the loop's own): "
                                  "the best is one of the iterations trained, so the checkpoint "
                                  "is damaged or was edited")

    def check_saved_model(self, state, model):
        params = state.get("best_params") if isinstance(state, dict) else None
        if not isinstance(params, dict):
            return  # NOTE: load_state_dict names a state of the wrong shape
        mine = model.state_dict()
        if set(params) != set(mine):
            lost, extra = sorted(set(mine) - set(params)), sorted(set(params) - set(mine))
            raise CheckpointError(f"{self.name}: the saved 'best_params' are not this model's "
                                  f"(missing {lost[:5]}, unknown {extra[:5]}): the checkpoint "
                                  "was saved by another model, or damaged")
        for k, v in params.items():
            a = mine[k]
            if (not isinstance(v, np.ndarray) or v.shape != tuple(a.shape)
                    or v.dtype != a.dtype):
                what = (f"{v.dtype}{list(v.shape)}" if isinstance(v, np.ndarray)
                        else type(v).__name__)
                raise CheckpointError(f"{self.name}: the saved 'best_params'[{k!r}] is {what}, "
                                      f"the model's is {a.dtype}{list(a.shape)}: the checkpoint "
                                      "was saved by another model, or damaged")

    def load_state_dict(self, state):
        keys = ("best", "best_iteration", "bad", "best_params")
        if not isinstance(state, dict) or set(state) != set(keys):
            raise CheckpointError(f"{self.name}: the saved state must be an object with the "
                                  f"keys {list(keys)}, got {state!r:.120}")
        best, it, bad, params = (state[k] for k in keys)
        checks = [
            (best is None or is_metric(best), f"'best' must be a number or null, got {best!r:.60}"),
            (it is None or is_count(it), "'best_iteration' must be null or an integer in "
             f"[0, 2**63), got {it!r:.60}"),
            (is_count(bad), f"'bad' must be an integer in [0, 2**63), got {bad!r:.60}"),
            (params is None or isinstance(params, dict) and all(
                isinstance(v, np.ndarray) for v in params.values()),
             "'best_params' must be null or an object of arrays"),
            (len({best is None, it is None, params is None}) == 1,
             "'best', 'best_iteration' and 'best_params' must be all null or all set")]
        for ok, problem in checks:
            if not ok:
                raise CheckpointError(f"{self.name}: the saved state's {problem}")
        if best is not None and not math.isfinite(best):
            warnings.warn(f"{self.name}: the saved best {self.metric} is {best} (an earlier "
                          "labkit counted a non-finite value as the best); it goes on with no "
                          "best yet", stacklevel=2)
            best = it = params = None
        self.best, self.best_iteration, self.bad = best, it, int(bad)
        self.best_params = {k: np.array(v) for k, v in params.items()} \
            if params is not None else None


class LearningRateSchedule(Extension):
    """Set the optimizer's learning rate to ``schedule(epoch)`` before each epoch (or
    ``schedule(iteration)`` before each batch with ``unit="iterations"``), and report it as
    ``lr``. ``schedule`` is any callable, e.g. ``lk.optimizers.Cosine(0.1, total=30)``."""

    every = None

    def __init__(self, schedule, unit="epochs"):
        super().__init__(unit=unit)
        if not callable(schedule):
            raise TrainingError("LearningRateSchedule: schedule must be callable (epoch -> lr)")
        if self.unit not in ("epochs", "iterations"):
            raise TrainingError("LearningRateSchedule: unit must be 'epochs' or 'iterations'")
        self.schedule = schedule

    def before_epoch(self, loop):
        if self.unit == "epochs":
            loop.optimizer.lr = float(self.schedule(loop.status["epoch"]))

    def on_resumption(self, loop):
        # NOTE: a loop resumed mid-epoch does not start that epoch again (no before_epoch): set
        # this epoch's rate here. A checkpoint holds the rate the run had, but not one saved
        # by an earlier labkit, and a fork's optimizer built with another lr keeps its own
        if self.unit == "epochs" and loop.status["epoch_started"]:
            loop.optimizer.lr = float(self.schedule(loop.status["epoch"]))

    def before_batch(self, loop):
        if self.unit == "iterations":
            loop.optimizer.lr = float(self.schedule(loop.status["iteration"]))

    def after_batch(self, loop):
        loop.log.report(lr=float(loop.optimizer.lr))


class NaNGuard(Extension):
    """Stop with a diagnosis when the loss is not finite (checked every batch), or when a
    parameter or gradient is not finite (checked every ``check_every`` batches and whenever
    the loss is bad). The error names the first non-finite parameter or gradient, its brick
    and role."""

    every = None
    priority = 95

    def __init__(self, check_every: int = 50, key: str = "loss"):
        super().__init__()
        self.check_every = _positive(check_every, "NaNGuard: check_every")
        self.key = key

    def after_batch(self, loop):
        v = loop.log[-1].get(self.key)
        bad_loss = v is not None and is_metric(v) and not math.isfinite(v)
        if bad_loss or loop.status["iteration"] % self.check_every == 0:
            culprit = self.first_non_finite(loop.model)
            if bad_loss or culprit:
                st = loop.status
                where = (f"at iteration {st['iteration']} (epoch {st['epoch']}, batch "
                         f"{st['epoch_iteration']})")
                what = f"the {self.key} is {v}" if bad_loss else f"the {self.key} is still finite"
                raise NonFiniteError(f"NaNGuard: {where}, {what}; "
                                     + (culprit or "every parameter and gradient is finite, so "
                                        "the loss itself overflowed (log of 0? division by 0?)"))

    @staticmethod
    def first_non_finite(model) -> str | None:
        for name, p in model.params().items():
            for kind, arr in (("parameter", p.data), ("gradient of", p.grad.data if
                                                      p.grad is not None else None)):
                if arr is None:
                    continue
                a = np.asarray(arr if isinstance(arr, np.ndarray) else arr.get())
                finite = np.isfinite(a)
                if not finite.all():
                    n_nan, n_inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
                    brick = name.rsplit(".", 1)[0]
                    role = getattr(p, "role", None)
                    return (f"first non-finite: {kind} {name} (brick {brick}, role {role}): "
                            f"{n_nan} nan and {n_inf} inf of {a.size} values")
        return None


_CKPT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")


def _key(directory, name):
    return os.path.realpath(Path(directory) / name)


def _same_folder(a, b) -> bool:
    """Whether two ``directory=`` arguments name one folder (None: the run's own)."""
    if a is None or b is None:
        return a is None and b is None
    return os.path.realpath(a) == os.path.realpath(b)


class Checkpoint(Extension):
    """Save a checkpoint every ``every`` ``unit`` (default: each epoch), on Ctrl-C and when
    training ends; keep the newest ``keep_last`` and, with ``keep_best="valid_loss"``, the best
    by that metric (``mode`` min or max). ``directory``: default the run's checkpoint directory.

    Pruning only ever deletes checkpoints that this run wrote into that directory (their
    manifest names this run, and the run store records them as this run's): a fork never
    touches its parent's checkpoints, and a checkpoint's saved state cannot name a directory
    to delete (it holds names inside the directory, which are checked when loaded).
    """

    priority = -10

    def __init__(self, every=1, unit="epochs", keep_last: int | None = 3, keep_best=None,
                 mode="min", directory=None, on_interrupt=True, after_training=True):
        super().__init__(every=every, unit=unit)
        if mode not in ("min", "max"):
            raise TrainingError(f"Checkpoint: mode must be 'min' or 'max', got {mode!r}")
        self.keep_last = _positive(keep_last, "Checkpoint: keep_last")
        self.keep_best, self.mode = keep_best, mode
        self.directory = Path(directory) if directory is not None else None
        self._on_interrupt, self._after_training = on_interrupt, after_training
        #: ``{"iteration", "metric", "name"}`` of the checkpoints kept, oldest first
        self.saved: list[dict] = []
        self._dir: Path | None = self.directory

    def __call__(self, loop):
        self.save(loop)

    def save(self, loop):
        it = loop.status["iteration"]
        value = loop.log[-1].get(self.keep_best) if (self.keep_best and len(loop.log)) else None
        entry = {"iteration": it, "metric": value if is_metric(value) else None, "name": None}
        last = loop.last_checkpoint
        # NOTE: decided alike on every rank of a data-parallel loop (each saves, collectively,
        # or none): from what every rank knows, the folder save_checkpoint was given
        if loop.last_checkpoint_iteration == it and last is not None and _same_folder(
                self.directory, getattr(loop, "last_checkpoint_directory", None)):
            # NOTE: written at this iteration already (by another Checkpoint of this loop, or
            # by this one: after_training after the last periodic save): it is this one's too
            if not any(s["iteration"] == it and s["name"] == last.name for s in self.saved):
                entry["name"] = last.name
                self.saved = [s for s in self.saved if s["iteration"] != it] + [entry]
                self._dir = last.parent
                self._prune(loop)
            return
        self.saved = [s for s in self.saved if s["iteration"] != it] + [entry]
        # NOTE: the entry is in self.saved before the state is taken, so the checkpoint knows
        # about itself (its name is filled in below, and on resumption)
        path = loop.save_checkpoint(self.directory)
        if path is None:  # the run was deleted from the store: nothing was written
            self.saved.remove(entry)
            return
        self._dir = path.parent
        entry["name"] = path.name
        self._prune(loop)

    def _pick_best(self, entries):
        # NOTE: a NaN or infinite metric is no score (min() would keep the first NaN and
        # drop the real best)
        scored = [s for s in entries if s["name"] and is_metric(s["metric"])
                  and math.isfinite(s["metric"])]
        if not scored:
            return None
        pick = min if self.mode == "min" else max
        return pick(scored, key=lambda s: s["metric"])

    def _prune(self, loop):
        if self.keep_last is None:
            return
        done = [s for s in self.saved if s["name"]]
        keep = {s["name"] for s in done[-self.keep_last:]}
        best = self._pick_best(done) if self.keep_best else None
        if best is not None:
            keep.add(best["name"])
        # NOTE: nor one that another Checkpoint of this loop keeps (a rolling one and a
        # per-epoch archive in one folder: the rolling one pruned the archive's)
        others = {_key(o._dir, s["name"]) for o in loop.extensions
                  if isinstance(o, Checkpoint) and o is not self and o._dir is not None
                  for s in o.saved if s["name"]}
        for s in done:
            if s["name"] not in keep and _key(self._dir, s["name"]) not in others:
                if not loop.recorder.delete_checkpoint(self._dir / s["name"], self._dir):
                    # NOTE: a run forked from it starts from it: pruned at a later save,
                    # once that run has checkpoints of its own
                    keep.add(s["name"])
        self.saved = [s for s in self.saved if s["name"] in keep or not s["name"]]

    def best(self) -> Path | None:
        """The kept checkpoint with the best ``keep_best`` metric."""
        best = self._pick_best(self.saved)
        return None if best is None or self._dir is None else self._dir / best["name"]

    def on_interrupt(self, loop):
        if self._on_interrupt:
            self.save(loop)

    def after_training(self, loop):
        if self._after_training:
            self.save(loop)

    def state_dict(self):
        return {"saved": [dict(s) for s in self.saved]}

    def check_saved(self, state, status):
        saved = state.get("saved") if isinstance(state, dict) else None
        for i, s in enumerate(saved if isinstance(saved, list) else ()):
            it = s.get("iteration", s.get("step")) if isinstance(s, dict) else None
            if is_count(it) and it > status["iteration"]:
                raise CheckpointError(f"{self.name}: saved[{i}]['iteration'] is {it}, after "
                                      f"status['iteration'] {status['iteration']} (the loop's "
                                      "own): a checkpoint is saved at an iteration trained, so "
                                      "the checkpoint is damaged or was edited")

    def load_state_dict(self, state):
        saved = state.get("saved") if isinstance(state, dict) else None
        if not isinstance(saved, list):
            raise CheckpointError("Checkpoint: the saved state must be {'saved': [...]}")
        entries = []
        for i, s in enumerate(saved):
            if not isinstance(s, dict):
                raise CheckpointError(f"Checkpoint: saved[{i}] must be an object")
            if "path" in s and "name" not in s:  # written by labkit 0.1: absolute paths
                s = {"iteration": s.get("step"), "metric": s.get("metric"),
                     "name": Path(s["path"]).name if isinstance(s["path"], str) else None}
            it, metric, name = s.get("iteration"), s.get("metric"), s.get("name")
            if not is_count(it):
                raise CheckpointError(f"Checkpoint: saved[{i}]['iteration'] must be an integer "
                                      f"in [0, 2**63), got {it!r:.60}")
            if metric is not None and not is_metric(metric):
                raise CheckpointError(f"Checkpoint: saved[{i}]['metric'] must be a number or "
                                      f"null, got {metric!r}")
            if name is not None and not (isinstance(name, str) and _CKPT_NAME.match(name)):
                raise CheckpointError(f"Checkpoint: saved[{i}]['name'] must be the name of a "
                                      f"checkpoint directory, got {name!r}")
            entries.append({"iteration": it, "metric": metric, "name": name})
        self.saved = entries

    def on_resumption(self, loop):
        # the newest entry is the checkpoint that was being written when the state was taken;
        # entries this run did not write (a fork holds its parent's) are forgotten, not pruned
        self._dir = self.directory or loop.checkpoint_dir
        for s in self.saved:
            if s["name"] is None:
                name = f"ckpt-{s['iteration']:08d}"
                s["name"] = name if (self._dir / name).is_dir() else None
                if s["name"]:
                    # NOTE: the one being written when the state was taken: a process killed
                    # between writing it and recording it left it unrecorded (never pruned)
                    loop.recorder.adopt_checkpoint(self._dir / name, self._dir)
        self.saved = [s for s in self.saved if s["name"] and loop.recorder.owns_checkpoint(
            self._dir / s["name"], self._dir)]
