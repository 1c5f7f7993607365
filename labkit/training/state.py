"""A loop's whole state as data: what ``MainLoop.state_dict()`` holds, and loading it back.

The state is nested dicts of arrays and JSON values (see ``labkit.checkpoint``). Loading checks
its shape first, then loads part by part; when a part does not fit (another model, damaged
values), the error names the part and everything loaded so far is put back as it was.
"""

from __future__ import annotations

import warnings

from ..backend.random import Generator
from ..errors import CheckpointError, LabkitError

FORMAT = "labkit-mainloop"
#: the loop's status entries and their types, as saved in checkpoints
STATUS = {"iteration": int, "epoch": int, "epoch_iteration": int, "epoch_started": bool,
          "training_started": bool, "finished": bool, "time_total": float,
          "resumed_from": (str, type(None))}


def brick_generators(model):
    """``(name, Generator)`` of every random generator a brick of ``model`` holds."""
    for b in model.bricks():
        for attr, v in vars(b).items():
            if isinstance(v, Generator):
                yield f"{b.path}.{attr}", v


def loop_state(loop) -> dict:
    from ..functions import noise

    return {
        "format": FORMAT, "version": 1,
        "status": dict(loop.status),
        "model": loop.model.state_dict(),
        "optimizer": loop.optimizer.state_dict(),
        "stream": loop.stream.state_dict(),
        "rng": {"dropout": {d: g.state_dict() for d, g in noise.default_generators().items()},
                "bricks": {k: g.state_dict() for k, g in brick_generators(loop.model)}},
        "log": loop.log.state_dict(),
        "extensions": {n: e.state_dict() for n, e in loop.extensions.saved().items()},
        "run": {"id": loop.run_id, "name": loop.name, "config": loop.config},
    }


def load_loop_state(loop, state: dict) -> None:
    check(state)
    mine = loop.extensions.saved()
    saved = state["extensions"]
    lost = sorted(k for k, v in saved.items() if k not in mine and v)
    if lost:
        raise CheckpointError(
            f"MainLoop.load_state_dict: the checkpoint has state for extensions {lost}, "
            f"which this loop lacks (it has {sorted(mine)}); build the loop as it was when "
            "it was saved")
    gens = dict(brick_generators(loop.model))
    unknown = sorted(set(state["rng"]["bricks"]) - set(gens))
    if unknown:
        raise CheckpointError(f"MainLoop.load_state_dict: the checkpoint has random "
                              f"generators {unknown} that this model lacks")
    missing = sorted(set(gens) - set(state["rng"]["bricks"]))
    if missing:
        # NOTE: loaded without them, their draws would restart and resume would not be exact
        raise CheckpointError(f"MainLoop.load_state_dict: the checkpoint has no state for the "
                              f"model's random generators {missing}; it was saved by another "
                              "model (or damaged)")
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
    parts += [(f"extension {n}", e.load_state_dict, state["extensions"][n])
              for n, e in extensions.items() if n in state["extensions"]]
    for what, load, value in parts:
        try:
            load(value)
        except CheckpointError as e:
            raise CheckpointError(f"MainLoop.load_state_dict: {what}: {e}") from e
        except (LabkitError, KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
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
    for key in ("status", "model", "optimizer", "stream", "rng", "log", "extensions"):
        if not isinstance(state.get(key), dict):
            raise bad(f"'{key}' must be an object, got {type(state.get(key)).__name__}")
    for key, kind in STATUS.items():
        if key not in state["status"] and key != "resumed_from":
            raise bad(f"status lacks '{key}'")
        v = state["status"].get(key)
        if kind is int and (isinstance(v, bool) or not isinstance(v, int) or v < 0
                            or v >= 1 << 63):
            # NOTE: below 2**63: the run store keeps counters as SQLite integers
            raise bad(f"status['{key}'] must be an integer in [0, 2**63), got {v!r}")
        if kind is float and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not 0 <= v < float("inf")):
            raise bad(f"status['{key}'] must be a finite number >= 0, got {v!r}")
        if kind is bool and not isinstance(v, bool):
            raise bad(f"status['{key}'] must be true or false, got {v!r}")
        if isinstance(kind, tuple) and not isinstance(v, kind):
            raise bad(f"status['{key}'] must be a string or null, got {v!r}")
    for key in ("dropout", "bricks"):
        gens = state["rng"].get(key)
        if not isinstance(gens, dict) or not all(isinstance(g, dict) for g in gens.values()):
            raise bad(f"rng['{key}'] must be an object of generator states")
