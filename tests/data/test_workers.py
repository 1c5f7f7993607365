"""Worker processes: errors that name the worker, clear refusals, clean shutdown, no orphans."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from labkit.data import Batch, DataStream, Mapping, Parallel
from labkit.errors import DataError, WorkerError

from . import helpers

ROOT = Path(__file__).resolve().parents[2]


def stream(fn, workers=2, **kw):
    return Parallel(Mapping(DataStream(helpers.images(), batch_size=None), fn), workers=workers,
                    **kw)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_worker_exception_names_worker_item_and_traceback():
    s = stream(helpers.fail_on_item_5)
    with pytest.raises(WorkerError, match=r"data worker 1 \(pid \d+\) raised while preparing "
                                          r"item 5 of epoch 0:\nValueError: bad example 5") as e:
        list(s)
    assert "fail_on_item_5" in str(e.value)  # the worker's traceback
    assert s._procs == []


@pytest.mark.timeout(60)
def test_dead_worker_is_an_error_not_a_hang():
    s = stream(helpers.die_on_item_5)
    with pytest.raises(WorkerError, match=r"data worker 1 \(pid \d+\) exited with code 3"):
        list(s)


@pytest.mark.timeout(60)
def test_dead_worker_is_reported_with_the_item_it_was_preparing():
    s = stream(helpers.die_on_item_5_while_4_blocks)  # worker 0 never returns item 4
    with pytest.raises(WorkerError, match=r"data worker 1 \(pid \d+\) exited with code 3 while "
                                          r"preparing item 5 of epoch 0; the main process was "
                                          r"waiting for item 4 of epoch 0"):
        s.get_item(0, 4)  # asks for items 4..7: worker 1 gets 5 and 7
    assert s._procs == []


@pytest.mark.timeout(60)
def test_unsendable_result_is_reported_at_once():
    s = stream(helpers.unsendable_on_item_5)  # the default timeout is 120 s
    with pytest.raises(WorkerError, match=r"(?s)data worker 1 \(pid \d+\) prepared item 5 of "
                                          r"epoch 0 but could not send it.*TypeError: cannot "
                                          r"pickle '_thread.lock' object"):
        list(s)
    assert s._procs == []


@pytest.mark.timeout(60)
def test_a_result_the_main_process_cannot_read_is_named_in_its_turn():
    s = stream(helpers.unreadable_on_item_5)
    got = []
    # before: "sent a result this process cannot read", with no item number, and items 0-4
    # lost when it came first
    with pytest.raises(WorkerError, match=r"data worker 1 \(pid \d+\) sent item 5 of epoch 0, "
                                          r"which this process cannot read back \(ImportError: "
                                          r"only the worker has this class\)"):
        for item in s:
            got.append(int(np.asarray(item["index"]).reshape(-1)[0]))
    assert got == [0, 1, 2, 3, 4] and s._procs == []


def test_hung_worker_times_out_with_its_name(monkeypatch):
    # NOTE: the timeout counts from when the worker starts the item (not from when it was asked
    # for, which included the workers' start-up). It is set to 3 s once items 0-4 have come,
    # and item 5 is the last: no other item is in preparation then, so only item 5 can exceed
    # it (with 3 s throughout, a machine that stalls a worker 3 s on an item of a few
    # milliseconds would name that item)
    from labkit.data import workers

    monkeypatch.setattr(workers, "SHUTDOWN_GRACE", 0.2)  # NOTE: the hung one is terminated
    s = Parallel(Mapping(DataStream(helpers.images(6), batch_size=None), helpers.hang_on_item_5),
                 workers=2)
    items = iter(s)
    assert [int(next(items)["index"]) for _ in range(5)] == [0, 1, 2, 3, 4]
    s.timeout = 3.0
    with pytest.raises(WorkerError, match=r"data worker 1 .* has not returned item 5 of epoch 0 "
                                          r"after 3 s"):
        next(items)
    assert s._procs == []


def test_unsendable_function_gets_a_clear_message():
    with pytest.raises(DataError, match=r"Mapping.fn = .*lambda.* cannot be sent to a worker "
                                        r"process.*module level"):
        stream(lambda item: item)
    stream(lambda item: item, workers=0)  # fine in process


def test_function_from_a_notebook_is_refused(monkeypatch):
    import types

    fake_main = types.ModuleType("__main__")  # like a notebook kernel: no __file__
    monkeypatch.setitem(sys.modules, "__main__", fake_main)

    def from_notebook(item):
        return item
    from_notebook.__module__ = "__main__"
    fake_main.from_notebook = from_notebook
    with pytest.raises(DataError, match="defined in the notebook.*Move it into a .py file"):
        stream(from_notebook)


def test_sequential_stage_under_parallel_is_refused():
    s = Batch(DataStream(helpers.images(), batch_size=None), 4)
    with pytest.raises(DataError, match=r"Batch is a sequential stage.*Batch\(Parallel\(...\)\)"):
        Parallel(s, workers=2)


def test_close_leaves_no_process_and_workers_use_one_blas_thread():
    s = stream(helpers.square_features)
    next(iter(s))
    pids = [p.pid for p in s._procs]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    env = open(f"/proc/{pids[0]}/environ", "rb").read().split(b"\0")
    assert b"OMP_NUM_THREADS=1" in env
    s.close()
    assert not any(alive(p) for p in pids)


def _child(tmp_path, body):
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from tests.data import helpers
        from tests.data.test_workers import stream
        if __name__ == "__main__":
            s = stream(helpers.square_features)
            it = iter(s)
            next(it)
            print(" ".join(str(p.pid) for p in s._procs), flush=True)
            {body}
    """))
    p = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    pids = [int(x) for x in p.stdout.readline().split()]
    assert len(pids) == 2, p.stderr.read()
    return p, pids


