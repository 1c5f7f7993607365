"""``labkit sweep run|ls|show|pause|resume|stop``: sweeps from the command line (a script on a
cluster, a terminal next to a notebook).

``labkit sweep run TARGET`` takes where ``make_loop`` lives, as ``lk.resume`` records it:
``path/to/script.py:make_loop`` or ``package.module:make_loop`` (``:make_loop`` may be left
out). The space is ``--space``: a JSON file or a JSON object written inline, in the form
``lk.sweep.space.from_json`` reads (``{"lr": {"loguniform": [1e-4, 0.1]}, "hidden": [64, 128],
"depth": {"range": [1, 8]}, "epochs": 5}``); without ``--space``, the ``SPACE`` dict of the
target's module. The script is imported (not run as ``__main__``), so its own
``if __name__ == "__main__"`` block does not start anything.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import math
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from ..errors import LabkitError, RunStoreError
from ..runs.checks import printable as show
from .space import SweepError

#: rows ``labkit sweep show`` prints unless ``--all``
SHOW_ROWS = 50


def load_target(target: str):
    """``(make_loop, module, factory)`` for ``script.py[:name]`` or ``module[:name]``;
    ``factory`` is the name ``lk.sweep.resume`` imports it by again."""
    where, _, name = target.rpartition(":") if ":" in target else (target, "", "make_loop")
    name = name or "make_loop"
    if not where.strip():
        raise SweepError(f"{show(target)!r}: give where make_loop is, as "
                         "path/to/script.py:make_loop or package.module:make_loop")
    if where.endswith(".py"):
        path = Path(where).resolve()
        if not path.is_file():
            raise SweepError(f"no script {show(where)} (give path/to/script.py:make_loop "
                             "or package.module:make_loop)")
        spec = importlib.util.spec_from_file_location("__labkit_sweep_target__", path)
        mod = importlib.util.module_from_spec(spec)
        # NOTE: the script's folder is importable from it, as when it runs as a script
        sys.path.insert(0, str(path.parent))
        try:
            spec.loader.exec_module(mod)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the script's own error, named
            raise _raised(where, e) from None
        factory = f"{path}:{name}"
    else:
        try:
            mod = importlib.import_module(where)
        except ImportError as e:
            raise SweepError(f"cannot import {show(where)!r} ({e}); give "
                             "path/to/script.py:make_loop or an importable module") from None
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the module's own error, named
            raise _raised(where, e) from None
        factory = f"{where}:{name}"
    fn = getattr(mod, name, None)
    if not callable(fn):
        have = sorted(k for k, v in vars(mod).items() if callable(v) and not k.startswith("_"))
        raise SweepError(f"{where} has no function {name!r} (it has "
                         f"{', '.join(have[:8]) or 'none'}); give {where}:<function>")
    return fn, mod, factory


def _raised(where, e) -> SweepError:
    """One line for a script or module that raised while it was imported: the error and
    where (its file and line)."""
    if isinstance(e, SystemExit):
        return SweepError(f"importing {show(where)} called sys.exit({e.code!r}): the script is "
                          "imported, not run; put its own work under "
                          "if __name__ == '__main__':")
    at = ""
    frames = traceback.extract_tb(e.__traceback__)
    if frames and not isinstance(e, SyntaxError):  # NOTE: a SyntaxError names its line
        at = f" (at {frames[-1].filename}:{frames[-1].lineno})"
    return SweepError(f"importing {show(where)} raised {type(e).__name__}: "
                      f"{show(str(e))[:300]}{at}")


def load_space(text, module, target):
    """The space from ``--space`` (a JSON file or inline JSON) or the module's ``SPACE``."""
    from .space import check, from_json

    if text is None:
        space = getattr(module, "SPACE", None)
        if space is None:
            raise SweepError(f"give --space (a JSON file or inline JSON), or define "
                             f"SPACE = {{...}} in {target.rpartition(':')[0] or target}")
        return check(space)
    if not text.lstrip().startswith(("{", "[")):  # NOTE: "[...": JSON, and not an object
        from ..checkpoint._files import Missing, read_regular

        name = show(text[:200])
        try:  # NOTE: a regular file of at most 1 MiB: not a FIFO to wait on, not /dev/zero
            raw = read_regular(text, 2**20, "space")
        except (LabkitError, OSError, ValueError) as e:
            why = "No such file or directory" if isinstance(e, Missing) else \
                str(e).replace(f"{text}: ", "", 1)
            raise SweepError(f"--space {name}: {show(why)[:200]} (give a JSON file "
                             "or an inline JSON object)") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SweepError(f"--space {name}: not a text file (give a JSON file in UTF-8 "
                             "or an inline JSON object)") from None
    try:
        json.loads(text)
    except (ValueError, RecursionError) as e:  # NOTE: JSONDecodeError is a ValueError
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise SweepError(f"--space is not valid JSON ({why})") from None
    return from_json(text)


