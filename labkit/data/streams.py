"""Streams: iterate a dataset epoch by epoch, with a state that is data.

Every stream has ``epoch`` and ``position`` (items delivered in this epoch), and
``state_dict()`` / ``load_state_dict()`` of JSON values: seeds, epochs and positions, never a live
iterator. ``for item in stream`` yields the *rest of the current epoch* as dicts
``{source: array}``, then moves the stream to the next epoch. Break out anywhere, save
``stream.state_dict()``, load it into the same pipeline built in another process, and iterating
continues with exactly the items the first one would have produced.

There are two kinds of stage:

- **indexed** stages (``DataStream`` and per-item transformers over it) can produce item ``k`` of
  epoch ``e`` directly, as a pure function of ``(e, k)`` and their seeds. Random ones draw from a
  counter-based generator keyed by ``(seed, e, k)``. That is what lets worker processes
  (``Parallel``) prepare items in any order and still give the same sequence.
- **sequential** stages (``Batch``, ``Unpack``, ``Filter``, ``Bucket``, ``Prefetch``) consume
  their upstream in order; each keeps what it needs to resume (at most one buffer's worth of
  upstream state to replay).

Examples
--------
>>> import numpy as np
>>> from labkit.data import DataStream, IndexableDataset
>>> ds = IndexableDataset({"x": np.arange(10)})
>>> stream = DataStream(ds, batch_size=4, shuffle=True, seed=0)
>>> first = next(iter(stream))["x"]          # one batch of epoch 0
>>> state = stream.state_dict()
>>> rest = [b["x"] for b in stream]          # the rest of epoch 0
>>> stream.load_state_dict(state)
>>> [b["x"].tolist() for b in stream] == [r.tolist() for r in rest]
True
"""

from __future__ import annotations

import hashlib
import reprlib

import numpy as np

from ..backend.random import Generator
from ..errors import DataError
from .datasets import Dataset
from .schemes import (
    COUNT,
    SEED,
    Scheme,
    SequentialExampleScheme,
    SequentialScheme,
    ShardedScheme,
    ShuffledExampleScheme,
    ShuffledScheme,
    built_otherwise,
    check_state,
    fresh_seed,
    mix_seed,
    state_int,
)

#: the iteration mark of a stream a state was loaded into (``Stream.load_state_dict``)
_LOADED = object()