def _gone(pids, within=10.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_no_orphans_when_the_main_process_is_killed(tmp_path):
    p, pids = _child(tmp_path, "time.sleep(60)")
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    assert _gone(pids), "workers outlived a SIGKILLed main process"


def test_ctrl_c_stops_cleanly(tmp_path):
    p, pids = _child(tmp_path, textwrap.indent(textwrap.dedent("""
        try:
            print("iterating", flush=True)
            while True:
                for item in it:
                    pass
                it = iter(s)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            raise SystemExit(0)
    """), " " * 12).lstrip())
    assert p.stdout.readline().strip() == "iterating"  # the child is inside the loop
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    assert "interrupted" in out
    assert "Traceback" not in err  # workers ignore Ctrl-C: no traceback spam from them
    assert _gone(pids)


def descendants(pid):
    """Every process below ``pid`` (Linux /proc), found while ``pid`` is alive."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _describe(pids):
    out = []
    for p in pids:
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode()
            out.append(f"{p}: {cmd[:120]}")
        except FileNotFoundError:
            pass
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("block, prctl", [
    ("block_on_item_3", True),
    ("block_on_item_3_holding_the_gil", True),  # only the kernel's signal can end this worker
    ("block_on_item_3", False),                 # the fallback: the worker's pipe-watching thread
])
def test_no_orphans_when_the_trainer_is_killed_mid_item(tmp_path, block, prctl):
    script = tmp_path / "trainer.py"
    script.write_text(textwrap.dedent(f"""
        from labkit.data import DataStream, Mapping, Parallel, workers
        from tests.data import helpers
        if __name__ == "__main__":
            workers._PDEATHSIG = {prctl}
            s = Parallel(Mapping(DataStream(helpers.images(), batch_size=None),
                                 helpers.{block}), workers=2)
            for item in s:
                pass
    """))
    p = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        line = p.stdout.readline()  # a worker is inside the transformer, blocked for good
        assert line.startswith("blocking "), p.stderr.read()
        blocked = int(line.split()[1])
        family = descendants(p.pid)
        assert blocked in family and len(family) >= 3, _describe(family)  # 2 workers + tracker
    finally:
        p.kill()
        p.wait(30)
    assert _gone(family, within=60), f"outlived the trainer: {_describe(family)}"


@pytest.mark.timeout(120)
def test_workers_started_from_a_thread_outlive_the_thread():
    """The parent-death signal follows the thread that started a worker: workers started from
    a thread that ends (a notebook's training thread) must keep working."""
    s = stream(helpers.square_features)
    native = []

    def first():
        native.append(threading.get_native_id())
        s.get_item(0, 0)
    t = threading.Thread(target=first)
    t.start()
    t.join()
    if sys.platform.startswith("linux"):  # until the thread is gone from the kernel too
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/self/task/{native[0]}") and time.monotonic() < deadline:
            time.sleep(0.01)
    pids = [p.pid for p in s._procs]
    items = list(s)
    assert len(items) == 60 and all(alive(p) for p in pids)
    s.close()


def test_same_items_as_in_process():
    a = list(stream(helpers.square_features, workers=0))
    with stream(helpers.square_features, workers=3, prefetch=2) as s:
        b = list(s)
    assert len(a) == len(b) == 60
    for x, y in zip(a, b):
        assert np.array_equal(x["features"], y["features"])