def _asha(text):
    from .asha import ASHA

    if text is None:
        return None
    try:
        grace, reduction = (int(v) for v in text.split(","))
    except ValueError:
        raise SweepError(f"--asha takes GRACE,REDUCTION (e.g. 1,3), got "
                         f"{text!r}") from None
    return ASHA(grace, reduction)


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return show(v if isinstance(v, str) else json.dumps(v))


def _progress(kind, info):
    if kind == "start":
        print(f"sweep {info['sweep']}: {info['trials']} trials ({show(info['name'])})",
              flush=True)
    elif kind == "result" and info.get("outcome") in ("finished", "rung"):
        what = "finished" if info["outcome"] == "finished" else f"stopped at epoch " \
               f"{info['epoch']}"
        print(f"  trial {info['trial']} {what}: {_fmt(info.get('value'))}", flush=True)
    elif kind == "failed":
        print(f"  trial {info['trial']} failed: {show(info['error'])}", flush=True)
    elif kind == "done":
        print(f"sweep {info['sweep']}: every trial is done, nothing to resume (--trials N "
              "grows it)", flush=True)


def _summary(sw) -> None:
    rec = sw.record
    counts = ", ".join(f"{k} {v}" for k, v in sorted(rec["counts"].items()))
    print(f"sweep {sw.id} {sw.status}; trials: {counts}")
    try:
        b = sw.best()
        print(f"best: trial {b['trial']} {show(sw.metric)} {_fmt(b[sw.metric])}  "
              + "  ".join(f"{show(k)}={_fmt(b[k])}" for k in rec["space"]))
    except SweepError as e:
        print(f"best: none ({e})")
    print(f"`labkit sweep show {sw.id}` prints every trial")


def _quiet_dask() -> None:
    """A failed trial is one line of ours (``trial 3 failed: ...``), not Dask's "Compute Failed"
    report with the trial's traceback on top of it."""
    import logging

    logging.getLogger("distributed.worker").setLevel(logging.CRITICAL)