class Stream:
    """The interface of every stream and transformer."""

    #: True if item ``k`` of epoch ``e`` can be produced directly (``get_item(e, k)``).
    indexed = False
    #: True if items are single examples, False if batches.
    produces_examples = False
    #: True for stages that do not change items or state (``Parallel``): left out of the state.
    transparent = False
    sources: tuple[str, ...] = ()
    stream: Stream | None = None

    def __init__(self):
        self.epoch = 0
        self.position = 0

    # -- iteration
    def __iter__(self):
        # NOTE: the newest iteration reads the stream: one made before it fails when it is
        # next read (two at once share one position: ``zip(s, s)`` paired items 0 and 1, 2 and
        # 3... and ended two epochs for one). An abandoned read (a ``break``) is not an error:
        # only reading on with it after a new one was made is.
        me = self._iteration = object()
        return self._iterating(me)

    def _iterating(self, me):
        if self._iteration is not me:
            raise self._superseded()
        if self.indexed:
            n = self.num_items(self.epoch)
            while self.position < n:
                item = self.get_item(self.epoch, self.position)
                self.position += 1
                yield item
                if self._iteration is not me:
                    raise self._superseded()
        # NOTE: an upstream that already finished this epoch has nothing left for it (this
        # happens when a state was saved right after the last item of an epoch).
        elif self.stream.epoch <= self.epoch or self._open():
            for item in self._iterate():
                self.position += 1
                yield item
                if self._iteration is not me:
                    raise self._superseded()
        self.epoch += 1
        self.position = 0
        self._new_epoch()

    def _superseded(self) -> DataError:
        if self._iteration is _LOADED:
            return DataError(
                f"{type(self).__name__}: this iteration of the stream was closed when a state "
                "was loaded into it (load_state_dict): it would read on from the loaded "
                "position in another iteration's place. Start a new one (iter(stream), or a "
                "for loop over it)")
        return DataError(
            f"{type(self).__name__}: this iteration of the stream was read on after another one "
            "had started (iter(stream), or a for loop over it, again): both would read from "
            "the one position the stream keeps, skipping or repeating items. Read a stream "
            "with one iteration at a time; to pair items, zip two streams built alike")

    def _new_epoch(self) -> None:
        """Called when an epoch ends: drop any position within it."""

    def _open(self) -> bool:
        """True while a read of this epoch, abandoned inside a buffer, has items to continue
        with (even where the upstream has finished its epoch)."""
        return False

    def _iterate(self):
        raise NotImplementedError

    def num_items(self, epoch: int) -> int:
        raise DataError(f"{type(self).__name__} is sequential: it has no item count in advance")

    def get_item(self, epoch: int, k: int) -> dict:
        raise DataError(f"{type(self).__name__} is sequential: it cannot produce item {k} "
                        "directly")

    # -- state
    def state_dict(self) -> dict:
        """Everything that determines the rest of the sequence, as JSON values."""
        if self.indexed:
            return {"epoch": self.epoch, "position": self.position,
                    "stages": [s._saved_own() for s in self.stages()]}
        return {"type": type(self).__name__, "epoch": self.epoch, "position": self.position,
                **self._saved_own(), "stream": self._upstream_state()}

    def load_state_dict(self, state: dict, _where: str | None = None) -> None:
        """Continue from ``state`` (from ``state_dict()`` of a stream built the same way).

        Every field is checked (a damaged ``state.json`` raises ``DataError`` naming the key and
        what was expected); on an error the stream is left as it was."""
        where = _where or f"{type(self).__name__}.load_state_dict: state"
        check_state(state, where)
        epoch = state_int(state, "epoch", where, *COUNT)
        position = state_int(state, "position", where, *COUNT)
        before = self.state_dict()
        try:
            self._load(state, where, epoch, position)
        except BaseException:
            self._load(before, where, before["epoch"], before["position"])
            raise
        if _where is None:  # NOTE: loaded (not a stage loaded by its downstream's load)
            s = self
            while s is not None:
                s._iteration = _LOADED  # NOTE: an iteration open now is closed
                s = s.stream

    def _load(self, state, where, epoch, position):
        if self.indexed:
            stages = self.stages()
            saved = state.get("stages")
            have = [s._own_state().get("type") for s in stages]
            if isinstance(saved, list) and all(isinstance(s, dict) for s in saved):
                got = [s.get("type") for s in saved]
            elif isinstance(saved, list):
                got = reprlib.repr(saved)[:80]  # NOTE: not repr(): deep nesting recurses
            else:
                got = f"none (it is the state of a {state.get('type')})"
            if got != have:
                raise built_otherwise(f"{where}['stages']: the state has stages {got}, this "
                                      f"stream has {have}; build the pipeline as it was when the "
                                      "state was saved")
            for i, (s, own) in enumerate(zip(stages, saved)):
                s._check_settings(own, f"{where}['stages'][{i}]")
                s._load_own_state(own, f"{where}['stages'][{i}]")
            s = self
            while s is not None and s.indexed:
                s._reset()
                s = s.stream
            n = self.num_items(epoch)
            if position > n:
                raise DataError(f"{where}['position'] = {position}: expected 0..{n} (epoch "
                                f"{epoch} has {n} items); the state is damaged or from another "
                                "pipeline")
        else:
            if state.get("type") != type(self).__name__:
                raise built_otherwise(f"{where}['type']: the state is for a "
                                      f"{state.get('type')!r}, this is a {type(self).__name__}; "
                                      "build the pipeline as it was when the state was saved")
            self._check_settings(state, where)
            self._load_own_state(state, where)
            upstream = state.get("stream")
            if not isinstance(upstream, dict):
                raise DataError(f"{where}['stream']: expected the upstream's state (an object), "
                                f"got {type(upstream).__name__}; the state is damaged")
            self._load_upstream_state(upstream, f"{where}['stream']")
            self._check_upstream(epoch, position, where)
            self._reset()
        self.epoch, self.position = epoch, position

    def _check_upstream(self, epoch: int, position: int, where: str) -> None:
        """A sequential stage's epoch against its upstream's (just loaded). Each of its epochs
        reads one epoch of the upstream to the end, so the upstream is in the same epoch, or in
        the next one with nothing read yet (the stage's state was saved after its last item of
        the epoch). Anything else would label one epoch's items with another's number, or skip
        epochs: a state no pipeline writes."""
        up = self.stream
        if up.epoch == epoch or (up.epoch == epoch + 1 and up.position == 0):
            return
        raise DataError(f"{where}['epoch'] = {epoch} but {where}['stream'] is at epoch "
                        f"{up.epoch}, position {up.position}: a {type(self).__name__} reads its "
                        f"upstream's epoch {epoch} to the end in its own epoch {epoch} (the "
                        f"upstream is then at epoch {epoch} or at the start of {epoch + 1}); the "
                        "state is damaged or was edited")

    def stages(self) -> list[Stream]:
        """The indexed stages from the dataset's stream up to this one."""
        chain, s = [], self
        while s is not None and s.indexed:
            if not s.transparent:
                chain.append(s)
            s = s.stream
        return chain[::-1]

    def _own_state(self) -> dict:
        return {"type": type(self).__name__}

    def _load_own_state(self, state: dict, where: str = "state") -> None:
        """Load this stage's own part of a state (checked: ``where`` names it in errors)."""

    def _settings(self) -> dict:
        """What this stage's items depend on beyond its state (a crop's size, a flip's ``p``,
        a mapping's function), each as short text: a state saved with other settings is
        refused, as it would go on with other items than the saved pipeline's."""
        return {}

    def _saved_own(self) -> dict:
        settings = self._settings()
        return {**self._own_state(), "settings": settings} if settings else self._own_state()

    def _check_settings(self, state, where: str) -> None:
        # NOTE: none saved: a state from before settings were recorded, or a fork's (see
        # training.state: a fork may change them)
        saved = state.get("settings") if isinstance(state, dict) else None
        same_record(saved, self._settings(), where, "settings", lambda key, a, b: (
            f"{where}: the state was saved from a {type(self).__name__} with {key} = {a}, this "
            f"one has {b}; build the pipeline as it was when the state was saved (to go on "
            "with other settings, fork the run: lk.runs.fork)"))

    def _upstream_state(self) -> dict:
        return self.stream.state_dict()

    def _load_upstream_state(self, state: dict, where: str = "state") -> None:
        self.stream.load_state_dict(state, where)

    def _reset(self) -> None:
        """Forget buffers and in-flight work (called on load_state_dict)."""

    # -- resources
    def close(self) -> None:
        """Stop worker processes and threads and close files, here and upstream."""
        if self.stream is not None:
            self.stream.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.stream!r})"


