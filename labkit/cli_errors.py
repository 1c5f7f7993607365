"""How ``labkit`` ends a command that failed or whose reader left: one line naming the culprit
(never a traceback), and nothing written to a closed pipe."""

from __future__ import annotations

import os
import sys


class Reader:
    """``sys.stdout`` / ``sys.stderr`` that drops what is written once its reader has gone
    (``labkit demo | head``): the command finishes its work, and a run or sweep is not marked
    failed because nobody reads its progress any more."""

    def __init__(self, stream):
        self._stream = stream

    def _gone(self) -> None:
        try:  # NOTE: the fd too, so the flush at exit (and any child process) writes nowhere
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            self._stream = open(os.devnull, "w")

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self):
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def other_kind(args) -> str:
    """`` (it is a sweep: ...)`` where a sweep id was given for a run, or the other way round."""
    from . import runs

    rid = getattr(args, "id", None)
    if not rid:
        return ""
    try:
        if args.cmd == "sweep":
            if runs.store().exists(rid):
                return f"; it is a run: `labkit runs show {rid}`"
        else:
            runs.store().get_sweep(rid)
            return f"; it is a sweep: `labkit sweep show {rid}`"
    except (runs.RunStoreError, OSError):
        pass
    return ""


def message(args, e: Exception) -> str:
    text = str(e)
    if isinstance(e, OSError) and not isinstance(e, BrokenPipeError):
        # NOTE: a file labkit was asked to read or write: name it and say why
        names = " -> ".join(str(n) for n in (e.filename, e.filename2) if n is not None)
        text = f"{names}: {e.strerror or e}" if names else (e.strerror or repr(e))
    # "launch: no script ..." under "labkit launch: " says the command once
    for prefix in (f"{args.cmd}: ", f"{getattr(args, 'action', None)}: "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    if getattr(e, "reason", None) in ("not_found", "deleted"):
        text += other_kind(args)
    return text


def closed_pipe() -> int:
    # `labkit runs | head`: the reader left; say nothing more (and nothing at exit)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return 0
