"""The main loop: a model, an optimizer and a stream, trained batch by batch, with extensions
called at events, its whole state checkpointed, and every run recorded in the run store.

The parts live beside it: ``events`` (extensions, triggers, dispatch), ``log`` (the rows and
their read cursors), ``control`` (pause, stop, checkpoint requests, Ctrl-C), ``recorder`` (the
run store) and ``resume`` (building, resuming, checking resume).
"""

from __future__ import annotations

import sys
import threading
import time
import warnings
from pathlib import Path

from .. import checkpoint as ckpt
from ..autograd import Tensor
from ..checkpoint import is_count
from ..errors import CheckpointError, LabkitError, TrainingError
from ..runs.notes import traceback_tail
from . import state
from .control import Control
from .events import Extension, Extensions, check_parts
from .log import Log, scalar
from .recorder import Recorder

_viewer = None


def _holds_checkpoints(path) -> bool:
    """Whether ``path`` is a directory of checkpoints (a run's ``checkpoints``), not one."""
    p = Path(path)
    return (p.is_dir() and not p.is_symlink() and not (p / ckpt.MANIFEST).exists()
            and bool(ckpt.list_checkpoints(p)))


def set_viewer(factory) -> None:
    """Register what ``MainLoop.show()`` returns: ``factory(loop, **kwargs)``. ``import labkit``
    registers the notebook Dashboard (a layer above this one, imported only when used)."""
    global _viewer
    _viewer = factory


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
    extensions : ``Extension`` objects, or ``(callable, {"every": 10, "unit": "iterations"})``.
    name, config : recorded in the run store (config: JSON values, e.g. hyperparameters).
    store : record the run in the run store (default True).
    compile : run the training step (zero_grad, ``loss_fn``, backward, update) through
        ``lk.compile`` (``reassociate=False``: a resumed run traces where the run it resumes
        replayed, so their arithmetic must agree to the bit), or a dict of its options
        (``{"reassociate": True}``: faster, a resume within float32 rounding). Traced on its
        first two batches, then replayed (``loop.compiled.explain()`` says what it did).

    ``run()`` trains until an extension stops it (``FinishAfter``, ``EarlyStopping``), Ctrl-C,
    or ``max_iterations`` more iterations. Ctrl-C once: the current batch finishes, a
    checkpoint is written and the loop stops; twice: it stops at once. The iteration counter
    (``status["iteration"]``, the log's ``iteration`` column, the run store's ``iteration``)
    counts the batches trained over the whole run.
    """

    def __init__(self, model, optimizer, stream, loss_fn=None, *, step=None, extensions=(),
                 name: str | None = None, config: dict | None = None, store: bool = True,
                 compile: bool | dict = False):
        check_parts(model, optimizer, stream, loss_fn, step, compile)
        self.model, self.optimizer, self.stream = model, optimizer, stream
        self.loss_fn, self.step_fn = loss_fn, step
        self.compiled = None  #: the compiled training step (compile=True), else None
        if compile is not False:
            from ..compile import Compiled

            opts = {"warn_after": 8, "reassociate": False, **(compile if compile is not True
                                                               else {})}
            self.compiled = Compiled(self._train_step, **opts)
            self.compiled.__name__ = f"MainLoop step ({getattr(loss_fn, '__name__', 'loss_fn')})"
        self.name, self.config = name, dict(config or {})
        self.factory: str | None = None
        self.recorder = Recorder(enabled=store)
        self._training = False  # inside run(): what progress()["training"] says
        self._budget_end: int | None = None  # the iteration run(max_iterations=) stops at
        self.control = Control()
        self._extensions = Extensions(self)
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
        #: the exception that ended the last run (None if it did not fail)
        self.error: BaseException | None = None
        self.last_checkpoint: Path | None = None
        #: the iteration of the last checkpoint written (None before the first)
        self.last_checkpoint_iteration: int | None = None
        #: the ``directory`` the last checkpoint was saved with (None: the run's own)
        self.last_checkpoint_directory = None
        self._resumed = False
        self._thread: threading.Thread | None = None
        # NOTE: set when the background run ends; not Thread.is_alive(): a Ctrl-C inside
        # Thread.join marks a thread that still trains as stopped (CPython 3.11)
        self._done = threading.Event()
        self._background_error: BaseException | None = None
        self._live_time: float | None = None
        #: called after backward, before the optimizer's update (``lk.dist`` averages the
        #: gradients over ranks here); None: nothing
        self.gradient_sync = None

    # -- extensions
    @property
    def extensions(self) -> Extensions:
        """The registered extensions (``add``/``remove`` change them)."""
        return self._extensions

    @extensions.setter
    def extensions(self, extensions) -> None:
        registry = Extensions(self)
        for e in extensions:
            registry.add(e)
        self._extensions = registry

    def add(self, ext, every=None, unit=None, priority=0, event=None, name=None,
            once=False) -> Extension:
        """Register an Extension, or a callable ``fn(loop)`` with a trigger (``every`` N
        ``unit``, or ``once``: at the first match only) or an ``event`` name. Returns the
        registered extension."""
        return self._extensions.add(ext, every=every, unit=unit, priority=priority, event=event,
                                    name=name, once=once)

    def remove(self, ext) -> None:
        """Unregister an extension (e.g. a closed widget's feed)."""
        self._extensions.remove(ext)

    def find(self, cls) -> list:
        """The registered extensions of class ``cls``."""
        return self._extensions.find(cls)

    def dispatch(self, event: str) -> None:
        """Call every extension's hook for ``event`` (and, after a batch or an epoch, the
        extensions whose trigger fires), highest priority first."""
        self._extensions.dispatch(event)

    # -- control
    def stop(self, reason: str = "stopped") -> None:
        """Stop after the current batch (and its extensions); ``after_training`` runs."""
        self.control.stop(reason)

    @property
    def stop_reason(self) -> str | None:
        """Why the loop stops (set by ``stop``), or None."""
        return self.control.stop_reason

    @property
    def paused(self) -> bool:
        return self.control.paused

    def pause(self) -> None:
        """Pause after the current batch (the run's status becomes ``paused``)."""
        self.control.pause()

    def resume(self) -> None:
        """Continue after ``pause()``. (To continue a run from a checkpoint, see
        ``lk.resume``.)"""
        self.control.unpause()

    def request_checkpoint(self) -> None:
        """Write a checkpoint after the current batch (at once if paused); when the loop is not
        training, write it now."""
        if not self.running:
            self.save_checkpoint()
        else:
            self.control.request_checkpoint()

    def start(self, max_iterations: int | None = None, *, max_batches: int | None = None):
        """Train on a background thread and return at once (``run()`` blocks). The notebook
        stays responsive: ``pause()``, ``resume()``, ``stop()`` and ``request_checkpoint()``
        act after the current batch; ``wait()`` joins and re-raises a training error."""
        if self.running:
            raise TrainingError("MainLoop.start: this loop is already training")
        self._background_error = None
        self.control.reset()  # NOTE: here: a stop pressed before the thread ran was wiped
        done = self._done = threading.Event()

        def target():
            try:
                self._skip_reset = True
                self.run(max_iterations, max_batches=max_batches)
            except BaseException as e:  # noqa: BLE001 - kept for wait()
                self._background_error = e
            finally:
                done.set()

        self._thread = threading.Thread(target=target, name=f"labkit-train-{self.run_id}",
                                        daemon=True)
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> MainLoop:
        """Wait for background training to end; re-raise its error, if any (once). Ctrl-C
        ends the wait, not the training (``stop()`` does)."""
        if self._thread is not None:
            self._done.wait(timeout)
        e, self._background_error = self._background_error, None
        if e is not None:
            raise e
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._done.is_set()

    def show(self, **kwargs):
        """A ``lk.notebook.Dashboard`` of this loop (display it, or make it a cell's value)."""
        if _viewer is None:
            raise TrainingError("MainLoop.show: no notebook viewer is registered; import "
                                "labkit (pip install 'labkit[notebook]' for the widgets)")
        return _viewer(self, **kwargs)

    def _control(self) -> None:
        """Between batches: handle a checkpoint request and wait while paused."""
        if self.control.take_checkpoint_request():
            self.save_checkpoint()
        if not self.control.paused:
            return
        self.recorder.set_status("paused", self.progress())
        it = self.status["iteration"]
        self.recorder.acknowledge("pause", f"paused at iteration {it}", it)
        self.dispatch("on_pause")
        self.control.wait_while_paused(self.save_checkpoint,
                                       lambda: self.recorder.mirror(self.progress))
        self.recorder.set_status("running", self.progress())
        self.dispatch("on_unpause")

    @property
    def device(self):
        return next(iter(self.optimizer.params.values())).device

    # -- running
    def run(self, max_iterations: int | None = None, *, max_batches: int | None = None):
        """Train (blocking) until an extension stops the loop, Ctrl-C, or ``max_iterations``
        more iterations (then the run is *paused*: ``run()`` again continues)."""
        if max_batches is not None:
            warnings.warn("run(max_batches=) is now run(max_iterations=)", DeprecationWarning,
                          stacklevel=2)
        limit = max_iterations if max_iterations is not None else max_batches
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise TrainingError(f"MainLoop.run: max_iterations must be an integer >= 0, got "
                                f"{limit!r}")
        if limit is None and not any(e.stops_training for e in self._extensions):
            raise TrainingError("MainLoop.run: nothing would stop this loop; add "
                                "lk.training.FinishAfter(epochs=N) (or iterations=, seconds=), "
                                "or call run(max_iterations=N)")
        if self.running and self._thread is not threading.current_thread():
            raise TrainingError("MainLoop.run: this loop is training on its start() thread; "
                                "wait() for it or stop() it first")
        if not self.__dict__.pop("_skip_reset", False):
            self.control.reset()
        self.error = None
        budget_end = None if limit is None else self.status["iteration"] + limit
        self._budget_end = budget_end
        self.ensure_run()
        self.recorder.claim()  # NOTE: before anything is recorded: one process trains a run
        self.recorder.follow(self.log, at_end=True)
        restore_sigint = self.control.install_sigint()
        t0 = time.perf_counter()
        outcome = "paused"
        try:
            started = time.time()
            self._training = True
            # NOTE: a failed run trained again is no longer failed: its old error goes
            self.recorder.set_status("running", self.progress(), started=started, error=None,
                                     traceback=None)
            self.recorder.listen(self.control, lambda: self.status["iteration"], started)
            st = self.status
            # NOTE: a loop trained further (a fork of a finished run, run() again) is not
            # finished while it trains, nor if it stops early; it is again if it finishes
            st["finished"] = False
            if self._resumed:
                self._resumed = False
                self.dispatch("on_resumption")
            if not st["training_started"]:
                st["training_started"] = True
                # NOTE: resumed from a checkpoint taken before run(), a loop starts as a fresh
                # one does; one that trained without the flag (earlier labkit left it false
                # after such a resume) is not started again in the middle
                if not (st["iteration"] or st["epoch"] or st["epoch_started"]):
                    self.dispatch("before_training")
            outcome = self._epochs(budget_end, t0)
            # no command is taken after the last batch (what it asked would act on the next run)
            self.recorder.stop_listening(f"training {outcome}")
            if outcome == "finished":
                self.status["finished"] = True
                self.dispatch("after_training")
            elif outcome == "paused":
                self.dispatch("after_budget")
            elif outcome == "interrupted":
                self.dispatch("on_interrupt")
                if self.last_checkpoint_iteration != self.status["iteration"]:
                    self.save_checkpoint()
                print(f"[labkit] interrupted at iteration {self.status['iteration']}; "
                      f"checkpoint {self.last_checkpoint}", file=sys.stderr)
        except KeyboardInterrupt:
            outcome = "interrupted"
            raise
        except BaseException as e:
            outcome = "failed"
            self.error = e
            self._training = False
            try:
                self.dispatch("on_error")
            finally:
                self.recorder.stop_listening("training failed")
                self.recorder.finish("failed", self.progress, error=f"{type(e).__name__}: {e}",
                                     traceback=traceback_tail(e))
            raise
        finally:
            self.status["time_total"] += time.perf_counter() - t0
            self._live_time = None
            restore_sigint()
            self._training = False
            try:
                # NOTE: one asked for as training ended is written now, not in the next run
                ok = outcome not in ("failed", "deleted")
                if (self.control.take_checkpoint_request() and ok
                        and self.last_checkpoint_iteration != self.status["iteration"]):
                    self.save_checkpoint()
                self.recorder.stop_listening(f"training {outcome}")
                if ok:
                    self.recorder.finish(outcome, self.progress)
            finally:
                self.recorder.close()
        return self

    def _epochs(self, budget_end, t0) -> str:
        st, control, recorder, empty = self.status, self.control, self.recorder, 0
        while True:
            if control.stop_reason is not None:
                return "finished"
            if not st["epoch_started"]:
                st["epoch_started"] = True
                self.dispatch("before_epoch")
            t_read = time.perf_counter()
            timing, dispatch, perf = self.timing, self.dispatch, time.perf_counter
            before = st["iteration"]
            for batch in self.stream:
                now = perf()
                timing["read"] = now - t_read
                first = next(iter(batch.values()), None)
                self.batch_size = len(first) if hasattr(first, "__len__") else 1
                dispatch("before_batch")
                values = self._step(batch)
                self.step_keys = list(values)
                t_read = perf()
                timing["step"] = t_read - now
                st["iteration"] += 1
                st["epoch_iteration"] += 1
                self._live_time = st["time_total"] + (t_read - t0)
                self.log.rows.append({"iteration": st["iteration"], "epoch": st["epoch"],
                                      **values})
                dispatch("after_batch")
                recorder.mirror(self.progress)
                if recorder.deleted:
                    return "deleted"
                if control.pending:
                    self._control()
                t_read = perf()
                if control.interrupts:
                    return "interrupted"
                if control.stop_reason is not None:
                    return "finished"
                if budget_end is not None and st["iteration"] >= budget_end:
                    return "paused"
            empty = empty + 1 if st["iteration"] == before else 0  # NOTE: else for ever
            if empty == 2:  # NOTE: one may be the rest of an epoch read by hand
                raise TrainingError(f"epochs {st['epoch'] - 1} and {st['epoch']} of the "
                                    f"training stream yielded no batches ({self.stream!r:.200}):"
                                    " an empty split, a filter that drops every example, or "
                                    "drop_last with a batch larger than the data; give it "
                                    "examples (or a smaller batch)")
            st["epoch"] += 1
            st["epoch_iteration"] = 0
            st["epoch_started"] = False
            self.dispatch("after_epoch")
            recorder.mirror(self.progress)
            if recorder.deleted:
                return "deleted"
            if control.interrupts:
                return "interrupted"

    @property
    def elapsed(self) -> float:
        """Seconds of training so far (across resumes)."""
        return self._live_time if self._live_time is not None else self.status["time_total"]

    def _step(self, batch) -> dict:
        if self.step_fn is not None:
            out = self.step_fn(self, batch)
            if not isinstance(out, dict):
                raise TrainingError(f"step must return a dict of values to report, got "
                                    f"{type(out).__name__}")
            return {k: scalar(v) for k, v in out.items()}
        out, extra = (self._train_step if self.compiled is None else self.compiled)(batch)
        return {"loss": out.item(), **{k: scalar(v) for k, v in extra.items()}}

    def _train_step(self, batch):
        """zero_grad, loss_fn, backward, update: (the loss tensor, the other values)."""
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
        if self.gradient_sync is not None:
            self.gradient_sync()
        self.optimizer.update()
        return out, extra

    # -- state
    def state_dict(self) -> dict:
        """Everything that determines the rest of the run (arrays and JSON values)."""
        return state.loop_state(self)

    def load_state_dict(self, saved: dict) -> None:
        """Restore everything from ``saved``. A state that does not fit this loop (another
        model, damaged values) raises ``CheckpointError`` naming the part, and leaves the
        loop as it was."""
        state.load_loop_state(self, saved)
        self._resumed = True

    def save_checkpoint(self, directory=None) -> Path | None:
        """Write a checkpoint of everything (atomically) and record it in the run store.
        Returns its path; None when the run was deleted from the store meanwhile (nothing is
        written then, and the loop stops after this batch)."""
        self.ensure_run()
        if not self.recorder.check_alive():
            return None
        given = directory
        directory = Path(directory) if directory is not None else self.checkpoint_dir
        metrics = self.log.last_metrics()
        it = self.status["iteration"]
        self._refuse_replacing(directory / f"ckpt-{it:08d}")
        path = ckpt.save(directory, self.state_dict(), iteration=it, epoch=self.status["epoch"],
                         metrics=metrics, run_id=self.run_id)
        self.last_checkpoint, self.last_checkpoint_iteration = path, it
        self.last_checkpoint_directory = given
        self.recorder.add_checkpoint(path, it, self.status["epoch"], metrics)
        self.recorder.acknowledge("checkpoint", f"checkpoint {path.name} written", it)
        return path

    def _refuse_replacing(self, path: Path) -> None:
        """Never replace another run's checkpoint (two runs given one ``directory=``)."""
        try:
            owner = ckpt.manifest(path).get("run_id") if path.is_dir() else None
        except CheckpointError:
            return  # NOTE: damaged or half-written: saving over it loses nothing
        if self.run_id is not None and isinstance(owner, str) and owner != self.run_id:
            raise CheckpointError(f"save_checkpoint: {path} is run {owner}'s checkpoint; "
                                  f"refusing to replace it with run {self.run_id}'s. Give each "
                                  "run its own folder (Checkpoint() without directory= writes "
                                  "into the run's own)")

    def _resume_dir(self) -> Path:
        """Where this run's newest checkpoint is: its run folder's checkpoints, or the folder
        of its ``Checkpoint(directory=...)`` when that holds a newer one."""
        from .extensions import Checkpoint

        dirs = [self.checkpoint_dir] + [e.directory for e in self.extensions
                                        if isinstance(e, Checkpoint) and e.directory is not None]

        def newest(d):
            its = []
            for p in ckpt.list_checkpoints(d) if Path(d).is_dir() else ():
                try:
                    m = ckpt.manifest(p)
                except CheckpointError:
                    continue
                if m.get("run_id") in (None, self.run_id) and is_count(m.get("iteration")):
                    its.append(m["iteration"])
            return max(its, default=-1)

        return max(dirs, key=newest)  # NOTE: the run folder on a tie (first)

    def load_checkpoint(self, path=None) -> Path:
        """Restore everything from the checkpoint at ``path``; anything wrong with it raises
        ``CheckpointError`` and leaves the loop as it was. By default (or for ``path`` a
        directory of checkpoints) the newest that loads: damaged ones and those whose state
        this loop's checks refuse are passed over with a warning (and marked invalid in the
        store), or, for a fork that has none of its own that loads, the checkpoint it was
        forked from (see ``state.load_newest``). The next ``run()`` continues exactly where it
        was saved."""
        if path is None:
            if self.checkpoint_dir is None:
                raise CheckpointError("load_checkpoint: give a path (this loop has no run "
                                      "directory yet)")
            path = state.load_newest(self, self._resume_dir(), own=True)
        elif _holds_checkpoints(path):
            path = state.load_newest(self, path)
        else:
            path = Path(path)
            try:
                self.load_state_dict(ckpt.load(path))
            except CheckpointError as e:
                raise CheckpointError(f"{path}: {e}") from e
        self._resumed = True
        self.status["resumed_from"] = str(path)
        self.recorder.sync_to_log(self.log, self.status["iteration"])
        return path

    # -- the run store
    @property
    def run_id(self) -> str | None:
        return self.recorder.run_id

    @property
    def directory(self) -> Path | None:
        """This run's directory (``$LABKIT_HOME/runs/<run id>``)."""
        return self.recorder.directory

    @property
    def checkpoint_dir(self) -> Path | None:
        """Where this run's checkpoints go by default."""
        return self.recorder.checkpoint_dir

    def ensure_run(self) -> str:
        """Create this loop's run (status ``created``) if it has none yet; returns its id."""
        return self.recorder.ensure_run(self.name, self.config, self.factory)

    def attach(self, record: dict) -> None:
        """Continue recording into the existing run ``record`` (used by ``resume``)."""
        self.recorder.attach(record)

    def progress(self) -> dict:
        """Where the run is: iteration, epoch, batch of the epoch, elapsed time, last metrics
        (what the run store, the Runs sidebar and the Dashboard show)."""
        st = self.status
        try:
            length = self.stream.num_items(self.stream.epoch) if self.stream.indexed else None
        except LabkitError:
            length = None
        return {"iteration": st["iteration"], "epoch": st["epoch"],
                "epoch_iteration": st["epoch_iteration"], "epoch_length": length,
                "elapsed": round(self.elapsed, 3), "last": self.log.last_metrics(finite=True),
                "training": self._training, "planned": self.planned(length)}

    def planned(self, epoch_length: int | None = None) -> dict:
        """What the run's stopping rules say of its end: ``{"epochs": E, "iterations": I,
        "seconds": S}``, each when known (from ``FinishAfter`` and ``run(max_iterations=)``);
        what the Dashboard's whole-run progress and ETA use."""
        epochs = iterations = seconds = None
        for ext in self._extensions:
            e, i = getattr(ext, "epochs", None), getattr(ext, "iterations", None)
            if getattr(ext, "stops_training", False):
                t = getattr(ext, "seconds", None)
                if isinstance(t, (int, float)) and not isinstance(t, bool):
                    seconds = t if seconds is None else min(seconds, t)
                if isinstance(e, int):
                    epochs = e if epochs is None else min(epochs, e)
                if isinstance(i, int):
                    iterations = i if iterations is None else min(iterations, i)
        if self._budget_end is not None:
            iterations = self._budget_end if iterations is None else \
                min(iterations, self._budget_end)
        if epochs is not None and epoch_length:
            by_epochs = epochs * epoch_length
            iterations = by_epochs if iterations is None else min(iterations, by_epochs)
        return {"epochs": epochs, "iterations": iterations, "seconds": seconds}

    def close(self) -> None:
        """Stop the stream's worker processes and the run-store writer thread."""
        self.recorder.close()
        self.stream.close()

    def __repr__(self):
        st = self.status
        return (f"MainLoop(run={self.run_id}, epoch={st['epoch']}, iteration={st['iteration']}, "
                f"extensions={[e.name for e in self._extensions]})")
