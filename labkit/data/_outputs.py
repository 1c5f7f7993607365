"""Where ``labkit convert -o`` may write: a new file, a labkit dataset (converted again), or
anything else only with ``--force``; never a folder, a FIFO, a socket or a device."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import DataError


def replaceable(out: str, force: bool):
    """A ``DataError`` unless ``-o OUT`` is new, a labkit dataset (converted again), or
    ``--force``: a converter replaces what is there."""
    path = Path(out)
    if path.is_dir():
        return DataError(f"-o {out} is a folder; give a file in it (-o {path / 'NAME.h5'})")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        # NOTE: opened to look inside, a FIFO waited for a writer for ever; replaced (with
        # --force), a device or a FIFO would have been renamed over
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")
        return DataError(f"-o {out} is {kind}, not a regular file; give a file's path")
    if force or mode is None:
        return None
    try:
        import h5py

        with h5py.File(path, "r") as f:
            if "labkit_dataset" in f.attrs:
                return None
    except OSError as e:
        from .datasets import is_locked

        if is_locked(e):
            return DataError(f"-o {out} is open for writing in another process (HDF5's lock "
                             "is held); let it finish or close it there, or give another -o")
    except ValueError:
        pass
    return DataError(f"{out} exists and is not a labkit dataset; give another -o, or --force "
                     "to replace it")
