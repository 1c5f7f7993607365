"""Iteration schemes: which requests a stream makes in each epoch, as a pure function of state.

A scheme answers ``num_requests(epoch)`` and ``request(epoch, k)``. A shuffled order is a function
of ``(seed, epoch)``, regenerated when needed and never stored, so a stream's position is just
``(epoch, k)`` and resuming mid-epoch costs nothing.

Examples
--------
>>> from labkit.data import ShuffledScheme, SequentialScheme
>>> s = SequentialScheme(10, batch_size=4)
>>> [s.request(0, k) for k in range(s.num_requests(0))]
[slice(0, 4, 1), slice(4, 8, 1), slice(8, 10, 1)]
>>> a = ShuffledScheme(10, batch_size=5, seed=3)
>>> b = ShuffledScheme(10, batch_size=5, seed=3)
>>> bool((a.request(1, 0) == b.request(1, 0)).all())
True
"""

from __future__ import annotations

import secrets

import numpy as np

from ..backend.random import Generator
from ..errors import DataError

_MASK64 = (1 << 64) - 1


# ---- checking a saved state (from a checkpoint's state.json, possibly damaged) ---------------
def check_state(state, where: str) -> dict:
    """``state`` if it is a dict, else a ``DataError`` naming ``where``."""
    if not isinstance(state, dict):
        raise DataError(f"{where}: expected an object (a dict from state_dict()), got "
                        f"{type(state).__name__}; the state is damaged or from another pipeline")
    return state


#: the range of counts (epochs, positions; below 2**63 like every counter of a checkpoint) and
#: of seeds (64-bit keys; non-negative, as NumPy's seeds are) a state may hold
COUNT = (0, 2 ** 63 - 1)
SEED = (0, 2 ** 64 - 1)


def state_int(state: dict, key: str, where: str, low: int | None = None,
              high: int | None = None) -> int:
    """``state[key]`` as an int: present, an integer (not a bool or float), within bounds."""
    if key not in state:
        raise DataError(f"{where}: no {key!r} (an integer); the state is damaged or from another "
                        "pipeline")
    v = state[key]
    if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)):
        raise DataError(f"{where}[{key!r}] = {v!r}: expected an integer; the state is damaged")
    v = int(v)
    if (low is not None and v < low) or (high is not None and v > high):
        span = f"{low}..{high}" if high is not None else f">= {low}"
        raise DataError(f"{where}[{key!r}] = {v}: expected {span}; the state is damaged or from "
                        "another pipeline")
    return v


def same_value(a, b) -> bool:
    """Equal and of the same type (so ``True`` is not ``1`` and ``64.0`` is not ``64``)."""
    return type(a) is type(b) and a == b


def built_otherwise(message: str) -> DataError:
    """A ``DataError`` for a state saved by a pipeline built otherwise than this one (another
    scheme, stages, sources or settings), not a damaged one: a loop resuming from it stops at
    once instead of trying each older checkpoint (``training.state.NotThisLoop``)."""
    e = DataError(message)
    e.built_otherwise = True
    return e


def config_mismatch(state: dict, mine: dict, where: str, what: str) -> None:
    """A ``DataError`` if ``state`` differs from this stage's configuration ``mine``."""
    diff = {k: (state.get(k), v) for k, v in mine.items() if not same_value(state.get(k), v)}
    if diff:
        shown = ", ".join(f"{k}: saved {a!r}, here {b!r}" for k, (a, b) in diff.items())
        raise built_otherwise(f"{where}: the state is for a different {what} ({shown}); build "
                              "the stream as it was when the state was saved")


def mix_seed(*words: int) -> int:
    """A 64-bit seed from integers (splitmix64 over each word): distinct inputs, unrelated seeds."""
    h = 0x9E3779B97F4A7C15
    for w in words:
        h = (h ^ (int(w) & _MASK64)) & _MASK64
        h = (h + 0x9E3779B97F4A7C15) & _MASK64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
        h ^= h >> 31
    return h


def fresh_seed(seed: int | None, where: str = "seed") -> int:
    """``seed`` as an int, or a new random one (kept in the state, so a resume is still exact).
    A seed is an integer in [0, 2**64) (NumPy's seeds are non-negative; labkit's generators
    take 64 bits); anything else is a ``DataError``."""
    if seed is None:
        return secrets.randbits(63)
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, (bool, np.bool_)) or \
            not SEED[0] <= seed <= SEED[1]:
        try:
            shown = f"{seed!r:.60}"
        except ValueError:  # an int too long to print
            shown = "a huge integer"
        raise DataError(f"{where}={shown}: a seed is an integer in [0, 2**64) (as NumPy's, "
                        "non-negative), or None for a fresh one")
    return int(seed)