@contextlib.contextmanager
def _terminate_interrupts():
    """SIGTERM (``kill PID``, a batch system's notice) ends the sweep as Ctrl-C does: its
    trials interrupted and its workers closed, resumable (without this the driver died at
    once, its trials left running until a resume); a second SIGTERM kills at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def run_cmd(args) -> int:
    from . import api

    make_loop, module, factory = load_target(args.target)
    space = load_space(args.space, module, args.target)
    asha = _asha(args.asha)
    if args.trials is None and args.search != "grid":
        raise SweepError(f"trials must be a positive integer for --search {args.search}: give "
                         "--trials N, how many points to draw (grid search tries every point "
                         "without it)")
    _quiet_dask()
    # NOTE: workers None: the engine's default (inprocess: 1, else 2)
    with _terminate_interrupts():
        sw = api.run(make_loop, space, args.trials, search=args.search, metric=args.metric,
                     mode=args.mode, early_stopping=asha, engine=args.engine,
                     workers=args.workers, seed=args.seed, name=args.name,
                     _factory=factory, _hook=_progress)
    _summary(sw)
    return 0 if sw.status in ("finished", "stopped") else 1


def ls_cmd(args) -> int:
    from .. import runs
    from .api import Sweep

    recs = runs.store().list_sweeps()
    if not recs:
        print(f"no sweeps in {runs.store().path}")
        return 0
    print(f"{'id':32s} {'name':16s} {'status':11s} {'created':16s} {'done':>11s}  best")
    for rec in recs:
        total = sum(rec["counts"].values())
        done = sum(rec["counts"].get(s, 0) for s in ("finished", "stopped", "failed"))
        status, best = rec["status"], f"damaged: {show(rec.get('damaged'))}"
        if "damaged" not in rec:  # NOTE: one damaged sweep or trial does not hide the others
            try:
                sw = Sweep(rec["id"])
                status = sw.status
                b = sw.best()
                best = f"{show(sw.metric)} {_fmt(b[sw.metric])} (trial {b['trial']})"
            except SweepError:
                best = "-"
            except RunStoreError as e:
                if getattr(e, "reason", None) != "damaged":
                    raise
                # NOTE: one store: its path (which the error names first) once, not per row
                why = str(e).removeprefix(f"{runs.store().path}: ")
                best = f"damaged: {show(why)}"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(rec["created"] or 0))
        print(f"{show(rec['id']):32s} {show(rec['name'] or '-')[:16]:16s} "
              f"{show(status):11s} {when:16s} {f'{done}/{total}':>11s}  {best}")
    return 0


def show_cmd(args) -> int:
    from .api import Sweep

    sw = Sweep(args.id)
    rec = sw.record
    st = rec["settings"]
    print(f"sweep {sw.id} ({show(rec['name'])})  status {sw.status}  {st['search']} search, "
          f"{st['trials']} trials, {show(st['metric'])} ({st['mode']}), engine "
          f"{show(st['engine'])}")
    if rec.get("error"):
        print(f"  error: {show(rec['error'])}")
    rows = sw.table(sort=None if args.sort == "trial" else "value")
    params = list(rec["space"])
    cols = ["trial", "status", st["metric"], "epoch", *params]
    cells = [[_fmt(r[c]) if c not in ("trial", "epoch") else str(r[c] if r[c] is not None
                                                                  else "-")
              for c in cols] for r in rows[:None if args.all else SHOW_ROWS]]
    heads = [show(c) for c in cols]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, h in enumerate(heads)]
    print("  ".join(h.rjust(w) for h, w in zip(heads, widths)))
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, widths)))
    if len(rows) > len(cells):
        print(f"... {len(rows) - len(cells)} more (--all prints every trial)")
    for r in rows:
        if r["status"] == "failed" and r["error"]:
            print(f"  trial {r['trial']} failed: {show(r['error'])[:300]}")
    return 0


def resume_cmd(args) -> int:
    from . import api

    sw = api.Sweep(args.id)
    if sw.status == "paused" and args.trials is None:
        sw.resume()
        print(f"asked sweep {sw.id}'s driver (pid {sw.record['pid']}) to continue")
        return 0
    make_loop, factory = None, None
    if args.target is not None:
        make_loop, _, factory = load_target(args.target)
    _quiet_dask()
    with _terminate_interrupts():
        sw = api.resume(args.id, make_loop, trials=args.trials, engine=args.engine,
                        workers=args.workers, _factory=factory, _hook=_progress)
    _summary(sw)
    return 0 if sw.status in ("finished", "stopped") else 1


def _ask(args, request: str, effect: str) -> int:
    """Write ``request`` for the sweep's driver, if its status takes it."""
    from ..runs.sweeps import REQUEST_FROM
    from .api import Sweep

    sw = Sweep(args.id)
    status = sw.status
    if status not in REQUEST_FROM[request]:
        print(f"sweep {sw.id} is {status}, not running: nothing to {request}")
        return 0
    getattr(sw, request)()
    print(f"asked sweep {sw.id} to {request}: {effect}; `labkit sweep resume {sw.id}` "
          "continues it")
    return 0


def pause_cmd(args) -> int:
    return _ask(args, "pause", "its trials checkpoint and stop within seconds and its driver "
                "waits")


