"""Transformers: one small hook each, per item (indexed, can run in workers) or sequential.

Per item: ``Mapping``, ``Cast``, ``ScaleAndShift``, ``Normalize``, ``OneHot``, ``Flatten``,
``RandomCrop``, ``RandomFlip``, ``NGrams``, ``Padding``, ``SortByLength``.
Sequential: ``Batch``, ``Unpack``, ``Filter``, ``Bucket``, ``Prefetch``.

Examples
--------
>>> import numpy as np
>>> from labkit.data import DataStream, IndexableDataset, Batch, OneHot
>>> ds = IndexableDataset({"x": np.arange(6.0), "y": np.array([0, 1, 2, 0, 1, 2])})
>>> stream = OneHot(Batch(DataStream(ds), batch_size=4), 3, which_sources="y")
>>> [b["y"].shape for b in stream]
[(4, 3), (2, 3)]
"""

from __future__ import annotations

import itertools
import pickle
import queue
import sys
import threading

import numpy as np

from ..backend.random import Generator
from ..errors import DataError
from .schemes import COUNT, SEED, config_mismatch, fresh_seed, mix_seed, state_int
from .streams import RandomTransformer, Stream, Transformer, stack

__all__ = [
    "Batch", "Bucket", "Cast", "Filter", "Flatten", "Mapping", "NGrams", "Normalize", "OneHot",
    "Padding", "Prefetch", "RandomCrop", "RandomFlip", "ScaleAndShift", "SortByLength", "Unpack",
]


def _float_dtype(v):
    v = np.asarray(v)
    return v.dtype if v.dtype.kind == "f" else np.dtype(np.float32)


# ---- per item -------------------------------------------------------------------------------
class Mapping(Transformer):
    """Apply ``fn(item) -> item`` (dicts of sources). ``sources`` names the result's sources
    when ``fn`` adds or drops some. For worker processes, ``fn`` must be importable (defined in a
    module, not in a notebook cell or as a lambda)."""

    def __init__(self, stream, fn, sources=None):
        super().__init__(stream)
        if not callable(fn):
            raise DataError(f"Mapping: fn must be callable, got {type(fn).__name__}")
        self.fn = fn
        if sources is not None:
            self.sources = (sources,) if isinstance(sources, str) else tuple(sources)

    def transform(self, item, epoch, k):
        out = self.fn(item)
        if not isinstance(out, dict):
            raise DataError(f"Mapping({_name(self.fn)}): fn returned a {type(out).__name__}; it "
                            "must return a dict {source: array}")
        missing = [s for s in self.sources if s not in out]
        if missing:
            raise DataError(f"Mapping({_name(self.fn)}): fn's result has no source "
                            f"{missing[0]!r}; pass sources=[...] if fn changes the sources")
        return out

    def __repr__(self):
        return f"Mapping({self.stream!r}, {_name(self.fn)})"


class Cast(Transformer):
    """Cast sources to ``dtype``."""

    def __init__(self, stream, dtype, which_sources=None):
        super().__init__(stream, which_sources)
        self.dtype = np.dtype(dtype)

    def transform_source(self, name, value, epoch, k):
        return np.asarray(value).astype(self.dtype, copy=False)


class ScaleAndShift(Transformer):
    """``value * scale + shift``, in float32 unless the source is already floating point."""

    def __init__(self, stream, scale, shift=0.0, which_sources=None):
        super().__init__(stream, which_sources)
        self.scale, self.shift = scale, shift

    def transform_source(self, name, value, epoch, k):
        dt = _float_dtype(value)
        return (np.asarray(value, dt) * dt.type(self.scale) + dt.type(self.shift)).astype(dt)


class Normalize(Transformer):
    """``(value - mean) / std``; ``mean`` and ``std`` are scalars or broadcast per feature."""

    def __init__(self, stream, mean, std, which_sources=None):
        super().__init__(stream, which_sources)
        self.mean, self.std = np.asarray(mean), np.asarray(std)
        if np.any(self.std == 0):
            raise DataError("Normalize: std has zeros; add a small epsilon (std + 1e-8)")

    def transform_source(self, name, value, epoch, k):
        dt = _float_dtype(value)
        return ((np.asarray(value, dt) - self.mean.astype(dt)) / self.std.astype(dt)).astype(dt)