class Scheme:
    """The interface of an iteration scheme."""

    #: True if requests are batches (slices or index arrays), False if single example indices.
    batched = True

    def num_requests(self, epoch: int) -> int:
        raise NotImplementedError

    def request(self, epoch: int, k: int):
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {"type": type(self).__name__, **self._config()}

    def load_state_dict(self, state: dict, where: str | None = None) -> None:
        where = where or f"{type(self).__name__}.load_state_dict: state"
        check_state(state, where)
        mine = self.state_dict()
        config_mismatch(state, {k: v for k, v in mine.items() if k != "seed"}, where, "scheme")
        if "seed" in mine:
            self.seed = state_int(state, "seed", where, *SEED)

    def _config(self) -> dict:
        return {}

    def _check_k(self, epoch, k):
        n = self.num_requests(epoch)
        if not 0 <= k < n:
            raise DataError(f"{self!r}: request {k} is out of range for epoch {epoch} "
                            f"({n} requests)")


class _BatchScheme(Scheme):
    def __init__(self, num_examples: int, batch_size: int, drop_last: bool = False):
        num_examples, batch_size = int(num_examples), int(batch_size)
        if num_examples < 0 or batch_size < 1:
            raise DataError(f"{type(self).__name__}: need num_examples >= 0 and batch_size >= 1, "
                            f"got {num_examples} and {batch_size}")
        self.num_examples, self.batch_size = num_examples, batch_size
        self.drop_last = bool(drop_last)

    def num_requests(self, epoch):
        full, rest = divmod(self.num_examples, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def _bounds(self, epoch, k):
        self._check_k(epoch, k)
        return k * self.batch_size, min((k + 1) * self.batch_size, self.num_examples)

    def _config(self):
        return {"num_examples": self.num_examples, "batch_size": self.batch_size,
                "drop_last": self.drop_last}

    def __repr__(self):
        return (f"{type(self).__name__}({self.num_examples}, batch_size={self.batch_size}"
                f"{', drop_last=True' if self.drop_last else ''})")


class SequentialScheme(_BatchScheme):
    """Batches of consecutive examples, as slices, the same every epoch."""

    def request(self, epoch, k):
        a, b = self._bounds(epoch, k)
        return slice(a, b, 1)


class _Shuffled:
    """The (seed, epoch) -> permutation map with a one-epoch cache (permuting costs O(n))."""

    def _permutation(self, epoch):
        cached = getattr(self, "_cache", None)
        if cached is None or cached[0] != (self.seed, epoch):
            perm = Generator(seed=mix_seed(self.seed, epoch)).permutation(self.num_examples)
            self._cache = cached = ((self.seed, epoch), perm)
        return cached[1]

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_cache", None)
        return state


class ShuffledScheme(_Shuffled, _BatchScheme):
    """Batches of a fresh permutation each epoch; the permutation is a function of (seed, epoch)."""

    def __init__(self, num_examples, batch_size, seed: int | None = None, drop_last=False):
        super().__init__(num_examples, batch_size, drop_last)
        self.seed = fresh_seed(seed, f"{type(self).__name__}: seed")

    def request(self, epoch, k):
        a, b = self._bounds(epoch, k)
        return self._permutation(epoch)[a:b]

    def _config(self):
        return {**super()._config(), "seed": self.seed}


class SequentialExampleScheme(Scheme):
    """One example per request, in order."""

    batched = False

    def __init__(self, num_examples: int):
        self.num_examples = int(num_examples)
        if self.num_examples < 0:
            raise DataError(f"{type(self).__name__}: need num_examples >= 0, got "
                            f"{self.num_examples}")

    def num_requests(self, epoch):
        return self.num_examples

    def request(self, epoch, k):
        self._check_k(epoch, k)
        return k

    def _config(self):
        return {"num_examples": self.num_examples}

    def __repr__(self):
        return f"{type(self).__name__}({self.num_examples})"


class ShuffledExampleScheme(_Shuffled, SequentialExampleScheme):
    """One example per request, in a fresh permutation each epoch (a function of seed, epoch)."""

    def __init__(self, num_examples, seed: int | None = None):
        super().__init__(num_examples)
        self.seed = fresh_seed(seed, f"{type(self).__name__}: seed")

    def request(self, epoch, k):
        self._check_k(epoch, k)
        return int(self._permutation(epoch)[k])

    def _config(self):
        return {**super()._config(), "seed": self.seed}


class ShardedScheme(Scheme):
    """Worker or rank ``index`` of ``count``: its share of another scheme's requests.

    A batch scheme is sharded *within* each batch (rank ``i`` gets the ``i``-th contiguous part of
    every batch), so all ranks see the same number of batches and together exactly the global
    batch: data-parallel training with gradient averaging then matches one process. An example
    scheme is sharded by request (every ``count``-th), truncated so every rank has the same count.
    """

    def __init__(self, scheme: Scheme, index: int, count: int):
        if not 0 <= index < count:
            raise DataError(f"ShardedScheme: need 0 <= index < count, got index={index}, "
                            f"count={count}")
        self.base, self.index, self.count = scheme, int(index), int(count)
        self.batched = scheme.batched
        smallest = smallest_batch(scheme)
        if self.batched and smallest is not None and smallest < self.count:
            raise DataError(f"ShardedScheme: {scheme!r} has a batch of {smallest} examples, "
                            f"which cannot be split between {self.count} shards (shard "
                            f"{self.count - 1} would get an empty batch); use a larger "
                            "batch_size or drop_last=True")

    def num_requests(self, epoch):
        n = self.base.num_requests(epoch)
        return n if self.batched else n // self.count

    def request(self, epoch, k):
        self._check_k(epoch, k)
        if not self.batched:
            return self.base.request(epoch, k * self.count + self.index)
        r, _, a, b = self._split(epoch, k)
        if isinstance(r, slice):
            return slice(r.start + a * r.step, r.start + b * r.step, r.step)
        return r[a:b]

    def rows(self, epoch, k) -> tuple[int, int, int]:
        """``(offset, rows, total)``: where this shard's part of batch ``k`` lies in the base
        scheme's batch (a batch scheme's; random transformers draw for those rows)."""
        _, n, a, b = self._split(epoch, k)
        return a, b - a, n

    def _split(self, epoch, k):
        """(the base scheme's request, its size, this shard's [a, b) of it)."""
        r = self.base.request(epoch, k)
        if isinstance(r, slice):  # NOTE: a custom scheme's slice(0, 4): start 0, step 1
            r = slice(r.start or 0, r.stop, r.step or 1)
            n = len(range(r.start, r.stop, r.step))
        else:
            n = len(r)
        a, b = _share(n, self.index, self.count)
        if a == b:
            # NOTE: a base whose batch sizes are not known ahead (see smallest_batch); an
            # empty batch would give a NaN mean loss, or a rank with nothing to average
            raise DataError(f"ShardedScheme: batch {k} of epoch {epoch} of {self.base!r} has "
                            f"{n} examples, fewer than the {self.count} shards: shard "
                            f"{self.index} would get an empty batch; give every batch at least "
                            f"{self.count} examples")
        return r, n, a, b

    def state_dict(self):
        return {"type": "ShardedScheme", "index": self.index, "count": self.count,
                "base": self.base.state_dict()}

    def load_state_dict(self, state, where: str | None = None):
        where = where or "ShardedScheme.load_state_dict: state"
        check_state(state, where)
        if not (same_value(state.get("index"), self.index)
                and same_value(state.get("count"), self.count)):
            raise built_otherwise(f"{where}: the state is for shard {state.get('index')!r} of "
                                  f"{state.get('count')!r}, this is shard {self.index} of "
                                  f"{self.count}")
        self.base.load_state_dict(state.get("base"), f"{where}['base']")

    def __repr__(self):
        return f"ShardedScheme({self.base!r}, index={self.index}, count={self.count})"


def smallest_batch(scheme) -> int | None:
    """The fewest examples in a batch of ``scheme`` (a ``SequentialScheme`` or
    ``ShuffledScheme``: its last, unless dropped), None where that is not known ahead; a
    scheme with no batches has no smallest (None)."""
    if not isinstance(scheme, _BatchScheme) or scheme.num_examples == 0:
        return None
    if scheme.num_examples < scheme.batch_size:
        return None if scheme.drop_last else scheme.num_examples
    rest = scheme.num_examples % scheme.batch_size
    return scheme.batch_size if scheme.drop_last or rest == 0 else rest


def _share(n: int, i: int, count: int) -> tuple[int, int]:
    base, extra = divmod(n, count)
    start = i * base + min(i, extra)
    return start, start + base + (1 if i < extra else 0)
