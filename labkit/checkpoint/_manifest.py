"""``manifest.json``: written last, it says what the checkpoint is (format, version, iteration,
epoch, metrics, run) and what each file must be (size, CRC-32); ``fields_crc32`` seals its other
fields."""

from __future__ import annotations

import json
import math
import os
import zlib

from ..errors import CheckpointError
from ._common import (
    FILES,
    FORMAT,
    INT64,
    MANIFEST,
    MANIFEST_LIMIT,
    VERSION,
    brief,
    check_keys,
    is_count,
    is_int,
    kind,
    read_json,
)
from ._files import Dir, Missing


def fields_crc32(m: dict) -> int:
    """CRC-32 of a canonical encoding of the manifest's fields other than ``files``."""
    rest = {k: v for k, v in m.items() if k not in ("files", "fields_crc32")}
    return zlib.crc32(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode())


def check_manifest(m, where="manifest.json") -> dict:
    """``m`` with defaults filled in, if it is a valid manifest; else a ``CheckpointError``
    naming the field and what it must be."""
    if not isinstance(m, dict):
        raise CheckpointError(f"{where}: {kind(m)}, expected a JSON object")
    if m.get("format") != FORMAT:
        raise CheckpointError(f"{where}: format is {brief(m.get('format'))}, expected "
                              f"{FORMAT!r}: not a labkit checkpoint manifest")
    v = m.get("version")
    if not is_int(v) or v < 1:
        raise CheckpointError(f"{where}: version is {brief(v)}, expected a positive integer")
    if v > VERSION:
        raise CheckpointError(f"{where}: version is {v}, a newer checkpoint format; this "
                              f"labkit reads formats 1 to {VERSION} - upgrade labkit")
    counter = "step" if v == 1 else "iteration"  # format 1 (labkit 0.1) said step
    check_keys(m, ("format", "version", counter, "epoch", "files"),
               ("labkit", "created", "run_id", "metrics", "fields_crc32"), where)
    for k in (counter, "epoch"):
        if not is_int(m[k]) or not is_count(m[k]):
            raise CheckpointError(f"{where}: {k} is {brief(m[k])}, expected an integer in "
                                  "[0, 2**63)")
    if not isinstance(m.get("labkit", ""), str):
        raise CheckpointError(f"{where}: labkit is {brief(m['labkit'])}, expected a version "
                              "string")
    created = m.get("created", 0.0)
    if type(created) not in (int, float) or not math.isfinite(created):
        raise CheckpointError(f"{where}: created is {brief(created)}, expected a time in "
                              "seconds")
    if m.get("run_id") is not None and not isinstance(m["run_id"], str):
        raise CheckpointError(f"{where}: run_id is {brief(m['run_id'])}, expected a string or "
                              "null")
    metrics = m.get("metrics", {})
    if not isinstance(metrics, dict) or not all(type(x) in (int, float)
                                                for x in metrics.values()):
        raise CheckpointError(f"{where}: metrics is {brief(metrics)}, expected an object of "
                              "numbers")
    files = m["files"]
    if not isinstance(files, dict):
        raise CheckpointError(f"{where}: files is {kind(files)}, expected an object")
    check_keys(files, FILES, (), f"{where}: files")  # NOTE: names only: never a path
    for name, info in files.items():
        if not isinstance(info, dict):
            raise CheckpointError(f"{where}: files[{name!r}] is {kind(info)}, expected "
                                  '{"size": ..., "crc32": ...}')
        check_keys(info, ("size", "crc32"), (), f"{where}: files[{name!r}]")
        if not is_int(info["size"]) or not 0 <= info["size"] < INT64:
            raise CheckpointError(f"{where}: files[{name!r}].size is {brief(info['size'])}, "
                                  "expected an integer >= 0")
        if not is_int(info["crc32"]) or not 0 <= info["crc32"] < 1 << 32:
            raise CheckpointError(f"{where}: files[{name!r}].crc32 is "
                                  f"{brief(info['crc32'])}, expected an integer in [0, 2**32)")
    if "fields_crc32" not in m and v >= 2:
        # NOTE: every manifest of format 2 has its seal (it came before the format): one
        # without it is one whose fields, the iteration its order goes by among them, were
        # edited and the seal dropped (format 1, from before the seal, may lack it)
        raise CheckpointError(f"{where}: no fields_crc32, which labkit writes in every "
                              f"manifest of format {v}; the manifest was edited (its iteration, "
                              "epoch or metrics cannot be believed) or not written by labkit")
    if "fields_crc32" in m and (not is_int(m["fields_crc32"]) or
                                m["fields_crc32"] != fields_crc32(m)):
        raise CheckpointError(f"{where}: fields_crc32 does not match the manifest's fields; the "
                              "manifest is corrupted or was edited")
    return {"run_id": None, "metrics": {}, **m, "iteration": m[counter]}


def manifest_of(d: Dir) -> dict:
    where = os.path.join(d.path, MANIFEST)
    try:
        raw = d.read(MANIFEST, limit=MANIFEST_LIMIT)
    except Missing:
        raise CheckpointError(f"{d.path}: no manifest.json; the checkpoint is incomplete (a "
                              "save was interrupted) or this is not a labkit checkpoint") from None
    return check_manifest(read_json(raw, where), where)


def manifest(path) -> dict:
    """The checked manifest of the checkpoint at ``path`` (raises ``CheckpointError``)."""
    with Dir(path) as d:
        return manifest_of(d)


def json_metrics(metrics):
    out = {}
    for k, v in metrics.items():
        try:
            out[str(k)] = float(v)
        except (TypeError, ValueError):
            continue
    return out


