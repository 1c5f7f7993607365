"""What people write about a run — its name, tags and a free-text note — and the traceback
tail a failed run keeps: checked here, before the store, the Python API, the CLI and the REST
API take them (one rule for all four)."""

from __future__ import annotations

import re
import traceback as _tb
import unicodedata

from .checks import refuse

#: the longest run name, in characters
MAX_NAME = 200
#: how many tags a run may have, and the longest one
MAX_TAGS = 32
MAX_TAG = 40
#: the longest note, in characters
MAX_NOTE = 10_000
#: a tag: a letter or digit, then letters, digits and ``_ . : + = @ / -`` (no spaces, so tags
#: can be typed and filtered on the command line as they are)
TAG_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+=@/-]*")
#: how much of a failed run's traceback is kept: its last lines, at most this many characters
TRACEBACK_LINES = 30
MAX_TRACEBACK = 8000

# control and format characters (escape sequences, bidi overrides); a note keeps \n and \t
_HIDDEN = ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn")


def _hidden(text: str, keep: str = "") -> str | None:
    """The first character of ``text`` no one can see (as an escape), or None."""
    for ch in text:
        if ch not in keep and unicodedata.category(ch) in _HIDDEN:
            return ascii(ch)
    return None


def check_name(name, what: str = "name") -> str:
    """A run name: a string of 1 to ``MAX_NAME`` visible characters (spaces inside allowed,
    none around it)."""
    if not isinstance(name, str):
        raise refuse(f"{what} must be a string, got {type(name).__name__}", "invalid")
    if not name.strip():
        raise refuse(f"{what} must not be empty", "invalid")
    if name != name.strip():
        raise refuse(f"{what} must not begin or end with spaces, got {name[:40]!r}", "invalid")
    if len(name) > MAX_NAME:
        raise refuse(f"{what} is {len(name)} characters long; at most {MAX_NAME}", "invalid")
    bad = _hidden(name)
    if bad:
        raise refuse(f"{what} holds the control character {bad}; use visible characters",
                     "invalid")
    return name


def check_tag(tag, what: str = "tag") -> str:
    if not isinstance(tag, str):
        raise refuse(f"{what} must be a string, got {type(tag).__name__}", "invalid")
    if not 1 <= len(tag) <= MAX_TAG or not TAG_RE.fullmatch(tag):
        raise refuse(f"{what} {tag[:60]!r} is not a tag: 1 to {MAX_TAG} characters, a letter "
                     "or digit first, then letters, digits and _ . : + = @ / - (no spaces)",
                     "invalid")
    return tag


def check_tags(tags, what: str = "tags") -> list[str]:
    """A list of tags, each once, in the order given."""
    if isinstance(tags, (str, bytes)) or not isinstance(tags, (list, tuple)):
        raise refuse(f"{what} must be a list of strings, got {type(tags).__name__}", "invalid")
    if len(tags) > MAX_TAGS:
        raise refuse(f"{what}: {len(tags)} tags; a run has at most {MAX_TAGS}", "invalid")
    out: list[str] = []
    for i, t in enumerate(tags):
        check_tag(t, f"{what}[{i}]")
        if t not in out:
            out.append(t)
    return out


def check_note(note, what: str = "note") -> str:
    """Free text up to ``MAX_NOTE`` characters; lines and tabs allowed, other control
    characters not."""
    if not isinstance(note, str):
        raise refuse(f"{what} must be a string, got {type(note).__name__}", "invalid")
    if len(note) > MAX_NOTE:
        raise refuse(f"{what} is {len(note):,} characters long; at most {MAX_NOTE:,}",
                     "invalid")
    bad = _hidden(note, keep="\n\t")
    if bad:
        raise refuse(f"{what} holds the control character {bad}; only visible characters, "
                     "new lines and tabs", "invalid")
    return note


def traceback_tail(exc: BaseException) -> str:
    """The last ``TRACEBACK_LINES`` lines of ``exc``'s traceback (chained causes included),
    at most ``MAX_TRACEBACK`` characters: what a run page shows under a failed run's error."""
    lines = "".join(_tb.format_exception(type(exc), exc, exc.__traceback__)).splitlines()
    tail = lines[-TRACEBACK_LINES:]
    if len(lines) > TRACEBACK_LINES:
        tail.insert(0, f"... ({len(lines) - TRACEBACK_LINES} lines before these)")
    text = "\n".join(tail)
    return text if len(text) <= MAX_TRACEBACK else "..." + text[-(MAX_TRACEBACK - 3):]
