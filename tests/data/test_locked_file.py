"""A dataset file another process holds locked (open for writing) is waited for a moment, then
refused as locked, naming the fix, never as damaged ("rebuild it" would have the user throw away
a good file); a lock that goes away while waiting (a process forked while the file was open,
until it execs) is no error at all."""

import subprocess
import sys

import numpy as np
import pytest

import labkit.data.datasets as datasets
from labkit.data import H5Dataset, write_h5
from labkit.errors import DataError

HOLD = """
import sys, h5py
f = h5py.File(sys.argv[1], "a")
print("open", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def dataset_file(tmp_path):
    path = tmp_path / "d.h5"
    write_h5(path, {"x": np.arange(10, dtype=np.float32)}, {"train": (0, 10)})
    return path


def test_a_file_open_for_writing_elsewhere_is_refused_as_locked(dataset_file, monkeypatch):
    monkeypatch.setattr(datasets, "LOCK_WAIT", 0.2)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(dataset_file)], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(DataError) as e:
            H5Dataset(dataset_file)
        message = str(e.value)
        assert str(dataset_file) in message and "locked by another process" in message
        assert "close the file there" in message and "HDF5_USE_FILE_LOCKING" in message
        assert "damaged" not in message and "rebuild" not in message
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    # closed there, it opens here, and nothing about the file changed
    data = H5Dataset(dataset_file)
    np.testing.assert_array_equal(data.get_data(slice(0, 10))["x"], np.arange(10))


def test_convert_does_not_take_a_locked_output_for_a_foreign_file(dataset_file, capsys):
    from labkit.cli import main

    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(dataset_file)], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "open"
        before = dataset_file.read_bytes()
        assert main(["convert", "digits", "-o", str(dataset_file)]) == 1
        err = capsys.readouterr().err
        assert "open for writing in another process" in err and "not a labkit dataset" not in err
        assert dataset_file.read_bytes() == before
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_a_lock_that_goes_away_while_waiting_is_no_error(dataset_file, monkeypatch):
    real = datasets.h5py().File
    refusals = []

    def file(path, mode="r", **kw):
        if len(refusals) < 3:
            refusals.append(path)
            raise BlockingIOError(11, "Unable to synchronously open file (unable to lock file, "
                                      "errno = 11, error message = 'Resource temporarily "
                                      "unavailable')")
        return real(path, mode, **kw)

    monkeypatch.setattr(datasets.h5py(), "File", file)
    data = H5Dataset(dataset_file)
    assert len(refusals) == 3 and data.num_examples == 10


def test_other_open_errors_still_name_the_damage(dataset_file, monkeypatch):
    def file(path, mode="r", **kw):
        raise OSError("Unable to synchronously open file (bad object header version number)")

    monkeypatch.setattr(datasets.h5py(), "File", file)
    with pytest.raises(DataError, match=r"cannot open as HDF5 \(.*bad object header.*\); "
                                        r"the file is truncated or damaged - rebuild it"):
        H5Dataset(dataset_file)


def test_a_filesystem_without_locks_is_named_with_the_fix_at_once(dataset_file, monkeypatch):
    def file(path, mode="r", **kw):
        raise OSError(38, "Unable to synchronously open file (unable to lock file, errno = 38, "
                          "error message = 'Function not implemented')")

    monkeypatch.setattr(datasets.h5py(), "File", file)
    monkeypatch.setattr(datasets, "LOCK_WAIT", 60.0)  # NOTE: not waited for: no one holds it
    with pytest.raises(DataError, match="does not take HDF5's file locks.*"
                                        "HDF5_USE_FILE_LOCKING=FALSE"):
        H5Dataset(dataset_file)