class DataStream(Stream):
    """A dataset read by an iteration scheme: the first stage of every pipeline.

    ``DataStream(dataset, scheme)``, or ``DataStream(dataset, batch_size=128, shuffle=True,
    seed=0)`` for the common schemes (``batch_size=None`` iterates single examples).
    """

    indexed = True

    def __init__(self, dataset: Dataset, scheme: Scheme | None = None, *,
                 batch_size: int | None = None, shuffle: bool = False, seed: int | None = None,
                 sources=None):
        super().__init__()
        if not isinstance(dataset, Dataset):
            raise DataError(f"DataStream: expected a labkit.data dataset, got "
                            f"{type(dataset).__name__} (wrap arrays in IndexableDataset)")
        if scheme is None:
            n = dataset.num_examples
            if batch_size is None:
                scheme = ShuffledExampleScheme(n, seed) if shuffle else SequentialExampleScheme(n)
            else:
                scheme = (ShuffledScheme(n, batch_size, seed) if shuffle
                          else SequentialScheme(n, batch_size))
        elif batch_size is not None or shuffle or seed is not None:
            raise DataError("DataStream: give a scheme or batch_size/shuffle/seed, not both")
        if not isinstance(scheme, Scheme):
            raise DataError(f"DataStream: scheme must be a labkit.data scheme, got "
                            f"{type(scheme).__name__}")
        n = getattr(scheme, "num_examples", getattr(getattr(scheme, "base", None),
                                                    "num_examples", None))
        if n is not None and n != dataset.num_examples:
            # NOTE: a scheme built for another split (its size reused): it would skip
            # examples, or request ones the dataset does not have (empty batches)
            raise DataError(f"DataStream: the scheme covers {n} examples but the dataset has "
                            f"{dataset.num_examples}; build the scheme with the dataset's "
                            f"num_examples (each epoch covers every example once)")
        self.dataset, self.scheme = dataset, scheme
        self.sources = dataset._pick(sources)
        self.produces_examples = not scheme.batched

    def num_items(self, epoch):
        return self.scheme.num_requests(epoch)

    def get_item(self, epoch, k):
        return self.dataset.get_data(self.scheme.request(epoch, k), self.sources)

    def _identity(self) -> dict:
        """What the stream reads, beyond sizes: its sources and the dataset's split."""
        out = {"sources": list(self.sources)}
        split = getattr(self.dataset, "split", None)
        if split is not None:
            out["split"] = list(split)
        return out

    def _own_state(self):
        return {"type": "DataStream", "scheme": self.scheme.state_dict(),
                "dataset": self._identity()}

    def _load_own_state(self, state, where="state"):
        # NOTE: None in a state saved before it was recorded
        same_record(state.get("dataset"), self._identity(), where, "dataset", lambda key, a, b: (
            f"{where}['dataset'][{key!r}]: the state was saved from a stream over {a}, this one "
            f"reads {b}; load it into a stream over the same data (the same split and sources)"))
        self.scheme.load_state_dict(state.get("scheme"), f"{where}['scheme']")

    def close(self):
        close = getattr(self.dataset, "close", None)
        if close is not None:
            close()

    def __repr__(self):
        return f"DataStream({self.dataset!r}, {self.scheme!r})"


