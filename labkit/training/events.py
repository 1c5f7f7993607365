"""Events, extensions and their triggers, and the dispatcher that calls them.

An extension is any object with methods named after events (``after_batch(loop)``, ...) and/or
a ``__call__(loop)`` that runs when its trigger fires (``every`` N iterations, epochs or
seconds). Plain callables are wrapped (``loop.add(fn, every=10, unit="iterations")``).
"""

from __future__ import annotations

import inspect
import time
import warnings

from ..errors import TrainingError

#: every event the loop dispatches (``on_resumption`` comes first in a resumed run);
#: ``after_budget``: ``run(max_iterations=N)`` returned on its budget (the run is paused, as
#: after Pause: the next ``run()`` continues it)
EVENTS = ("before_training", "before_epoch", "before_batch", "after_batch", "after_epoch",
          "after_training", "on_pause", "on_unpause", "on_interrupt", "on_error",
          "on_resumption", "after_budget")
#: trigger units; ``batches`` is an older spelling of ``iterations``
UNITS = ("iterations", "epochs", "seconds")
_UNIT_ALIASES = {"batches": "iterations"}
#: the events after which triggers are checked
TRIGGER_EVENTS = ("after_batch", "after_epoch")


def check_parts(model, optimizer, stream, loss_fn, step, compile) -> None:
    """``MainLoop``'s arguments, each checked, with the fix in the error."""
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
    if loss_fn is not None:
        check_args(loss_fn, "loss_fn", ("model", "batch"))
    else:
        check_args(step, "step", ("loop", "batch"))
    options = {"fuse", "cse", "stabilize", "reassociate", "trust_input", "warn_after"}
    if not isinstance(compile, bool) and not (
            isinstance(compile, dict) and set(compile) <= options):
        raise TrainingError(f"MainLoop: compile must be True, False or a dict of lk.compile "
                            f"options ({', '.join(sorted(options))}); got {compile!r}")
    if compile is not False and loss_fn is None:
        raise TrainingError("MainLoop: compile=True compiles loss_fn's step; with step= "
                            "compile your own: step=lk.compile(...) inside it")


def unit_name(unit: str, what: str) -> str:
    """The canonical name of a trigger unit (``batches`` -> ``iterations``), or a clear error."""
    if unit in _UNIT_ALIASES:
        warnings.warn(f"{what}: unit={unit!r} is now unit={_UNIT_ALIASES[unit]!r}",
                      DeprecationWarning, stacklevel=4)
        unit = _UNIT_ALIASES[unit]
    if unit not in UNITS:
        raise TrainingError(f"{what}: unit must be one of {UNITS}, got {unit!r}")
    return unit


class Extension:
    """Something the loop calls: hooks named after events, and ``__call__(loop)`` whenever its
    trigger fires (``every`` iterations, epochs or seconds).

    Subclasses define any of the event methods (``before_training(loop)``, ``after_batch(loop)``,
    ``on_pause(loop)``, ... see ``EVENTS``) and/or ``__call__``; state that must survive a
    restart goes in ``state_dict()``. ``priority``: higher runs first within an event
    (monitoring 100, default 0, checkpoints -10, printing -50). ``transient = True``: not part
    of the loop's state (widgets watching a loop), so a checkpoint neither holds nor expects it.

    What an extension may use on the loop: ``status``, ``log``, ``model``, ``optimizer``,
    ``stream``, ``timing``, ``batch_size``, ``step_keys``, ``elapsed``, ``stop(reason)``,
    ``stop_reason``, ``run_id``, ``checkpoint_dir``, ``save_checkpoint()``,
    ``last_checkpoint``, ``last_checkpoint_iteration``, ``recorder``, ``running``, ``paused``.
    """

    priority = 0
    #: run by the loop between steps, never by a compiled step: lk.compile's guards do not
    #: walk its ``__call__`` (a counter it moves would trace the step at every call)
    lk_between_steps = True
    every: int | None = 1
    unit: str = "epochs"
    #: fire only the first time the trigger matches (the state remembers that it fired)
    once: bool = False
    #: not saved in checkpoints (e.g. a widget that watches the loop)
    transient: bool = False
    #: ends training by itself (FinishAfter, EarlyStopping): ``run()`` needs one, or a limit
    stops_training: bool = False

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
        self.unit = unit_name(self.unit, self.name)
        if self.every is not None and (isinstance(self.every, bool) or not isinstance(
                self.every, (int, float)) or self.every <= 0):
            raise TrainingError(f"{self.name}: every must be a positive number, got "
                                f"{self.every!r}")
        self._last_fired = None

    @property
    def triggered(self) -> bool:
        """Whether ``__call__`` runs on a trigger (an ``every`` and a ``__call__`` of its own)."""
        return self.every is not None and type(self).__call__ is not Extension.__call__

    def fires(self, loop, event) -> bool:
        """Whether the trigger fires at ``event`` (``after_batch`` or ``after_epoch``)."""
        if self.once and self.fired:
            return False
        hit = self._fires(loop, event)
        self.fired |= hit
        return hit

    def _fires(self, loop, event) -> bool:
        if not self.triggered:
            return False
        if self.unit == "iterations":
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

    def check_saved(self, state, status: dict) -> None:
        """Called with this extension's saved ``state`` and the loop's saved ``status`` (its
        counters, checked) before anything of a loop state loads: raise ``CheckpointError``
        where they contradict each other (an iteration after the loop's own). ``state`` is not
        checked yet: compare only well-typed values, ``load_state_dict`` names the others."""

    def check_saved_model(self, state, model) -> None:
        """Called with this extension's saved ``state`` and the loop's ``model`` before
        anything of a loop state loads: raise ``CheckpointError`` where the state holds
        something of the model that does not fit it (EarlyStopping's best parameters)."""

    def __repr__(self):
        trig = "" if self.every is None else f", every {self.every} {self.unit}"
        return f"<{self.name}{trig}, priority {self.priority}>"


