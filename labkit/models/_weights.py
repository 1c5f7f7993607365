"""Shipped weights: ``weights/NAME.safetensors`` (the parameters and buffers) beside
``weights/NAME.json`` (the model's module, its config, the measured results and the command
that produced them). Loading parses only JSON and the safetensors header: no pickle, no code
from the file."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from .. import _fs
from ..backend.device import device as _device
from ..checkpoint import tensors_bytes, tensors_from_bytes
from ..errors import CheckpointError

WEIGHTS = Path(__file__).parent / "weights"


def available() -> list[str]:
    """The names ``load`` accepts: every shipped ``weights/NAME.json``."""
    return sorted(p.stem for p in WEIGHTS.glob("*.json"))


def info(name: str, directory=WEIGHTS) -> dict:
    """The record of shipped weights: ``module``, ``config``, ``results``, ``command``."""
    path = Path(directory) / f"{name}.json"
    if not path.is_file():
        names = sorted(p.stem for p in Path(directory).glob("*.json"))
        raise CheckpointError(f"labkit.models: no weights named {name!r} in {directory}; "
                              f"available: {', '.join(names) or 'none'}")
    record = json.loads(path.read_text())
    if not isinstance(record, dict) or not isinstance(record.get("module"), str) \
            or not record["module"].isidentifier() or not isinstance(record.get("config"), dict):
        raise CheckpointError(f"{path}: expected a JSON object with a module name and a config")
    return record


def save(model, name: str, module: str, config: dict, results: dict, command: str,
         directory=WEIGHTS) -> Path:
    """Write ``model``'s state as ``directory/NAME.safetensors`` and its record as JSON."""
    directory = Path(directory)
    state = model.state_dict()
    _fs.atomic_write(directory / f"{name}.safetensors",
                     b"".join(bytes(p) for p in tensors_bytes(state)))
    record = {"module": module, "config": config, "results": results, "command": command}
    _fs.atomic_write(directory / f"{name}.json", json.dumps(record, indent=1) + "\n")
    return directory / f"{name}.safetensors"


def load(name: str, device=None, directory=WEIGHTS):
    """The model ``name`` (``"cnn-digits"``, ...) with its shipped weights, in eval mode, on
    ``device`` (default: the default device). Works offline.

    Examples
    --------
    >>> import labkit as lk
    >>> model = lk.models.load("cnn-digits")
    >>> model.training
    False
    """
    directory = Path(directory)
    record = info(name, directory)
    module = importlib.import_module(f"{__package__}.{record['module']}")
    model = module.build(record["config"])
    path = directory / f"{name}.safetensors"
    model.load_state_dict(tensors_from_bytes(path.read_bytes(), str(path)))
    model.eval()
    return model.to(_device(device))
