"""SQLite connections for the run store, and the one place where SQLite's errors become
``RunStoreError`` with the file and what to do."""

from __future__ import annotations

import functools
import sqlite3
import time
from contextlib import contextmanager

from .._proc import alive
from .checks import refuse

#: seconds a call waits for another process's write lock before it gives up
BUSY_TIMEOUT = 30.0

_DAMAGE = ("malformed", "not a database", "corrupt", "encrypted", "decode", "disk image")
_IO = ("unable to open", "disk i/o", "readonly", "read-only", "full", "permission")


def explain(path, e: Exception):
    """The ``RunStoreError`` for SQLite's error ``e`` on the store at ``path``."""
    text = str(e).lower()
    if isinstance(e, (TypeError, ValueError, OverflowError)) or any(w in text for w in _DAMAGE):
        return refuse(f"{path}: the run store is damaged ({e}). Move the file away (labkit "
                      "then starts an empty store there); `sqlite3 runs.sqlite .recover` may "
                      "save most of its rows", "damaged")
    if "locked" in text or "busy" in text:
        err = refuse(f"{path}: the run store stayed locked by another process for "
                     f"{BUSY_TIMEOUT:.0f} s ({e}); look for a stuck process that uses it and "
                     "try again", "failed")
        err.locked = True  # NOTE: a loop's bookkeeping writes wait and try again (recorder)
        return err
    if any(w in text for w in _IO):
        return refuse(f"{path}: cannot read or write the run store ({e}); check the disk, its "
                      "free space and the file's permissions", "failed")
    return refuse(f"{path}: the run store failed ({type(e).__name__}: {e}); if it happens "
                  "again, move the file away (labkit then starts an empty store)", "failed")


def guarded(fn):
    """Every public ``RunStore`` method: SQLite's errors, and values a damaged file yields
    that cannot be decoded, leave as ``RunStoreError`` (with the file and what to do)."""

    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        # NOTE: text that is not UTF-8 (a damaged page) leaves sqlite3 as UnicodeDecodeError
        except (sqlite3.Error, UnicodeDecodeError) as e:
            raise explain(self.path, e) from e

    call.guarded = True
    return call


def _wal(c: sqlite3.Connection) -> None:
    """Switch to WAL, waiting out other openers: changing the journal mode needs the file to
    itself, and two connections switching at once get "database is locked" at once, without
    the busy timeout (seen with 8 threads opening an old store: 3 tries in 40 failed)."""
    deadline = time.monotonic() + BUSY_TIMEOUT
    delay = 0.001
    while True:
        try:
            c.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e).lower() or time.monotonic() > deadline:
                raise
            time.sleep(delay)  # NOTE: a backoff, not a synchronisation: the other opener
            delay = min(delay * 2, 0.05)  # finishes its switch in microseconds


def connect(path) -> sqlite3.Connection:
    c = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None,
                        check_same_thread=False)
    try:
        _wal(c)
        c.execute("PRAGMA synchronous=NORMAL")
        c.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}")
    except BaseException:
        c.close()
        raise
    c.row_factory = sqlite3.Row
    return c


@contextmanager
def transaction(c: sqlite3.Connection):
    """``BEGIN IMMEDIATE`` (a deferred transaction that reads and then writes can fail with
    "database is locked" whatever the timeout), committed at the end, rolled back on error."""
    c.execute("BEGIN IMMEDIATE")
    try:
        yield c
    except BaseException:
        if c.in_transaction:
            try:
                c.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # NOTE: the original error says more than a failed rollback of it
        raise
    c.execute("COMMIT")


def pid_alive(pid) -> bool:
    """Whether process ``pid`` of this host runs (a zombie does not)."""
    return alive(pid)
