"""Shipped weights: ``weights/NAME.safetensors`` (the parameters and buffers) beside
``weights/NAME.json`` (the model's module, its config, the measured results and the command
that produced them). Loading parses only JSON and the safetensors header: no pickle, no code
from the file. Weights may come from elsewhere, so the record is checked before anything is
built: its module must be one of the zoo's, its config must have the keys and types of that
module's defaults, and the model it asks for must fit in the weights file (a crafted size
cannot allocate more memory than the file holds). The record holds the weights file's size
and SHA-256, checked before the file is parsed: a damaged file (one flipped bit of a tensor
loaded silently, and the model answered at chance) is refused, naming it. Both files are read
only as regular files (links followed), so a FIFO or a device is refused, not waited on."""

from __future__ import annotations

import hashlib
import importlib
import json
import math
from pathlib import Path

import numpy as np

from .. import _fs
from .._json import loads_strict
from ..backend.device import device as _device
from ..checkpoint import tensors_bytes, tensors_from_bytes
from ..checkpoint._files import Missing, read_regular
from ..errors import CheckpointError

WEIGHTS = Path(__file__).parent / "weights"
RECORD_LIMIT = 1 << 20  # the shipped records are < 1 KB
INT64 = 1 << 63

# NOTE: a lower bound of the number of weights (elements) each module's build makes from a
# config: its largest matrices. Checked against the file before building, so the model cannot
# be much larger than the weights file (4x, plus 1M); tests/models/test_crafted_weights.py
# checks each bound against the real count.
FLOORS = {
    "cnn": lambda c: 27 * c["channels"] ** 2,
    "resnet": lambda c: 36 * c["width"] ** 2,
    "vae": lambda c: c["hidden"] * (128 + 3 * c["latent"]),
    "dcgan": lambda c: 256 * c["noise"],
    "charlstm": lambda c: 4 * c["hidden"] * (c["hidden"] + c["embed"])
    + len(c.get("vocab") or "") * (c["embed"] + c["hidden"]),
}
MODULES = tuple(FLOORS)
#: the config keys each build reads that are sizes (at least 1)
SIZES = {"cnn": ("channels",), "resnet": ("width",), "vae": ("latent", "hidden"),
         "dcgan": ("noise",), "charlstm": ("embed", "hidden")}
EXTRA = {"charlstm": {"vocab": ""}}  # keys a config may have beyond the module's DEFAULTS


def available() -> list[str]:
    """The names ``load`` accepts: every shipped ``weights/NAME.json``."""
    return sorted(p.stem for p in WEIGHTS.glob("*.json"))


def _check_name(name) -> None:
    if not isinstance(name, str) or not name or name in (".", "..") \
            or any(c in name for c in "/\\\0"):
        raise CheckpointError(f"labkit.models: {name!r} is not a weights name (a file name "
                              "without its extension, such as 'cnn-digits')")


def _type(v) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(v), type(v).__name__)


def check_config(module: str, config, where: str) -> dict:
    """``config`` checked against ``module``'s defaults: known keys, the defaults' types, sizes
    of at least 1, integers in [0, 2**63), finite numbers; returns it."""
    if module not in MODULES:
        raise CheckpointError(f"{where}: module {module!r} is not one of the zoo's "
                              f"({', '.join(MODULES)})")
    if not isinstance(config, dict):
        raise CheckpointError(f"{where}: config is {_type(config)}, expected an object")
    defaults = {**importlib.import_module(f"{__package__}.{module}").DEFAULTS,
                **EXTRA.get(module, {})}
    for k, v in config.items():
        if k not in defaults:
            raise CheckpointError(f"{where}: config key {k!r} is not one {module} has "
                                  f"({', '.join(defaults)}); the record is for another "
                                  "version of the model, or was edited")
        want, bad = defaults[k], None
        if type(want) is int:
            if type(v) is not int or not 0 <= v < INT64:
                bad = "an integer in [0, 2**63)"
            elif k in SIZES[module] and v < 1:
                bad = "a size of at least 1"
        elif type(want) is float:
            if type(v) not in (int, float) or not math.isfinite(v):
                bad = "a finite number"
        elif type(v) is not type(want):
            bad = _type(want)
        elif k == "vocab" and (not v or len(set(v)) != len(v)):
            bad = "a non-empty string of distinct characters"
        if bad:
            raise CheckpointError(f"{where}: config {k!r} is {v!r}; {module} needs {bad}")
    return config