class Transformer(Stream):
    """A per-item stage: ``transform(item, epoch, k)`` maps one item (an example or a batch).

    Over an indexed stream it is indexed too (so it can run in worker processes); over a
    sequential one it maps items as they come. Subclasses override ``transform`` and, if they
    change the sources, set ``self.sources``. ``which_sources`` limits a transformer to some
    sources (default: all).
    """

    def __init__(self, stream: Stream, which_sources=None):
        super().__init__()
        if not isinstance(stream, Stream):
            raise DataError(f"{type(self).__name__}: expected a stream, got "
                            f"{type(stream).__name__} (wrap a dataset in DataStream first)")
        self.stream = stream
        self.indexed = stream.indexed
        self.produces_examples = stream.produces_examples
        self.sources = stream.sources
        if which_sources is None:
            self.which_sources = self.sources
        else:
            ws = (which_sources,) if isinstance(which_sources, str) else tuple(which_sources)
            missing = [s for s in ws if s not in self.sources]
            if missing:
                raise DataError(f"{type(self).__name__}: no source {missing[0]!r} in the stream; "
                                f"its sources are {list(self.sources)}")
            self.which_sources = ws

    #: the attributes this transformer's items depend on (see ``Stream._settings``)
    SETTINGS: tuple = ()

    def _settings(self) -> dict:
        return {"which_sources": fingerprint(list(self.which_sources)),
                **{a: fingerprint(getattr(self, a)) for a in self.SETTINGS}}

    def transform(self, item: dict, epoch: int, k: int) -> dict:
        out = dict(item)
        for s in self.which_sources:
            out[s] = self.transform_source(s, item[s], epoch, k)
        return out

    def transform_source(self, name: str, value, epoch: int, k: int):
        raise NotImplementedError

    def num_items(self, epoch):
        return self.stream.num_items(epoch)

    def get_item(self, epoch, k):
        return self.transform(self.stream.get_item(epoch, k), epoch, k)

    def _iterate(self):
        for item in self.stream:
            yield self.transform(item, self.epoch, self.position)


