"""A loop's whole state as data: what ``MainLoop.state_dict()`` holds, and loading it back.

The state is nested dicts of arrays and JSON values (see ``labkit.checkpoint``). Loading checks
its shape first, then loads part by part; when a part does not fit (another model, damaged
values), the error names the part and everything loaded so far is put back as it was.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from .. import checkpoint as ckpt
from ..backend.random import Generator
from ..checkpoint import is_count
from ..checkpoint._common import ROOM
from ..errors import CheckpointError, LabkitError
from ..regularizers import NOISE_PREFIX

FORMAT = "labkit-mainloop"
#: the loop state's version: 1 since the first labkit; a newer one is refused (upgrade labkit)
VERSION = 1
#: the keys of a loop state of this version
KEYS = ("format", "version", "status", "model", "optimizer", "stream", "rng", "log",
        "extensions", "run")
#: the loop's status entries and their types, as saved in checkpoints
STATUS = {"iteration": int, "epoch": int, "epoch_iteration": int, "epoch_started": bool,
          "training_started": bool, "finished": bool, "time_total": float,
          "resumed_from": (str, type(None))}


class NotThisLoop(CheckpointError):
    """A state that is not this loop's (another model's generators, extensions it lacks): the
    loop was built otherwise than the one that saved it, so no other checkpoint of the run is
    taken instead of it (see ``MainLoop.load_checkpoint``)."""


def brick_generators(model):
    """``(name, Generator)`` of every random generator a brick of ``model`` holds."""
    for b in model.bricks():
        for attr, v in vars(b).items():
            if isinstance(v, Generator):
                yield f"{b.path}.{attr}", v


def loop_state(loop) -> dict:
    from ..functions import noise

    return {
        "format": FORMAT, "version": VERSION,
        "status": dict(loop.status),
        "model": loop.model.state_dict(),
        "optimizer": loop.optimizer.state_dict(),
        "stream": loop.stream.state_dict(),
        "rng": {"dropout": {d: g.state_dict() for d, g in noise.default_generators().items()},
                "bricks": {k: g.state_dict() for k, g in brick_generators(loop.model)}},
        "log": loop.log.state_dict(),
        "extensions": {n: _extension_state(e) for n, e in loop.extensions.saved().items()},
        "run": {"id": loop.run_id, "name": loop.name, "config": loop.config},
    }


def _without_settings(state):
    """``state`` with its stream stages' recorded settings left out (data.streams)."""
    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k != "settings"}
        return [strip(x) for x in v] if isinstance(v, list) else v

    if isinstance(state, dict) and isinstance(state.get("stream"), dict):
        state = {**state, "stream": strip(state["stream"])}
    return state


def load_loop_state(loop, state: dict) -> None:
    check(state)
    mine = loop.extensions.saved()
    saved = state["extensions"]
    lost = sorted(k for k, v in saved.items() if k not in mine and v)
    if lost:
        raise NotThisLoop(
            f"MainLoop.load_state_dict: the checkpoint has state for extensions {lost}, "
            f"which this loop lacks (it has {sorted(mine)}); build the loop as it was when "
            "it was saved")
    gens = dict(brick_generators(loop.model))
    unknown = sorted(set(state["rng"]["bricks"]) - set(gens))
    if unknown:
        raise NotThisLoop(f"MainLoop.load_state_dict: the checkpoint has random generators "
                          f"{unknown} that this model lacks")
    missing = sorted(set(gens) - set(state["rng"]["bricks"]))
    # NOTE: a WeightNoise generator (regularizers.py) a checkpoint of an older labkit lacks:
    # that labkit restarted it from its seed at every resume, as this load does, with a warning
    noise = [k for k in missing if k.rpartition(".")[2].startswith(NOISE_PREFIX)]
    missing = [k for k in missing if k not in noise]
    if missing:
        # NOTE: loaded without them, their draws would restart and resume would not be exact
        raise NotThisLoop(f"MainLoop.load_state_dict: the checkpoint has no state for the "
                          f"model's random generators {missing}; it was saved by another "
                          "model (or damaged)")
    _check_optimizer_steps(loop, state)
    if noise:
        warnings.warn(f"MainLoop.load_state_dict: the checkpoint has no state for the "
                      f"WeightNoise generators {noise} (saved by a labkit that did not save "
                      "them): their noise starts again from its seed, so the resumed run draws "
                      "other noise than the saved one would have", stacklevel=4)
    for name, ext in mine.items():
        if name in saved:
            try:
                ext.check_saved(saved[name], state["status"])
                ext.check_saved_model(saved[name], loop.model)
            except CheckpointError as e:
                raise CheckpointError(f"MainLoop.load_state_dict: extension {name}: {e}") from e
    fresh = sorted(k for k, e in mine.items() if k not in saved and e.state_dict())
    if fresh:
        warnings.warn(f"extensions {fresh} are not in the checkpoint: they start fresh",
                      stacklevel=4)
    before = loop_state(loop)
    try:
        _load_parts(loop, state, mine, gens)
    except BaseException:
        _load_parts(loop, before, mine, gens)  # leave the loop as it was
        raise