def stop_cmd(args) -> int:
    return _ask(args, "stop", "its trials checkpoint and stop within seconds")


def id_argument(what: str, listed: str):
    """An argparse ``type`` for ``what`` (an id): not empty, not a page of text; ``listed``
    says where the ids are listed (labkit/cli.py uses it for run ids)."""
    def check(text):
        if not text.strip():
            raise argparse.ArgumentTypeError(f"expected {what} ({listed}), got an empty "
                                             "string")
        if len(text) > 4096:
            raise argparse.ArgumentTypeError(f"expected {what}, got {len(text):,} characters")
        return text
    return check


_an_id = id_argument("a sweep id", "`labkit sweep ls` lists them")


def _positive(text):
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def add_parser(sub) -> None:
    """``labkit sweep ...`` on the ``labkit`` parser's subcommands."""
    p = sub.add_parser("sweep", help="run, list, show, pause, resume or stop hyperparameter "
                       "sweeps",
                       description="Hyperparameter sweeps on Dask: every trial a run in the "
                       "store, resumable trial by trial. Needs pip install 'labkit[sweep]'.")
    ss = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = ss.add_parser("run", help="start a sweep (blocks until it ends; Ctrl-C interrupts, "
                      "`labkit sweep resume ID` continues)",
                      description=__doc__.split("\n\n", 1)[1])
    q.add_argument("target", help="script.py:make_loop or package.module:make_loop")
    q.add_argument("--space", help="a JSON file or inline JSON (default: the module's SPACE)")
    q.add_argument("--trials", type=_positive, help="how many trials (grid: default all)")
    q.add_argument("--search", choices=["random", "grid", "sobol"], default="random")
    q.add_argument("--metric", default="valid_loss", help="a value the loop logs (default "
                   "valid_loss)")
    q.add_argument("--mode", choices=["min", "max"], default="min",
                   help="whether lower (min, the default) or higher is better")
    q.add_argument("--asha", metavar="GRACE,REDUCTION", help="early stopping by ASHA, e.g. 1,3")
    q.add_argument("--engine", default="local", help="local (the default), inprocess, or a "
                   "scheduler address such as tcp://10.0.0.5:8786")
    q.add_argument("--workers", type=_positive, help="local worker processes (default 2; "
                   "1 for --engine inprocess)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--name", help="the sweep's name (default: the function's)")
    q.set_defaults(func=run_cmd)
    q = ss.add_parser("ls", help="list sweeps, newest first")
    q.set_defaults(func=ls_cmd)
    q = ss.add_parser("show", help="a sweep's settings and trials, best first")
    q.add_argument("id", type=_an_id)
    q.add_argument("--sort", choices=["value", "trial"], default="value",
                   help="order: by the metric, best first (the default), or by trial number")
    q.add_argument("--all", action="store_true", help=f"every trial (default: the first "
                   f"{SHOW_ROWS})")
    q.set_defaults(func=show_cmd)
    q = ss.add_parser("resume", help="continue a paused, stopped, interrupted or killed sweep")
    q.add_argument("id", type=_an_id)
    q.add_argument("--trials", type=_positive, help="grow the sweep to this many trials (the "
                   "search's next points)")
    q.add_argument("--engine", help="default: the engine it ran on")
    q.add_argument("--workers", type=_positive, help="default: as it ran")
    q.add_argument("--target", help="script.py:make_loop or package.module:make_loop, where "
                   "the one it was started with cannot be imported anymore (recorded: later "
                   "resumes use it)")
    q.set_defaults(func=resume_cmd)
    q = ss.add_parser("pause", help="ask a running sweep (in any process) to checkpoint its "
                      "trials and wait until `labkit sweep resume ID`")
    q.add_argument("id", type=_an_id)
    q.set_defaults(func=pause_cmd)
    q = ss.add_parser("stop", help="ask a running sweep (in any process) to checkpoint its "
                      "trials and stop")
    q.add_argument("id", type=_an_id)
    q.set_defaults(func=stop_cmd)
