"""The main loop: events, extensions, the log, checkpoints of everything, exact resume."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

from .. import checkpoint as ckpt
from ..autograd import Tensor
from ..backend.random import Generator
from ..config import home
from ..errors import CheckpointError, LabkitError, TrainingError

EVENTS = ("before_training", "before_epoch", "before_batch", "after_batch", "after_epoch",
          "after_training", "on_interrupt", "on_error", "on_resumption")
UNITS = ("batches", "epochs", "seconds")


# ---- extensions -----------------------------------------------------------------------------
class Extension:
    """Something the loop calls: hooks named after events, and ``__call__(loop)`` whenever its
    trigger fires (``every`` batches, epochs or seconds).

    Subclasses define any of the event methods (``before_training(loop)``, ``after_batch(loop)``,
    ...) and/or ``__call__``; state that must survive a restart goes in ``state_dict()``.
    ``priority``: higher runs first within an event (monitoring 100, default 0, checkpoints
    -10, printing -50).
    """

    priority = 0
    every: int | None = 1
    unit: str = "epochs"
    #: fire only the first time the trigger matches (the state remembers that it fired)
    once: bool = False

    def __init__(self, every=None, unit=None, priority=None, name=None, once=None):
        if once is not None:
            self.once = once
        self.fired = False
        if every is not None:
            self.every = every
        if unit is not None:
            self.unit = unit
        if priority is not None:
            self.priority = priority
        self.name = name or type(self).__name__
        if self.unit not in UNITS:
            raise TrainingError(f"{self.name}: unit must be one of {UNITS}, got {self.unit!r}")
        if self.every is not None and self.every <= 0:
            raise TrainingError(f"{self.name}: every must be positive, got {self.every}")
        self._last_fired = None

    def fires(self, loop, event) -> bool:
        """Whether the trigger fires at ``event`` (``after_batch`` or ``after_epoch``)."""
        if self.once and self.fired:
            return False
        hit = self._fires(loop, event)
        self.fired |= hit
        return hit

    def _fires(self, loop, event) -> bool:
        if self.every is None or type(self).__call__ is Extension.__call__:
            return False
        if self.unit == "batches":
            return event == "after_batch" and loop.status["iteration"] % self.every == 0
        if self.unit == "epochs":
            return event == "after_epoch" and loop.status["epoch"] % self.every == 0
        if event != "after_batch":
            return False
        now = time.monotonic()
        if self._last_fired is None:
            self._last_fired = now
            return False
        if now - self._last_fired >= self.every:
            self._last_fired = now
            return True
        return False

    def __call__(self, loop):
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def __repr__(self):
        trig = "" if self.every is None else f", every {self.every} {self.unit}"
        return f"<{self.name}{trig}, priority {self.priority}>"


class _Callable(Extension):
    def __init__(self, fn, every, unit, priority, event, name, once):
        super().__init__(every=every, unit=unit or "batches", priority=priority, name=name,
                         once=once)
        self.fn, self.event = fn, event
        if event is not None:
            self.every = None
            setattr(self, event, self._on_event)

    def _on_event(self, loop):
        if not (self.once and self.fired):
            self.fired = True
            self.fn(loop)

    def __call__(self, loop):
        self.fn(loop)

    def state_dict(self):
        return {"fired": self.fired}

    def load_state_dict(self, state):
        self.fired = bool(state.get("fired", False))


def _check_takes_loop(fn, what: str) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(object())
    except TypeError:
        raise TrainingError(f"{what}{sig} must take one argument, the loop: "
                            f"def {getattr(fn, '__name__', 'fn')}(loop): ...") from None


# ---- the log --------------------------------------------------------------------------------
class Log:
    """One row per iteration: ``{"iteration", "epoch", <reported values>}``.

    ``log[-1]`` is the current row; ``log.report(key=value)`` adds to it;
    ``log.series("loss")`` gives ``(iterations, values)``; ``log.last("valid_loss")`` the most
    recent value.
    """

    def __init__(self):
        self.rows: list[dict] = []
        self._unsent = 0

    def new_row(self, iteration: int, epoch: int, values: dict) -> dict:
        row = {"iteration": iteration, "epoch": epoch, **values}
        self.rows.append(row)
        return row

    def report(self, **values) -> None:
        if not self.rows:
            self.rows.append({"iteration": 0, "epoch": 0})
        self.rows[-1].update(values)

    def series(self, key: str):
        its = [r["iteration"] for r in self.rows if key in r]
        return its, [r[key] for r in self.rows if key in r]

    def last(self, key: str, default=None):
        for r in reversed(self.rows):
            if key in r:
                return r[key]
        return default

    def keys(self) -> list[str]:
        seen = {}
        for r in self.rows:
            seen.update(dict.fromkeys(r))
        return [k for k in seen if k not in ("iteration", "epoch")]

    def __getitem__(self, i):
        return self.rows[i]

    def __len__(self):
        return len(self.rows)

    def state_dict(self) -> dict:
        return {"rows": [{k: _json_value(v) for k, v in r.items()} for r in self.rows]}

    def load_state_dict(self, state) -> None:
        self.rows = [dict(r) for r in state["rows"]]

    def __repr__(self):
        return f"Log({len(self.rows)} rows, keys={self.keys()})"


def _json_value(v):
    if isinstance(v, (np.generic,)):
        return v.item()
    return v


def _scalar(v):
    if isinstance(v, Tensor):
        return v.item()
    if hasattr(v, "get") and hasattr(v, "shape"):
        return np.asarray(v.get()).item()
    return float(v) if isinstance(v, (int, float, np.generic, np.ndarray)) else v


# ---- the loop -------------------------------------------------------------------------------
class MainLoop:
    """Train ``model`` with ``optimizer`` on ``stream``, calling ``extensions`` at events.

    Parameters
    ----------
    model : a Brick.
    optimizer : an optimizer already ``setup(model)``.
    stream : a ``labkit.data`` stream; each epoch is one pass ``for batch in stream``.
    loss_fn : ``loss_fn(model, batch)`` returning the loss Tensor, or a dict with ``"loss"`` and
        other values to report (Tensors or numbers). The loop does zero_grad, backward, update.
    step : instead of ``loss_fn``, ``step(loop, batch)`` that does everything and returns a dict
        of values to report.
    extensions : ``Extension`` objects, or ``(callable, {"every": 10, "unit": "batches"})``.
    name, config : recorded in the run store (config: JSON values, e.g. hyperparameters).
    store : record the run in the run store (default True).

    ``run()`` trains until an extension stops it (``FinishAfter``, ``EarlyStopping``), Ctrl-C,
    or ``max_batches`` more batches. Ctrl-C once: the current batch finishes, a checkpoint is
    written and the loop stops; twice: it stops at once.
    """

    def __init__(self, model, optimizer, stream, loss_fn=None, *, step=None, extensions=(),
                 name: str | None = None, config: dict | None = None, store: bool = True):
        from ..bricks import Brick
        from ..data import Stream

        if (loss_fn is None) == (step is None):
            raise TrainingError("MainLoop: give loss_fn(model, batch) or step(loop, batch), not "
                                "both or neither")
        if not isinstance(model, Brick):
            raise TrainingError(f"MainLoop: model must be a Brick, got {type(model).__name__}")
        if not getattr(optimizer, "params", None):
            raise TrainingError("MainLoop: the optimizer has no parameters; call "
                                "optimizer.setup(model) first (and call the model once if its "
                                "sizes are resolved on the first call)")
        if not isinstance(stream, Stream):
            raise TrainingError(f"MainLoop: stream must be a labkit.data stream (it has the state "
                                f"that makes resume exact), got {type(stream).__name__}")
        fn = loss_fn if loss_fn is not None else step
        _check_two_args(fn, "loss_fn" if loss_fn is not None else "step")
        self.model, self.optimizer, self.stream = model, optimizer, stream
        self.loss_fn, self.step_fn = loss_fn, step
        self.name, self.config = name, dict(config or {})
        self.use_store = store
        self.run_id: str | None = None
        self.directory: Path | None = None
        self.factory: str | None = None
        self.extensions: list[Extension] = []
        self._plans: dict = {}
        for e in extensions:
            if isinstance(e, tuple):
                self.add(e[0], **e[1])
            else:
                self.add(e)
        self.log = Log()
        self.status = {"iteration": 0, "epoch": 0, "epoch_iteration": 0, "epoch_started": False,
                       "training_started": False, "finished": False, "time_total": 0.0,
                       "resumed_from": None}
        self.timing = {"read": 0.0, "step": 0.0}
        self.batch_size = 0
        self.step_keys: list[str] = []
        self._stop_reason = None
        self._interrupt = 0
        self._paused = False
        self._checkpoint_requested = False
        self._ctl = threading.Condition()
        self._resumed = False
        self._pending_metrics: list = []
        self._writer = None
        self._sent = (-1, set())  # (log row, keys already sent to the store)
        self._last_flush = 0.0
        self._last_heartbeat = 0.0
        self.last_checkpoint: Path | None = None
        self._checkpointed_at = None

    # -- extensions
    def add(self, ext, every=None, unit=None, priority=0, event=None, name=None,
            once=False) -> Extension:
        """Register an Extension, or a callable ``fn(loop)`` with a trigger (``every`` N
        ``unit``, or ``once``: at the first match only) or an ``event`` name. Returns the
        registered extension."""
        if not isinstance(ext, Extension):
            if not callable(ext):
                raise TrainingError(f"MainLoop.add: {ext!r} is neither an Extension nor callable")
            if event is not None and event not in EVENTS:
                raise TrainingError(f"MainLoop.add: unknown event {event!r}; the events are "
                                    f"{', '.join(EVENTS)}")
            label = name or getattr(ext, "__name__", type(ext).__name__)
            _check_takes_loop(ext, f"extension {label}")
            ext = _Callable(ext, every if event is None else None, unit, priority, event, label,
                            once)
        else:
            for ev in EVENTS:
                hook = getattr(ext, ev, None)
                if hook is not None:
                    _check_takes_loop(hook, f"{ext.name}.{ev}")
        taken = {e.name for e in self.extensions}
        base, n = ext.name, 2
        while ext.name in taken:
            ext.name = f"{base}#{n}"
            n += 1
        self.extensions.append(ext)
        return ext

    def find(self, cls):
        """The registered extensions of class ``cls``."""
        return [e for e in self.extensions if isinstance(e, cls)]

    def dispatch(self, event: str) -> None:
        """Call every extension's hook for ``event`` (and, after a batch or an epoch, the
        extensions whose trigger fires), highest priority first."""
        key = (event, id(self.extensions), len(self.extensions))
        plan = self._plans.get(key)
        if plan is None:
            # NOTE: built once per event and extension list: dispatch runs ~3 times a batch
            order = [e for _, e in sorted(enumerate(self.extensions),
                                          key=lambda ie: (-ie[1].priority, ie[0]))]
            plan = [(getattr(e, event, None), e if event in ("after_batch", "after_epoch")
                     and e.every is not None and type(e).__call__ is not Extension.__call__
                     else None) for e in order]
            plan = [(h, e) for h, e in plan if h is not None or e is not None]
            self._plans[key] = plan
        for hook, ext in plan:
            if hook is not None:
                hook(self)
            if ext is not None and ext.fires(self, event):
                ext(self)

    # -- control
    def stop(self, reason: str = "stopped") -> None:
        """Stop after the current batch (and its extensions); ``after_training`` runs."""
        if self._stop_reason is None:
            self._stop_reason = reason
        with self._ctl:
            self._ctl.notify_all()

    # -- training in the background (notebooks): start, pause, resume, checkpoint, wait
    def start(self, max_batches: int | None = None) -> MainLoop:
        """Train on a background thread and return at once (``run()`` blocks). The notebook
        stays responsive: ``pause()``, ``resume()``, ``stop()`` and ``request_checkpoint()``
        act after the current batch; ``wait()`` joins and re-raises a training error."""
        if self.running:
            raise TrainingError("MainLoop.start: this loop is already training")
        self.error = None

        def target():
            try:
                self.run(max_batches=max_batches)
            except BaseException as e:  # noqa: BLE001 - kept for wait()
                self.error = e

        self._thread = threading.Thread(target=target, name=f"labkit-train-{self.run_id}",
                                        daemon=True)
        self._thread.start()
        return self

    def show(self, **kwargs):
        """A ``lk.notebook.Dashboard`` of this loop (display it, or make it a cell's value)."""
        from ..notebook import Dashboard

        return Dashboard(self, **kwargs)

    @property
    def running(self) -> bool:
        t = getattr(self, "_thread", None)
        return t is not None and t.is_alive()

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        """Pause after the current batch (the run's status becomes ``paused``)."""
        self._paused = True

    def resume(self) -> None:
        """Continue after ``pause()``. (To continue a run from a checkpoint, see
        ``lk.resume``.)"""
        with self._ctl:
            self._paused = False
            self._ctl.notify_all()

    def request_checkpoint(self) -> None:
        """Write a checkpoint after the current batch (at once if paused); when the loop is not
        training, write it now."""
        if not self.running:
            self.save_checkpoint()
            return
        with self._ctl:
            self._checkpoint_requested = True
            self._ctl.notify_all()

    def wait(self, timeout: float | None = None) -> MainLoop:
        """Wait for background training to end; re-raise its error, if any."""
        t = getattr(self, "_thread", None)
        if t is not None:
            t.join(timeout)
        if getattr(self, "error", None) is not None:
            e, self.error = self.error, None
            raise e
        return self

    def _control(self) -> None:
        """Between batches: handle a checkpoint request and wait while paused."""
        if self._checkpoint_requested:
            self._checkpoint_requested = False
            self.save_checkpoint()
        if not self._paused:
            return
        self._set_status("paused")
        self.dispatch_transient("on_pause")
        with self._ctl:
            while self._paused and self._stop_reason is None and not self._interrupt:
                if self._checkpoint_requested:
                    self._checkpoint_requested = False
                    self._ctl.release()
                    try:
                        self.save_checkpoint()
                    finally:
                        self._ctl.acquire()
                self._ctl.wait(0.2)
        self._set_status("running")
        self.dispatch_transient("on_unpause")

    def dispatch_transient(self, event: str) -> None:
        for e in self.extensions:
            hook = getattr(e, event, None)
            if hook is not None:
                hook(self)

    @property
    def device(self):
        p = next(iter(self.optimizer.params.values()))
        return p.device

    # -- running
    def run(self, max_batches: int | None = None) -> MainLoop:
        """Train (blocking) until an extension stops the loop, Ctrl-C, or ``max_batches`` more
        batches (then the run is *paused*: ``run()`` again continues)."""
        from .extensions import FinishAfter

        if max_batches is None and not self.find(FinishAfter) and not any(
                hasattr(e, "stops_training") for e in self.extensions):
            raise TrainingError("MainLoop.run: nothing would stop this loop; add "
                                "lk.training.FinishAfter(epochs=N) (or batches=, seconds=), or "
                                "call run(max_batches=N)")
        self._stop_reason = None
        self._interrupt = 0
        budget_end = None if max_batches is None else self.status["iteration"] + int(max_batches)
        self._ensure_run()
        self._set_status("running", started=time.time())
        restore_sigint = self._install_sigint()
        t0 = time.perf_counter()
        outcome = "paused"
        try:
            if self._resumed:
                self._resumed = False
                self.dispatch("on_resumption")
            elif not self.status["training_started"]:
                self.status["training_started"] = True
                self.dispatch("before_training")
            outcome = self._epochs(budget_end, t0)
            if outcome == "finished":
                self.status["finished"] = True
                self.dispatch("after_training")
            elif outcome == "interrupted":
                self.dispatch("on_interrupt")
                if self._checkpointed_at != self.status["iteration"]:
                    self.save_checkpoint()
                print(f"[labkit] interrupted at iteration {self.status['iteration']}; "
                      f"checkpoint {self.last_checkpoint}", file=sys.stderr)
        except KeyboardInterrupt:
            outcome = "interrupted"
            raise
        except BaseException as e:
            outcome = "failed"
            self._error = e
            try:
                self.dispatch("on_error")
            finally:
                self._finish_store("failed", error=f"{type(e).__name__}: {e}")
            raise
        finally:
            self.status["time_total"] += time.perf_counter() - t0
            restore_sigint()
            if outcome != "failed":
                self._finish_store(outcome)
        return self

    def _epochs(self, budget_end, t0) -> str:
        st = self.status
        while True:
            if self._stop_reason is not None:
                return "finished"
            if not st["epoch_started"]:
                st["epoch_started"] = True
                self.dispatch("before_epoch")
            t_read = time.perf_counter()
            timing, dispatch, perf = self.timing, self.dispatch, time.perf_counter
            for batch in self.stream:
                now = perf()
                timing["read"] = now - t_read
                first = next(iter(batch.values()), None)
                self.batch_size = len(first) if hasattr(first, "__len__") else 1
                dispatch("before_batch")
                values = self._step(batch)
                self.step_keys = values.keys()
                t_read = perf()
                timing["step"] = t_read - now
                st["iteration"] += 1
                st["epoch_iteration"] += 1
                self._live_time = st["time_total"] + (t_read - t0)
                self.log.rows.append({"iteration": st["iteration"], "epoch": st["epoch"],
                                      **values})
                dispatch("after_batch")
                if self._store is not None:
                    self._mirror()
                if self._paused or self._checkpoint_requested:
                    self._control()
                t_read = perf()
                if self._interrupt:
                    return "interrupted"
                if self._stop_reason is not None:
                    return "finished"
                if budget_end is not None and st["iteration"] >= budget_end:
                    return "paused"
            st["epoch"] += 1
            st["epoch_iteration"] = 0
            st["epoch_started"] = False
            self.dispatch("after_epoch")
            self._mirror()
            if self._interrupt:
                return "interrupted"

    @property
    def elapsed(self) -> float:
        """Seconds of training so far (across resumes)."""
        return getattr(self, "_live_time", self.status["time_total"])

    def _step(self, batch) -> dict:
        if self.step_fn is not None:
            out = self.step_fn(self, batch)
            if not isinstance(out, dict):
                raise TrainingError(f"step must return a dict of values to report, got "
                                    f"{type(out).__name__}")
            return {k: _scalar(v) for k, v in out.items()}
        self.optimizer.zero_grad()
        out = self.loss_fn(self.model, batch)
        extra = {}
        if isinstance(out, dict):
            if "loss" not in out:
                raise TrainingError(f"loss_fn returned a dict without 'loss' (keys: "
                                    f"{sorted(out)})")
            extra = {k: v for k, v in out.items() if k != "loss"}
            out = out["loss"]
        if not isinstance(out, Tensor) or out.size != 1:
            shape = f" of shape {out.shape}" if isinstance(out, Tensor) else ""
            raise TrainingError(f"loss_fn must return a scalar Tensor (or a dict with one under "
                                f"'loss'), got {type(out).__name__}{shape}")
        out.backward()
        self.optimizer.update()
        return {"loss": out.item(), **{k: _scalar(v) for k, v in extra.items()}}

    # -- Ctrl-C
    def _install_sigint(self):
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = signal.getsignal(signal.SIGINT)

        def handler(signum, frame):
            self._interrupt += 1
            if self._interrupt == 1:
                print("\n[labkit] Ctrl-C: finishing the current batch, then writing a checkpoint "
                      "and stopping. Press Ctrl-C again to stop at once, without a checkpoint.",
                      file=sys.stderr, flush=True)
            else:
                print("\n[labkit] Ctrl-C again: stopping now; no checkpoint is written.",
                      file=sys.stderr, flush=True)
                signal.signal(signal.SIGINT, previous)
                raise KeyboardInterrupt

        signal.signal(signal.SIGINT, handler)
        return lambda: signal.signal(signal.SIGINT, previous)

    # -- state
    def state_dict(self) -> dict:
        """Everything that determines the rest of the run (arrays and JSON values)."""
        from ..functions import noise

        return {
            "format": "labkit-mainloop", "version": 1,
            "status": dict(self.status),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "stream": self.stream.state_dict(),
            "rng": {"dropout": {d: g.state_dict() for d, g in noise._default.items()},
                    "bricks": {k: g.state_dict() for k, g in _brick_generators(self.model)}},
            "log": self.log.state_dict(),
            "extensions": {e.name: e.state_dict() for e in self.extensions
                           if not getattr(e, "transient", False)},
            "run": {"id": self.run_id, "name": self.name, "config": self.config},
        }

    def load_state_dict(self, state: dict) -> None:
        from ..functions import noise

        if state.get("format") != "labkit-mainloop":
            raise CheckpointError("MainLoop.load_state_dict: not the state of a MainLoop")
        mine = {e.name: e for e in self.extensions if not getattr(e, "transient", False)}
        saved = state["extensions"]
        lost = sorted(k for k, v in saved.items() if k not in mine and v)
        if lost:
            raise CheckpointError(
                f"MainLoop.load_state_dict: the checkpoint has state for extensions {lost}, "
                f"which this loop lacks (it has {sorted(mine)}); build the loop as it was when "
                "it was saved")
        fresh = sorted(k for k, e in mine.items() if k not in saved and e.state_dict())
        if fresh:
            import warnings

            warnings.warn(f"extensions {fresh} are not in the checkpoint: they start fresh",
                          stacklevel=3)
        try:
            self.model.load_state_dict(state["model"])
        except KeyError as e:
            raise CheckpointError(f"MainLoop.load_state_dict: the model does not match the "
                                  f"checkpoint: {e}") from None
        self.optimizer.load_state_dict(state["optimizer"])
        self.stream.load_state_dict(state["stream"])
        for dev, g in state["rng"]["dropout"].items():
            noise.default_generator(dev).load_state_dict(g)
        gens = dict(_brick_generators(self.model))
        for k, g in state["rng"]["bricks"].items():
            if k not in gens:
                raise CheckpointError(f"MainLoop.load_state_dict: the checkpoint has a random "
                                      f"generator {k} that this model lacks")
            gens[k].load_state_dict(g)
        self.log.load_state_dict(state["log"])
        for name, e in mine.items():
            if name in saved:
                e.load_state_dict(saved[name])
        self.status = dict(state["status"])
        self._resumed = True

    def save_checkpoint(self, directory=None) -> Path:
        """Write a checkpoint of everything (atomically) and record it in the run store."""
        self._ensure_run()
        directory = Path(directory) if directory is not None else self.directory / "checkpoints"
        metrics = {k: v for k, v in (self.log[-1].items() if len(self.log) else ())
                   if k not in ("iteration", "epoch") and isinstance(v, (int, float))}
        path = ckpt.save(directory, self.state_dict(), step=self.status["iteration"],
                         epoch=self.status["epoch"], metrics=metrics, run_id=self.run_id)
        self.last_checkpoint = path
        self._checkpointed_at = self.status["iteration"]
        if self._store is not None:
            size = sum(f.stat().st_size for f in path.iterdir())
            self._store.add_checkpoint(self.run_id, self.status["iteration"],
                                       self.status["epoch"], path, size, metrics)
        return path

    def load_checkpoint(self, path=None) -> Path:
        """Restore everything from the checkpoint at ``path`` (default: this run's newest valid
        one); the next ``run()`` continues exactly where it was saved."""
        if path is None:
            if self.directory is None:
                raise CheckpointError("load_checkpoint: give a path (this loop has no run "
                                      "directory yet)")
            path = ckpt.latest(self.directory / "checkpoints")
            if path is None:
                raise CheckpointError(f"no valid checkpoint in {self.directory / 'checkpoints'}")
        path = Path(path)
        self.load_state_dict(ckpt.load(path))
        self.status["resumed_from"] = str(path)
        if len(self.log):
            self._sent = (len(self.log) - 1, set(self.log[-1]))
        if self._store is not None:
            # the store may hold rows logged after this checkpoint (a killed run) and may lack
            # rows logged before it (not yet flushed when it was killed): make it match the log
            it = self.status["iteration"]
            self._store.truncate_metrics(self.run_id, after_step=it)
            have = self._store.max_step(self.run_id)
            missing = [(r["iteration"], r["epoch"], k, v, time.time()) for r in self.log.rows
                       if r["iteration"] > have for k, v in r.items()
                       if k not in ("iteration", "epoch") and isinstance(v, (int, float))
                       and not isinstance(v, bool)]
            self._store.add_metrics(self.run_id, missing)
        return path

    # -- the run store
    _store = None

    def _ensure_run(self):
        if self.run_id is not None:
            if self._store is None and self.use_store:
                from .. import runs

                self._store = runs.store()
            return
        if self.use_store:
            from .. import runs

            self._store = runs.store()
            self.run_id = self._store.create_run(name=self.name, config=self.config,
                                                 source=_source(), factory=self.factory)
        else:
            from ..runs.store import new_run_id

            self.run_id = new_run_id()
        self.directory = home() / "runs" / self.run_id
        if self._store is not None:
            self._store.update_run(self.run_id, directory=str(self.directory))

    def attach(self, run_id: str) -> None:
        """Continue recording into the existing run ``run_id`` (used by ``resume``)."""
        from .. import runs
        run = runs.get(run_id)
        self.run_id = run_id
        self.directory = Path(run["directory"]) if run.get("directory") else home() / "runs" / \
            run_id
        self._store = runs.store() if self.use_store else None
        if self._store is not None:
            self._store.update_run(run_id, directory=str(self.directory), pid=os.getpid())

    def _set_status(self, status, **fields):
        if self._store is not None:
            self._store.update_run(self.run_id, status=status, heartbeat=time.time(),
                                   pid=os.getpid(), progress=self.progress(), **fields)

    def _finish_store(self, outcome, error=None):
        if self._store is None:
            return
        self._mirror(force=True, wait=True)
        fields = {"ended": time.time()} if outcome in ("finished", "failed", "interrupted") else {}
        if error:
            fields["error"] = error
        self._set_status(outcome, **fields)

    def progress(self) -> dict:
        st = self.status
        try:
            length = self.stream.num_items(self.stream.epoch) if self.stream.indexed else None
        except LabkitError:
            length = None
        last = {k: v for k, v in (self.log[-1].items() if len(self.log) else ())
                if k not in ("iteration", "epoch") and isinstance(v, (int, float))
                and math.isfinite(v)}
        return {"iteration": st["iteration"], "epoch": st["epoch"],
                "epoch_iteration": st["epoch_iteration"], "epoch_length": length,
                "elapsed": round(self.elapsed, 3), "last": last}

    def _mirror(self, force=False, wait=False):
        """Send the log's new values to the run store: every second, or now with ``force``;
        ``wait`` until they are written."""
        if self._store is None:
            return
        if len(self.log):
            index, row = len(self.log) - 1, self.log[-1]
            if self._sent[0] != index:
                self._sent = (index, set())
            sent, now = self._sent[1], time.time()
            for k, v in row.items():
                if k not in sent and k not in ("iteration", "epoch") and isinstance(
                        v, (int, float)) and not isinstance(v, bool):
                    self._pending_metrics.append((row["iteration"], row["epoch"], k, v, now))
                    sent.add(k)
        now = time.monotonic()
        writer = self._writer
        if writer is None:
            writer = self._writer = _Writer()
        if self._pending_metrics and (force or len(self._pending_metrics) >= 5000
                                      or now - self._last_flush > 1.0):
            writer.submit(self._store.add_metrics, self.run_id, self._pending_metrics)
            self._pending_metrics = []
            self._last_flush = now
        # progress once a second, with the metrics: what the Runs sidebar and Dashboards show
        if force or now - self._last_heartbeat > 1.0:
            writer.submit(self._store.update_run, self.run_id, heartbeat=time.time(),
                          progress=self.progress())
            self._last_heartbeat = now
        if wait:
            writer.drain()

    def close(self) -> None:
        """Stop the stream's worker processes and threads."""
        self.stream.close()

    def __repr__(self):
        st = self.status
        return (f"MainLoop(run={self.run_id}, epoch={st['epoch']}, iteration={st['iteration']}, "
                f"extensions={[e.name for e in self.extensions]})")


class _Writer:
    """Run-store writes on a background thread, in order (SQLite releases the GIL), so a
    training step never waits for the disk; ``drain()`` waits for them and re-raises any
    error."""

    def __init__(self):
        import queue

        self._q = queue.Queue()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="labkit-run-store",
                                        daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            fn, args, kwargs = self._q.get()
            try:
                fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - re-raised in the training thread
                self._error = e
            finally:
                self._q.task_done()

    def submit(self, fn, *args, **kwargs):
        self._raise()
        self._q.put((fn, args, kwargs))

    def drain(self):
        self._q.join()
        self._raise()

    def _raise(self):
        if self._error is not None:
            e, self._error = self._error, None
            raise e


def _check_two_args(fn, what):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(object(), object())
    except TypeError:
        args = "(model, batch)" if what == "loss_fn" else "(loop, batch)"
        raise TrainingError(f"{what}{sig} must take two arguments {args}") from None


def _brick_generators(model):
    for b in model.bricks():
        for attr, v in vars(b).items():
            if isinstance(v, Generator):
                yield f"{b.path}.{attr}", v


def _source() -> str:
    nb = os.environ.get("JPY_SESSION_NAME")
    if nb:
        return nb
    main = sys.modules.get("__main__")
    f = getattr(main, "__file__", None)
    return str(Path(f).resolve()) if f else "<interactive>"


# ---- building, resuming, checking -----------------------------------------------------------
def _factory_name(fn) -> str | None:
    mod = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", "")
    if not mod or "<" in qual:
        return None
    if mod == "__main__":
        f = getattr(sys.modules.get("__main__"), "__file__", None)
        return f"{Path(f).resolve()}:{qual}" if f else None
    return f"{mod}:{qual}"


def load_factory(name: str):
    """Import ``module:function`` or ``/path/to/script.py:function``."""
    target, _, qual = name.rpartition(":")
    if not target or not qual:
        raise TrainingError(f"bad factory {name!r}: expected 'module:function'")
    if target.endswith(".py"):
        spec = importlib.util.spec_from_file_location("__labkit_factory__", target)
        if spec is None or not Path(target).exists():
            raise TrainingError(f"the run was built by {name}, but {target} does not exist")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    else:
        mod = importlib.import_module(target)
    obj = mod
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def build(make_loop, config: dict | None = None, name: str | None = None) -> MainLoop:
    """``make_loop(config)`` -> MainLoop, recorded so that ``lk.resume(run_id)`` and ``labkit
    resume`` can rebuild it. ``make_loop`` must be importable (defined in a module or a script,
    not in a notebook cell) for ``resume`` to find it without being passed it."""
    config = dict(config or {})
    loop = make_loop(config)
    if not isinstance(loop, MainLoop):
        raise TrainingError(f"build: make_loop returned {type(loop).__name__}, not a MainLoop")
    loop.config = {**config, **loop.config}
    loop.factory = _factory_name(make_loop)
    if name is not None:
        loop.name = name
    return loop


def resume(run_or_path, make_loop=None, run: bool = True) -> MainLoop:
    """Rebuild a run's loop, load its newest valid checkpoint and continue training.

    ``run_or_path``: a run id, a checkpoint directory, or a run directory. ``make_loop``: the
    function that built the loop (needed when it was defined in a notebook). A forked run (see
    ``lk.runs.fork``) starts from its parent's checkpoint with its own config.
    """
    from .. import runs

    p = Path(str(run_or_path))
    checkpoint_path, run_id = None, None
    if p.is_dir() and (p / "manifest.json").exists():
        checkpoint_path = p
        run_id = ckpt.manifest(p).get("run_id")
    elif p.is_dir() and (p / "checkpoints").is_dir():
        checkpoint_path = ckpt.latest(p / "checkpoints")
        run_id = p.name
    else:
        run_id = str(run_or_path)
    record = None
    if run_id:
        try:
            record = runs.get(run_id)
        except runs.RunStoreError:
            if checkpoint_path is None:
                raise
    if checkpoint_path is None:
        directory = Path(record["directory"]) / "checkpoints" if record.get("directory") else None
        checkpoint_path = ckpt.latest(directory) if directory else None
        # checkpoints newer than the one chosen were skipped as corrupted: say so in the store
        store = runs.store()
        for c in store.checkpoints(run_id):
            if c["valid"] and (checkpoint_path is None or c["step"] > ckpt.manifest(
                    checkpoint_path)["step"]) and ckpt.verify(c["path"]) is not None:
                store.set_checkpoint(c["id"], valid=0)
        if checkpoint_path is None and record.get("parent_checkpoint"):
            checkpoint_path = Path(record["parent_checkpoint"])
        if checkpoint_path is None:
            raise CheckpointError(f"run {run_id} has no valid checkpoint to resume from")
    if make_loop is None:
        factory = record.get("factory") if record else None
        if not factory:
            raise TrainingError(f"resume: run {run_id} does not say how to rebuild its loop "
                                "(it was not made with lk.training.build from an importable "
                                "function); pass make_loop=<the function that builds it>")
        make_loop = load_factory(factory)
    config = record["config"] if record else {}
    loop = make_loop(config)
    loop.config = dict(config)
    loop.factory = record.get("factory") if record else _factory_name(make_loop)
    if record is not None:
        loop.name = record.get("name")
        loop.attach(run_id)
    loop.load_checkpoint(checkpoint_path)
    if record is not None and record.get("parent_checkpoint") and not ckpt.list_checkpoints(
            loop.directory / "checkpoints"):
        loop.log.report(forked_from=record.get("parent_run"))
    if run:
        loop.run()
    return loop


class ResumeCheck:
    """The result of ``check_resume``: ``identical``, ``first_difference`` and a readable repr."""

    def __init__(self, at_batch, compared, first_difference):
        self.at_batch, self.compared = at_batch, compared
        self.first_difference = first_difference
        self.identical = first_difference is None

    def __bool__(self):
        return self.identical

    def __repr__(self):
        if self.identical:
            return (f"ResumeCheck: identical - stopped at batch {self.at_batch}, resumed from the "
                    f"checkpoint, {self.compared} values compared bit for bit")
        return f"ResumeCheck: DIFFERENT after resuming at batch {self.at_batch}: " + \
            self.first_difference


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def check_resume(make_loop, at_batch: int, directory=None) -> ResumeCheck:
    """Train ``make_loop()`` uninterrupted; train another ``make_loop()`` for ``at_batch``
    batches, checkpoint it, resume a third from that checkpoint; compare the logs (every
    reported value except timings) and the final parameters bit for bit."""
    import tempfile

    from .. import runs

    with tempfile.TemporaryDirectory() as tmp, runs.use_store(Path(tmp) / "runs.sqlite"):
        a = make_loop()
        a.run()
        a.close()
        b = make_loop()
        b.run(max_batches=at_batch)
        path = b.save_checkpoint(directory or Path(tmp) / "check")
        b.close()
        c = make_loop()
        c.load_checkpoint(path)
        c.run()
        c.close()
        compared = 0
        if len(a.log) != len(c.log):
            return ResumeCheck(at_batch, compared, f"the uninterrupted run logged {len(a.log)} "
                               f"iterations, the resumed one {len(c.log)}")
        for ra, rc in zip(a.log.rows, c.log.rows):
            for k in ra:
                if k.startswith("time") or k == "forked_from":
                    continue
                if k not in rc or not _same(ra[k], rc[k]):
                    return ResumeCheck(at_batch, compared, f"iteration {ra['iteration']}, {k!r}: "
                                       f"uninterrupted {ra.get(k)!r}, resumed {rc.get(k)!r}")
                compared += 1
        pa, pc = a.model.state_dict(), c.model.state_dict()
        for k in pa:
            compared += 1
            if not np.array_equal(pa[k], pc[k], equal_nan=True):
                diff = float(np.nanmax(np.abs(pa[k].astype(np.float64) - pc[k])))
                return ResumeCheck(at_batch, compared, f"final parameter {k}: max |difference| "
                                   f"{diff:.3g}")
        return ResumeCheck(at_batch, compared, None)