class _Unfit(Exception):
    """Carries a NotThisLoop out of ``load_latest``, which would skip it as damaged."""


def load_newest(loop, directory, own: bool = False) -> Path:
    """Load into ``loop`` the newest checkpoint in ``directory`` that loads; returns its path.

    Passed over, each with a warning naming it and why, and marked invalid in the run store:
    a checkpoint damaged on disk and one whose state the loop's checks refuse (values that
    contradict each other), alike. Then, for a fork with none of its own that loads, the
    checkpoint it was forked from. A state that is not this loop's (``NotThisLoop``) raises at
    once: the loop was built otherwise, and an older checkpoint would hide it. When nothing
    loads, the ``CheckpointError`` gives every reason; the loop is left as it was. ``own``:
    only the loop's run's checkpoints are candidates (resuming it: a folder it shares with
    other runs holds theirs too)."""
    refused: dict[Path, str] = {}
    others: list = []

    def accept(path, saved):
        # NOTE: a folder shared with other runs (Checkpoint(directory=...)): their checkpoints
        # are theirs, neither loaded nor marked invalid
        rid = ckpt.manifest(path).get("run_id") if own and loop.run_id is not None else None
        if isinstance(rid, str) and rid != loop.run_id:
            others.append(rid)
            return False
        try:
            load_loop_state(loop, saved)
        except NotThisLoop as e:
            raise _Unfit(NotThisLoop(f"{path}: {e}")) from e
        except CheckpointError as e:
            refused[path] = str(e)
            raise

    try:
        path, _, skipped = ckpt.load_latest(directory, accept=accept)
    except _Unfit as e:
        raise e.args[0] from e.__cause__
    if path is not None:
        loop.recorder.mark_invalid(skipped, loop.status["iteration"])
        return path
    reasons = [f"{p}: {refused.get(p) or ckpt.verify(p) or 'it changed as it was read'}"
               for p in skipped]
    parent = loop.recorder.parent_checkpoint
    if parent:
        try:
            # NOTE: a fork may change its data pipeline's settings (a crop size in its changed
            # config): the parent's stream state is loaded without them
            load_loop_state(loop, _without_settings(ckpt.load(parent)))
            return Path(parent)
        except CheckpointError as e:
            if not reasons:
                raise CheckpointError(f"{parent}: {e}") from e
            reasons.append(f"{parent} (the checkpoint this run was forked from): {e}")
    name = f"run {loop.run_id}" if loop.run_id else "the loop"
    if others:
        reasons.append(f"{len(others)} checkpoint(s) of other runs "
                       f"({', '.join(sorted(set(others)))}) were passed over")
    if not reasons or (others and len(reasons) == 1):
        more = f" ({reasons[0]})" if reasons else ""
        raise CheckpointError(f"{name} has no valid checkpoint to resume from (in "
                              f"{directory}){more}")
    raise CheckpointError(f"{name} has no checkpoint that loads in {directory}; each was "
                          "passed over, nothing was loaded: " + "; ".join(reasons))


def _check_optimizer_steps(loop, state) -> None:
    """A loop with ``loss_fn`` updates its optimizer once per iteration, so the optimizer has
    taken at least as many steps as the loop has iterations (more when it was stepped before
    the loop, or by an extension). Fewer cannot be: an edited ``t`` would restart the
    learning-rate schedule and Adam's bias correction silently. With ``step=`` the step decides
    how often to update (gradient accumulation), and nothing is assumed."""
    t, it = state["optimizer"].get("t"), state["status"]["iteration"]
    if loop.loss_fn is not None and is_count(t) and t < it:
        raise CheckpointError(
            f"MainLoop.load_state_dict: optimizer['t'] is {t} (the optimizer's steps taken), "
            f"fewer than status['iteration'] {it}; a loop with loss_fn updates the optimizer "
            "once per iteration, so the checkpoint is damaged or was edited (a state saved by "
            "a loop with step= that updates less often loads into a loop built with that step)")


