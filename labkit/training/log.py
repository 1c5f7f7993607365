"""The log: one row per iteration, append-only, with read cursors for whoever mirrors it.

The training thread only appends rows and adds values to the newest row. Readers (the run-store
recorder, a Dashboard) each hold a ``Cursor`` that returns the values added since they last
read, so nobody keeps its own "row and keys already sent" bookkeeping.
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd import Tensor
from ..checkpoint import is_count
from ..errors import CheckpointError

#: the columns every row has; the rest are reported values
INDEX_KEYS = ("iteration", "epoch")


def scalar(v):
    """A reported value as a Python number: a Tensor's or a device array's item, a NumPy
    scalar's value (anything else as it is)."""
    if isinstance(v, Tensor):
        return v.item()
    if hasattr(v, "get") and hasattr(v, "shape"):
        return np.asarray(v.get()).item()
    return float(v) if isinstance(v, (int, float, np.generic, np.ndarray)) else v


def is_metric(value) -> bool:
    """A value the run store keeps: a finite or non-finite int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def fits_float(v) -> bool:
    """Whether a number converts to a float (an int past 2**1023 raises OverflowError)."""
    return not isinstance(v, int) or abs(v) <= 2 ** 1023


class Cursor:
    """A reader's position in a ``Log``: ``read()`` returns the ``(iteration, epoch, key,
    value)`` of every value added since the previous ``read()``, oldest first.

    When the log is replaced wholesale (``load_state_dict``), the cursor moves to its end: the
    owner of the cursor decides what to do with loaded history."""

    def __init__(self, log: Log, at_end: bool = False):
        self._log = log
        self._generation = log.generation
        self._row, self._seen = (len(log.rows) - 1, set(log.rows[-1])) if (
            at_end and log.rows) else (0, set())

    def read(self) -> list[tuple]:
        log = self._log
        rows = log.rows
        if self._generation != log.generation:
            self._generation = log.generation
            self.seek_end()
            return []
        out = []
        n = len(rows)
        for i in range(self._row, n):
            r = rows[i]
            seen = self._seen if i == self._row else ()
            # NOTE: a tuple of the items: the training thread may add to this row meanwhile
            items = tuple(r.items())
            for k, v in items:
                if k not in seen and k not in INDEX_KEYS:
                    out.append((r["iteration"], r["epoch"], k, v))
            if i == n - 1:
                self._row, self._seen = i, {k for k, _ in items}
        return out

    def seek_end(self) -> None:
        rows = self._log.rows
        self._row, self._seen = (len(rows) - 1, set(rows[-1])) if rows else (0, set())


class Log:
    """One row per iteration: ``{"iteration", "epoch", <reported values>}``.

    ``log[-1]`` is the current row; ``log.report(key=value)`` adds to it;
    ``log.series("loss")`` gives ``(iterations, values)``; ``log.last("valid_loss")`` the most
    recent value; ``log.cursor()`` a reader that sees each value once.
    """

    def __init__(self):
        self.rows: list[dict] = []
        #: bumped when the rows are replaced (cursors then skip to the end)
        self.generation = 0

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

    def last_metrics(self, finite: bool = False) -> dict:
        """The numbers of the current row (``finite``: without NaN and infinities)."""
        if not self.rows:
            return {}
        # NOTE: a copy of the row first (the training thread may add to it meanwhile: a
        # "dictionary changed size" in a dashboard's thread); an int too large for a float is
        # no metric of the store's (an OverflowError in math.isfinite failed the run)
        return {k: v for k, v in tuple(self.rows[-1].items()) if k not in INDEX_KEYS
                and is_metric(v) and fits_float(v) and (not finite or math.isfinite(v))}

    def keys(self) -> list[str]:
        seen = {}
        for r in self.rows:
            seen.update(dict.fromkeys(r))
        return [k for k in seen if k not in INDEX_KEYS]

    def cursor(self, at_end: bool = False) -> Cursor:
        return Cursor(self, at_end)

    def __getitem__(self, i):
        return self.rows[i]

    def __len__(self):
        return len(self.rows)

    def state_dict(self) -> dict:
        return {"rows": [{k: _json_value(v) for k, v in r.items()} for r in self.rows]}

    def load_state_dict(self, state) -> None:
        rows = state.get("rows") if isinstance(state, dict) else None
        if not isinstance(rows, list):
            raise CheckpointError("log: the saved state must be {'rows': [...]}, got "
                                  f"{type(state).__name__}")
        last = -1
        for i, r in enumerate(rows):
            if not isinstance(r, dict):
                raise CheckpointError(f"log: row {i} must be an object, got {type(r).__name__}")
            for k in INDEX_KEYS:
                v = r.get(k)
                if not is_count(v):
                    raise CheckpointError(f"log: row {i} has {k}={v!r:.60}; expected an integer "
                                          "in [0, 2**63)")
            if r["iteration"] < last:
                raise CheckpointError(f"log: row {i} goes back from iteration {last} to "
                                      f"{r['iteration']}")
            last = r["iteration"]
        self.rows = [dict(r) for r in rows]
        self.generation += 1

    def __repr__(self):
        return f"Log({len(self.rows)} rows, keys={self.keys()})"


def _json_value(v):
    if isinstance(v, np.generic):
        return v.item()
    return v
