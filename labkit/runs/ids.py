"""Run ids: sortable by creation time, readable, unique under any creation rate.

A new id is the UTC creation time to the second and 64 random bits,
``20261203-081500-3fa9c1d27b8e0a45``; ids of older stores (6 hex digits,
``20261203-081500-3fa9c1``) stay valid. ``RUN_ID`` is the pattern the REST API and the
JupyterLab extension (``extensions/labkit-runs/src/api.ts``) accept: nothing else is addressable.
"""

from __future__ import annotations

import re
import secrets
import time

#: every run id labkit has written: the old 24-bit suffix and the new 64-bit one
RUN_ID = r"[0-9]{8}-[0-9]{6}-(?:[0-9a-f]{16}|[0-9a-f]{6})"
_RUN_RE = re.compile(RUN_ID)


def new_run_id() -> str:
    """``YYYYMMDD-HHMMSS-`` (UTC, so ids from machines in other time zones sort together) and
    16 hex digits from ``secrets``: the chance that two runs created in the same second share
    an id is about n² / 2⁶⁵ (``RunStore.create_run`` still retries if it happens)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(8)


def is_run_id(value) -> bool:
    """True if ``value`` is a string the REST API can address as a run id."""
    return isinstance(value, str) and _RUN_RE.fullmatch(value) is not None