def _extension_state(ext):
    """An extension's state, with ``"fired": true`` added for a ``once`` extension that fired
    (its own ``state_dict`` may not say so: a subclass's, or the base class's ``{}``), so a
    resumed run does not fire it again."""
    state = ext.state_dict()
    if ext.once and ext.fired and isinstance(state, dict) and "fired" not in state:
        state = {**state, "fired": True}
    return state


def _load_extension(ext, state):
    own = ext.state_dict()
    if ext.once and isinstance(state, dict) and "fired" in state and not (
            isinstance(own, dict) and "fired" in own):
        fired = state["fired"]
        if fired is not True:
            raise CheckpointError(f"{ext.name}: saved state 'fired' must be true, got "
                                  f"{fired!r:.60}")
        ext.load_state_dict({k: v for k, v in state.items() if k != "fired"})
        ext.fired = True
    else:
        ext.load_state_dict(state)
        if ext.once and not (isinstance(own, dict) and "fired" in own):
            ext.fired = False  # NOTE: saved before it fired (a rollback puts that back too)


def _load_parts(loop, state, extensions, gens) -> None:
    from ..functions import noise

    parts = [("model", loop.model.load_state_dict, state["model"]),
             ("optimizer", loop.optimizer.load_state_dict, state["optimizer"]),
             ("stream", loop.stream.load_state_dict, state["stream"]),
             ("log", loop.log.load_state_dict, state["log"])]
    # NOTE: the device is looked up inside the loop below: a checkpoint from a machine with
    # another device (cl:1) is a CheckpointError naming it, with the loop left as it was
    parts += [(f"dropout generator of {d}",
               lambda g, d=d: noise.default_generator(d).load_state_dict(g), g)
              for d, g in state["rng"]["dropout"].items()]
    parts += [(f"generator {k}", gens[k].load_state_dict, g)
              for k, g in state["rng"]["bricks"].items()]
    parts += [(f"extension {n}", lambda v, e=e: _load_extension(e, v), state["extensions"][n])
              for n, e in extensions.items() if n in state["extensions"]]
    for what, load, value in parts:
        try:
            load(value)
        except CheckpointError as e:
            raise CheckpointError(f"MainLoop.load_state_dict: {what}: {e}") from e
        except (LabkitError, KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            if getattr(e, "built_otherwise", False):
                # NOTE: a pipeline built otherwise (another scheme, stages or settings): every
                # checkpoint of the run would be refused alike; say so at once
                raise NotThisLoop(f"MainLoop.load_state_dict: the saved {what} is not this "
                                  f"loop's ({e})") from e
            # NOTE: a component that does not check its own state yet fails on damaged values
            # with a raw error: name the part, keep the cause
            raise CheckpointError(f"MainLoop.load_state_dict: the saved {what} does not fit "
                                  f"this loop ({type(e).__name__}: {e})") from e
    loop.status = {k: state["status"].get(k) for k in STATUS}


def check(state) -> None:
    """The shape of a saved loop state, checked before anything is loaded."""
    def bad(what):
        return CheckpointError(f"MainLoop.load_state_dict: {what}")

    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise bad("not the state of a MainLoop")
    version = state.get("version")
    if is_count(version) and version > VERSION:
        raise bad(f"the state is version {version}, written by a newer labkit; this labkit reads "
                  f"loop states of version {VERSION} - upgrade labkit")
    if not (is_count(version) and version == VERSION):
        raise bad(f"'version' must be {VERSION}, got {_brief(version)}; the checkpoint is "
                  "damaged or was edited")
    unknown = sorted(set(state) - set(KEYS), key=str)
    if unknown:
        raise bad(f"unknown keys {_keys(unknown)}; a loop state of version {VERSION} has "
                  f"{list(KEYS)}")
    for key in KEYS[2:-1]:
        if not isinstance(state.get(key), dict):
            raise bad(f"'{key}' must be an object, got {type(state.get(key)).__name__}")
    status = state["status"]
    unknown = sorted(set(status) - set(STATUS), key=str)
    if unknown:
        raise bad(f"status has unknown keys {_keys(unknown)}; expected {list(STATUS)}")
    for key, kind in STATUS.items():
        if key not in status and key != "resumed_from":
            raise bad(f"status lacks '{key}'")
        v = status.get(key)
        if kind is int and not is_count(v):
            # NOTE: below 2**63: the run store keeps counters as SQLite integers
            raise bad(f"status['{key}'] must be an integer in [0, 2**63), got {_brief(v)}")
        if kind is int and v >= ROOM:
            raise bad(f"status['{key}'] is {v}: no run counts to 2**62 (a count this close to "
                      "the run store's limit leaves no room to train on); the checkpoint is "
                      "damaged or was edited")
        if kind is float and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not 0 <= v < float("inf")):
            raise bad(f"status['{key}'] must be a finite number >= 0, got {_brief(v)}")
        if kind is bool and not isinstance(v, bool):
            raise bad(f"status['{key}'] must be true or false, got {_brief(v)}")
        if isinstance(kind, tuple) and not isinstance(v, kind):
            raise bad(f"status['{key}'] must be a string or null, got {_brief(v)}")
    if status["epoch_iteration"] > status["iteration"]:
        raise bad(f"status['epoch_iteration'] is {status['epoch_iteration']}, more than "
                  f"status['iteration'] {status['iteration']} (the iterations of all epochs)")
    _check_counters(status, state.get("log"), bad)
    for key in ("dropout", "bricks"):
        gens = state["rng"].get(key)
        if not isinstance(gens, dict) or not all(isinstance(g, dict) for g in gens.values()):
            raise bad(f"rng['{key}'] must be an object of generator states")
        for name, g in gens.items():
            problem = _generator_problem(g)
            if problem:
                raise bad(f"rng['{key}'][{_brief(name, 60)}]: {problem}")
    if set(state["rng"]) != {"dropout", "bricks"}:
        raise bad(f"rng must have the keys 'dropout' and 'bricks', got {sorted(state['rng'])}")
    run = state.get("run", {})
    if not isinstance(run, dict) or not set(run) <= {"id", "name", "config"} or not all(
            isinstance(run.get(k), (str, type(None))) for k in ("id", "name")) or not \
            isinstance(run.get("config", {}), dict):
        raise bad(f"'run' must be {{\"id\": string or null, \"name\": string or null, "
                  f"\"config\": object}}, got {_brief(run)}")


