"""Worker processes under a hostile user: Ctrl-C at the worst moments, then the stream used again
(a notebook's interrupted cell run again) gives the items of an uninterrupted run."""

import multiprocessing.context

import numpy as np
import pytest

from . import helpers
from .test_workers import alive


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


@pytest.mark.timeout(30)
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
    calls[0].join(10)
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


@pytest.mark.timeout(30)
@pytest.mark.parametrize("after_bytes", [6, None])
def test_ctrl_c_while_a_result_is_read(after_bytes, reference):
    s = helpers.image_pipeline(workers=2)
    got = [s.get_item(0, 0)]
    _interrupt_once(s._results[1], after_bytes)  # item 1 (it may have arrived already)
    with pytest.raises(KeyboardInterrupt):
        for k in range(1, 4):
            got.append(s.get_item(0, k))
    # before: an UnpicklingError or EOFError for the item after, or a wait forever for it
    with s:
        got += [s.get_item(0, k) for k in range(len(got), s.num_items(0))]
    same_items(got, reference)


@pytest.mark.timeout(30)
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
