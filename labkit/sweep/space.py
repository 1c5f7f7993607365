"""Search spaces: what each hyperparameter may be, and the trials that grid, random and Sobol'
search draw from them.

A space is a dict ``{name: spec}``; a spec is ``loguniform(low, high)``, ``uniform(low, high)``,
``range(low, high)`` (integers, both ends included), a list (one of its values, each given
once), or any other JSON value (fixed: the same in every trial). A space is flat (no spec inside
a list or a dict); NumPy scalars and arrays in it are taken as the Python values JSON stores
(``np.float64(0.1)`` as ``0.1``, ``np.logspace(-4, -1, 4)`` as its list); a sweep has at
most ``MAX_TRIALS`` trials. Anything else is a ``SweepError`` naming it. Trial ``i``'s
parameters depend only on the space, the search, the seed and ``i``, so a resumed sweep draws
the same trials again. A space is stored as JSON (``to_json``/``from_json``):
``{"lr": {"loguniform": [1e-4, 0.1]}, "hidden": {"choice": [64, 128]}, "depth": {"range":
[1, 8]}, "epochs": {"value": 3}}``.
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


#: the most trials one sweep holds (a grid with more points needs ``trials=N``): each is a row
#: in the store, drawn before the sweep starts
MAX_TRIALS = 100_000


def _py(v):
    """NumPy scalars and arrays as the Python values a sweep stores as JSON (``np.float64(0.1)``
    -> ``0.1``, ``np.arange(3)`` -> ``[0, 1, 2]``), in lists, tuples and dicts too; anything
    else unchanged."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if type(v) in (list, tuple):
        return type(v)(_py(x) for x in v)
    if type(v) is dict:
        return {k: _py(x) for k, x in v.items()}
    return v


def _number(v, what) -> float:
    v = _py(v)
    try:  # NOTE: float(10**400) overflows
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(float(v))
    except OverflowError:
        ok = False
    if not ok:
        raise SweepError(f"{what} must be a finite number (an int or a float), got {v!r:.60}")
    return float(v)


