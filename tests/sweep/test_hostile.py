"""A careless or hostile user of lk.sweep: wrong values anywhere in a space or a setting are a
SweepError naming the culprit and the fix, raised before the store is written; ASHA never
promotes a trial without a value; resume of a done, unknown or unloadable sweep; what Dask
prints about a failed trial or a closing cluster."""

import logging
import time
import tracemalloc

import numpy as np
import pytest

import labkit as lk
from labkit.sweep import ASHA, SweepError
from labkit.sweep import engine as E
from labkit.sweep import space as S
from labkit.sweep.space import TrialError

from .helpers import make_loop, odd_loop

SPACE = {"lr": [0.01, 0.02], "hidden": 8, "epochs": 1}


@pytest.fixture(scope="module")
def client():
    c, close = E.connect("inprocess", 1)
    yield c
    close()


@pytest.fixture
def store(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as s:
        yield s


def sweep(client, tmp_path, **kw):
    args = {"trials": 1, "search": "grid", "metric": "valid_accuracy", "mode": "max",
            "engine": client, "directory": tmp_path / "runs", **kw}
    return lk.sweep.run(args.pop("make_loop", make_loop), args.pop("space", SPACE), **args)


@pytest.mark.parametrize("space, words", [
    ({"a": [1, 1, 2]}, r"space\['a'\]: 1 is in the list more than once: give each value once"),
    ({"a": [1, 1.0]}, r"1.0 is in the list more than once \(as 1\)"),
    ({"a": {"choice": [{"x": [1]}, {"x": [1]}]}}, "more than once"),
    ({"a": {"b": lk.sweep.uniform(0, 1)}}, r"holds the spec uniform\(0, 1\) inside a dict: a "
                                           "space is flat"),
    ({"a": [lk.sweep.range(1, 3), 4]}, "inside a list: a space is flat"),
    (lambda: {"a": lk.sweep.uniform(0, 10**400)}, "high must be a finite number"),
    (lambda: {"a": lk.sweep.uniform(0, 1, points=True)}, "points must be an integer"),
    ({"a": {"uniform": [0, 1], "points": 1}}, "points must be an integer >= 2"),
])
def test_bad_values_in_a_space_are_named(space, words):
    with pytest.raises(SweepError, match=words):
        S.check(space() if callable(space) else space)


def test_true_and_1_are_two_values_and_lists_of_lists_stay():
    assert S.check({"a": [True, 1, None, 0]})["a"].values == [True, 1, None, 0]
    assert S.check({"a": [[1, 2], [2, 1]]})["a"].size() == 2


def test_huge_spaces_cost_nothing_until_drawn_and_trials_are_bounded():
    # NOTE: "nothing" is measured in memory, not seconds (a loaded machine is slow): a list of
    # even one dimension's 10**9 points would take gigabytes; unmaterialised, the peak is ~1 MB
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        t = time.perf_counter()
        dims = S.check({"n": lk.sweep.range(0, 10**12),
                        "lr": lk.sweep.uniform(0, 1, points=10**9), "k": list(range(1000))})
        assert S.grid_size(dims) == (10**12 + 1) * 10**9 * 1000
        with pytest.raises(SweepError, match=r"more than the 100,000 trials a sweep holds: .*"
                           "trials=N"):
            S.check_search(dims, "grid", None)
        with pytest.raises(SweepError, match=r"give 1..100,000 \(a sweep holds at most"):
            S.check_search(dims, "grid", S.MAX_TRIALS + 1)
        assert S.check_search(dims, "grid", 3) == 3
        assert [S.draw(dims, "grid", i) for i in range(2)] == [{"n": 0, "lr": 0.0, "k": 0},
                                                               {"n": 0, "lr": 0.0, "k": 1}]
        assert 0 <= S.draw(dims, "random", 5)["n"] <= 10**12
        with pytest.raises(SweepError, match="positive integer .*at most 100,000"):
            S.check_search(dims, "random", 10**9)
        elapsed = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if not tracing:
            tracemalloc.stop()
    assert peak < 16 * 2**20, f"{peak} bytes at the peak: the space was materialised"
    # NOTE: about 0.02 s; 30 s only catches a walk over the 10**9 points (or the 10**12)
    assert elapsed < 30


def test_draws_stay_inside_bounds_across_the_whole_float_range():
    dims = S.check({"x": lk.sweep.uniform(-1e308, 1e308, points=3)})
    values = [S.draw(dims, "random", i)["x"] for i in range(50)]
    assert all(np.isfinite(values)) and all(-1e308 <= v <= 1e308 for v in values)
    assert dims["x"].grid() == [-1e308, 0.0, 1e308]


def test_sobol_seeds_shift_the_sequence_and_keep_its_balance():
    """Each seed is a digital shift of the sequence: trial 0 is not the origin (every
    parameter at its lowest), seeds do not share points, and the first 2**k trials of any
    seed still fall one in each interval of 1/2**k in every parameter."""
    dims = S.check({"x": lk.sweep.uniform(0, 1), "y": lk.sweep.uniform(0, 1)})
    pts = {s: np.array([[S.draw(dims, "sobol", i, s)[k] for k in "xy"] for i in range(64)])
           for s in (0, 1, 2**32 - 1)}
    assert not np.any(pts[0][0] == 0.0)
    assert not set(map(tuple, pts[0])) & set(map(tuple, pts[1]))
    for p in pts.values():
        for col in p.T:
            assert sorted(np.floor(col * 64).astype(int)) == list(range(64))
    assert np.array_equal(pts[1], [[S.draw(dims, "sobol", i, 1)[k] for k in "xy"]
                                   for i in range(64)])  # reproducible
    for bad in (-1, 2**32, 1.0, True, np.int64(-1)):
        with pytest.raises(SweepError, match="seed"):
            S.check_seed("sobol", bad, 10)


@pytest.mark.parametrize("text, words", [
    ('{"a": ', "not valid JSON"),
    ('{"a": ' + "[" * 100_000, "nested too deeply"),
])
def test_a_space_in_json_that_does_not_parse_is_a_sweep_error(text, words):
    with pytest.raises(SweepError, match=words):
        lk.sweep.run(make_loop, text, trials=1)


def test_bad_settings_write_nothing(store, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for kw, words in (({"name": object()}, "name must be a string"),
                      ({"directory": 5}, "directory must be a folder's path"),
                      ({"directory": afile / "runs"}, "is not a folder"),
                      ({"search": "sobol", "trials": 2, "seed": 2**32}, "seed must be"),
                      ({"engine": "local", "workers": 10**6}, "give at most"),
                      ({"space": {"lr": [0.1, 0.1]}}, "more than once"),
                      ({"trials": 0}, "a grid of this space has 2 points")):
        with pytest.raises(SweepError, match=words):
            sweep("inprocess", tmp_path, **kw)
    assert lk.sweep.list() == [] and not (tmp_path / "runs").exists()


def test_a_make_loop_that_cannot_be_pickled_is_refused_before_anything_starts(store,
                                                                             tmp_path):
    """Dask pickles make_loop with every trial (the in-process engine too): one that holds a
    lock was Dask's "Could not serialize object of type LLGExpr" at the first trial, and a
    sweep left failed."""
    import threading

    lock = threading.Lock()

    def locked_loop(config):
        with lock:
            return make_loop(config)

    for engine in ("inprocess", "local"):
        with pytest.raises(SweepError, match=r"make_loop cannot be sent to the workers "
                           r"\(TypeError: cannot pickle '_thread.lock' object\).*define those "
                           "inside make_loop"):
            lk.sweep.run(locked_loop, SPACE, 2, metric="valid_accuracy", engine=engine,
                         directory=tmp_path / "runs")
    assert lk.sweep.list() == [] and not (tmp_path / "runs").exists()


def test_asha_never_promotes_a_trial_without_a_value():
    """reduction 2, rung 0: trial 2 (0.5) and three trials without a value (NaN, none). The
    rung's top 2 = trial 2 and trial 0 (the worst, by number): trial 2 goes on, trial 0 does
    not, though it is in the top half."""
    a = ASHA(grace=1, reduction=2)
    t = {0: ("stopped", {0: float("nan")}), 1: ("stopped", {0: None}),
         2: ("stopped", {0: 0.5}), 3: ("stopped", {0: float("inf")})}
    for mode in ("max", "min"):
        assert a.next_promotion(t, mode) == (2, 1)
    t[2] = ("running", {0: 0.5})
    assert a.next_promotion(t, "max") is None and a.next_promotion(t, "min") is None


def test_asha_ties_go_to_the_lower_trial_and_mode_picks_the_end():
    a = ASHA(grace=2, reduction=3)
    t = {4: ("stopped", {0: 0.3}), 1: ("stopped", {0: 0.3}), 2: ("stopped", {0: 0.1})}
    assert a.next_promotion(t, "max") == (1, 1)  # 0.3 twice: trial 1 before trial 4
    assert a.next_promotion(t, "min") == (2, 1)
    t[1] = ("failed", {0: 0.3})  # promoted, then failed on the way to rung 1: not again
    assert a.next_promotion(t, "max") is None


def test_unknown_ids_are_sweep_errors_and_not_found(store):
    for call in (lambda: lk.sweep.resume("nope"), lambda: lk.sweep.get("nope")):
        with pytest.raises(SweepError, match="no sweep 'nope' in") as e:
            call()
        assert isinstance(e.value, lk.runs.RunStoreError) and e.value.reason == "not_found"
    for bad in (None, "", 3):
        with pytest.raises(SweepError, match="a sweep id is a non-empty string"):
            lk.sweep.resume(bad)


def test_resume_of_a_finished_sweep_starts_nothing_and_changes_nothing(client, tmp_path,
                                                                       store, monkeypatch):
    sw = sweep(client, tmp_path, trials=2)
    before = sw.record, sw.table()

    def no_cluster(*args):
        raise AssertionError("a cluster was started for a finished sweep")
    monkeypatch.setattr(E, "connect", no_cluster)
    assert lk.sweep.resume(sw.id, engine="inprocess").table() == before[1]
    assert lk.sweep.get(sw.id).record == before[0]
    # a driver that died right after its last trial: its sweep is marked finished
    store.update_sweep(sw.id, status="running", pid=2**22 + 1, heartbeat=0)
    assert lk.sweep.resume(sw.id, engine="inprocess").status == "finished"
    # every trial failed: it stays failed, with its error (was: finished, error cleared)
    store.update_trials(sw.id, {n: {"status": "failed"} for n in (0, 1)})
    store.update_sweep(sw.id, status="failed", error="TrialError: all failed")
    again = lk.sweep.resume(sw.id, engine="inprocess").record
    assert again["status"] == "failed" and again["error"] == "TrialError: all failed"


def test_resume_when_make_loop_cannot_be_imported_anymore(client, tmp_path, store):
    gone = tmp_path / "gone.py"
    gone.write_text("raise RuntimeError('moved')\n")
    for factory, words in (("no_such_module_q:make_loop", "cannot be imported"),
                           (f"{tmp_path}/missing.py:make_loop", "does not exist"),
                           (f"{gone}:make_loop", "RuntimeError: moved")):
        sw = sweep(client, tmp_path, _factory=factory)
        before = sw.record
        with pytest.raises(SweepError, match=f"make_loop {factory} cannot be loaded.*{words}.*"
                           "pass make_loop=") as e:
            lk.sweep.resume(sw.id, engine=client, trials=2)
        assert isinstance(e.value, lk.errors.TrainingError)  # as lk.resume's for a run
        assert sw.record == before and len(sw.table()) == 1  # nothing written
    grown = lk.sweep.resume(sw.id, make_loop, engine=client, trials=2)
    assert [r["status"] for r in grown.table()] == ["finished", "finished"]


def test_a_make_loop_never_importable_is_needed_only_for_work_left(client, tmp_path, store):
    def local_loop(config):  # NOTE: a nested function: no factory is recorded
        return make_loop(config)

    sw = sweep(client, tmp_path, make_loop=local_loop)
    assert sw.record["factory"] is None
    assert lk.sweep.resume(sw.id, engine=client).status == "finished"
    with pytest.raises(SweepError, match="was not importable .*pass make_loop="):
        lk.sweep.resume(sw.id, engine=client, trials=2)


def test_an_unreachable_scheduler_leaves_no_sweep(store, tmp_path, monkeypatch):
    monkeypatch.setattr(E, "CONNECT_TIMEOUT", 0.5)
    with pytest.raises(SweepError, match="no Dask scheduler answered there"):
        sweep("tcp://127.0.0.1:9", tmp_path)
    assert lk.sweep.list() == []


def test_a_failed_trial_is_one_line_of_labkit_not_daskss_report(client, tmp_path, store,
                                                                caplog):
    sw = sweep(client, tmp_path, make_loop=odd_loop, trials=None,
               space={"kind": ["exit", "ok"], "epochs": 1})
    assert [r["status"] for r in sw.table()] == ["failed", "finished"]
    said = [r for r in caplog.records if r.name == "labkit.sweep"]
    assert [r.getMessage() for r in said] == [
        f"labkit sweep {sw.id}: trial 0 failed: TrialError: trial 0 called sys.exit(3); raise "
        "an exception to fail a trial"]
    assert not [r for r in caplog.records if "Compute Failed" in r.getMessage()]


def _fail():
    raise ValueError("bad trial")


def _sigint():
    import signal

    handler = signal.getsignal(signal.SIGINT)
    return getattr(handler, "name", repr(handler))


def _listening(processes) -> set:
    return {c.laddr for p in processes for c in p.net_connections() if c.status == "LISTEN"}


def test_local_workers_drop_daskss_report_of_a_failed_trial_only(capfd):
    """In a local worker process, Dask's "Compute Failed" (with a traceback) is dropped for a
    sweep's trial, and kept for any other task. Everything listens on 127.0.0.1 only. The
    worker processes ignore SIGINT (a terminal's Ctrl-C made each print pages of tracebacks
    while the driver closed them)."""
    import psutil
    from distributed import wait

    me = psutil.Process()
    before = _listening([me])
    client, close = E.connect("local", 1)
    try:
        futures = [client.submit(_fail, key="labkit-trial-x-0-1", pure=False),
                   client.submit(_fail, key="another-task", pure=False)]
        wait(futures, timeout=30)
        new = _listening([me, *me.children(recursive=True)]) - before
        assert new and {a.ip for a in new} == {"127.0.0.1"}
        # NOTE: Ctrl-C (SIGINT to the terminal's process group) is the driver's to act on
        for nanny in (False, True):
            assert list(client.run(_sigint, nanny=nanny).values()) == ["SIG_IGN"]
        # NOTE: the worker writes its report on its own time: read until it is there
        err, deadline = "", time.monotonic() + 30
        while "another-task" not in err and time.monotonic() < deadline:
            err += capfd.readouterr().err
            time.sleep(0.05)
    finally:
        close()
    err += capfd.readouterr().err
    assert "another-task" in err and "labkit-trial" not in err, err


def test_the_schedulers_report_of_a_trial_that_killed_its_workers_is_dropped_too():
    """A trial that kills every worker it runs on: the scheduler (in the driver's process on
    engine='local') logged "Task ... marked as failed because 2 workers died" at ERROR beside
    labkit's line for it (KilledWorker, with the reason)."""
    E.quiet_trial_failures()
    kept = []
    handler = logging.Handler()
    handler.emit = kept.append
    log = logging.getLogger("distributed.scheduler")
    log.addHandler(handler)
    try:
        for key in ("labkit-trial-s-2-ab12", "another-task"):
            log.error("Task %s marked as failed because %d workers died while trying to run it",
                      key, 2)
    finally:
        log.removeHandler(handler)
    assert [r.args[0] for r in kept] == ["another-task"]


def test_the_inprocess_engine_listens_on_127_0_0_1_only():
    """Its scheduler's and worker's HTTP servers bound 0.0.0.0:8787 (every interface)."""
    import psutil

    before = _listening([psutil.Process()])
    client, close = E.connect("inprocess", 1)
    try:
        new = _listening([psutil.Process()]) - before
        assert new and {a.ip for a in new} == {"127.0.0.1"}
    finally:
        close()


def test_a_closing_cluster_logs_nothing_below_error():
    """The comms of our own cluster closing mid-message log "Batched Comm Closed" with a
    CommClosedError traceback at INFO, even after the cluster has put back the handler's
    level: dropped while it closes, and only then."""
    import io

    heard = io.StringIO()
    handler = logging.StreamHandler(heard)
    dask_log = logging.getLogger("distributed")
    dask_log.addHandler(handler)

    class Cluster:
        def close(self):
            logging.getLogger("distributed.batched").info("Batched Comm Closed")
            logging.getLogger("distributed.core").error("a real error")

    class Client:
        def close(self):
            logging.getLogger("distributed.comm").warning("closing noise")

    try:
        E.closer(Client(), Cluster())()
        logging.getLogger("distributed.batched").error("after")
    finally:
        dask_log.removeHandler(handler)
    assert heard.getvalue().splitlines() == ["a real error", "after"]


def test_asha_with_fewer_trials_than_its_reduction_warns(store, tmp_path):
    with pytest.warns(UserWarning, match=r"promotes none .* at least 3 trials"):
        sw = sweep("inprocess", tmp_path, space={**SPACE, "lr": [0.1, 0.2]}, trials=None,
                   early_stopping=lk.sweep.ASHA(grace=1, reduction=3))
    assert sw.status == "finished"


def test_a_metric_that_is_not_a_number_fails_the_trial_saying_so(store, tmp_path):
    from labkit.training import Extension

    class Odd(Extension):
        priority = -500  # NOTE: after the monitoring's own valid_accuracy

        def after_epoch(self, loop):
            loop.log.report(valid_accuracy="high")

    def string_metric_loop(config):
        loop = make_loop(config)
        loop.add(Odd())
        return loop
    with pytest.raises(TrialError, match=r"metric 'valid_accuracy' of trial 0 is str 'high', "
                                         r"not a number: report it as a float"):
        sweep("inprocess", tmp_path, make_loop=string_metric_loop, metric="valid_accuracy")


def test_numpy_values_in_a_space_are_taken_as_python_values():
    """np.logspace, np.arange, NumPy scalars and bounds: what a researcher writes; each is
    stored and drawn as the Python value JSON keeps."""
    dims = S.check({"lr": list(np.logspace(-4, -1, 4)), "h": np.array([64, 128]),
                    "a": np.int64(3), "f": np.float32(0.5), "ok": np.bool_(True),
                    "u": lk.sweep.uniform(np.float64(0), 1, points=np.int64(3)),
                    "r": lk.sweep.range(1, np.int64(4))})
    assert repr(dims["lr"]) == "[0.0001, 0.001, 0.01, 0.1]" and repr(dims["h"]) == "[64, 128]"
    assert repr(dims["u"]) == "uniform(0.0, 1, points=3)" and repr(dims["r"]) == "range(1, 4)"
    p = S.draw(dims, "grid", 5)
    assert all(type(v) in (int, float, bool) for v in p.values()), p
    assert p["a"] == 3 and type(p["a"]) is int and p["ok"] is True
    assert S.check(S.to_json(dims)).keys() == dims.keys()
    assert lk.sweep.choice(np.arange(3)).values == [0, 1, 2]
    assert S.check_seed("sobol", np.int64(7), 3) == 7 and S.check_search(dims, "random",
                                                                          np.int64(5)) == 5


@pytest.mark.parametrize("space, words", [
    ({"lr": [0.01, 0.02], "pad": "a" * 70_000}, r"space\['pad'\] is 70,0\d\d bytes as JSON"),
    ({"lr": [0.01], "deep": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
     r"space\['deep'\] nests deeper than 32"),
    ({"a": ["x" * 40_000], "b": ["y" * 40_000]}, "the largest values together"),
])
def test_a_value_no_trial_could_store_is_refused_before_the_store(store, tmp_path, space,
                                                                  words):
    """Accepted, the sweep was made and failed at its first trial (every trial pending, and
    a resume failed the same way)."""
    with pytest.raises(SweepError, match=words):
        sweep("inprocess", tmp_path, space=space)
    assert lk.sweep.list() == [] and not (tmp_path / "runs").exists()


def test_numpy_integers_for_the_seed_and_asha_are_plain_ints():
    """They reached the store as NumPy values, refused there with an error that blamed
    labkit's own settings, after the engine had started."""
    a = ASHA(np.int64(1), np.int64(2))
    assert a.to_json() == {"asha": {"grace": 1, "reduction": 2}}
    assert type(a.grace) is int and type(a.reduction) is int
    seed = S.check_seed("random", np.int64(3), 2)
    assert seed == 3 and type(seed) is int


def test_a_numpy_seed_runs(client, store, tmp_path):
    sw = lk.sweep.run(make_loop, {"lr": [0.01], "hidden": 8, "epochs": 1}, engine=client,
                      search="random", trials=1, seed=np.int64(3),
                      early_stopping=ASHA(np.int64(1), np.int64(2)), directory=tmp_path)
    assert sw.status == "finished"
    assert lk.runs.store().get_sweep(sw.id)["settings"]["seed"] == 3


HOLDER = """
import fcntl, sys, time
f = open(sys.argv[1], "a+")
fcntl.flock(f, fcntl.LOCK_EX)
f.seek(0); f.truncate(); f.write("4242"); f.flush()
print("held", flush=True)
time.sleep(120)
"""


def test_a_driver_that_lives_keeps_its_sweep_whatever_its_heartbeat(client, tmp_path, store):
    """A driver suspended past DEAD_AFTER (SIGSTOP, a laptop's sleep) showed dead; a resume
    took the sweep, and the first driver, woken, drove it on beside the second: two trainers
    in each trial's folder. Its process holds the sweep's lock: a resume is refused while it
    lives, and goes on once it is gone."""
    import subprocess
    import sys

    from labkit.sweep import api

    sw = sweep(client, tmp_path, trials=2)
    store.update_trials(sw.id, {1: {"status": "pending"}})
    store.update_sweep(sw.id, status="running", heartbeat=time.time() - 3600)
    assert lk.sweep.get(sw.id).status == "dead"
    path = api.lock_path(store.get_sweep(sw.id))
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(SweepError, match=r"still driven by process 4242 on this machine; "
                                              r"its heartbeat is 3,6\d\d s old"):
            lk.sweep.resume(sw.id, engine=client)
        assert store.get_sweep(sw.id)["heartbeat"] < time.time() - 3000  # NOTE: not taken
    finally:
        p.kill()
        p.wait()
    assert lk.sweep.resume(sw.id, engine=client).status == "finished"
    assert [t["status"] for t in lk.sweep.get(sw.id).table()] == ["finished", "finished"]
