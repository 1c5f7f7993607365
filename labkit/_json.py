"""JSON read strictly, for whatever labkit reads from outside (checkpoint manifests and headers,
dataset attributes, REST request bodies): no duplicate keys (a second value would silently win),
optionally no NaN/Infinity and no integers so long that parsing them stalls. Every failure is a
``ValueError`` whose message says what is wrong; each caller turns it into its own error.

Examples
--------
>>> from labkit._json import loads_strict
>>> loads_strict('{"a": 1}')
{'a': 1}
>>> loads_strict('{"a": 1, "a": 2}')
Traceback (most recent call last):
...
ValueError: the key 'a' appears twice in one object
"""

from __future__ import annotations

import json


def _unique_keys(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"the key {k!r} appears twice in one object")
        out[k] = v
    return out


def _no_constant(name):
    raise ValueError(f"{name} is not a number JSON allows")


def _short_int(text: str) -> int:
    # NOTE: int() of a long digit string is quadratic: a crafted file must not make it stall
    if len(text.lstrip("-")) > 40:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


_DECODERS = {(constants, short): json.JSONDecoder(
    object_pairs_hook=_unique_keys, parse_constant=None if constants else _no_constant,
    parse_int=_short_int if short else None)
    for constants in (False, True) for short in (False, True)}


def loads_strict(text, *, constants: bool = False, short_ints: bool = False):
    """Parse ``text`` (str, or UTF-8 bytes): no duplicate keys; ``constants``: accept NaN and
    Infinity; ``short_ints``: refuse integers of more than 40 digits. Raises ``ValueError``
    (``UnicodeDecodeError`` is one) with a message that says what is wrong."""
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8")
    try:
        return _DECODERS[constants, short_ints].decode(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None
