"""Building loops so they can be rebuilt, resuming runs, and checking that resume is exact.

``build(make_loop, config)`` records which importable function made the loop, so
``resume(run_id)`` (and ``labkit resume``) can rebuild it in another process, load its newest
valid checkpoint and continue. ``check_resume`` trains once straight through and once stopped
and resumed, and names the first difference.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import math
import os
import socket
import sysconfig
import tempfile
import types
import warnings
from pathlib import Path

import numpy as np

from .. import checkpoint as ckpt
from ..errors import CheckpointError, RunStoreError, TrainingError
from .loop import MainLoop


def factory_name(fn) -> str | None:
    """``module:qualname`` (or ``/path/script.py:qualname``) of ``fn``, if it is importable."""
    mod = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", "")
    if not mod or "<" in qual:
        return None
    if mod == "__main__" or mod.startswith("__labkit_"):
        # NOTE: a script run, or one labkit imported from its path (load_factory, the sweep
        # CLI's target): by that path; its module's name imports nothing
        f = (getattr(fn, "__globals__", None) or {}).get("__file__")
        return f"{Path(f).resolve()}:{qual}" if isinstance(f, str) and f else None
    return f"{mod}:{qual}"


def load_factory(name: str):
    """Import ``module:function`` or ``/path/to/script.py:function``."""
    if not isinstance(name, str):
        raise TrainingError(f"bad factory {name!r}: expected 'module:function'")
    target, _, qual = name.rpartition(":")
    if not target or not qual:
        raise TrainingError(f"bad factory {name!r}: expected 'module:function'")
    if target.endswith(".py"):
        if not Path(target).is_file():
            raise TrainingError(f"the run was built by {name}, but {target} does not exist")
        spec = importlib.util.spec_from_file_location("__labkit_factory__", target)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    else:
        if _python_own(target.partition(".")[0]) or target == "__main__":
            # NOTE: a factory builds a MainLoop; Python's own modules build none, and a run
            # store from elsewhere naming one (subprocess:run) would run it on `labkit resume`
            raise _not_a_factory(name, "is in Python's standard library")
        try:
            mod = importlib.import_module(target)
        except ImportError as e:
            raise TrainingError(f"the run was built by {name}, but {target} cannot be imported "
                                f"({e}); pass make_loop=<the function that builds it>") from None
    obj = mod
    for part in qual.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TrainingError(f"the run was built by {name}, but {target} has no {qual}; pass "
                                "make_loop=<the function that builds it>") from None
    # NOTE: nor one of Python's own functions imported into a user's module (os:system is
    # posix's, built in)
    inner = obj.func if isinstance(obj, functools.partial) else obj
    home = getattr(inner, "__module__", None)
    if not callable(obj) or isinstance(inner, (types.BuiltinFunctionType,
                                               types.BuiltinMethodType)) or (
            isinstance(home, str) and _python_own(home.partition(".")[0])):
        qual_name = getattr(inner, "__qualname__", "?")
        raise _not_a_factory(name, f"is {type(obj).__name__} {home}.{qual_name}")
    return obj


#: where Python's standard library lives (its site-packages excepted)
_STDLIB = {Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib")}


def _python_own(module: str) -> bool:
    """Whether top-level module ``module`` is Python's own (built in, frozen, or a file of the
    standard library), found without importing it; a user's package of the same name found
    first on the path is not."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False  # NOTE: importing it says why
    if spec is None or not spec.origin:
        return False
    if spec.origin in ("built-in", "frozen"):
        return True
    where = Path(spec.origin).resolve()
    if "site-packages" in where.parts or "dist-packages" in where.parts:
        return False
    return any(where.is_relative_to(p) for p in _STDLIB)


def _not_a_factory(name, what) -> TrainingError:
    return TrainingError(f"the run's factory {name!r} {what}, which builds no MainLoop: its "
                         "record was altered or the run store is not yours; pass "
                         "make_loop=<the function that builds it>")