def _check_counters(status: dict, log, bad) -> None:
    """The loop's counters against each other and against its log: only what no loop can
    write (the loop alone moves them). The stream's epoch and position are not compared with
    them: a notebook may read batches from ``loop.stream`` between runs, and both resume
    exactly as they were."""
    it, epoch, in_epoch = status["iteration"], status["epoch"], status["epoch_iteration"]
    fix = "; the checkpoint is damaged or was edited"
    if not status["epoch_started"] and in_epoch:
        # NOTE: an epoch ends by setting both (epoch_iteration 0, epoch_started false)
        raise bad(f"status['epoch_iteration'] is {in_epoch} but status['epoch_started'] is "
                  f"false: iterations are counted only inside a started epoch{fix}")
    if epoch == 0 and it != in_epoch:
        raise bad(f"status['iteration'] is {it} but status['epoch_iteration'] is {in_epoch} in "
                  f"epoch 0: every iteration of the first epoch is one of both{fix}")
    rows = log.get("rows") if isinstance(log, dict) else None
    for i, row in enumerate(rows if isinstance(rows, list) else ()):
        if not isinstance(row, dict):
            continue  # NOTE: the log's own check names it
        for key, now in (("iteration", it), ("epoch", epoch)):
            v = row.get(key)
            if is_count(v) and v > now:
                # NOTE: the log only has rows of iterations already trained; a later one would
                # stay in the run store and come before the next rows, which no later load takes
                raise bad(f"log row {i} has {key}={v}, after status['{key}'] {now} (the "
                          f"loop's own {key}){fix}")


def _generator_problem(g: dict) -> str | None:
    """What is wrong with a saved random generator's state, or None: its seed is a 64-bit key
    (NumPy's seeds are non-negative), its counter counts blocks drawn, like every counter."""
    if set(g) != {"seed", "counter"}:
        return f"expected the keys 'seed' and 'counter', got {sorted(map(str, g))[:5]}"
    seed, counter = g["seed"], g["counter"]
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64:
        return f"'seed' must be an integer in [0, 2**64), got {_brief(seed)}"
    if not is_count(counter):
        return f"'counter' must be an integer in [0, 2**63), got {_brief(counter)}"
    if counter >= ROOM:
        return (f"'counter' is {counter}: no run draws 2**62 blocks (a counter this close to "
                "the limit leaves no room to draw on); the checkpoint is damaged or was edited")
    return None


def _keys(keys) -> str:
    return ", ".join(_brief(k, 30) for k in keys[:5]) + (" ..." if len(keys) > 5 else "")


def _brief(v, n: int = 60) -> str:
    try:
        r = repr(v)
    except ValueError:  # an integer too long to print
        return "an integer of more than 4300 digits"
    return r if len(r) <= n else r[:n] + "..."