def _integer(v, what) -> int:
    v = _py(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise SweepError(f"{what} must be an integer, got {v!r:.60}")
    return v


def _points(points, what):
    if points is None:
        return None
    if _integer(points, f"{what}: points") < 2:
        raise SweepError(f"{what}: points must be an integer >= 2 (grid values), got {points!r}")
    return points


class Dimension:
    """One hyperparameter's values: ``value(u)`` maps u in [0, 1) onto them; ``size()`` is how
    many values grid search tries (None: not finite), ``at(i)`` the i-th; ``grid()`` lists
    them."""

    kind = ""

    def value(self, u: float):
        raise NotImplementedError

    def size(self):
        return None

    def at(self, i: int):
        raise NotImplementedError

    def grid(self):
        n = self.size()
        return None if n is None else [self.at(i) for i in builtins.range(n)]

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
        low, high, points = _py(low), _py(high), _py(points)
        what = f"{self.kind}({low!r:.40}, {high!r:.40})"
        _number(low, f"{what}: low")
        _number(high, f"{what}: high")
        self.low, self.high = low, high
        if not low < high:
            raise SweepError(f"{what}: low must be below high")
        self.points = _points(points, what)

    def size(self):
        return self.points

    def at(self, i):
        return self.value(i / (self.points - 1))

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
        span = self.high - self.low
        # NOTE: a span past the largest float (-1e308 to 1e308) is inf: weigh the ends instead
        v = self.low + u * span if math.isfinite(span) else (1 - u) * self.low + u * self.high
        return float(min(self.high, max(self.low, v)))


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
        low, high, step = _py(low), _py(high), _py(step)
        what = f"range({low!r:.40}, {high!r:.40})"
        for v, name in ((low, "low"), (high, "high"), (step, "step")):
            if isinstance(v, bool) or not isinstance(v, int):
                raise SweepError(f"{what}: {name} must be an integer, got {v!r:.60} (for floats "
                                 "use uniform or loguniform)")
        if step < 1 or high < low:
            raise SweepError(f"{what}: needs low <= high and step >= 1 (got step {step})")
        if not -2**63 <= low <= high < 2**63 or (high - low) // step >= 2**63 - 1:
            # NOTE: a value the run store holds as a 64-bit integer, a count of values that
            # len() takes
            raise SweepError(f"{what}: low and high must be 64-bit integers (from -2**63 to "
                             "2**63 - 1), with fewer than 2**63 values between them")
        self.low, self.high, self.step = low, high, step
        # NOTE: a range object, not a list: range(0, 10**12) is as cheap as range(1, 8)
        self._ints = builtins.range(low, high + 1, step)

    @property
    def values(self):
        """The integers, as a list (as a ``range`` past ``MAX_TRIALS`` of them)."""
        return list(self._ints) if len(self._ints) <= MAX_TRIALS else self._ints

    def value(self, u):
        return self._ints[min(len(self._ints) - 1, int(u * len(self._ints)))]

    def size(self):
        return len(self._ints)

    def at(self, i):
        return self._ints[i]

    def to_json(self):
        return {"range": [self.low, self.high, self.step]}

    def __repr__(self):
        return f"range({self.low}, {self.high}" + (f", {self.step})" if self.step != 1 else ")")


class choice(Dimension):  # noqa: N801
    """One of ``values`` (JSON values: numbers, strings, booleans, null, lists, objects)."""

    kind = "choice"

    def __init__(self, values, name="choice"):
        values = _py(values)
        if not isinstance(values, (list, tuple)) or not values:
            raise SweepError(f"{name}: give a non-empty list of values, got {values!r:.80}")
        _json_value(list(values), name)
        seen: dict = {}
        for i, v in enumerate(values):
            first = seen.setdefault(_same(v), i)
            if first != i:
                again = "" if repr(values[first]) == repr(v) else f" (as {_brief(values[first])})"
                raise SweepError(f"{name}: {_brief(v)} is in the list more than once{again}: "
                                 "give each value once (a duplicate is drawn twice as often, "
                                 "and a grid trains it twice)")
        self.values = list(values)

    def value(self, u):
        return self.values[min(len(self.values) - 1, int(u * len(self.values)))]

    def size(self):
        return len(self.values)

    def at(self, i):
        return self.values[i]

    def to_json(self):
        return {"choice": list(self.values)}

    def __repr__(self):
        return repr(self.values)


class fixed(Dimension):  # noqa: N801
    """The same value in every trial."""

    kind = "value"

    def __init__(self, v, name="value"):
        v = _py(v)
        _json_value(v, f"space[{name!r}]")
        self.v = v

    def value(self, u):
        return self.v

    def size(self):
        return 1

    def at(self, i):
        return self.v

    def to_json(self):
        return {"value": self.v}

    def __repr__(self):
        return repr(self.v)


def _brief(v, n=60) -> str:
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def _same(v):
    """A key equal for values a trial cannot tell apart (1 and 1.0; not True and 1)."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return (type(v).__name__, v)
    if isinstance(v, (int, float)):
        return ("number", v)
    if isinstance(v, list):
        return ("list", tuple(_same(x) for x in v))
    return ("dict", frozenset((k, _same(x)) for k, x in v.items()))


def _inside(v):
    """The first spec inside a list or dict value, or None."""
    if isinstance(v, Dimension):
        return v
    items = v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else ()
    for x in items:
        found = _inside(x)
        if found is not None:
            return found
    return None


def _json_value(v, where):
    """``v`` unchanged through JSON, or a SweepError naming ``where`` (``space['lr']``)."""
    found = _inside(v)
    if found is not None:
        raise SweepError(f"{where}: {_brief(v)} holds the spec {found!r} inside a "
                         f"{type(v).__name__}: a space is flat, {{name: spec}}; give it a name "
                         "of its own (e.g. 'opt.lr') and build the nested config in make_loop")
    try:
        text = json.dumps(v, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise SweepError(f"{where}: {_brief(v)} is not a JSON value ({e}); a trial's "
                         "parameters are stored as JSON") from None
    if json.loads(text) != v:
        raise SweepError(f"{where}: {_brief(v)} does not survive JSON unchanged (tuples and "
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
        spec = _py(spec)
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


def check_sizes(dims: dict[str, Dimension]) -> None:
    """Refuse values a trial's run could not store (its config over
    ``labkit.runs.MAX_CONFIG_BYTES`` as JSON, or nested over ``MAX_CONFIG_DEPTH``): the
    sweep was made, then failed at its first trial, every trial left pending."""
    from ..runs import checks

    big = {}
    for name, d in dims.items():
        values = d.values if isinstance(d, choice) else [d.value(0.0)]
        for v in values:
            try:
                checks.config_json({name: v}, f"space[{name!r}]")
            except LabkitError as e:
                raise SweepError(f"{e} (each trial's config holds the value)") from None
        big[name] = max(values, key=lambda v: len(json.dumps(v)))
    try:
        checks.config_json(big, "a trial's config")
    except LabkitError as e:
        raise SweepError(f"space: the largest values together: {e}") from None


def to_json(dims: dict[str, Dimension]) -> str:
    return json.dumps({k: d.to_json() for k, d in dims.items()})


def from_json(text) -> dict[str, Dimension]:
    """A space from its JSON form (also what ``labkit sweep run --space`` takes): each value
    ``{"loguniform": [lo, hi]}``, ``{"uniform": [lo, hi]}`` (optional ``"points": N``),
    ``{"range": [lo, hi]}`` or ``[lo, hi, step]``, ``{"choice": [...]}``, ``{"value": v}``; a
    plain list is a choice and any other plain value is fixed."""
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicates) if isinstance(text, str) \
            else text
    except (ValueError, RecursionError) as e:  # NOTE: JSONDecodeError is a ValueError
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise SweepError(f"a space in JSON is not valid JSON ({why}): {text[:60]!r}") from None
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
        _json_value(spec, where)  # NOTE: a spec nested in it: say that
        raise SweepError(f"{where}: {json.dumps(spec)[:80]} is not a spec: expected one of "
                         f"{', '.join(_SPEC_KEYS)} as its key (with \"points\" for uniform "
                         "and loguniform); a dict value that stays fixed is {\"value\": {...}}")
    (kind,) = kinds
    args = spec[kind]
    if "points" in spec and kind not in _KINDS:
        raise SweepError(f"{where}: \"points\" goes with uniform or loguniform, not {kind}")
    if kind in _KINDS:
        if not (isinstance(args, list) and len(args) == 2):
            raise SweepError(f"{where}: {kind} takes [low, high], got {_brief(args)}")
        return _KINDS[kind](*args, points=spec.get("points"))
    if kind == "range":
        if not (isinstance(args, list) and len(args) in (2, 3)):
            raise SweepError(f"{where}: range takes [low, high] or [low, high, step], got "
                             f"{_brief(args)}")
        return range(*args)
    if kind == "choice":
        return choice(args, where)
    return fixed(args, name)


def grid_size(dims: dict[str, Dimension]) -> int:
    bad = [f"{k} = {d!r}" for k, d in dims.items() if d.size() is None]
    if bad:
        raise SweepError(f"grid search needs a finite set of values for every parameter; "
                         f"continuous here: {', '.join(bad)}; give each points=N (e.g. "
                         "loguniform(1e-4, 1e-1, points=4)) or use search='random' or 'sobol'")
    return math.prod(d.size() for d in dims.values())


def draw(dims: dict[str, Dimension], search: str, number: int, seed: int = 0) -> dict:
    """The parameters of trial ``number`` (0, 1, ...)."""
    names = list(dims)
    if search == "grid":  # NOTE: the product in order, the last parameter varying fastest
        idx, out = number, {}
        for k in reversed(names):
            idx, r = divmod(idx, dims[k].size())
            out[k] = dims[k].at(r)
        return {k: out[k] for k in names}
    free = [k for k in names if not isinstance(dims[k], fixed)]
    if search == "random":
        u = np.random.default_rng([int(seed), int(number)]).random(len(free))
    else:
        u = _sobol_point(number, max(1, len(free)), int(seed))
    pos = dict(zip(free, u))
    return {k: dims[k].value(float(pos[k])) if k in pos else dims[k].value(0.0) for k in names}


def _sobol_point(number: int, dims: int, seed: int) -> np.ndarray:
    """Point ``number`` of the Sobol' sequence, digitally shifted by ``seed``: each coordinate's
    bits XORed with the seed's own 32 random bits. A shift keeps the sequence's balance (its
    first 2**k points still fall one in each interval of 2**-k, and its nets stay nets), and
    gives each seed other points: the sequence's point 0 (the origin: every parameter at its
    lowest) is not trial 0 of every sweep, and sweeps with other seeds do not share points."""
    shift = np.random.default_rng([seed, 0x50B01]).integers(0, 2**32, MAX_DIMS,
                                                             dtype=np.uint64)[:dims]
    bits = (sobol(1, dims, skip=number)[0] * 2.0**32).astype(np.uint64)
    return (bits ^ shift).astype(np.float64) / 2.0**32


def check_search(dims: dict[str, Dimension], search: str, trials) -> int:
    """The number of trials, checked against the search (and ``MAX_TRIALS``)."""
    trials = _py(trials)
    if search not in SEARCHES:
        raise SweepError(f"search must be one of {SEARCHES}, got {search!r:.60}")
    if search == "grid":
        n = grid_size(dims)
        if trials is None:
            if n > MAX_TRIALS:
                raise SweepError(f"a grid of this space has {n:,} points, more than the "
                                 f"{MAX_TRIALS:,} trials a sweep holds: give fewer values, "
                                 "trials=N (the grid's first N points), or search='random'")
            return n
        if isinstance(trials, bool) or not isinstance(trials, int) or \
                not 1 <= trials <= min(n, MAX_TRIALS):
            raise SweepError(f"trials={trials!r:.40}: a grid of this space has {n:,} points; "
                             f"give 1..{min(n, MAX_TRIALS):,}"
                             + (" (or None for all)" if n <= MAX_TRIALS else
                                f" (a sweep holds at most {MAX_TRIALS:,} trials)"))
        return trials
    if search == "sobol":
        free = sum(not isinstance(d, fixed) for d in dims.values())
        if free > MAX_DIMS:
            raise SweepError(f"search='sobol' handles up to {MAX_DIMS} free parameters, this "
                             f"space has {free}: use search='random'")
    if isinstance(trials, bool) or not isinstance(trials, int) or not 1 <= trials <= MAX_TRIALS:
        raise SweepError(f"trials must be a positive integer (at most {MAX_TRIALS:,}) for "
                         f"search={search!r}: how many points to draw; got {trials!r:.40}")
    return trials



def check_seed(search: str, seed, trials: int) -> int:
    """``seed``, checked: an integer from 0 to 2**32 - 1 (Sobol' search shifts its sequence by
    it, random search seeds each trial's generator with it)."""
    seed = _py(seed)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise SweepError(f"seed must be an integer >= 0 (and < 2**32), got {seed!r:.40}")
    return seed

