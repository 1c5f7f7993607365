"""A worker stopped in the middle of sending an item (SIGSTOP, a debugger) blocked the main
process in its read for good: the timeout was checked between reads only. Now it is killed
after ``timeout`` seconds without CPU time, and the error says so. Also: Parallel's arguments
are checked (prefetch=0 and timeout=nan were taken silently), and an exception whose message
cannot be formatted is reported as the worker's error, not as a crash of the worker."""

import os
import signal
import sys
import time

import numpy as np
import pytest

from labkit.data import DataStream, IndexableDataset, Mapping, Parallel
from labkit.errors import DataError, WorkerError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the watch reads a worker's CPU time from /proc")


def large(item):
    """About 40 MB: far more than a pipe holds, so the read waits inside the message."""
    return {**item, "features": np.full(40_000_000, int(item["index"]) % 250, np.uint8)}


class BadMessage(Exception):
    def __str__(self):
        raise RuntimeError("no message")


def bad_message(item):
    if int(item["index"]) == 3:
        raise BadMessage()
    return item


def _stream(fn, **kw):
    ds = IndexableDataset({"index": np.arange(6), "features": np.arange(6.0)})
    return Parallel(Mapping(DataStream(ds, batch_size=None), fn), workers=1, **kw)


def test_a_worker_stopped_while_it_sends_is_killed_after_the_timeout(monkeypatch):
    s = _stream(large, prefetch=1, timeout=3.0)  # NOTE: room for a busy machine's item 0
    try:
        assert int(s.get_item(0, 0)["index"]) == 0
        pid = s._procs[0].pid
        orig = Parallel._receive

        def stop_then_read(self, w, key):  # NOTE: stopped just as its result is read
            os.kill(pid, signal.SIGSTOP)
            return orig(self, w, key)

        monkeypatch.setattr(Parallel, "_receive", stop_then_read)
        t0 = time.monotonic()
        with pytest.raises(WorkerError, match=r"stopped in the middle of sending an item and "
                                              r"used no CPU for 3 s \(timeout=3\).* killed"):
            s.get_item(0, 1)
        assert time.monotonic() - t0 < 30
    finally:
        s.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_watch_kills_a_stopped_process_not_a_working_one():
    """ReadWatch itself: a process that uses CPU while the read waits (a large item being
    sent) is left alone past the timeout; a stopped one is killed."""
    import subprocess

    from labkit._proc import ReadWatch

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    stopped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        # NOTE: windows of 1 s (the busy child needs one clock tick of CPU time in each: on a
        # loaded 2-core machine 0.5 s was within reach of the scheduler's delays)
        watch = ReadWatch(1.0)
        with watch.reading(busy):
            time.sleep(3.0)  # NOTE: three windows of the timeout, each with CPU time used
        assert busy.poll() is None and watch.killed == set()
        with watch.reading(stopped):
            assert stopped.wait(30) == -signal.SIGKILL
        assert watch.killed == {stopped.pid}
        watch.close()
    finally:
        for p in (busy, stopped):
            p.kill()
            p.wait()


@pytest.mark.parametrize("kw,words", [
    ({"prefetch": 0}, "prefetch must be an integer >= 1, got 0"),
    ({"workers": 1.7}, "workers must be an integer >= 0, got 1.7"),
    ({"workers": -1}, "workers must be an integer >= 0"),
    ({"timeout": float("nan")}, "timeout must be a positive number of seconds, got nan"),
    ({"timeout": None}, "timeout must be a positive number of seconds, got None"),
    ({"timeout": -1}, "timeout must be a positive number"),
])
def test_bad_arguments_are_named(kw, words):
    ds = IndexableDataset({"x": np.arange(4)})
    with pytest.raises(DataError, match=words):
        Parallel(DataStream(ds, batch_size=None), **{"workers": 1, **kw})


def test_an_exception_whose_message_fails_is_the_workers_error():
    s = _stream(bad_message)
    try:
        with pytest.raises(WorkerError, match=r"raised while preparing item 3 of epoch 0:\n"
                                              r"BadMessage \(its message could not be "
                                              "formatted\\)"):
            for k in range(6):
                s.get_item(0, k)
    finally:
        s.close()
