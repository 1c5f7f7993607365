"""``labkit sweep run|ls|show|resume|stop``: in this process, trials on the in-process engine
(one Dask worker thread), the make_loop of tests/sweep/helpers.py imported from its path."""

import json
import threading
from pathlib import Path

import pytest

import labkit as lk
from labkit.cli import main
from labkit.sweep.cli import load_target

from . import helpers

HELPERS = Path(__file__).with_name("helpers.py")
SPACE = json.dumps({"lr": {"loguniform": [1e-3, 1e-1]}, "hidden": [8, 16], "epochs": 1})
RUN = ["sweep", "run", f"{HELPERS}:make_loop", "--space", SPACE, "--metric",
       "valid_accuracy", "--mode", "max", "--engine", "inprocess", "--workers", "1"]


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with lk.runs.use_store(tmp_path / "runs.sqlite") as s:
        yield s


def cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_run_ls_show(store, capsys):
    rc, out, err = cli(capsys, *RUN, "--trials", "3", "--name", "cli\x1b[2J")
    assert rc == 0, err
    sid = lk.sweep.list()[0]["id"]
    assert f"sweep {sid}: 3 trials (cli\\x1b[2J)" in out  # the escape is shown, not obeyed
    assert all(f"trial {n} finished: " in out for n in range(3)) and "best: trial" in out
    rec = store.get_sweep(sid)
    assert rec["factory"] == f"{HELPERS.resolve()}:make_loop"  # what resume imports
    sw = lk.sweep.get(sid)
    assert sw.status == "finished" and len(sw.table()) == 3

    rc, out, _ = cli(capsys, "sweep", "ls")
    line = next(x for x in out.splitlines() if x.startswith(sid))
    assert "finished" in line and " 3/3 " in line and "cli\\x1b[2J" in line
    best = sw.best()
    assert f"valid_accuracy {best['valid_accuracy']:.4g} (trial {best['trial']})" in line

    rc, out, _ = cli(capsys, "sweep", "show", sid)
    lines = out.splitlines()
    assert rc == 0 and lines[1].split() == ["trial", "status", "valid_accuracy", "epoch", "lr",
                                            "hidden", "epochs"]
    shown = [int(x.split()[0]) for x in lines[2:5]]
    assert shown == [r["trial"] for r in sw.table(sort="value")]  # best first
    values = [float(x.split()[2]) for x in lines[2:5]]
    assert values == sorted(values, reverse=True)
    rc, out, _ = cli(capsys, "sweep", "show", sid, "--sort", "trial")
    assert [int(x.split()[0]) for x in out.splitlines()[2:5]] == [0, 1, 2]


_TOLD = threading.Event()  # the driver has told the trials to stop
_BUILT = []


def _later_trials_wait_for_the_stop(config):
    """helpers.make_loop, but a second or later trial (queued on the worker behind the first,
    it starts as the first ends) is built only once the driver has told the trials to stop:
    else it can train to its end while the driver records the first and reads the request.
    Module-level, so the engine pickles it by reference (the same Event)."""
    _BUILT.append(config)
    if len(_BUILT) > 1:
        assert _TOLD.wait(60), "the driver never told the trials to stop"
    return helpers.make_loop(config)


def test_stop_then_resume_from_the_command_line(store, capsys):
    """A sweep stopped after its first trial (the store's stop request, as `labkit sweep stop`
    writes it) is finished by `labkit sweep resume`, which imports make_loop from the path the
    sweep recorded; the first trial is not trained again."""
    _TOLD.clear()
    _BUILT.clear()

    def hook(kind, info):
        if kind == "start":
            sid.append(info["sweep"])
        elif kind == "result":
            lk.sweep.get(sid[0]).stop()
        elif kind == "stop":  # the driver calls it right after telling the trials
            _TOLD.set()
    sid = []
    _, _, factory = load_target(f"{HELPERS}:make_loop")  # what resume imports
    sw = lk.sweep.run(_later_trials_wait_for_the_stop,
                      json.loads(SPACE) | {"lr": lk.sweep.loguniform(1e-3, 1e-1)},
                      3, metric="valid_accuracy", mode="max", engine="inprocess", workers=1,
                      _factory=factory, _hook=hook)
    assert sw.status == "stopped"
    first = [r for r in sw.table() if r["status"] == "finished"]
    assert len(first) == 1
    run0 = first[0]["run_id"]
    ckpts = [c["path"] for c in lk.runs.checkpoints(run0)]

    rc, out, err = cli(capsys, "sweep", "resume", sw.id)
    assert rc == 0, err
    assert f"sweep {sw.id} finished; trials: finished 3" in out
    assert f"trial {first[0]['trial']} finished" not in out  # not rerun
    assert [c["path"] for c in lk.runs.checkpoints(run0)] == ckpts
    assert sw.table()[first[0]["trial"]]["run_id"] == run0


