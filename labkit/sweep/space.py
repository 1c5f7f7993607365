"""Search spaces: what each hyperparameter may be, and the trials that grid, random and Sobol'
search draw from them.

A space is a dict ``{name: spec}``; a spec is ``loguniform(low, high)``, ``uniform(low, high)``,
``range(low, high)`` (integers, both ends included), a list (one of its values), or any other
JSON value (fixed: the same in every trial). Trial ``i``'s parameters depend only on the space,
the search, the seed and ``i``, so a resumed sweep draws the same trials again. A space is
stored as JSON (``to_json``/``from_json``): ``{"lr": {"loguniform": [1e-4, 0.1]}, "hidden":
{"choice": [64, 128]}, "depth": {"range": [1, 8]}, "epochs": {"value": 3}}``.
"""

from __future__ import annotations

import builtins
import json
import math

import numpy as np

from ..errors import LabkitError
from ..runs.sweeps import SEARCHES
from .sobol import MAX_DIMS, sobol


class SweepError(LabkitError, ValueError):
    """A sweep that cannot run as asked: a bad space, metric or setting (the message names it
    and the fix)."""


class TrialError(LabkitError, RuntimeError):
    """One trial could not be built (its make_loop raised): the trial fails, the sweep goes on
    (unless every trial so far failed)."""


def _number(v, what) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SweepError(f"{what} must be a finite number, got {v!r}")
    return v


def _points(points, what):
    if points is None:
        return None
    if isinstance(points, bool) or not isinstance(points, int) or points < 2:
        raise SweepError(f"{what}: points must be an integer >= 2 (grid values), got {points!r}")
    return points


class Dimension:
    """One hyperparameter's values: ``value(u)`` maps u in [0, 1) onto them; ``grid()`` lists
    the values grid search tries (None: not finite)."""

    kind = ""

    def value(self, u: float):
        raise NotImplementedError

    def grid(self):
        return None

    def to_json(self) -> dict:
        raise NotImplementedError

    def __eq__(self, other):
        return type(self) is type(other) and self.to_json() == other.to_json()

    def __repr__(self):
        args = self.to_json()[self.kind]
        extra = f", points={self.points}" if getattr(self, "points", None) else ""
        return f"{self.kind}({', '.join(map(repr, args))}{extra})"


class _Interval(Dimension):
    def __init__(self, low, high, points=None):
        what = f"{self.kind}({low!r}, {high!r})"
        self.low, self.high = _number(low, f"{what}: low"), _number(high, f"{what}: high")
        if not low < high:
            raise SweepError(f"{what}: low must be below high")
        self.points = _points(points, what)

    def grid(self):
        if self.points is None:
            return None
        return [self.value(i / (self.points - 1)) for i in builtins.range(self.points)]

    def to_json(self):
        d = {self.kind: [self.low, self.high]}
        if self.points:
            d["points"] = self.points
        return d


class uniform(_Interval):  # noqa: N801 - read as a function: lk.sweep.uniform(0, 1)
    """A float drawn uniformly from [low, high]; ``points=N``: N evenly spaced values for grid
    search."""

    kind = "uniform"

    def value(self, u):
        return float(self.low + u * (self.high - self.low))


class loguniform(_Interval):  # noqa: N801
    """A float whose logarithm is uniform between log(low) and log(high) (both > 0), e.g. a
    learning rate; ``points=N``: N values evenly spaced in log scale for grid search."""

    kind = "loguniform"

    def __init__(self, low, high, points=None):
        super().__init__(low, high, points)
        if self.low <= 0:
            raise SweepError(f"loguniform({low!r}, {high!r}): low must be > 0 (use uniform for "
                             "a range that includes 0)")

    def value(self, u):
        if u <= 0 or u >= 1:  # the ends exactly (a grid's first and last values)
            return float(self.low if u <= 0 else self.high)
        lo, hi = math.log(self.low), math.log(self.high)
        return float(min(self.high, max(self.low, math.exp(lo + u * (hi - lo)))))


class range(Dimension):  # noqa: N801, A001 - lk.sweep.range(1, 8), as the issue spells it
    """An integer from ``low`` to ``high``, both included, in steps of ``step``."""

    kind = "range"

    def __init__(self, low, high, step=1):
        what = f"range({low!r}, {high!r})"
        for v, name in ((low, "low"), (high, "high"), (step, "step")):
            if isinstance(v, bool) or not isinstance(v, int):
                raise SweepError(f"{what}: {name} must be an integer, got {v!r} (for floats use "
                                 "uniform or loguniform)")
        if step < 1 or high < low:
            raise SweepError(f"{what}: needs low <= high and step >= 1 (got step {step})")
        self.low, self.high, self.step = low, high, step
        self.values = list(builtins.range(low, high + 1, step))

    def value(self, u):
        return self.values[min(len(self.values) - 1, int(u * len(self.values)))]

    def grid(self):
        return list(self.values)

    def to_json(self):
        return {"range": [self.low, self.high, self.step]}

    def __repr__(self):
        return f"range({self.low}, {self.high}" + (f", {self.step})" if self.step != 1 else ")")


