"""Rows of the run store read back as records, each column checked for what labkit writes
there: a damaged or crafted store (a flipped type byte, text where a number belongs, binary
data, JSON nested thousands deep) gives a ``ValueError``
naming the column, which the store turns into its "damaged" error or, in a list, into a row
marked damaged, never a raw exception further on (a terminal's ``strftime``, a REST handler's
``json.dumps``) nor a value loaded wrong."""

from __future__ import annotations

import warnings

from .checks import TIMES, is_time, json_columns, typed_columns

#: a run row's JSON columns and what each holds
RUN_JSON = (("config", dict), ("progress", dict), ("tags", list))
#: the text columns of a run row (its JSON columns are checked as JSON)
RUN_TEXT = ("id", "name", "status", "host", "source", "factory", "parent_run",
            "parent_checkpoint", "error", "directory", "note", "traceback", "sweep_id")


class Renamed(dict):
    """A record that still answers the old key ``"step"`` (deprecated: ``"iteration"``), until
    every caller says ``iteration``. The alias is not a key: it never reaches JSON."""

    def __missing__(self, key):
        if key == "step":
            warnings.warn('run store records say "iteration" now, not "step"',
                          DeprecationWarning, stacklevel=2)
            return self["iteration"]
        raise KeyError(key)


def check_run(d: dict, statuses) -> None:
    """Decode run row ``d`` in place (its JSON columns), checking every column."""
    json_columns(d, RUN_JSON)
    typed_columns(d, text=RUN_TEXT, integers=("pid", "parent_checkpoint_id"), times=TIMES)
    if not d["id"]:
        raise ValueError("it has no id")
    if d["status"] not in statuses:
        raise ValueError(f"its status {str(d['status'])[:40]!r} is not one of {statuses}")
    if not all(isinstance(t, str) for t in d["tags"]):
        raise ValueError("its tags are not all text")


def checkpoint(row) -> Renamed:
    """A checkpoint row as a record, every column checked."""
    d = Renamed(row)
    json_columns(d, (("metrics", dict),))
    typed_columns(d, text=("run_id", "path"),
                  integers=("id", "iteration", "epoch", "size", "valid"), times=("created",))
    if not d["path"]:
        raise ValueError("it has no path")
    d["valid"] = bool(d["valid"])
    return d


def damaged_checkpoint(row, why) -> Renamed:
    """What a list shows for a checkpoint row ``checkpoint`` refused: ``valid`` false,
    ``damaged`` saying why, each column that is not of its kind None, no metrics."""
    d = Renamed(row)
    for col in ("id", "iteration", "epoch", "size"):
        d[col] = d[col] if type(d[col]) is int else None
    for col in ("run_id", "path"):
        d[col] = d[col] if isinstance(d[col], str) and d[col] else None
    d["created"] = d["created"] if is_time(d["created"]) else None
    d.update(metrics={}, valid=False, damaged=str(why))
    return d


def _shown(v) -> str:
    return f"{len(v)} bytes" if isinstance(v, (bytes, memoryview)) else repr(v)[:30]


def bad_metric_row(rows) -> str | None:
    """Why the first of the metric rows ``(iteration, epoch, value, time)`` does not hold
    what labkit writes there, or None."""
    for r in rows:
        iteration, epoch, value, t = r
        if not (type(iteration) is int and (epoch is None or type(epoch) is int)
                and (value is None or type(value) in (int, float))
                and (t is None or type(t) in (int, float))):
            return f"its row at iteration {_shown(iteration)} holds {tuple(map(_shown, r))}"
    return None
