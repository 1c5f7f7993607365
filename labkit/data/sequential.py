"""Sequential stages: they consume their upstream in order, and keep in their state what they
need to resume (at most one buffer's worth of upstream state to replay): ``Batch``,
``Unpack``, ``Filter``, ``Bucket``, ``Prefetch``. (Re-exported by ``transformers``.)"""

from __future__ import annotations

import itertools
import queue
import threading

import numpy as np

from ..backend.random import Generator
from ..errors import DataError
from .schemes import COUNT, SEED, config_mismatch, fresh_seed, mix_seed, state_int
from .streams import Stream, fingerprint, stack

__all__ = ["Batch", "Bucket", "Filter", "Prefetch", "Unpack"]


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
        #: the upstream's state before the batch being filled (None between batches): an
        #: error or Ctrl-C while it fills leaves the examples taken to be read again from it
        #: (they were lost, and the state saved then was refused as damaged)
        self._before = None

    def _iterate(self):
        if self._before is not None:  # NOTE: a batch abandoned as it filled: read it again
            self.stream.load_state_dict(self._before)
            self._before = None
        up = iter(self.stream)
        while True:
            self._before = self.stream.state_dict()
            buf = list(itertools.islice(up, self.batch_size))
            self._before = None
            if len(buf) == self.batch_size or (buf and not self.drop_last):
                yield _collate(buf, self.sources)
            if len(buf) < self.batch_size:
                return

    def _upstream_state(self):
        return self._before if self._before is not None else self.stream.state_dict()

    def _open(self):
        return self._before is not None

    def _reset(self):
        self._before = None

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
        self._items = None     # the current buffer's items
        self._resume = (0, 0)  # (buffer index, delivered) to start from after a load
        #: (upstream state before it, its index) of a buffer being filled: an error or Ctrl-C
        #: as it fills leaves it to be read again from there (its items were lost, and the
        #: state saved then was refused as damaged)
        self._filling = None

    def _partial(self):
        c = self._current
        return c is not None and c[2] < c[3]

    def _own_state(self):
        c = self._current
        if self._filling is not None:
            buffer, skip = self._filling[1], 0
        elif c is None:
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
        if self._filling is not None:
            return self._filling[0]
        return self._current[0] if self._partial() else self.stream.state_dict()

    #: upstream items read for each buffer (but the epoch's last); items yielded for each
    #: buffer (but the last) where every buffer yields as many, else None
    _reads, _yields = 1, None

    def _check_upstream(self, epoch, position, where):
        """Where the loaded state resumes against its upstream (just loaded), before anything
        is read: inside a begun buffer (``skip`` of its items delivered, the upstream at the
        buffer's start) or between buffers (``skip`` 0, the upstream after them)."""
        super()._check_upstream(epoch, position, where)
        (buffer, skip), up, name = self._resume, self.stream, type(self).__name__
        reads, out = self._reads, self._yields
        fix = "; the state is damaged or was edited"
        ended = up.epoch != epoch  # NOTE: as the epoch's last buffer was read (Bucket)
        if ended and skip:
            raise DataError(f"{where}['skip'] = {skip}, but {where}['stream'] has ended epoch "
                            f"{epoch}: no buffer is begun to resume inside (skip is 0 after a "
                            f"whole buffer){fix}")
        if not ended and up.position != buffer * reads:
            raise DataError(f"{where}['buffer'] = {buffer}, but {where}['stream'] is at position "
                            f"{up.position}: a {name} reads {reads} upstream items a buffer, so "
                            f"buffer {buffer} begins at position {buffer * reads}{fix}")
        if out is not None:
            full = buffer * out + skip
            ok = position == full if not ended else \
                position <= full and (position > full - out or buffer == 0)
            at = full if not ended else f"{max(full - out + 1, 0)} to {full} (the last read)"
            want = (f"a {name} yields {out} items a buffer (the epoch's last fewer), so the "
                    f"position is {at}")
        else:
            ok = position >= skip and (buffer > 0 or position == skip)
            want = (f"the position counts the items of the buffers before and the {skip} of "
                    f"this one, so it is {'at least' if buffer else 'exactly'} {skip}")
        if not ok:
            raise DataError(f"{where}['position'] = {position}, with ['buffer'] = {buffer} and "
                            f"['skip'] = {skip}: {want}{fix}")
        if skip:
            size = self._buffer_size(buffer)
            if size is None or skip >= size:
                has = "no items left" if size is None else f"{size} items"
                raise DataError(f"{where}['skip'] = {skip}, but buffer {buffer} has {has} (a "
                                "state resumes inside a buffer after 1 to all but one of its "
                                f"items){fix}")

    def _buffer_size(self, index):
        """The number of items of the upstream's next buffer (None: none is left), read and
        then put back: the upstream's state is left as it was."""
        saved = self.stream.state_dict()
        up = iter(self.stream)
        try:
            items = self._fill(up, index)
        finally:
            up.close()  # NOTE: first: a Prefetch upstream rewinds itself when closed
            self.stream.load_state_dict(saved)
        return None if items is None else len(items)

    def _reset(self):
        self._current = self._items = self._filling = None

    def _new_epoch(self):
        self._current = self._items = self._filling = None
        self._resume = (0, 0)

    def _config(self):
        return {}

    def _open(self):
        return self._current is not None or self._filling is not None

    def _iterate(self):
        if self._filling is not None:  # NOTE: a buffer abandoned as it filled: read it again
            before, index = self._filling
            self.stream.load_state_dict(before)
            self._current = self._items = self._filling = None
            self._resume = (index, 0)
        c, items = self._current, self._items
        if c is None:  # NOTE: the first read of this epoch, or the first after a load
            index, skip = self._resume
            self._resume = (0, 0)
        else:  # NOTE: a read abandoned at c (a stop, run(max_iterations=k)): carry on from it
            before, index, delivered, size = c
            for t in range(delivered, size):
                self._current = (before, index, t + 1, size)
                yield items[t]
            index, skip = index + 1, 0
            if self.stream.epoch > self.epoch:  # NOTE: that was the epoch's last buffer
                self._current = self._items = None
                return
        up = iter(self.stream)
        while True:
            before = self.stream.state_dict()
            self._filling = (before, index)
            items = self._fill(up, index)
            self._filling = None
            if items is None:
                break
            if skip > len(items):
                raise DataError(f"{type(self).__name__}: the state resumes after item {skip} of "
                                f"a buffer of {len(items)}; the state is damaged or from another "
                                "pipeline")
            self._items = items
            for t in range(skip, len(items)):
                self._current = (before, index, t + 1, len(items))
                yield items[t]
            skip = 0
            index += 1
        self._current = self._items = None


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
        for what, v in (("batch_size", batch_size), ("pool", pool)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise DataError(f"Bucket: {what} must be an integer >= 1, got {v!r:.40}")
        self.source, self.batch_size, self.pool = source, int(batch_size), int(pool)
        self.seed = fresh_seed(seed, f"{type(self).__name__}: seed")
        self.produces_examples = False

    def _settings(self):
        # NOTE: a state of a Bucket by another source went on with other batches
        return {"source": self.source}

    def _config(self):
        return {"seed": self.seed, "batch_size": self.batch_size, "pool": self.pool}

    @property
    def _reads(self):
        return self.batch_size * self.pool

    @property
    def _yields(self):
        return self.pool

    def _load_own_state(self, state, where="state"):
        seed = state_int(state, "seed", where, *SEED)
        super()._load_own_state(state, where)
        self.seed = seed

    def _fill(self, up, index):
        pool = list(itertools.islice(up, self.batch_size * self.pool))
        if not pool:
            return None
        try:
            lengths = [len(ex[self.source]) for ex in pool]
        except TypeError:
            raise DataError(f"Bucket: source {self.source!r} holds values without a length "
                            "(scalars); bucket by a source of sequences") from None
        order = np.argsort(lengths, kind="stable")
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

    def _settings(self):
        return {"predicate": fingerprint(self.predicate)}

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
        self._live = None  # (stop, thread, queue) of the iteration reading ahead now

    def _own_state(self):
        return {"size": self.size}

    def _upstream_state(self):
        return self._delivered if self._running else self.stream.state_dict()

    def _halt(self) -> None:
        """Stop the iteration reading ahead, if one is open (a state is loaded, or the stream
        is iterated again): its thread ends before anything else reads the upstream, and it
        yields no more (loaded meanwhile, its rewind at its end undid the load, or its thread
        read the upstream as the load wrote it)."""
        live, self._live = self._live, None
        if live is None:
            return
        stop, thread, q = live
        stop.set()
        thread.join()
        self._running = False
        while True:
            try:
                q.get_nowait()
            except queue.Empty:
                break
        q.put_nowait((DataError("Prefetch: this iteration was closed when a state was loaded "
                                "into the stream, or it was iterated again; read it with one "
                                "iterator at a time"), None))

    def _load_upstream_state(self, state, where="state"):
        self._halt()
        super()._load_upstream_state(state, where)

    def _iterate(self):
        if self._live is not None:  # NOTE: an earlier iteration still open: rewound, closed
            delivered = self._delivered
            self._halt()
            self.stream.load_state_dict(delivered)
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
        live = self._live = (stop, thread, q)
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
            if self._live is live:  # NOTE: else halted already (a load, a new iteration)
                self._live = None
                stop.set()
                thread.join()
                self._running = False
                if not finished:
                    self.stream.load_state_dict(self._delivered)
