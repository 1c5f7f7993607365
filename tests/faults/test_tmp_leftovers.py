"""A writer killed inside an atomic write (SIGKILL skips the clean-up) left its temporary
beside the target for good: every killed `labkit convert` added a full-size hidden file. The
next atomic write of the same target removes what dead writers of this host left; a live
writer's temporary, another host's and other targets' stay."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from labkit import _fs
from labkit.data import H5Dataset, write_h5

ROOT = Path(__file__).resolve().parents[2]

KILLED_INSIDE = """
import os, signal, sys
from labkit._fs import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    open(tmp, "wb").write(b"x" * 100000)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _leftovers(folder: Path, name: str):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(f"{_fs.TMP_PREFIX}{name}."))


def test_the_next_write_removes_what_a_killed_writer_left(tmp_path):
    target = tmp_path / "out.h5"
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", KILLED_INSIDE, str(target)],
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
        assert r.returncode == -signal.SIGKILL
    # the second killed writer removed the first's on its way in; its own is left
    assert len(_leftovers(tmp_path, "out.h5")) == 1 and not target.exists()
    write_h5(target, {"x": np.arange(10, dtype=np.float32)}, {"train": (0, 10)})
    assert _leftovers(tmp_path, "out.h5") == []
    assert H5Dataset(target).num_examples == 10


def test_a_live_writers_another_hosts_and_other_targets_temporaries_stay(tmp_path):
    prefix = f"{_fs.TMP_PREFIX}out.h5."
    keep = [f"{prefix}{_fs._owner()}.abc123",               # a live writer (this process)
            f"{prefix}0badc0de-1-1.abc123",                    # another host's writer
            f"{prefix}old_unnamed",                            # older labkit: no owner in it
            f"{_fs.TMP_PREFIX}other.h5.{_fs.HOST}-1-1.abc123"]  # another target's
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = f"{prefix}{_fs.HOST}-{gone.pid}-1.abc123"
    for name in keep + [dead]:
        (tmp_path / name).write_bytes(b"x")
    _fs.atomic_write(tmp_path / "out.h5", b"new")
    assert (tmp_path / "out.h5").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep + ["out.h5"])


def test_a_target_no_temporary_can_sit_beside_is_named_not_the_temporary():
    """-o /proc/self/nope.h5 named /proc/self/.labkit-tmp-nope.h5.HOST-PID-START.XXXX."""
    import pytest

    from labkit import _fs

    with pytest.raises(OSError) as e:
        _fs.atomic_write("/proc/self/nope.h5", b"x")
    assert e.value.filename == "/proc/self/nope.h5" and ".labkit-tmp" not in str(e.value)
    assert "a temporary file beside it could not be made" in str(e.value)
