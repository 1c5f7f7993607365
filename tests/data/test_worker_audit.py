"""Worker processes under a hostile user: Ctrl-C at the worst moments, then the stream used again
(a notebook's interrupted cell run again) gives the items of an uninterrupted run."""

import multiprocessing.context
import os
import signal
import threading
import time

import numpy as np
import pytest

from labkit.data import DataStream, Mapping, Parallel
from labkit.data.workers import _BUSY, _IDLE, _SLOTS
from labkit.errors import DataError, WorkerError

from . import helpers
from .test_workers import alive

# NOTE: the timeouts here (marks, deadlines, joins) only bound waits on worker processes, each
# a fresh interpreter (spawn) that takes seconds to start on a loaded machine: generous bounds


def items_of(stream, epoch=0):
    return [stream.get_item(epoch, k) for k in range(stream.num_items(epoch))]


def same_items(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert list(a) == list(b)
        for k in a:
            assert np.array_equal(a[k], b[k]), k


@pytest.fixture(scope="module")
def reference():
    s = helpers.image_pipeline(workers=0)
    return items_of(s)


@pytest.mark.timeout(120)
def test_ctrl_c_while_workers_start_leaves_no_half_started_stream(monkeypatch, reference):
    s = helpers.image_pipeline(workers=2)
    real, calls = multiprocessing.context.SpawnProcess.start, []

    def start(self):
        calls.append(self)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the first worker is running, the second is not
        return real(self)
    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", start)
    with pytest.raises(KeyboardInterrupt):
        s.get_item(0, 0)
    assert s._procs == [] and s._tasks == [] and s._results == []
    calls[0].join(60)
    assert not alive(calls[0].pid)  # it was an IndexError, and the worker left running
    monkeypatch.undo()
    with s:
        same_items(items_of(s), reference)


def _interrupt_once(conn, after_bytes):
    """Make ``conn`` read ``after_bytes`` of the next result (None: all of it), then raise
    KeyboardInterrupt, as Ctrl-C landing there would."""
    real = conn._recv

    def recv(size, *a):
        del conn._recv
        if after_bytes is None:
            conn._recv_bytes()  # the whole result, lost as an interrupt before its bookkeeping
        else:
            real(after_bytes)   # the length and part of the pickle: the pipe is in its middle
        raise KeyboardInterrupt
    conn._recv = recv


@pytest.mark.timeout(120)
@pytest.mark.parametrize("after_bytes", [6, None])
def test_ctrl_c_while_a_result_is_read(after_bytes, reference):
    s = helpers.image_pipeline(workers=2)
    got = [s.get_item(0, 0)]
    _interrupt_once(s._results[1], after_bytes)  # the next result read from worker 1
    with pytest.raises(KeyboardInterrupt):
        for k in range(1, s.num_items(0)):
            got.append(s.get_item(0, k))
    # before: an UnpicklingError or EOFError for the item after, or a wait forever for it
    with s:
        got += [s.get_item(0, k) for k in range(len(got), s.num_items(0))]
    same_items(got, reference)


@pytest.mark.timeout(120)
def test_ctrl_c_while_loading_a_state_leaves_no_worker_with_another_state(reference):
    s = helpers.image_pipeline(workers=2)
    other = helpers.image_pipeline(workers=0, seed=8)
    s.get_item(0, 0)
    state = s.state_dict()
    real, sends = s._send, []

    def send(w, message, key):
        if message[0] == "state":
            sends.append(w)
            if len(sends) == 4:  # the last send of the rollback
                raise KeyboardInterrupt
            real(w, message, key)
            if len(sends) == 2:  # sent, then Ctrl-C: the rollback begins
                raise KeyboardInterrupt
        else:
            real(w, message, key)
    s._send = send
    with pytest.raises(KeyboardInterrupt):
        s.load_state_dict(other.state_dict())
    del s._send
    assert s.state_dict() == state
    # before: worker 1 kept seed 8's stages and prepared the odd items from them
    with s:
        same_items(items_of(s), reference)


# ---- one stream, two threads (a notebook's training thread, and the notebook itself) --------
@pytest.fixture
def quick_shutdown(monkeypatch):
    """A worker stuck in its item is terminated 0.2 s into a shutdown, not 2 s."""
    from labkit.data import workers

    monkeypatch.setattr(workers, "SHUTDOWN_GRACE", 0.2)


def _blocked_on_item_5():
    """A stream whose reader thread waits for item 5, which its worker never finishes."""
    s = Parallel(Mapping(DataStream(helpers.images(8), batch_size=None), helpers.hang_on_item_5),
                 workers=2)
    s.get_item(0, 0)
    errors = []

    def read():
        try:
            s.get_item(0, 5)
        except Exception as e:  # noqa: BLE001 - checked by the test
            errors.append(e)
    reader = threading.Thread(target=read, name="trainer", daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while tuple(s._progress[_SLOTS + 3:_SLOTS + 5]) != (5, _BUSY):  # worker 1 is inside item 5
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return s, reader, errors


@pytest.mark.timeout(120)
def test_close_from_another_thread_stops_the_reader_with_a_clear_error(quick_shutdown):
    s, reader, errors = _blocked_on_item_5()
    pids = [p.pid for p in s._procs]
    s.close()
    reader.join(60)
    assert not reader.is_alive()
    # before: IndexError: list index out of range, from the reader's next look at the pipes
    assert len(errors) == 1 and isinstance(errors[0], DataError), errors
    assert "thread 'trainer' was waiting for item 5 of epoch 0 when another thread closed" \
        in str(errors[0])
    assert not any(alive(p) for p in pids)


@pytest.mark.timeout(120)
def test_a_second_thread_reading_or_loading_a_state_is_refused(quick_shutdown):
    s, reader, errors = _blocked_on_item_5()
    state = s.state_dict()
    # before: both threads read the same pipes (a WorkerError blaming a healthy worker, an
    # IndexError, or a wait forever once the other thread cleared the items in flight)
    with pytest.raises(DataError, match=r"cannot read this stream in thread 'MainThread' while "
                                        r"thread 'trainer' reads it"):
        s.get_item(0, 1)
    with pytest.raises(DataError, match=r"cannot load a state into this stream in thread "
                                        r"'MainThread' while thread 'trainer' reads it"):
        s.load_state_dict(state)
    assert s.state_dict() == state
    s.close()
    reader.join(60)
    assert not reader.is_alive() and len(errors) == 1


def test_parallel_inside_parallel_is_refused_at_once():
    inner = Parallel(DataStream(helpers.images(8), batch_size=None), workers=2)
    # before: each worker raised "daemonic processes are not allowed to have children" at the
    # first item, wrapped in a WorkerError
    with pytest.raises(DataError, match=r"already has Parallel\(DataStream.*workers=2\) in it, "
                                        r"and worker processes cannot start their own; keep one"):
        Parallel(Mapping(inner, helpers.square_features), workers=2)
    Parallel(Mapping(inner, helpers.square_features), workers=0)  # in this process: fine
    inner = Parallel(DataStream(helpers.images(8), batch_size=None), workers=0)
    with Parallel(inner, workers=2) as s:  # its lock stays behind: a worker gets its own
        assert int(s.get_item(0, 3)["index"]) == 3


@pytest.mark.timeout(120)
def test_a_stopped_idle_worker_times_out_naming_the_item_it_holds_up():
    s = Parallel(Mapping(DataStream(helpers.images(8), batch_size=None),
                         helpers.square_features), workers=2)
    s.get_item(0, 0)
    deadline = time.monotonic() + 60
    while tuple(s._progress[_SLOTS:_SLOTS + 5:4]) != (2, _IDLE):  # worker 1 did items 1 and 3
        assert time.monotonic() < deadline
        time.sleep(0.01)
    pid = s._procs[1].pid
    os.kill(pid, signal.SIGSTOP)

    def resume_once_forgotten():  # so that close() need not wait for it to be killed
        while s._procs:
            time.sleep(0.01)
        os.kill(pid, signal.SIGCONT)
    threading.Thread(target=resume_once_forgotten, daemon=True).start()
    s.load_state_dict(s.state_dict())  # what it sent before it stopped is of no use now
    s.timeout = 1.0
    # before: waited forever (a worker was timed only while busy with an item)
    with pytest.raises(WorkerError, match=r"data worker 1 \(pid \d+\) has been idle 1 s "
                                          r"\(timeout=1\) while item 1 of epoch 0 waits on it; "
                                          r"it is stopped \(SIGSTOP"):
        s.get_item(0, 1)
    assert s._procs == []