def test_stop_asks_a_running_sweep(store, capsys):
    sid = store.create_sweep("s", None, '{"a": {"value": 1}}', {"metric": "m", "mode": "min"},
                             [{"a": 1}])  # this process is its driver: running
    rc, out, _ = cli(capsys, "sweep", "stop", sid)
    assert rc == 0 and f"asked sweep {sid} to stop" in out
    assert store.get_sweep(sid)["request"] == "stop"
    store.update_sweep(sid, status="finished", request=None)
    rc, out, _ = cli(capsys, "sweep", "stop", sid)
    assert "is finished, not running: nothing to stop" in out
    assert store.get_sweep(sid)["request"] is None


def test_pause_and_resume_ask_a_live_driver(store, capsys):
    sid = store.create_sweep("s", None, '{"a": {"value": 1}}', {"metric": "m", "mode": "min"},
                             [{"a": 1}])  # this process is its driver: running
    rc, out, _ = cli(capsys, "sweep", "pause", sid)
    assert rc == 0 and f"asked sweep {sid} to pause" in out
    assert store.get_sweep(sid)["request"] == "pause"
    store.update_sweep(sid, status="paused", request=None)  # as the driver answers
    rc, out, _ = cli(capsys, "sweep", "pause", sid)
    assert "is paused, not running: nothing to pause" in out
    rc, out, _ = cli(capsys, "sweep", "resume", sid)
    assert rc == 0 and f"asked sweep {sid}'s driver (pid " in out
    assert store.get_sweep(sid)["request"] == "resume"


def test_resume_grows_a_stopped_sweep(store, capsys):
    make_loop, _, factory = load_target(f"{HELPERS}:make_loop")
    sw = lk.sweep.run(make_loop, json.loads(SPACE) | {"lr": lk.sweep.loguniform(1e-3, 1e-1)},
                      1, metric="valid_accuracy", mode="max", engine="inprocess", workers=1,
                      _factory=factory)
    rc, out, err = cli(capsys, "sweep", "resume", sw.id, "--trials", "2")
    assert rc == 0, err
    assert f"sweep {sw.id} finished; trials: finished 2" in out
    rc, out, err = cli(capsys, "sweep", "resume", sw.id, "--trials", "1")
    assert rc == 1 and "trials must be a whole number >= the sweep's 2" in err


