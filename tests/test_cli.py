"""The ``labkit`` command as a new user meets it: help that says what each command does, one-line
errors, bad arguments refused, pipes closed early, names printed safely."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import labkit as lk
from labkit import training as T

from .training.helpers import make_loop

ROOT = Path(__file__).resolve().parents[1]


def labkit(*args, home, timeout=120, **extra_env):
    env = {**os.environ, "LABKIT_HOME": str(home), "PYTHONPATH": str(ROOT),
           "OMP_NUM_THREADS": "1", **extra_env}
    return subprocess.run([sys.executable, "-m", "labkit.cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_help_lists_every_command_in_plain_text(tmp_path):
    out = labkit("--help", home=tmp_path)
    assert out.returncode == 0
    for cmd in ("demo", "doctor", "runs", "resume", "convert"):
        assert f"\n    {cmd} " in out.stdout, out.stdout
    assert "``" not in out.stdout
    demo = labkit("demo", "--help", home=tmp_path).stdout
    assert "digits" in demo and "Nothing is downloaded" in demo and "--threads" in demo


@pytest.mark.parametrize("args,message", [
    (["demo", "--epochs", "0"], "expected a positive integer, got '0'"),
    (["demo", "--threads", "-1"], "expected a positive integer"),
    (["runs", "ls", "--status", "bogus"], "invalid choice: 'bogus'"),
    (["convert", "nope"], "invalid choice: 'nope'"),
])
def test_bad_arguments_are_refused(tmp_path, args, message):
    out = labkit(*args, home=tmp_path)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_errors_are_one_line_not_a_traceback(tmp_path):
    out = labkit("demo", "--device", "cl:7", home=tmp_path)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("labkit demo: device 'cl:7' does not exist")
    out = labkit("runs", "show", "20260101-000000-abcdef", home=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr and "no run" in out.stderr
    out = labkit("resume", "nonsense", home=tmp_path)
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    env_bad = labkit("doctor", home=tmp_path, LABKIT_CHECK_INDICES="maybe")
    assert "LABKIT_CHECK_INDICES" in env_bad.stdout and "INVALID" in env_bad.stdout


@pytest.fixture
def store_with_runs(tmp_path):
    home = tmp_path / "home"
    with lk.runs.use_store(home / "runs.sqlite"):
        ids = []
        for i in range(3):
            loop = T.build(make_loop, {"epochs": 1}, name=f"run\x1b[31m{i}\r\u202e")
            loop.run()
            loop.close()
            ids.append(loop.run_id)
    return home, ids


def test_a_closed_pipe_ends_quietly(store_with_runs):
    home, ids = store_with_runs
    env = {**os.environ, "LABKIT_HOME": str(home), "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "labkit.cli", "runs"], env=env, cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()  # like `labkit runs | head -1`
    err = p.stderr.read().decode()
    assert p.wait(60) == 0 and "BrokenPipeError" not in err and "Traceback" not in err, err


def test_names_with_control_characters_are_printed_escaped(store_with_runs):
    home, ids = store_with_runs
    listed = labkit("runs", home=home).stdout
    shown = labkit("runs", "show", ids[0], home=home).stdout
    for text in (listed, shown):
        assert "\x1b" not in text and "\r" not in text and "\u202e" not in text
        assert "\\x1b[31m" in text
    assert "\\u202e" in shown  # (the list shortens names)


def test_resuming_a_finished_run_says_so(store_with_runs):
    home, ids = store_with_runs
    out = labkit("resume", ids[0], home=home)
    assert out.returncode == 0 and "already finished" in out.stdout, out.stdout + out.stderr
    assert "lk.runs.fork" in out.stdout


def test_convert_says_what_a_file_is(tmp_path):
    made = labkit("convert", "digits", "-o", str(tmp_path / "d.h5"), home=tmp_path)
    assert made.returncode == 0, made.stderr
    wrong = labkit("convert", "npz", str(tmp_path / "d.h5"), home=tmp_path)
    assert wrong.returncode == 1 and "not a .npz file" in wrong.stderr
    assert "labkit convert h5" in wrong.stderr and "pickle" not in wrong.stderr
    again = labkit("convert", "h5", str(tmp_path / "d.h5"), "-o", str(tmp_path / "e.h5"),
                   home=tmp_path)
    assert again.returncode == 0 and "splits:  train 1297, valid 200, test 300" in again.stdout
