"""The ``labkit`` command as a confused or hostile user meets it (in-process, fast): a reader
that leaves does not fail the work, a file is not replaced unasked, an empty or wrong-kind id
gets a line that says what to give, an interrupted resume does not exit 0."""

import io
import signal
import threading

import pytest

import labkit as lk
from labkit import cli
from labkit import training as T

from .training.helpers import make_loop


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


class Closed(io.StringIO):
    """A pipe whose reader leaves after the first line (``labkit ... | head -1``)."""

    def write(self, text):
        if "\n" in self.getvalue():
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)

    def fileno(self):
        raise io.UnsupportedOperation("no fd")


def test_a_reader_leaving_does_not_fail_the_run(home, monkeypatch):
    monkeypatch.setattr("sys.stdout", Closed())
    assert cli.main(["demo", "--epochs", "1", "--device", "cpu"]) == 0
    (run,) = lk.runs.list()
    assert run["status"] == "finished", run["error"]


def test_convert_does_not_replace_a_file_unasked(home, tmp_path, capsys):
    keep = tmp_path / "notes.txt"
    keep.write_text("mine")
    assert cli.main(["convert", "digits", "-o", str(keep)]) == 1
    assert keep.read_text() == "mine"
    err = capsys.readouterr().err
    assert "not a labkit dataset" in err and "--force" in err and err.count("\n") == 1
    assert cli.main(["convert", "digits", "-o", str(tmp_path)]) == 1  # a folder: one line
    assert "is a folder" in capsys.readouterr().err
    out = tmp_path / "d.h5"
    assert cli.main(["convert", "digits", "-o", str(out)]) == 0
    assert cli.main(["convert", "digits", "-o", str(out)]) == 0  # a dataset: converted again
    assert cli.main(["convert", "digits", "-o", str(keep), "--force"]) == 0


def test_convert_to_a_fifo_or_a_device_is_refused_at_once(home, tmp_path, capsys):
    """Opened to see whether it was a dataset, a FIFO waited for a writer for ever; with
    --force it (or a device) would have been renamed over."""
    import os
    import stat

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for force in ([], ["--force"]):
        assert cli.main(["convert", "digits", "-o", str(fifo), *force]) == 1
        assert "is a FIFO, not a regular file" in capsys.readouterr().err
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert cli.main(["convert", "digits", "-o", "/dev/null", "--force"]) == 1
    assert "/dev/null is a device, not a regular file" in capsys.readouterr().err
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_an_unusable_home_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("LABKIT_HOME", str(tmp_path / "file"))
    assert cli.main(["convert", "digits"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("labkit convert: ") and "Not a directory" in err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("args", [["resume", ""], ["runs", "show", "  "], ["runs", "rm", ""],
                                  ["sweep", "show", ""], ["demo", "--device", ""],
                                  ["convert", "digits", "-o", ""]])
def test_empty_arguments_are_refused(home, args, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(args)
    assert e.value.code == 2 and "empty string" in capsys.readouterr().err


def test_an_id_of_the_other_kind_says_what_it_is(home, capsys):
    loop = T.build(make_loop, {"epochs": 1})
    loop.run()
    loop.close()
    rid = loop.run_id
    assert cli.main(["sweep", "show", rid]) == 1
    assert f"it is a run: `labkit runs show {rid}`" in capsys.readouterr().err
    sid = lk.runs.store().create_sweep("s", "m:f", '{"lr": [1]}', {
        "search": "grid", "trials": 1, "metric": "loss", "mode": "min", "engine": "inprocess",
        "workers": 1, "seed": 0, "early_stopping": None, "directory": str(home)}, [{"lr": 1}])
    for args in (["runs", "show", sid], ["resume", sid]):
        assert cli.main(args) == 1
        assert f"it is a sweep: `labkit sweep show {sid}`" in capsys.readouterr().err
    assert cli.main(["launch", "-n", "2", "no-such.py"]) == 1
    assert capsys.readouterr().err.startswith("labkit launch: no script")  # said once


def test_a_checkpoint_deleted_behind_the_stores_back_is_shown_missing(home, capsys):
    import shutil

    loop = T.build(make_loop, {"epochs": 1})
    loop.run()
    loop.save_checkpoint()
    loop.close()
    shutil.rmtree(loop.last_checkpoint)
    assert cli.main(["runs", "show", loop.run_id]) == 0
    assert "MISSING" in capsys.readouterr().out


def test_an_interrupted_resume_does_not_exit_0(home, capsys):
    loop = T.build(make_loop, {"epochs": 1})
    loop.run()
    loop.save_checkpoint()
    loop.close()
    child = lk.runs.fork(loop.run_id, epochs=10_000)  # trains until Ctrl-C
    timer = threading.Timer(1.5, signal.raise_signal, (signal.SIGINT,))
    timer.start()
    try:
        rc = cli.main(["resume", child])
    finally:
        timer.cancel()
    captured = capsys.readouterr()
    assert rc == 130, captured
    assert f"`labkit resume {child}` continues it" in captured.err
    assert lk.runs.get(child)["status"] == "interrupted"


def test_sweep_run_inprocess_needs_no_workers_flag(home, tmp_path, capsys):
    script = tmp_path / "target.py"
    script.write_text("from tests.training.helpers import make_loop\n")
    rc = cli.main(["sweep", "run", f"{script}:make_loop", "--engine", "inprocess",
                   "--trials", "1", "--space", '{"lr": [0.01], "epochs": 1}', "--metric", "loss"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "workers" not in out.err and "trial 0 finished" in out.out


@pytest.mark.parametrize("progress", [{"epoch": None}, {"iteration": "7"},
                                      {"last": {"loss": "n/a"}}, {"last": [1, 2]},
                                      {"epoch": True, "iteration": 2.5}])
def test_a_stored_progress_of_the_wrong_types_is_listed_not_a_traceback(home, capsys,
                                                                        progress):
    # NOTE: one such row (a store edited by hand) made `labkit runs ls` a TypeError
    store = lk.runs.store()
    good = store.create_run("good", config={})
    store.update_run(good, progress={"epoch": 2, "iteration": 30, "last": {"loss": 0.25}})
    bad = store.create_run("odd", config={})
    store.update_run(bad, progress=progress)
    assert cli.main(["runs", "ls"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith(good))
    assert row.split()[-4:] == ["2", "30", "loss", "0.25"]
    assert any(line.startswith(bad) for line in out.splitlines())
