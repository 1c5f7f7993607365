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
import sys

import numpy as np

from ..errors import DataError
from .sequential import Batch, Bucket, Filter, Prefetch, Unpack
from .streams import RandomTransformer, Stream, Transformer

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

    SETTINGS = ("fn", "sources")

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

    SETTINGS = ("dtype",)

    def __init__(self, stream, dtype, which_sources=None):
        super().__init__(stream, which_sources)
        self.dtype = np.dtype(dtype)

    def transform_source(self, name, value, epoch, k):
        return np.asarray(value).astype(self.dtype, copy=False)


class ScaleAndShift(Transformer):
    """``value * scale + shift``, in float32 unless the source is already floating point."""

    SETTINGS = ("scale", "shift")

    def __init__(self, stream, scale, shift=0.0, which_sources=None):
        super().__init__(stream, which_sources)
        self.scale, self.shift = scale, shift

    def transform_source(self, name, value, epoch, k):
        dt = _float_dtype(value)
        return (np.asarray(value, dt) * dt.type(self.scale) + dt.type(self.shift)).astype(dt)


class Normalize(Transformer):
    """``(value - mean) / std``; ``mean`` and ``std`` are scalars or broadcast per feature."""

    SETTINGS = ("mean", "std")

    def __init__(self, stream, mean, std, which_sources=None):
        super().__init__(stream, which_sources)
        self.mean, self.std = np.asarray(mean), np.asarray(std)
        if np.any(self.std == 0) or not np.all(np.isfinite(self.std)):
            raise DataError("Normalize: std has zeros or values that are not finite; give "
                            "finite values, with a small epsilon for zeros (std + 1e-8)")

    def transform_source(self, name, value, epoch, k):
        dt = _float_dtype(value)
        std = self.std.astype(dt)
        if np.any(std == 0):  # NOTE: 1e-8 is 0 in float16: the items were infinite
            raise DataError(f"Normalize: std has values that are 0 in source {name!r}'s dtype "
                            f"{dt} (the least is {float(np.min(np.abs(self.std))):.3g}); cast "
                            "the source to float32 first (Cast), or give a larger std")
        return ((np.asarray(value, dt) - self.mean.astype(dt)) / std).astype(dt)


class OneHot(Transformer):
    """Integer labels to one-hot rows of ``num_classes`` (float32)."""

    SETTINGS = ("num_classes", "dtype")

    def __init__(self, stream, num_classes: int, which_sources="targets", dtype=np.float32):
        super().__init__(stream, which_sources)
        self.num_classes, self.dtype = int(num_classes), np.dtype(dtype)
        if self.num_classes < 1:
            raise DataError(f"OneHot: num_classes must be >= 1, got {num_classes!r:.40}")

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

    SETTINGS = ("shape",)

    def __init__(self, stream, shape, which_sources="features", seed=None):
        super().__init__(stream, which_sources, seed)
        self.shape = (int(shape), int(shape)) if np.isscalar(shape) else tuple(map(int, shape))
        if len(self.shape) != 2 or min(self.shape) < 1:
            raise DataError(f"RandomCrop: shape must be a size >= 1 or (height, width) of "
                            f"sizes >= 1, got {shape!r:.40}")

    def transform_source(self, name, value, epoch, k):
        x, batched = _per_row(self, value)
        h, w = self.shape
        H, W = x.shape[-2:] if x.ndim >= 3 else (0, 0)  # NOTE: a scalar or 1-D example
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

    SETTINGS = ("axis", "p")

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
        dims = x.ndim - 1  # NOTE: an example's; an axis past them flipped the batch's order
        if not -dims <= self.axis < dims:
            raise DataError(f"RandomFlip: axis {self.axis} is not an axis of source {name!r}'s "
                            f"examples ({dims} dimensions: axes {-dims} to {dims - 1})")
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

    SETTINGS = ("n", "source", "target")

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

    SETTINGS = ("pad_value", "mask_dtype")

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
            pad = _pad_value(self.pad_value, dt, s)
            padded = np.full((len(seqs), t, *rest), pad, dtype=dt)
            for i, q in enumerate(seqs):
                padded[i, :len(q)] = q
            out[s] = padded
            out[f"{s}_mask"] = (np.arange(t)[None, :] < lengths[:, None]).astype(self.mask_dtype)
        return out


def _pad_value(v, dt, source):
    """``v`` in dtype ``dt``, exactly: -0.5 padding integer tokens became 0 (a token id), and
    -1 for uint8 a bare NumPy error."""
    try:
        cast = np.array(v).astype(dt, casting="unsafe") if np.isfinite(v) else np.array(v, dt)
        same = bool(cast == v) or (np.isnan(v) and np.isnan(cast))
    except (TypeError, ValueError, OverflowError):
        same = False
    if not same:
        raise DataError(f"Padding: pad_value {v!r} is not a value of source {source!r}'s dtype "
                        f"{np.dtype(dt)}; give one it holds exactly (for token ids, an id "
                        "the vocabulary does not use, e.g. 0 reserved for padding)")
    return cast


class SortByLength(Transformer):
    """Order the examples of each batch by the length of ``source`` (longest first)."""

    SETTINGS = ("source", "descending")

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


# ---- what worker processes receive (the sequential stages are in .sequential) -------------


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def check_sendable(stream: Stream) -> None:
    """Raise ``DataError`` naming the stage that worker processes could not receive."""
    interactive = not hasattr(sys.modules.get("__main__"), "__file__")
    for stage in _walk(stream):
        owned = {k: v for k, v in _sent(stage).items() if k != "stream"}
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


def _sent(stage) -> dict:
    """What pickling sends of a stage: what its own ``__getstate__`` returns (``Parallel``
    leaves out its lock), else its attributes."""
    own = getattr(type(stage), "__getstate__", None)
    state = stage.__getstate__() if own not in (None, getattr(object, "__getstate__", None)) \
        else None
    return state if isinstance(state, dict) else vars(stage)


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
