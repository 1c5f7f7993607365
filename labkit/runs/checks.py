"""Values that enter or leave the run store: configs (bounded, plain JSON) and text for a
terminal (control characters escaped)."""

from __future__ import annotations

import json
import math
import unicodedata

from .._json import loads_strict
from ..errors import RunStoreError

#: the largest config a run may have, as JSON (a config is hyperparameters, not data: every
#: run-list request carries every run's config)
MAX_CONFIG_BYTES = 64 * 1024
#: how deeply a config may nest dicts and lists
MAX_CONFIG_DEPTH = 32


def refuse(message: str, reason: str) -> RunStoreError:
    """A ``RunStoreError`` with ``reason``: ``"not_found"``, ``"deleted"``, ``"invalid"``,
    ``"live"``, ``"damaged"`` or ``"failed"`` (the REST API maps it to 404, 404, 400, 409,
    503, 503)."""
    e = RunStoreError(message)
    e.reason = reason
    return e


def json_columns(d: dict, spec) -> None:
    """Decode the JSON text columns of row ``d`` in place: ``spec`` is ``(column, type)``
    pairs (an empty column is that type's empty value). A ValueError names the first column
    that is not JSON of its type (a damaged row)."""
    for col, kind in spec:
        text = d.get(col)
        if text is not None and not isinstance(text, str):
            raise ValueError(f"its {col} is {_what(text)}, not JSON text")
        try:  # NOTE: strict: a column nested 5,000 deep is damage, not a RecursionError
            v = loads_strict(text or ("[]" if kind is list else "{}"), constants=True)
        except ValueError as e:
            raise ValueError(f"its {col} is not JSON ({e})") from None
        if not isinstance(v, kind):
            raise ValueError(f"its {col} is not a JSON {'list' if kind is list else 'object'}")
        d[col] = v


#: the time columns of the store's rows: seconds since 1970, up to the year 9999
TIMES = ("created", "started", "ended", "heartbeat")
MAX_TIME = 253402300799.0


def _what(v) -> str:
    if isinstance(v, (bytes, memoryview)):
        return f"binary data ({len(v)} bytes)"
    return f"a {type(v).__name__} ({str(v)[:40]!r})"


def is_time(v) -> bool:
    return type(v) in (int, float) and 0 <= v <= MAX_TIME


def typed_columns(d: dict, text=(), integers=(), times=()) -> None:
    """A ValueError naming the first column of row ``d`` whose value is not of its kind (a
    damaged or crafted store: text where a number belongs, binary data, a time outside
    1970..9999); NULL is every kind's missing value."""
    for col in text:
        v = d.get(col)
        if v is not None and not isinstance(v, str):
            raise ValueError(f"its {col} is {_what(v)}, not text")
    for col in integers:
        v = d.get(col)
        if v is not None and type(v) is not int:
            raise ValueError(f"its {col} is {_what(v)}, not an integer")
    for col in times:
        v = d.get(col)
        if v is not None and not is_time(v):
            raise ValueError(f"its {col} is {_what(v)}, not a time")


def damaged_row(row, why, **empty) -> dict:
    """What a list shows in place of a row it cannot decode (one damaged row does not hide the
    others): the row's plain values (text, numbers, None; its times only if numbers), the
    ``empty`` values for its JSON columns, ``status`` ``"damaged"`` and ``damaged``: why."""
    d = {k: v if v is None or isinstance(v, (str, int, float)) else None
         for k, v in dict(row).items()}
    for t in TIMES:
        if t in d and not is_time(d[t]):
            d[t] = None
    d.update(empty, status="damaged", damaged=str(why))
    return d


def config_json(config, what: str = "config") -> str:
    """``config`` as JSON text, checked: a dict with string keys at every level, values that
    are strings, finite numbers, booleans, None, lists or dicts, nested at most
    ``MAX_CONFIG_DEPTH`` deep and at most ``MAX_CONFIG_BYTES`` long."""
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise refuse(f"{what} must be a dict (a JSON object), got {type(config).__name__}",
                     "invalid")
    # NOTE: iterative, so a hostile config nested 100,000 deep is refused, not a RecursionError
    todo = [(config, what, 1)]
    while todo:
        v, where, depth = todo.pop()
        if depth > MAX_CONFIG_DEPTH:
            raise refuse(f"{what} nests deeper than {MAX_CONFIG_DEPTH} levels (at {where})",
                         "invalid")
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise refuse(f"{what} keys must be strings, got {k!r} in {where}",
                                 "invalid")
                todo.append((x, f"{where}[{k[:40]!r}]", depth + 1))
        elif isinstance(v, (list, tuple)):
            todo.extend((x, f"{where}[{i}]", depth + 1) for i, x in enumerate(v))
        elif isinstance(v, float) and not math.isfinite(v):
            raise refuse(f"{what} values must be finite numbers, got {v} at {where}", "invalid")
        elif not (v is None or isinstance(v, (str, int, float, bool))):
            raise refuse(f"{what} values must be JSON values (str, number, bool, None, list, "
                         f"dict), got {type(v).__name__} at {where}", "invalid")
    text = json.dumps(config, allow_nan=False, separators=(",", ":"))
    if len(text.encode()) > MAX_CONFIG_BYTES:
        raise refuse(f"{what} is {len(text.encode()):,} bytes as JSON; the limit is "
                     f"{MAX_CONFIG_BYTES:,} (labkit.runs.MAX_CONFIG_BYTES): keep data and "
                     "long lists out of it and store a path or a name instead", "invalid")
    return text


# control, format (bidi overrides, zero-width), line/paragraph separators, lone surrogates
_HIDDEN = ("Cc", "Cf", "Zl", "Zp", "Cs")
_JOINERS = "\u200c\u200d"  # scripts and emoji sequences need them; they move nothing


def printable(text) -> str:
    """``text`` safe to print on a terminal: control and format characters (escape sequences,
    carriage returns, bidirectional overrides, line and paragraph separators) become visible
    escapes like ``\\x1b`` and ``\\u202e``; everything else is kept.

    >>> printable("ok\\x1b[2Jname\\u202e")
    'ok\\\\x1b[2Jname\\\\u202e'
    """
    if text is None:
        return ""
    out = []
    for ch in str(text):
        if unicodedata.category(ch) in _HIDDEN and ch not in _JOINERS:
            n = ord(ch)
            out.append(f"\\x{n:02x}" if n < 0x100 else
                       f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}")
        else:
            out.append(ch)
    return "".join(out)