class RandomTransformer(Transformer):
    """A transformer that draws random numbers: ``self.rng(epoch, k)`` is its generator for one
    item, keyed by ``(seed, epoch, k)``, so the draws do not depend on which process or in which
    order items are made. The seed is the state."""

    def __init__(self, stream, which_sources=None, seed: int | None = None):
        super().__init__(stream, which_sources)
        self.seed = fresh_seed(seed, f"{type(self).__name__}: seed")

    def rng(self, epoch: int, k: int) -> Generator:
        g = Generator(seed=mix_seed(self.seed, epoch, k))
        # NOTE: over a rank's share of each batch (ShardedScheme, lk.dist), a batch-shaped draw
        # is that share's rows of the whole batch's draw, as dropout's is: N ranks flip and
        # crop as one process does (each rank drew the first rows: all the same)
        g.shard = _shard_rows(self.stream, epoch, k)
        return g

    def _own_state(self):
        return {"type": type(self).__name__, "seed": self.seed}

    def _load_own_state(self, state, where="state"):
        self.seed = state_int(state, "seed", where, *SEED)


def _shard_rows(stream, epoch: int, k: int):
    """``(offset, rows, total)`` of item ``k`` in its global batch when ``stream`` is (through
    stages that keep item k item k: transformers, and indexed ones such as Parallel) a
    DataStream over a batched ShardedScheme, else None. (Through Transformers only, a random
    stage above Parallel drew the first rows on every rank.)"""
    while isinstance(stream, Transformer) or (
            stream.indexed and not isinstance(stream, DataStream) and hasattr(stream, "stream")):
        stream = stream.stream
    scheme = getattr(stream, "scheme", None)
    if not isinstance(stream, DataStream) or not isinstance(scheme, ShardedScheme) or (
            not scheme.batched):
        return None
    return scheme.rows(epoch, k)


def same_record(saved, mine: dict, where: str, field: str, mismatch) -> None:
    """A stage's recorded ``field`` of a state (``saved``; None: not recorded then) against
    ``mine``: ``mismatch(key, saved, mine)`` (values shown short) words the first that differs
    (a pipeline built otherwise); a field that is not an object is damage."""
    if saved is None:
        return
    if not isinstance(saved, dict):
        raise DataError(f"{where}['{field}']: expected an object, got {type(saved).__name__}; "
                        "the state is damaged")
    for key in sorted(set(saved) | set(mine), key=str):
        if saved.get(key) != mine.get(key):
            raise built_otherwise(mismatch(key, reprlib.repr(saved.get(key)),
                                           reprlib.repr(mine.get(key))))


def fingerprint(v) -> str:
    """A setting as short, comparable text: an array by its shape, dtype and a digest of its
    bytes; a function by its module and name; anything else by its repr (cut to 200)."""
    if isinstance(v, np.ndarray):
        digest = hashlib.sha1(np.ascontiguousarray(v).tobytes()).hexdigest()[:16]
        return f"array{v.shape} {v.dtype} {digest}"
    if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
        return str(np.dtype(v))
    if callable(v) and hasattr(v, "__qualname__"):
        return f"{getattr(v, '__module__', '?')}.{v.__qualname__}"
    if isinstance(v, np.generic) and v.dtype.kind in "biuf":
        v = v.item()  # NOTE: by value: ScaleAndShift(np.float64(0.5)) makes 0.5's items
    return repr(v)[:200]


def stack(values: list):
    """Stack examples into a batch; examples of different shapes become an object array."""
    first = np.asarray(values[0])
    if first.dtype != object and all(np.shape(v) == first.shape for v in values):
        return np.stack(values)
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = np.asarray(v)
    return out