class OneHot(Transformer):
    """Integer labels to one-hot rows of ``num_classes`` (float32)."""

    def __init__(self, stream, num_classes: int, which_sources="targets", dtype=np.float32):
        super().__init__(stream, which_sources)
        self.num_classes, self.dtype = int(num_classes), np.dtype(dtype)

    def transform_source(self, name, value, epoch, k):
        v = np.asarray(value)
        if v.dtype.kind not in "iu":
            raise DataError(f"OneHot: source {name!r} has dtype {v.dtype}; it needs integer "
                            "labels")
        if v.size and (v.min() < 0 or v.max() >= self.num_classes):
            bad = v[(v < 0) | (v >= self.num_classes)].flat[0]
            raise DataError(f"OneHot: source {name!r} has label {int(bad)}, outside "
                            f"0..{self.num_classes - 1}")
        return np.eye(self.num_classes, dtype=self.dtype)[v]


class Flatten(Transformer):
    """Flatten each example to 1-D (a batch becomes ``(batch, features)``)."""

    def transform_source(self, name, value, epoch, k):
        v = np.asarray(value)
        return v.reshape(-1) if self.produces_examples else v.reshape(len(v), -1)


def _per_row(transformer, value):
    """(rows, batched): a batch as is, a single example as a batch of one."""
    v = np.asarray(value)
    return (v[None], False) if transformer.produces_examples else (v, True)


class RandomCrop(RandomTransformer):
    """Crop a random ``(height, width)`` window out of the last two axes of each example."""

    def __init__(self, stream, shape, which_sources="features", seed=None):
        super().__init__(stream, which_sources, seed)
        self.shape = (int(shape), int(shape)) if np.isscalar(shape) else tuple(map(int, shape))

    def transform_source(self, name, value, epoch, k):
        x, batched = _per_row(self, value)
        h, w = self.shape
        H, W = x.shape[-2:]
        if x.ndim < 3 or H < h or W < w:
            raise DataError(f"RandomCrop: source {name!r} has examples of shape {x.shape[1:]}; "
                            f"a {h}x{w} crop needs at least 2 axes of that size")
        g = self.rng(epoch, k)
        oy = g.integers(0, H - h + 1, (len(x),))
        ox = g.integers(0, W - w + 1, (len(x),))
        win = np.lib.stride_tricks.sliding_window_view(x, (h, w), axis=(-2, -1))
        rows = np.arange(len(x))
        mid = (slice(None),) * (x.ndim - 3)
        out = np.ascontiguousarray(win[(rows, *mid, oy, ox)])
        return out if batched else out[0]


class RandomFlip(RandomTransformer):
    """Reverse ``axis`` of each example with probability ``p`` (default: horizontal flips)."""

    def __init__(self, stream, axis: int = -1, p: float = 0.5, which_sources="features",
                 seed=None):
        super().__init__(stream, which_sources, seed)
        if not 0 <= p <= 1:
            raise DataError(f"RandomFlip: p must be in [0, 1], got {p}")
        self.axis, self.p = int(axis), float(p)

    def transform_source(self, name, value, epoch, k):
        x, batched = _per_row(self, value)
        if x.ndim < 2:
            raise DataError(f"RandomFlip: source {name!r} has scalar examples; nothing to flip")
        flip = self.rng(epoch, k).bernoulli((len(x),), self.p)
        axis = self.axis if self.axis < 0 else self.axis + 1
        out = x.copy()
        out[flip] = np.flip(x[flip], axis=axis)
        return out if batched else out[0]


def _sequences(transformer, value, name):
    v = np.asarray(value) if not isinstance(value, np.ndarray) else value
    if transformer.produces_examples:
        return [np.asarray(v)]
    if v.dtype == object:
        return [np.asarray(s) for s in v]
    if v.ndim >= 2:
        return list(v)
    raise DataError(f"{type(transformer).__name__}: source {name!r} needs sequences (a batch of "
                    f"1-D arrays), got shape {v.shape}")


