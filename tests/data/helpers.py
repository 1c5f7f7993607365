"""Functions the data tests send to worker processes (they must be importable there)."""

import ctypes
import os
import threading
import time

import numpy as np

from labkit.data import (
    Batch,
    Bucket,
    Cast,
    DataStream,
    Filter,
    Flatten,
    IndexableDataset,
    Mapping,
    NGrams,
    Normalize,
    OneHot,
    Padding,
    Parallel,
    Prefetch,
    RandomCrop,
    RandomFlip,
    ScaleAndShift,
    SequentialExampleScheme,
    SequentialScheme,
    ShardedScheme,
    ShuffledScheme,
    SortByLength,
    Unpack,
)


def square_features(item):
    return {**item, "features": item["features"] ** 2}


def fail_on_item_5(item):
    if 5 in np.atleast_1d(item["index"]):
        raise ValueError("bad example 5")
    return item


def die_on_item_5(item):
    if 5 in np.atleast_1d(item["index"]):
        os._exit(3)
    return item


def hang_on_item_5(item):
    if 5 in np.atleast_1d(item["index"]):
        time.sleep(60)
    return item


def die_on_item_5_while_4_blocks(item):
    """Worker 1 dies preparing item 5 while the main process waits for item 4 (worker 0's)."""
    i = int(np.asarray(item["index"]).reshape(-1)[0])
    if i == 4:
        time.sleep(3600)  # until the test closes the stream
    if i == 5:
        os._exit(3)
    return item


def unsendable_on_item_5(item):
    if 5 in np.atleast_1d(item["index"]):
        return {**item, "lock": threading.Lock()}
    return item


def _refuse_to_load():
    raise ImportError("only the worker has this class")


class _WorkerOnly:
    """Pickles in a worker; unpickling it raises (as a class the main process cannot import)."""

    def __reduce__(self):
        return _refuse_to_load, ()


def unreadable_on_item_5(item):
    if 5 in np.atleast_1d(item["index"]):
        return {**item, "odd": _WorkerOnly()}
    return item


def _announce_block(item):
    if 3 not in np.atleast_1d(item["index"]):
        return False
    print(f"blocking {os.getpid()}", flush=True)  # the worker's stdout is the trainer's
    return True


def block_on_item_3(item):
    """Blocks forever in a call that releases the GIL."""
    if _announce_block(item):
        while True:
            time.sleep(3600)
    return item


def block_on_item_3_holding_the_gil(item):
    """Blocks forever in C code that keeps the GIL: no other thread of the worker can run."""
    if _announce_block(item):
        while True:
            ctypes.PyDLL(None).sleep(3600)
    return item


def keep_even(item):
    return int(np.asarray(item["index"]).reshape(-1)[0]) % 2 == 0


def images(n=60, seed=0):
    rng = np.random.default_rng(seed)
    return IndexableDataset({
        "features": rng.integers(0, 255, (n, 1, 10, 12)).astype(np.uint8),
        "targets": rng.integers(0, 10, n),
        "index": np.arange(n),
    })


def sentences(n=50, seed=0):
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, 20, rng.integers(1, 15)).astype(np.int32) for _ in range(n)]
    return IndexableDataset({"text": seqs, "index": np.arange(n)})


def image_pipeline(workers=0, seed=7):
    s = DataStream(images(), ShuffledScheme(60, 8, seed=seed))
    s = ScaleAndShift(s, 1 / 255, which_sources="features")
    s = RandomCrop(s, (8, 8), seed=seed + 1)
    s = RandomFlip(s, seed=seed + 2)
    s = Mapping(s, square_features)
    s = OneHot(s, 10)
    return Parallel(s, workers=workers)


def example_pipeline(workers=0, seed=7):
    """Examples shuffled in workers, then sequential stages in the main process."""
    s = DataStream(images(), batch_size=7, shuffle=True, seed=seed)
    s = Normalize(RandomFlip(s, seed=seed), 100.0, 50.0, which_sources="features")
    s = Unpack(Parallel(s, workers=workers))
    s = Filter(s, keep_even)
    return Prefetch(Batch(s, 5), size=3)


def text_pipeline(workers=0, seed=7):
    s = DataStream(sentences(), batch_size=None, shuffle=True, seed=seed)
    s = Bucket(Parallel(s, workers=workers), "text", batch_size=4, pool=3, seed=seed)
    return Padding(SortByLength(s, "text"), which_sources="text")


def ngram_pipeline(workers=0, seed=7):
    s = DataStream(sentences(), batch_size=6, shuffle=True, seed=seed)
    return Parallel(NGrams(s, 3, source="text"), workers=workers)


def sharded_pipeline(workers=0, seed=7, index=1, count=3):
    s = DataStream(images(), ShardedScheme(ShuffledScheme(60, 9, seed=seed), index, count))
    return Parallel(RandomFlip(s, seed=seed), workers=workers)


def plain_pipeline(workers=0, seed=7):
    """Sequential schemes, Cast and Flatten, batches and examples."""
    s = DataStream(images(), SequentialScheme(60, 11))
    s = Flatten(Cast(Parallel(s, workers=workers), np.float64, "features"), "features")
    ex = Batch(DataStream(images(seed=1), SequentialExampleScheme(60)), 11)
    return _Zip(s, ex)


class _Zip:
    """Two streams side by side (to resume two pipelines at once in one test)."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    @property
    def epoch(self):
        return self.a.epoch

    def __iter__(self):
        for x, y in zip(self.a, self.b):
            yield {**x, **{f"ex_{k}": v for k, v in y.items()}}
        for _ in self.b:  # both finish the epoch
            pass

    def state_dict(self):
        return {"a": self.a.state_dict(), "b": self.b.state_dict()}

    def load_state_dict(self, state):
        self.a.load_state_dict(state["a"])
        self.b.load_state_dict(state["b"])

    def close(self):
        self.a.close()
        self.b.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


PIPELINES = {"plain": plain_pipeline, "image": image_pipeline, "examples": example_pipeline,
             "text": text_pipeline, "ngrams": ngram_pipeline, "sharded": sharded_pipeline}