class CallableExtension(Extension):
    """A plain ``fn(loop)`` registered with a trigger or an event."""

    def __init__(self, fn, every, unit, priority, event, name, once):
        super().__init__(every=every, unit=unit or "iterations", priority=priority, name=name,
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
        fired = state.get("fired", False) if isinstance(state, dict) else state
        if not isinstance(fired, bool):
            raise TrainingError(f"{self.name}: saved state 'fired' must be true or false, got "
                                f"{fired!r}")
        self.fired = fired


def check_args(fn, what: str, names: tuple = ("loop",)) -> None:
    """Refuse, when it is given, a function that cannot be called with ``names`` (a hook with
    the loop; a loss_fn with the model and a batch)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*[object()] * len(names))
    except TypeError:
        count = "one argument, the loop" if names == ("loop",) else \
            f"{('two', 'three')[len(names) - 2]} arguments ({', '.join(names)})"
        raise TrainingError(f"{what}{sig} must take {count}: def "
                            f"{getattr(fn, '__name__', 'fn')}({', '.join(names)}): ...") from None


class Extensions:
    """The loop's registered extensions and their dispatch.

    ``dispatch(event)`` calls each extension's hook for ``event`` and, after a batch or an
    epoch, the extensions whose trigger fires, highest priority first (ties: registration
    order). The call plan of each event is cached and rebuilt whenever an extension is added
    or removed.
    """

    def __init__(self, owner):
        self._owner = owner
        self._items: list[Extension] = []
        self._plans: dict[str, list] = {}

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __contains__(self, ext):
        return ext in self._items

    def __getitem__(self, i):
        return self._items[i]

    def __repr__(self):
        return repr(self._items)

    def add(self, ext, every=None, unit=None, priority=0, event=None, name=None,
            once=False) -> Extension:
        if not isinstance(ext, Extension):
            if not callable(ext):
                raise TrainingError(f"MainLoop.add: {ext!r} is neither an Extension nor callable")
            if event is not None and event not in EVENTS:
                raise TrainingError(f"MainLoop.add: unknown event {event!r}; the events are "
                                    f"{', '.join(EVENTS)}")
            label = name or getattr(ext, "__name__", type(ext).__name__)
            check_args(ext, f"extension {label}")
            ext = CallableExtension(ext, every if event is None else None, unit, priority, event,
                                    label, once)
        else:
            for ev in EVENTS:
                hook = getattr(ext, ev, None)
                if hook is not None:
                    check_args(hook, f"{ext.name}.{ev}")
        if ext in self._items:
            raise TrainingError(f"MainLoop.add: {ext.name} is already registered")
        taken = {e.name for e in self._items}
        base, n = ext.name, 2
        while ext.name in taken:
            ext.name = f"{base}#{n}"
            n += 1
        self._items.append(ext)
        self._plans.clear()
        return ext

    def remove(self, ext) -> None:
        self._items.remove(ext)
        self._plans.clear()

    def find(self, cls) -> list:
        return [e for e in self._items if isinstance(e, cls)]

    def saved(self) -> dict[str, Extension]:
        """The extensions whose state is part of the loop's state, by name."""
        return {e.name: e for e in self._items if not e.transient}

    def dispatch(self, event: str) -> None:
        plan = self._plans.get(event)
        if plan is None:
            # NOTE: built once per event and extension list: dispatch runs ~3 times a batch
            order = sorted(enumerate(self._items), key=lambda ie: (-ie[1].priority, ie[0]))
            plan = [(getattr(e, event, None),
                     e if event in TRIGGER_EVENTS and e.triggered else None) for _, e in order]
            plan = [(h, e) for h, e in plan if h is not None or e is not None]
            self._plans[event] = plan
        loop = self._owner
        for hook, ext in plan:
            if hook is not None:
                hook(loop)
            if ext is not None and ext.fires(loop, event):
                ext(loop)