def build(make_loop, config: dict | None = None, name: str | None = None) -> MainLoop:
    """``make_loop(config)`` -> MainLoop, recorded so that ``lk.resume(run_id)`` and ``labkit
    resume`` can rebuild it. ``make_loop`` must be importable (defined in a module or a script,
    not in a notebook cell) for ``resume`` to find it without being passed it."""
    config = dict(config or {})
    loop = make_loop(config)
    if not isinstance(loop, MainLoop):
        raise TrainingError(f"build: make_loop returned {type(loop).__name__}, not a MainLoop")
    loop.config = {**config, **loop.config}
    loop.factory = factory_name(make_loop)
    if name is not None:
        loop.name = name
    return loop


def started_by_dist(record: dict) -> bool:
    """Whether run ``record`` is a job ``lk.dist.start`` made: it records its ranks (config)
    and its script (source); ``lk.dist.resume`` continues it, not ``resume``."""
    return ("ranks" in (record.get("config") or {})
            and str(record.get("source") or "").endswith(".py"))


def _locate(run_or_path):
    """(checkpoint path or None, run id or None) for a run id, a checkpoint or a run
    directory."""
    p = Path(str(run_or_path))
    if p.is_symlink():
        raise CheckpointError(f"{p}: a symbolic link; labkit resumes from real directories only "
                              "(give the link's target)")
    if p.is_dir() and (p / "manifest.json").exists():
        return p, ckpt.manifest(p).get("run_id")
    if p.is_dir() and (p / "checkpoints").is_dir():
        # NOTE: the directory, not its newest valid checkpoint: the loop takes the newest that
        # loads into it, as for a run id (one whose state it refuses is passed over)
        found = ckpt.list_checkpoints(p / "checkpoints")
        return (p / "checkpoints" if found else None), p.name
    text = str(run_or_path)
    from ..runs.ids import is_run_id

    if p.is_dir() and is_run_id(p.name):
        return None, p.name  # NOTE: a run's folder before its first checkpoint
    if os.path.lexists(p) and (os.path.sep in text or not is_run_id(text)):
        # NOTE: a path (a run id has no slash): "no run '/etc' in runs.sqlite" named the wrong
        # thing
        raise CheckpointError(f"resume: {p} is neither a checkpoint directory (one with a "
                              "manifest.json) nor a run's folder (one with checkpoints/); give "
                              "one of those, or a run id (labkit runs ls)")
    return None, text


def _refuse_live(store, record) -> None:
    """A run training in another process (running or paused, beating) is not resumed: two
    loops would train it into one folder, each pruning what the other recorded."""
    if not store.is_live(record):
        return
    if record.get("host") == socket.gethostname() and record.get("pid") == os.getpid():
        return  # NOTE: this process's own loop (paused in a notebook): the caller's to decide
    raise TrainingError(f"resume: run {record['id']} is training now (status "
                        f"{record.get('stored_status', record.get('status'))}, pid "
                        f"{record.get('pid')} on {record.get('host')}); stop it first "
                        f"(lk.runs.send({record['id']!r}, 'stop')), or fork it "
                        f"(lk.runs.fork({record['id']!r}))")


def resume(run_or_path, make_loop=None, run: bool = True) -> MainLoop:
    """Rebuild a run's loop, load its newest valid checkpoint and continue training.

    ``run_or_path``: a run id, a checkpoint directory, or a run directory. ``make_loop``: the
    function that built the loop (needed when it was defined in a notebook). A forked run (see
    ``lk.runs.fork``) starts from its parent's checkpoint with its own config.
    """
    from .. import runs

    checkpoint_path, run_id = _locate(run_or_path)
    record = None
    if run_id:
        try:
            record = runs.get(run_id)
        except RunStoreError:
            if checkpoint_path is None:
                raise
    if record is not None:
        _refuse_live(runs.store(), record)
    if make_loop is None:
        factory = record.get("factory") if record else None
        if not factory and record and started_by_dist(record):
            raise TrainingError(f"resume: run {run_id} is a data-parallel job (lk.dist.start "
                                f"of {record['source']}); continue it on N ranks with "
                                f"lk.dist.resume({run_id!r}, n=N) or `labkit resume {run_id}`")
        if not factory:
            raise TrainingError(f"resume: run {run_id} does not say how to rebuild its loop "
                                "(it was not made with lk.training.build from an importable "
                                "function); pass make_loop=<the function that builds it>")
        make_loop = load_factory(factory)
    config = record["config"] if record else {}
    loop = make_loop(config)
    if not isinstance(loop, MainLoop):
        raise TrainingError(f"resume: make_loop returned {type(loop).__name__}, not a MainLoop")
    loop.config = dict(config)
    loop.factory = record.get("factory") if record else factory_name(make_loop)
    try:
        if record is not None:
            loop.name = record.get("name")
            loop.attach(record)  # NOTE: claims the run (recorder.claim)
        loop.load_checkpoint(checkpoint_path)
        if record is not None and record.get("parent_checkpoint") and not \
                ckpt.list_checkpoints(loop.checkpoint_dir):
            loop.log.report(forked_from=record.get("parent_run"))
    except BaseException:
        loop.recorder.release()  # NOTE: a notebook's traceback keeps the loop: let go now
        raise
    if run:
        loop.run()  # NOTE: still claimed from the attach: no other process got in between
    else:
        loop.recorder.release()  # NOTE: claimed again when it trains
    return loop


