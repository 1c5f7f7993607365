"""What every part of the checkpoint format shares: its names and limits, and JSON read
strictly (UTF-8, no duplicate keys, no giant integers) with every failure a CheckpointError."""

from __future__ import annotations

import re

import numpy as np

from .._json import loads_strict
from ..errors import CheckpointError

FORMAT = "labkit-checkpoint"
#: 2: the manifest says ``iteration`` (1 said ``step``; both are read)
VERSION = 2
MANIFEST = "manifest.json"
#: the files a manifest lists (exactly these; it never names a path)
FILES = ("tensors.safetensors", "state.json")
CHUNK = 8 << 20
MANIFEST_LIMIT = 4 << 20  # labkit's manifests are < 1 KB plus the metrics
INT64 = 1 << 63
MAX_DIMS = 64  # NumPy 2's limit

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
          "I32": np.int32, "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32,
          "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_}
CODES = {np.dtype(v): k for k, v in DTYPES.items()}


def read_json(raw, where: str, strict: bool = True):
    """Parse JSON: UTF-8 only, no duplicate keys, (``strict``) no integers of more than 40
    digits; every failure is a CheckpointError."""
    try:
        return loads_strict(raw, constants=True, short_ints=strict)
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{where}: not UTF-8 text ({e}); the file is corrupted") from None
    except ValueError as e:
        if "appears twice" in str(e):
            raise CheckpointError(f"{where}: {e}; labkit never writes that, so the file was "
                                  "corrupted or edited") from None
        raise CheckpointError(f"{where}: not valid JSON ({e}); the file is corrupted") from None


def is_int(v) -> bool:
    return type(v) is int  # NOTE: not isinstance: True and False are ints too


def is_count(v) -> bool:
    """An integer (not a bool) in [0, 2**63): what every counter and step number of a saved
    state must be (iterations, epochs, optimizer steps, generator counters; the run store keeps
    them as SQLite integers)."""
    return (isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
            and 0 <= v < INT64)


#: a loaded counter must leave room to count on (no run reaches 2**62 iterations or draws):
#: one a step short of 2**63 loaded, then overflowed the run store or made a checkpoint its
#: own loader refused
ROOM = 1 << 62


def kind(v) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def brief(v, n=60) -> str:
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def check_keys(obj, required, optional, where):
    missing = [k for k in required if k not in obj]
    # NOTE: a file's keys as shown_key shows them (sorted by that text: keys of a parsed
    # file need not be strings, nor comparable)
    unknown = sorted(shown_key(k) for k in set(obj) - set(required) - set(optional))
    if missing or unknown:
        parts = ([f"lacks {missing}"] if missing else []) + \
            ([f"has unknown {listed(unknown)}"] if unknown else [])
        raise CheckpointError(f"{where} {' and '.join(parts)}; expected the keys "
                              f"{list(required) + list(optional)}")


_PLAIN = re.compile(r"[A-Za-z0-9_./-]{1,120}")
_LISTED = 12


def shown_key(key) -> str:
    """A key from a file as an error message shows it: a plain name (``/mlp/linear_0.W``) as
    it is, any other quoted and escaped (``'/a b,\\n'``), so a key with spaces, separators,
    quotes, line breaks or look-alike letters cannot pass for others; a long one is cut."""
    if isinstance(key, str) and _PLAIN.fullmatch(key):
        return key
    try:
        text = ascii(str.__str__(key) if isinstance(key, str) else key)
    except Exception:  # noqa: BLE001 - a crafted object's repr may raise anything
        text = f"<{type(key).__name__}>"
    return text if len(text) <= 120 else f"{text[:100]}... ({len(text)} characters)"


def listed(items: list, sep: str = ", ") -> str:
    """``items`` joined, the first few of a long list and how many more."""
    more = len(items) - _LISTED
    return sep.join(items[:_LISTED]) + (f"{sep}... and {more} more" if more > 0 else "")
