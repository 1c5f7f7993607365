"""A nested state <-> (its JSON structure, its arrays): each array in the structure is replaced by
``{"__tensor__": key}``."""

from __future__ import annotations

import itertools

import numpy as np

from ..errors import CheckpointError
from ._common import brief, kind

_REF = "__tensor__"


def split_state(state, path="state"):
    """(JSON-able structure, {key: array}); raises naming the first value that is neither."""
    tensors: dict[str, np.ndarray] = {}

    def walk(v, p):
        if isinstance(v, np.ndarray):
            key = base = p[len("state/"):] if p.startswith("state/") else p
            # NOTE: {"a/b": x} and {"a": {"b": y}} both give "a/b": each array keeps its own key
            for i in itertools.count(2):
                if key not in tensors:
                    break
                key = f"{base}#{i}"
            tensors[key] = v
            return {_REF: key}
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if not isinstance(k, str):
                    raise CheckpointError(f"{_show(p)} has key {k!r}: checkpoint state keys must "
                                          "be strings")
                if k == _REF:
                    raise CheckpointError(f"{_show(p)} has the key {_REF!r}, which checkpoints "
                                          "reserve for their references to arrays; rename it")
                out[k] = walk(x, f"{p}/{k}")
            return out
        if isinstance(v, (list, tuple)):
            return [walk(x, f"{p}/{i}") for i, x in enumerate(v)]
        if isinstance(v, np.generic):
            return v.item()
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if hasattr(v, "get") and hasattr(v, "shape") and hasattr(v, "dtype"):  # a cl array
            return walk(np.asarray(v.get()), p)
        raise CheckpointError(f"{_show(p)} is a {type(v).__name__}: a checkpoint holds arrays and "
                              "JSON values (dict, list, str, int, float, bool, None) only; give "
                              "the object a state_dict() of those")

    try:
        return walk(state, path), tensors
    except RecursionError:
        raise CheckpointError(f"{path} is nested too deeply to save") from None


def join_state(tree, tensors, where: str = "state.json"):
    """The state from its JSON structure and its arrays: ``tree`` must be an object, every
    reference must name an existing tensor, and every tensor must be referenced exactly once."""
    if not isinstance(tree, dict):
        raise CheckpointError(f"{where}: {kind(tree)}; a checkpoint's state is a JSON object")
    used: dict[str, str] = {}

    def walk(v, p):
        if isinstance(v, dict):
            if _REF in v:
                key = v[_REF]
                if len(v) != 1 or not isinstance(key, str):
                    raise CheckpointError(f"{where}: {_show(p)} is {brief(v)}; a reference to "
                                          f'an array is exactly {{"{_REF}": "<tensor name>"}}')
                if key not in tensors:
                    raise CheckpointError(f"{where}: {_show(p)} refers to tensor {key!r}, which "
                                          "tensors.safetensors lacks")
                if key in used:
                    raise CheckpointError(f"{where}: tensor {key!r} is referenced twice ("
                                          f"{_show(used[key])} and {_show(p)}); labkit writes "
                                          "one reference per array")
                used[key] = p
                return tensors[key]
            return {k: walk(x, f"{p}/{k}") for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, f"{p}/{i}") for i, x in enumerate(v)]
        return v

    if _REF in tree:
        raise CheckpointError(f"{where}: the state itself is a reference to a tensor; a "
                              "checkpoint's state is an object of named values")
    try:
        out = walk(tree, "state")
    except RecursionError:
        raise CheckpointError(f"{where}: nested too deeply to load") from None
    unused = sorted(set(tensors) - set(used))
    if unused:
        raise CheckpointError(f"{where} never refers to the tensors {unused[:5]}"
                              f"{' ...' if len(unused) > 5 else ''} of tensors.safetensors, so "
                              "the two files do not belong together (one was replaced or edited)")
    return out


def _show(p: str) -> str:
    parts = p.split("/")
    return parts[0] + "".join(f"[{x!r}]" if not x.isdigit() else f"[{x}]" for x in parts[1:])