@pytest.mark.parametrize("argv, message", [
    (["sweep", "show", "nope"], "no sweep 'nope' in"),
    (["sweep", "resume", "nope"], "no sweep 'nope' in"),
    (["sweep", "run", "missing.py:make_loop"], "no script missing.py"),
    (["sweep", "run", f"{HELPERS}:mkae_loop"], "has no function 'mkae_loop' (it has "),
    (["sweep", "run", "no_such_module_x:f"], "cannot import 'no_such_module_x'"),
    (["sweep", "run", f"{HELPERS}"], "give --space (a JSON file or inline JSON), or define "
                                     "SPACE"),
    (["sweep", "run", f"{HELPERS}", "--space", "{\"lr\": "], "--space is not valid JSON"),
    (["sweep", "run", f"{HELPERS}", "--space", "nofile.json"], "--space nofile.json: No such"),
    (["sweep", "run", f"{HELPERS}", "--space", SPACE, "--asha", "3"], "--asha takes GRACE,"),
    (["sweep", "run", f"{HELPERS}", "--space", SPACE, "--asha", "0,3"], "ASHA: needs grace"),
    (["sweep", "run", f"{HELPERS}", "--space", SPACE, "--search", "grid"],
     "grid search needs a finite set of values"),
    (["sweep", "run", f"{HELPERS}", "--space", SPACE, "--trials", "2", "--engine", "nope"],
     "engine must be 'local', 'inprocess'"),
    (["sweep", "run", ":make_loop"], "':make_loop': give where make_loop is, as "),
    (["sweep", "run", ""], "'': give where make_loop is"),
    (["sweep", "run", "syntax.py"], "importing syntax.py raised SyntaxError: '(' was never "
                                    "closed (syntax.py, line 1)"),
    (["sweep", "run", "raises.py"], "importing raises.py raised RuntimeError: moved (at "),
    (["sweep", "run", "exits.py"], "importing exits.py called sys.exit(2): the script is "
                                   "imported, not run; put its own work under if __name__"),
    (["sweep", "run", f"{HELPERS}", "--space", "binary.json"], "--space binary.json: not a "
                                                                "text file"),
    (["sweep", "run", f"{HELPERS}", "--space", "fifo"], "--space fifo: a FIFO"),
    (["sweep", "run", f"{HELPERS}", "--space", "."], "--space .: a directory"),
    (["sweep", "run", f"{HELPERS}", "--space", "[1]"], "a space in JSON must be an object"),
    (["sweep", "run", f"{HELPERS}", "--space", '{"a": ' + "[" * 100_000],
     "--space is not valid JSON (nested too deeply)"),
    (["sweep", "run", f"{HELPERS}", "--space", '{"a": [1, 1]}', "--search", "grid"],
     "space['a']: 1 is in the list more than once"),
    (["sweep", "run", f"{HELPERS}", "--space", SPACE], "trials must be a positive integer for "
                                                      "--search random: give --trials N"),
    (["sweep", "run", f"{HELPERS}", "--space", SPACE, "--trials", "2", "--workers", "100000"],
     "engine='local' starts one process per worker"),
    (["sweep", "resume", "nope", "--target", "missing.py"], "no sweep 'nope' in"),
])
def test_errors_are_one_line_naming_the_fix(store, capsys, argv, message):
    import os

    Path("syntax.py").write_text("x = (\n")
    Path("raises.py").write_text("raise RuntimeError('moved')\n")
    Path("exits.py").write_text("import sys\nsys.exit(2)\n")
    Path("binary.json").write_bytes(b"\xff\xfe{")
    os.mkfifo("fifo")  # NOTE: opened to check it, it would wait for a writer forever
    rc, out, err = cli(capsys, *argv)
    assert rc == 1 and err.startswith("labkit sweep: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err and len(err) < 1000
    assert lk.sweep.list() == []


def test_resume_takes_another_target_and_says_when_nothing_is_left(store, capsys):
    sw = lk.sweep.run(helpers.make_loop, json.loads(SPACE), 1, metric="valid_accuracy",
                      engine="inprocess", _factory="gone_module_q:make_loop")
    # NOTE: nothing is left to train, but the make_loop it records must still import
    rc, out, err = cli(capsys, "sweep", "resume", sw.id)
    assert rc == 1 and "its make_loop gone_module_q:make_loop cannot be loaded" in err
    assert f"`labkit sweep resume {sw.id} --target path/to/script.py:make_loop`" in err
    rc, out, err = cli(capsys, "sweep", "resume", sw.id, "--target", f"{HELPERS}:make_loop")
    assert rc == 0 and "every trial is done, nothing to resume (--trials N grows it)" in out
    # NOTE: the target given is recorded: the next resume (and the new trials' runs) use it
    _, _, factory = load_target(f"{HELPERS}:make_loop")
    assert lk.runs.store().get_sweep(sw.id)["factory"] == factory
    rc, out, err = cli(capsys, "sweep", "resume", sw.id, "--trials", "2")
    assert rc == 0 and "trial 1 finished" in out and "trial 0 finished" not in out, err
    assert lk.runs.get(lk.sweep.get(sw.id).table()[1]["run_id"])["factory"] == factory


def test_sigterm_interrupts_a_running_sweep_as_ctrl_c_does(tmp_path):
    """`kill PID` of `labkit sweep run`: the sweep and its training trial are interrupted
    (resumable), exit 130 with one line. Before, the driver died at once: the sweep was left
    running (shown dead) and its trial running until a resume."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "LABKIT_HOME": str(tmp_path), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(HELPERS.parents[2])}
    space = json.dumps({"lr": 0.01, "hidden": 8, "epochs": 10_000})
    p = subprocess.Popen([sys.executable, "-c", "import sys; from labkit.cli import main; "
                          "sys.exit(main(sys.argv[1:]))", *RUN[:3], "--space", space,
                          "--trials", "1", "--engine", "inprocess"], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert p.stdout.readline().endswith(": 1 trials (make_loop)\n")
        # NOTE: signalled once its trial trains (the store says so), not after a guessed delay
        deadline = time.monotonic() + 60
        with lk.runs.use_store(tmp_path / "runs.sqlite"):
            while not any(r["counts"].get("running") for r in lk.sweep.list()):
                assert time.monotonic() < deadline and p.poll() is None, "no trial began"
                time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert p.returncode == 130 and err == "labkit sweep: interrupted\n", err
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        (rec,) = lk.sweep.list()
        assert rec["status"] == "interrupted" and "running" not in rec["counts"]