class choice(Dimension):  # noqa: N801
    """One of ``values`` (JSON values: numbers, strings, booleans, null, lists, objects)."""

    kind = "choice"

    def __init__(self, values, name="choice"):
        if not isinstance(values, (list, tuple)) or not values:
            raise SweepError(f"{name}: give a non-empty list of values, got {values!r}")
        _json_value(list(values), name)
        self.values = list(values)

    def value(self, u):
        return self.values[min(len(self.values) - 1, int(u * len(self.values)))]

    def grid(self):
        return list(self.values)

    def to_json(self):
        return {"choice": list(self.values)}

    def __repr__(self):
        return repr(self.values)


class fixed(Dimension):  # noqa: N801
    """The same value in every trial."""

    kind = "value"

    def __init__(self, v, name="value"):
        _json_value(v, f"space[{name!r}]")
        self.v = v

    def value(self, u):
        return self.v

    def grid(self):
        return [self.v]

    def to_json(self):
        return {"value": self.v}

    def __repr__(self):
        return repr(self.v)


def _json_value(v, where):
    """``v`` unchanged through JSON, or a SweepError naming ``where`` (``space['lr']``)."""
    try:
        text = json.dumps(v, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise SweepError(f"{where}: {v!r} is not a JSON value ({e}); a trial's "
                         "parameters are stored as JSON") from None
    if json.loads(text) != v:
        raise SweepError(f"{where}: {v!r} does not survive JSON unchanged (tuples and "
                         "non-string keys do not): use lists and string keys")


_KINDS = {"uniform": uniform, "loguniform": loguniform}
#: the columns of a sweep's table besides the parameters (and the metric's)
RESERVED = frozenset({"trial", "status", "rung", "epoch", "iteration", "run_id", "error"})
_SPEC_KEYS = ("loguniform", "uniform", "range", "choice", "value")


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise SweepError(f"a space in JSON names {', '.join(map(repr, dup))} more than once")
    return dict(pairs)


def check(space) -> dict[str, Dimension]:
    """``{name: Dimension}`` for a space (see the module's doc), or a ``SweepError`` naming
    the culprit."""
    if isinstance(space, str):
        space = from_json(space)
    if not isinstance(space, dict) or not space:
        raise SweepError(f"space must be a non-empty dict {{name: spec}}, got {space!r:.80}")
    out = {}
    for name, spec in space.items():
        if not isinstance(name, str) or not name:
            raise SweepError(f"space: names must be non-empty strings, got {name!r}")
        if isinstance(spec, Dimension):
            out[name] = spec
        elif _looks_like_spec(spec):  # NOTE: as in JSON: {"loguniform": [lo, hi]}, ...
            out[name] = _spec(name, spec)
        elif isinstance(spec, (list, tuple)):
            out[name] = choice(list(spec), f"space[{name!r}]")
        elif isinstance(spec, (builtins.range, set, frozenset)) or callable(spec):
            raise SweepError(f"space[{name!r}]: {spec!r:.60} is not a spec; use "
                             "lk.sweep.range(low, high), a list of values, lk.sweep.uniform or "
                             "lk.sweep.loguniform")
        else:
            out[name] = fixed(spec, name)
    return out


def check_names(dims: dict[str, Dimension], metric: str) -> None:
    """A new sweep's parameters may not take the names of its table's other columns (they
    would hide them: a parameter ``status`` showed instead of each trial's status)."""
    for name in dims:
        if name in RESERVED or name == metric or name.startswith("_"):
            raise SweepError(f"space: {name!r} is the name of a column of the sweep's table "
                             f"({', '.join(sorted(RESERVED))}, the metric {metric!r}; and "
                             "names starting with '_'): rename the parameter")


def to_json(dims: dict[str, Dimension]) -> str:
    return json.dumps({k: d.to_json() for k, d in dims.items()})


def from_json(text) -> dict[str, Dimension]:
    """A space from its JSON form (also what ``labkit sweep run --space`` takes): each value
    ``{"loguniform": [lo, hi]}``, ``{"uniform": [lo, hi]}`` (optional ``"points": N``),
    ``{"range": [lo, hi]}`` or ``[lo, hi, step]``, ``{"choice": [...]}``, ``{"value": v}``; a
    plain list is a choice and any other plain value is fixed."""
    raw = json.loads(text, object_pairs_hook=_no_duplicates) if isinstance(text, str) else text
    if not isinstance(raw, dict):
        raise SweepError(f"a space in JSON must be an object, got {str(text)[:60]!r}")
    out = {}
    for name, spec in raw.items():
        if _looks_like_spec(spec):
            out[name] = _spec(name, spec)
        else:
            out[name] = choice(spec, f"space[{name!r}]") if isinstance(spec, list) else \
                fixed(spec, name)
    return check(out)


def _looks_like_spec(spec) -> bool:
    """A dict meant as ``{kind: args}`` (one key, or a kind's or "points" among its keys);
    a dict value that stays fixed is ``{"value": {...}}``."""
    return isinstance(spec, dict) and (len(spec) == 1 or "points" in spec
                                       or bool(set(spec) & set(_SPEC_KEYS)))


def _spec(name, spec):
    """One ``{kind: args}`` of a JSON space; a mistyped kind or wrong arguments are errors
    (never a fixed dict value: that is ``{"value": {...}}``)."""
    where = f"space[{name!r}]"
    kinds = set(spec) - {"points"}
    if len(kinds) != 1 or not kinds <= set(_SPEC_KEYS):
        raise SweepError(f"{where}: {json.dumps(spec)[:80]} is not a spec: expected one of "
                         f"{', '.join(_SPEC_KEYS)} as its key (with \"points\" for uniform "
                         "and loguniform); a dict value that stays fixed is {\"value\": {...}}")
    (kind,) = kinds
    args = spec[kind]
    if "points" in spec and kind not in _KINDS:
        raise SweepError(f"{where}: \"points\" goes with uniform or loguniform, not {kind}")
    if kind in _KINDS:
        if not (isinstance(args, list) and len(args) == 2):
            raise SweepError(f"{where}: {kind} takes [low, high], got {json.dumps(args)[:60]}")
        return _KINDS[kind](*args, points=spec.get("points"))
    if kind == "range":
        if not (isinstance(args, list) and len(args) in (2, 3)):
            raise SweepError(f"{where}: range takes [low, high] or [low, high, step], got "
                             f"{json.dumps(args)[:60]}")
        return range(*args)
    if kind == "choice":
        return choice(args, where)
    return fixed(args, name)


def grid_size(dims: dict[str, Dimension]) -> int:
    bad = [f"{k} = {d!r}" for k, d in dims.items() if d.grid() is None]
    if bad:
        raise SweepError(f"grid search needs a finite set of values for every parameter; "
                         f"continuous here: {', '.join(bad)}; give each points=N (e.g. "
                         "loguniform(1e-4, 1e-1, points=4)) or use search='random' or 'sobol'")
    return math.prod(len(d.grid()) for d in dims.values())


def draw(dims: dict[str, Dimension], search: str, number: int, seed: int = 0) -> dict:
    """The parameters of trial ``number`` (0, 1, ...)."""
    names = list(dims)
    if search == "grid":
        grids = [dims[k].grid() for k in names]
        sizes = [len(g) for g in grids]
        idx, out = number, {}
        for k, g, n in zip(reversed(names), reversed(grids), reversed(sizes)):
            idx, r = divmod(idx, n)
            out[k] = g[r]
        return {k: out[k] for k in names}
    free = [k for k in names if not isinstance(dims[k], fixed)]
    if search == "random":
        u = np.random.default_rng([int(seed), int(number)]).random(len(free))
    else:
        # NOTE: the seed picks where in the sequence to start, so sweeps with other seeds
        # try other points and keep the sequence's balance
        u = sobol(1, max(1, len(free)), skip=number + int(seed) * 4096)[0]
    pos = dict(zip(free, u))
    return {k: dims[k].value(float(pos[k])) if k in pos else dims[k].value(0.0) for k in names}


def check_search(dims: dict[str, Dimension], search: str, trials) -> int:
    """The number of trials, checked against the search."""
    if search not in SEARCHES:
        raise SweepError(f"search must be one of {SEARCHES}, got {search!r}")
    if search == "grid":
        n = grid_size(dims)
        if trials is None:
            return n
        if isinstance(trials, bool) or not isinstance(trials, int) or not 1 <= trials <= n:
            raise SweepError(f"trials={trials!r}: a grid of this space has {n} points; give "
                             f"1..{n} (or None for all)")
        return trials
    if search == "sobol":
        free = sum(not isinstance(d, fixed) for d in dims.values())
        if free > MAX_DIMS:
            raise SweepError(f"search='sobol' handles up to {MAX_DIMS} free parameters, this "
                             f"space has {free}: use search='random'")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise SweepError(f"trials must be a positive integer for search={search!r}, got "
                         f"{trials!r}")
    return trials