class NGrams(Transformer):
    """Sequences of tokens to ``n``-grams and the token that follows each.

    The result has two sources: ``source`` holds the windows ``(m, n)`` and ``target`` the next
    tokens ``(m,)`` (other sources are dropped: they do not align with the n-grams).
    """

    def __init__(self, stream, n: int, source: str = "text", target: str = "targets"):
        super().__init__(stream, source)
        if n < 1:
            raise DataError(f"NGrams: n must be >= 1, got {n}")
        self.n, self.source, self.target = int(n), source, target
        self.sources = (source, target)

    def transform(self, item, epoch, k):
        wins, nxt = [], []
        for seq in _sequences(self, item[self.source], self.source):
            if len(seq) > self.n:
                wins.append(np.lib.stride_tricks.sliding_window_view(seq[:-1], self.n))
                nxt.append(seq[self.n:])
        if not wins:
            dt = np.asarray(item[self.source][0] if not self.produces_examples
                            else item[self.source]).dtype
            return {self.source: np.zeros((0, self.n), dt), self.target: np.zeros(0, dt)}
        return {self.source: np.concatenate(wins), self.target: np.concatenate(nxt)}


class Padding(Transformer):
    """Pad a batch of sequences to its longest and add ``<source>_mask`` (1 = data, 0 = pad)."""

    def __init__(self, stream, which_sources=None, pad_value=0, mask_dtype=np.float32):
        super().__init__(stream, which_sources)
        if self.produces_examples:
            raise DataError("Padding: the stream yields single examples; batch them first "
                            "(Batch(stream, batch_size) or a batch scheme)")
        self.pad_value, self.mask_dtype = pad_value, np.dtype(mask_dtype)
        self.sources = tuple(itertools.chain.from_iterable(
            (s, f"{s}_mask") if s in self.which_sources else (s,) for s in self.sources))

    def transform(self, item, epoch, k):
        out = {}
        for s, v in item.items():
            if s not in self.which_sources:
                out[s] = v
                continue
            seqs = _sequences(self, v, s)
            lengths = np.array([len(q) for q in seqs], dtype=np.int64)
            t = int(lengths.max(initial=0))
            rest = seqs[0].shape[1:] if seqs else ()
            dt = np.result_type(*[q.dtype for q in seqs]) if seqs else np.float32
            padded = np.full((len(seqs), t, *rest), self.pad_value, dtype=dt)
            for i, q in enumerate(seqs):
                padded[i, :len(q)] = q
            out[s] = padded
            out[f"{s}_mask"] = (np.arange(t)[None, :] < lengths[:, None]).astype(self.mask_dtype)
        return out


class SortByLength(Transformer):
    """Order the examples of each batch by the length of ``source`` (longest first)."""

    def __init__(self, stream, source: str, descending: bool = True):
        super().__init__(stream, source)
        if self.produces_examples:
            raise DataError("SortByLength: the stream yields single examples; it sorts within "
                            "batches")
        self.source, self.descending = source, descending

    def transform(self, item, epoch, k):
        lengths = np.array([len(q) for q in item[self.source]])
        order = np.argsort(-lengths if self.descending else lengths, kind="stable")
        return {s: np.asarray(v)[order] for s, v in item.items()}


# ---- sequential -----------------------------------------------------------------------------
class _Sequential(Stream):
    def __init__(self, stream: Stream):
        super().__init__()
        if not isinstance(stream, Stream):
            raise DataError(f"{type(self).__name__}: expected a stream, got "
                            f"{type(stream).__name__} (wrap a dataset in DataStream first)")
        self.stream = stream
        self.sources = stream.sources
        self.produces_examples = stream.produces_examples