def info(name: str, directory=WEIGHTS) -> dict:
    """The record of shipped weights: ``module``, ``config``, ``results``, ``command``."""
    _check_name(name)
    path = Path(directory) / f"{name}.json"
    try:
        raw = read_regular(path, RECORD_LIMIT, "weights record")
    except Missing:
        names = sorted(p.stem for p in Path(directory).glob("*.json"))
        raise CheckpointError(f"labkit.models: no weights named {name!r} in {directory}; "
                              f"available: {', '.join(names) or 'none'}") from None
    try:
        # NOTE: NaN allowed: save writes a diverged result as json.dumps does; the config is
        # checked for finite numbers below
        record = loads_strict(raw, constants=True, short_ints=True)
    except ValueError as e:  # NOTE: UnicodeDecodeError is one
        raise CheckpointError(f"{path}: not a weights record: {e}") from None
    if not isinstance(record, dict) or not isinstance(record.get("module"), str) \
            or not record["module"].isidentifier() or not isinstance(record.get("config"), dict):
        raise CheckpointError(f"{path}: expected a JSON object with a module name and a config")
    check_config(record["module"], record["config"], str(path))
    w = record.get("weights")
    if w is not None and not (isinstance(w, dict) and set(w) == {"size", "sha256"}
                              and type(w["size"]) is int and 0 <= w["size"] < INT64
                              and isinstance(w["sha256"], str) and len(w["sha256"]) == 64
                              and all(c in "0123456789abcdef" for c in w["sha256"])):
        raise CheckpointError(f"{path}: 'weights' must be {{'size': bytes, 'sha256': 64 hex "
                              f"digits}} (the weights file's), got {w!r:.120}")
    return record


def save(model, name: str, module: str, config: dict, results: dict, command: str,
         directory=WEIGHTS) -> Path:
    """Write ``model``'s state as ``directory/NAME.safetensors`` and its record as JSON
    (refusing a record that ``load`` would refuse)."""
    _check_name(name)
    directory = Path(directory)
    check_config(module, config, f"labkit.models.save {name!r}")
    state = model.state_dict()
    data = b"".join(bytes(p) for p in tensors_bytes(state))
    _fs.atomic_write(directory / f"{name}.safetensors", data)
    record = {"module": module, "config": config, "results": results, "command": command,
              "weights": fingerprint(data)}
    _fs.atomic_write(directory / f"{name}.json", json.dumps(record, indent=1) + "\n")
    return directory / f"{name}.safetensors"


def fingerprint(data: bytes) -> dict:
    """What a record says of its weights file: ``{"size", "sha256"}``."""
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _names(keys, n=8) -> str:
    keys = sorted(keys)
    more = f" and {len(keys) - n} more" if len(keys) > n else ""
    return ", ".join(repr(k) for k in keys[:n]) + more


def load(name: str, device=None, directory=WEIGHTS):
    """The model ``name`` (``"cnn-digits"``, ...) with its shipped weights, in eval mode, on
    ``device`` (default: the default device). Works offline. Damaged, crafted or mismatched
    files raise ``CheckpointError`` naming the file and the tensor or field.

    Examples
    --------
    >>> import labkit as lk
    >>> model = lk.models.load("cnn-digits")
    >>> model.training
    False
    """
    directory = Path(directory)
    record = info(name, directory)
    where = directory / f"{name}.json"
    path = directory / f"{name}.safetensors"
    try:
        data = read_regular(path, what="weights file")
    except Missing:
        raise CheckpointError(f"{path}: missing; {where.name} has no weights beside it") \
            from None
    # NOTE: a record without a fingerprint (saved by an earlier labkit) is not checked here
    got = fingerprint(data) if record.get("weights") is not None else None
    if got is not None and got != record["weights"]:
        what = (f"{got['size']:,} bytes where {where.name} says {record['weights']['size']:,}"
                if got["size"] != record["weights"]["size"] else
                f"its SHA-256 is not the one {where.name} gives")
        raise CheckpointError(f"{path}: damaged or replaced ({what}); get the weights file "
                              "again (labkit ships its zoo's; save one of yours again)")
    tensors = tensors_from_bytes(data, str(path))
    count = sum(int(np.prod(a.shape, dtype=object)) for a in tensors.values())
    module, config = record["module"], record["config"]
    defaults = importlib.import_module(f"{__package__}.{module}").DEFAULTS
    floor = FLOORS[module]({**defaults, **config})
    # NOTE: a margin, so a config a little off still gets load_state_dict's key-by-key shapes
    if floor > 4 * count + (1 << 20):
        raise CheckpointError(f"{where}: its config builds a {module} of at least {floor:,} "
                              f"weights, but {path.name} holds {count:,}; the record and the "
                              "weights do not belong together")
    model = importlib.import_module(f"{__package__}.{module}").build(config)
    own = model.state_dict().keys()
    if set(tensors) != set(own):
        parts = [f"{what}: {_names(keys)}" for what, keys in
                 (("lacks", set(own) - set(tensors)), ("has unknown", set(tensors) - set(own)))
                 if keys]
        raise CheckpointError(f"{path}: not the weights of the {module} that {where.name}'s "
                              f"config builds; it {'; it '.join(parts)}")
    try:
        model.load_state_dict(tensors)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}; the weights were made for another config than "
                              f"the one {where.name} gives") from None
    model.eval()
    return model.to(_device(device))