class ResumeCheck:
    """The result of ``check_resume``: ``identical``, ``first_difference`` and a readable repr."""

    def __init__(self, at_iteration, compared, first_difference):
        self.at_iteration, self.compared = at_iteration, compared
        self.first_difference = first_difference
        self.identical = first_difference is None

    @property
    def at_batch(self):  # the older name
        return self.at_iteration

    def __bool__(self):
        return self.identical

    def __repr__(self):
        if self.identical:
            return (f"ResumeCheck: identical - stopped at iteration {self.at_iteration}, resumed "
                    f"from the checkpoint, {self.compared} values compared bit for bit")
        return f"ResumeCheck: DIFFERENT after resuming at iteration {self.at_iteration}: " + \
            self.first_difference


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def check_resume(make_loop, at_iteration: int | None = None, directory=None, *,
                 at_batch: int | None = None) -> ResumeCheck:
    """Train ``make_loop()`` uninterrupted; train another ``make_loop()`` for ``at_iteration``
    iterations, checkpoint it, resume a third from that checkpoint; compare the logs (every
    reported value except timings) and the final parameters bit for bit."""
    from .. import runs

    if at_batch is not None:
        warnings.warn("check_resume(at_batch=) is now at_iteration=", DeprecationWarning,
                      stacklevel=2)
    at = at_iteration if at_iteration is not None else at_batch
    if at is None:
        raise TrainingError("check_resume: give at_iteration=N")
    with tempfile.TemporaryDirectory() as tmp, runs.use_store(Path(tmp) / "runs.sqlite"):
        a = make_loop()
        a.run()
        a.close()
        b = make_loop()
        b.run(max_iterations=at)
        path = b.save_checkpoint(directory or Path(tmp) / "check")
        b.close()
        c = make_loop()
        c.load_checkpoint(path)
        c.run()
        c.close()
        compared = 0
        if len(a.log) != len(c.log):
            return ResumeCheck(at, compared, f"the uninterrupted run logged {len(a.log)} "
                               f"iterations, the resumed one {len(c.log)}")
        for ra, rc in zip(a.log.rows, c.log.rows):
            # NOTE: the keys of both rows: a value only the resumed run logged is a difference
            for k in list(ra) + [k for k in rc if k not in ra]:
                if k.startswith("time") or k == "forked_from":
                    continue
                if k not in rc or k not in ra or not _same(ra[k], rc[k]):
                    return ResumeCheck(at, compared, f"iteration {ra['iteration']}, {k!r}: "
                                       f"uninterrupted {ra.get(k)!r}, resumed {rc.get(k)!r}")
                compared += 1
        pa, pc = a.model.state_dict(), c.model.state_dict()
        for k in pa:
            compared += 1
            if not np.array_equal(pa[k], pc[k], equal_nan=True):
                diff = float(np.nanmax(np.abs(pa[k].astype(np.float64) - pc[k])))
                return ResumeCheck(at, compared, f"final parameter {k}: max |difference| "
                                   f"{diff:.3g}")
        return ResumeCheck(at, compared, None)