class Batch(_Sequential):
    """Group consecutive examples into batches of ``batch_size`` (the last may be smaller unless
    ``drop_last``). Prefer a batch scheme when the dataset can read batches itself: it is faster
    and can run in worker processes."""

    def __init__(self, stream, batch_size: int, drop_last: bool = False):
        super().__init__(stream)
        if not stream.produces_examples:
            raise DataError("Batch: the stream already yields batches; Unpack it first or use an "
                            "example scheme")
        if batch_size < 1:
            raise DataError(f"Batch: batch_size must be >= 1, got {batch_size}")
        self.batch_size, self.drop_last = int(batch_size), bool(drop_last)
        self.produces_examples = False

    def _iterate(self):
        buf = []
        for ex in self.stream:
            buf.append(ex)
            if len(buf) == self.batch_size:
                yield _collate(buf, self.sources)
                buf = []
        if buf and not self.drop_last:
            yield _collate(buf, self.sources)

    def _own_state(self):
        return {"batch_size": self.batch_size, "drop_last": self.drop_last}

    def _load_own_state(self, state, where="state"):
        config_mismatch(state, self._own_state(), where, "Batch")

    def _check_upstream(self, epoch, position, where):
        super()._check_upstream(epoch, position, where)
        up = self.stream
        if not up.indexed:
            return  # NOTE: a Filter's or an Unpack's count of items is known only by reading
        # a batch is yielded when it is full, or (not drop_last) with the epoch's rest after
        # the upstream has ended: ``position`` batches are position * batch_size items read
        n = up.num_items(epoch)
        full, rest = divmod(n, self.batch_size)
        if up.epoch == epoch:
            ok, want = up.position == position * self.batch_size, "position * batch_size items"
        else:
            ok = rest and not self.drop_last and position == full + 1
            want = f"its epoch ended after the last, short batch ({n} items)"
        if not ok:
            raise DataError(f"{where}['position'] = {position} batches, but {where}['stream'] is "
                            f"at epoch {up.epoch}, position {up.position} (batch_size "
                            f"{self.batch_size}, drop_last {self.drop_last}; expected "
                            f"{want}); the state is damaged or was edited")


def _collate(examples, sources):
    return {s: stack([ex[s] for ex in examples]) for s in sources}


