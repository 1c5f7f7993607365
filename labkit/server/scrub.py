"""Paths out of the API's messages: ``scrub(text)`` is ``text`` with every filesystem path
replaced, so that a client does not learn where the server keeps things.

A path may hold spaces, quotes and any letter, so no one pattern can tell where it ends. In
order:

1. the run store's file (as given and resolved, with a suffix: ``runs.sqlite-wal``) becomes
   "the run store";
2. a quoted path (``'/tmp/my runs/x'``, ``"/data/it's/a.h5"``: what Python's ``OSError`` and
   ``repr`` write) is hidden up to its closing quote;
3. the folders the server knows, literally: ``$LABKIT_HOME``, the home directory, the working
   directory, the store's folder, the folders of its run directories and its sweeps'
   directories (as given and resolved), with the rest of the path after them;
4. any other absolute path (or ``~/...``) not glued to a word, or one under a system's usual
   top-level directories wherever it starts (``checkpoint-/tmp/x``, ``3/home/u``), up to a
   space, a quote or a bracket, and on across a space only when the next word goes on with a
   ``/`` (``/tmp/my runs/x.json``).

So an unquoted path whose last part holds a space, outside every folder the server knows,
keeps that last word (``/elsewhere/my file.h5`` shows ``<path> file.h5``); nothing else is
taken from the message.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from .. import config, runs
from ..errors import RunStoreError

#: what a path never holds unquoted: where it ends (an apostrophe inside a word is kept)
_END = "\\s'\"`<>|,;:()\\[\\]{}"
_PART = f"(?:[^{_END}]|(?<=\\w)'(?=\\w))"
#: the rest of a path: more of it, and words after a space that go on with a "/"
_REST = f"{_PART}*(?: [^{_END}/]*/{_PART}*)*"
_SYSTEM = ("home|tmp|root|usr|var|etc|mnt|opt|srv|data|media|private|Users|Volumes|run|proc")
_PATH_RE = re.compile(f"(?:(?<![\\w.~/-])~?|(?=/(?:{_SYSTEM})/))/{_PART}+{_REST}")
# a quoted path: the quote not glued to a word, the path up to the same quote on its line
_QUOTED_RE = re.compile(r"""(?<!\w)(['"`])~?/[^\n]*?\1""")
#: how long the store's folders are remembered, in seconds (scrub runs for every message)
KNOWN_FOR = 5.0
_known: dict = {}


def _variants(paths) -> set[str]:
    """Each path as given and resolved, absolute, without a trailing slash, not "/"."""
    out = set()
    for p in paths:
        for v in (str(p), os.path.realpath(p)):
            v = v.rstrip("/")
            if v.startswith("/") and len(v) > 1:
                out.add(v)
    return out


def _literal(paths, rest: str, whole: bool = True) -> re.Pattern | None:
    """A pattern for any of ``paths`` (the longest first) not inside a longer path (nor, if
    ``whole``, the start of a longer name), with ``rest`` after it."""
    if not paths:
        return None
    names = "|".join(re.escape(p) for p in sorted(paths, key=len, reverse=True))
    end = f"(?=/|[{_END}]|$)" if whole else ""
    return re.compile(f"(?<![\\w/.~])(?:{names}){end}{rest}")


def _patterns() -> tuple:
    """(the store's file, the folders the server knows) as patterns, remembered for
    ``KNOWN_FOR`` seconds."""
    try:
        path = runs.store().path
    except (RunStoreError, OSError):
        path = None
    hit = _known.get(str(path))
    if hit is not None and time.monotonic() - hit[0] < KNOWN_FOR:
        return hit[1]
    try:
        folders = runs.folders() if path is not None else []
    except (RunStoreError, OSError):
        folders = []
    try:
        here = [config.home(), Path.home(), os.getcwd()]
    except (OSError, RuntimeError, ValueError):
        here = []
    # NOTE: the store's file with its suffix: runs.sqlite-wal is the store too
    pats = (_literal(_variants([path]) if path else set(), f"{_PART}*", whole=False),
            _literal(_variants([*here, *folders, *([path.parent] if path else [])]),
                     f"(?:/{_PART}*{_REST})?"))
    _known.clear()
    _known[str(path)] = (time.monotonic(), pats)
    return pats


def scrub(text) -> str:
    """``text`` without filesystem paths: the store's file becomes "the run store", any other
    absolute path ``<path>`` (see the module's docstring for where a path ends)."""
    text = str(text)
    store, known = _patterns()
    if store is not None:
        text = store.sub("the run store", text)
    text = _QUOTED_RE.sub(lambda m: f"{m.group(1)}<path>{m.group(1)}", text)
    if known is not None:
        text = known.sub("<path>", text)
    return _PATH_RE.sub("<path>", text)


#: a value that is a path and nothing else (``"/runs/x/ckpt 7"``): hidden whole, spaces and all
_WHOLE_RE = re.compile(r"~?/[^\n]*")


def scrub_values(v):
    """``v`` (JSON values: a run's progress) with ``scrub`` applied to every string in it; a
    string that starts with ``/`` or ``~/`` on one line is a path, all of it."""
    if isinstance(v, str):
        return "<path>" if _WHOLE_RE.fullmatch(v.strip()) else scrub(v)
    if isinstance(v, dict):
        return {k: scrub_values(x) for k, x in v.items()}
    if isinstance(v, list):
        return [scrub_values(x) for x in v]
    return v