class _Replaying(_Sequential):
    """A sequential stage that buffers several upstream items: to resume inside a buffer it keeps
    the upstream's state from before the buffer and how much of the buffer was delivered, and
    replays that one buffer (never the epoch)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._current = None   # (upstream state before the buffer, buffer index, delivered, size)
        self._resume = (0, 0)  # (buffer index, delivered) to start from after a load

    def _partial(self):
        c = self._current
        return c is not None and c[2] < c[3]

    def _own_state(self):
        c = self._current
        if c is None:
            buffer, skip = self._resume
        elif c[2] < c[3]:
            buffer, skip = c[1], c[2]
        else:
            buffer, skip = c[1] + 1, 0
        return {"buffer": buffer, "skip": skip, **self._config()}

    def _load_own_state(self, state, where="state"):
        config_mismatch(state, {k: v for k, v in self._config().items() if k != "seed"}, where,
                        type(self).__name__)
        self._resume = (state_int(state, "buffer", where, *COUNT),
                        state_int(state, "skip", where, *COUNT))

    def _upstream_state(self):
        return self._current[0] if self._partial() else self.stream.state_dict()

    def _reset(self):
        self._current = None

    def _new_epoch(self):
        self._current = None
        self._resume = (0, 0)

    def _config(self):
        return {}

    def _iterate(self):
        index, skip = self._resume
        self._resume = (0, 0)
        up = iter(self.stream)
        while True:
            before = self.stream.state_dict()
            items = self._fill(up, index)
            if items is None:
                break
            if skip > len(items):
                raise DataError(f"{type(self).__name__}: the state resumes after item {skip} of "
                                f"a buffer of {len(items)}; the state is damaged or from another "
                                "pipeline")
            for t in range(skip, len(items)):
                self._current = (before, index, t + 1, len(items))
                yield items[t]
            skip = 0
            index += 1
        self._current = None


class Unpack(_Replaying):
    """Split batches into single examples."""

    def __init__(self, stream):
        super().__init__(stream)
        if stream.produces_examples:
            raise DataError("Unpack: the stream already yields single examples")
        self.produces_examples = True

    def _fill(self, up, index):
        batch = next(up, None)
        if batch is None:
            return None
        n = len(next(iter(batch.values())))
        return [{s: v[i] for s, v in batch.items()} for i in range(n)]


class Bucket(_Replaying):
    """Batches of examples of similar length: read ``pool`` batches' worth of examples, sort
    them by the length of ``source``, cut into batches and yield those in a random order
    (keyed by seed, epoch and pool, so it resumes exactly)."""

    def __init__(self, stream, source: str, batch_size: int, pool: int = 20,
                 seed: int | None = None):
        super().__init__(stream)
        if not stream.produces_examples:
            raise DataError("Bucket: needs a stream of single examples (Unpack a batch stream)")
        if source not in self.sources:
            raise DataError(f"Bucket: no source {source!r}; the sources are {list(self.sources)}")
        self.source, self.batch_size, self.pool = source, int(batch_size), int(pool)
        self.seed = fresh_seed(seed, f"{type(self).__name__}: seed")
        self.produces_examples = False

    def _config(self):
        return {"seed": self.seed, "batch_size": self.batch_size, "pool": self.pool}

    def _load_own_state(self, state, where="state"):
        seed = state_int(state, "seed", where, *SEED)
        super()._load_own_state(state, where)
        self.seed = seed

    def _fill(self, up, index):
        pool = list(itertools.islice(up, self.batch_size * self.pool))
        if not pool:
            return None
        order = np.argsort([len(ex[self.source]) for ex in pool], kind="stable")
        cuts = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        perm = Generator(seed=mix_seed(self.seed, self.epoch, index)).permutation(len(cuts))
        return [_collate([pool[i] for i in cuts[j]], self.sources) for j in perm]


class Filter(_Sequential):
    """Keep the items for which ``predicate(item)`` is true."""

    def __init__(self, stream, predicate):
        super().__init__(stream)
        if not callable(predicate):
            raise DataError(f"Filter: predicate must be callable, got {type(predicate).__name__}")
        self.predicate = predicate

    def _iterate(self):
        for item in self.stream:
            if self.predicate(item):
                yield item


_END = object()


class Prefetch(_Sequential):
    """Read up to ``size`` items ahead on a background thread (overlaps file reads with compute).

    Its state is the upstream's state after the last item *delivered*; on a break or a load, the
    upstream is rewound to it, so items read ahead are never lost.
    """

    def __init__(self, stream, size: int = 4):
        super().__init__(stream)
        if size < 1:
            raise DataError(f"Prefetch: size must be >= 1, got {size}")
        self.size = int(size)
        self._delivered = None
        self._running = False

    def _own_state(self):
        return {"size": self.size}

    def _upstream_state(self):
        return self._delivered if self._running else self.stream.state_dict()

    def _iterate(self):
        q: queue.Queue = queue.Queue(self.size)
        stop = threading.Event()
        self._delivered = self.stream.state_dict()

        def put(entry):
            while not stop.is_set():
                try:
                    q.put(entry, timeout=0.05)
                    return True
                except queue.Full:
                    pass
            return False

        def work():
            try:
                for item in self.stream:
                    if not put((item, self.stream.state_dict())):
                        return
                put((_END, self.stream.state_dict()))
            except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
                put((e, None))

        thread = threading.Thread(target=work, name="labkit-prefetch", daemon=True)
        self._running = True
        thread.start()
        finished = False
        try:
            while True:
                item, state = q.get()
                if state is None:
                    raise item
                self._delivered = state
                if item is _END:
                    finished = True
                    return
                yield item
        finally:
            stop.set()
            thread.join()
            self._running = False
            if not finished:
                self.stream.load_state_dict(self._delivered)


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def check_sendable(stream: Stream) -> None:
    """Raise ``DataError`` naming the stage that worker processes could not receive."""
    interactive = not hasattr(sys.modules.get("__main__"), "__file__")
    for stage in _walk(stream):
        owned = {k: v for k, v in vars(stage).items() if k != "stream"}
        culprits = [(f"{type(stage).__name__}", type(stage))] + [
            (f"{type(stage).__name__}.{k}", v) for k, v in owned.items()]
        for label, obj in culprits:
            mod = getattr(obj, "__module__", None)
            if interactive and mod == "__main__" and (callable(obj) or isinstance(obj, type)):
                raise DataError(
                    f"{label} = {_name(obj)} is defined in the notebook (module __main__), which "
                    "worker processes cannot import. Move it into a .py file next to the notebook "
                    "and import it from there, or use workers=0.")
        try:
            pickle.dumps(owned)
            pickle.dumps(type(stage))
        except Exception as e:  # noqa: BLE001 - reported with the stage that caused it
            bad = next((k for k, v in owned.items() if not _picklable(v)), None)
            what = f"{type(stage).__name__}.{bad} = {owned[bad]!r}" if bad else type(stage).__name__
            raise DataError(
                f"{what} cannot be sent to a worker process ({type(e).__name__}: {e}). Define "
                "functions at module level (not lambdas or closures), or use workers=0.") from None


def _picklable(v) -> bool:
    try:
        pickle.dumps(v)
        return True
    except Exception:  # noqa: BLE001
        return False


def _walk(stream):
    s = stream
    while s is not None:
        yield s
        s = s.stream
