"""The safetensors encoding of a checkpoint's arrays, and its reader, which checks the whole
header (any safetensors reader can open labkit's file; labkit refuses at least what the
safetensors library refuses)."""

from __future__ import annotations

import json
import struct

import numpy as np

from ..errors import CheckpointError
from ._common import CODES, DTYPES, FORMAT, MAX_DIMS, brief, check_keys, is_int, kind, read_json


def tensors_bytes(tensors: dict[str, np.ndarray]) -> list:
    """The safetensors encoding of ``tensors`` as a list of buffers (header, then each array)."""
    header, offset, arrays = {}, 0, []
    for key in sorted(tensors):
        # NOTE: contiguous first: safetensors 0.8 itself writes wrong bytes for strided arrays.
        a = np.asarray(tensors[key])
        # (not np.ascontiguousarray: it turns a 0-d array into shape (1,))
        a = a if a.flags.c_contiguous else a.copy(order="C")
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        code = CODES.get(a.dtype.newbyteorder("=") if a.dtype.byteorder != "|" else a.dtype)
        if code is None:
            known = sorted(str(np.dtype(d)) for d in DTYPES.values())
            raise CheckpointError(f"tensor {key!r} has dtype {a.dtype}, which safetensors cannot "
                                  f"store; use one of {known}")
        header[key] = {"dtype": code, "shape": list(a.shape),
                       "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        arrays.append(a)
    header["__metadata__"] = {"format": FORMAT}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return [struct.pack("<Q", len(raw)) + raw] + [a.reshape(-1).view(np.uint8) for a in arrays
                                                   if a.nbytes]


def _tensor_entry(key, info, where: str, size: int):
    """(dtype, shape, begin, end) of one header entry, every field checked."""
    what = f"{where}: tensor {brief(key, 80)}"
    if not isinstance(info, dict):
        raise CheckpointError(f"{what}: the header entry is {kind(info)}, expected an object "
                              "with dtype, shape and data_offsets")
    check_keys(info, ("dtype", "shape", "data_offsets"), (), f"{what}: the header entry")
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(code, str) or code not in DTYPES:
        raise CheckpointError(f"{what}: dtype {brief(code)} is not one labkit reads "
                              f"({', '.join(DTYPES)})")
    if not isinstance(shape, list) or not all(is_int(d) and d >= 0 for d in shape):
        raise CheckpointError(f"{what}: shape {brief(shape)} is not a list of non-negative "
                              "integers")
    if len(shape) > MAX_DIMS:
        raise CheckpointError(f"{what}: shape has {len(shape)} dimensions; NumPy supports at "
                              f"most {MAX_DIMS}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(is_int, offsets))):
        raise CheckpointError(f"{what}: data_offsets {brief(offsets)} is not a list of two "
                              "integers [begin, end]")
    begin, end = offsets
    if not 0 <= begin <= end <= size:
        raise CheckpointError(f"{what}: data_offsets {brief(offsets)} do not lie inside the "
                              f"data region of {size} bytes (need 0 <= begin <= end <= {size}); "
                              "the file is truncated or corrupted")
    dt = np.dtype(DTYPES[code]).newbyteorder("<")
    # NOTE: Python ints (np.prod would overflow silently), cut short past the file's size
    count = 0 if 0 in shape else 1
    for d in shape:
        count *= d
        if count > size:
            break
    if end - begin != count * dt.itemsize:
        need = count * dt.itemsize if count <= size else f"more than {size}"
        raise CheckpointError(f"{what}: data_offsets [{begin}, {end}] hold {end - begin} bytes "
                              f"but shape {brief(shape)} of {code} needs {need}")
    return dt, tuple(shape), begin, end


def _check_layout(entries, size: int, where: str) -> None:
    """The tensors must tile the data region exactly: no overlaps, no gaps, nothing after the
    last one (as the safetensors library requires)."""
    at, prev = 0, None
    for key, _, _, begin, end in sorted(entries, key=lambda e: (e[3], e[4])):
        if begin < at:
            raise CheckpointError(f"{where}: tensor {brief(key, 80)} at [{begin}, {end}] "
                                  f"overlaps tensor {brief(prev, 80)}, which ends at {at}; "
                                  "each tensor needs bytes of its own")
        if begin > at:
            raise CheckpointError(f"{where}: bytes [{at}, {begin}] of the data region belong to "
                                  "no tensor; the header is corrupted")
        at, prev = end, key
    if at != size:
        raise CheckpointError(f"{where}: {size - at} bytes after the last tensor belong to no "
                              "tensor; the file is corrupted or has data appended")


def tensors_from_bytes(buf, where: str = "tensors") -> dict[str, np.ndarray]:
    """Arrays (views into ``buf``) from a safetensors encoding, after checking the whole header:
    its length, that it is a JSON object without duplicate keys, ``__metadata__`` (str to str),
    each tensor's dtype, shape and offsets, and that the tensors tile the data region exactly.

    Raises
    ------
    CheckpointError
        naming ``where``, the tensor and the field for anything that is not so.
    """
    mv = memoryview(buf).cast("B")
    total = mv.nbytes
    if total < 8:
        raise CheckpointError(f"{where}: {total} bytes; a safetensors file starts with an 8-byte "
                              "header length")
    (n,) = struct.unpack_from("<Q", mv, 0)
    if n > total - 8:
        raise CheckpointError(f"{where}: the header length field says {n} bytes but the file "
                              f"has {total - 8} after it; the file is truncated or corrupted")
    header = read_json(mv[8:8 + n], f"{where} (header)")
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}: the header is {kind(header)}, expected a JSON object "
                              "of tensor entries")
    base, size = 8 + n, total - 8 - n
    entries = []
    for key, info in header.items():
        if key == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise CheckpointError(f"{where}: __metadata__ is {brief(info)}, expected an "
                                      "object of strings")
            continue
        entries.append((key, *_tensor_entry(key, info, where, size)))
    _check_layout(entries, size, where)
    out = {}
    for key, dt, shape, begin, end in entries:
        try:
            if end == begin:
                out[key] = np.zeros(shape, dt)
            else:
                out[key] = np.frombuffer(buf, dtype=dt, count=(end - begin) // dt.itemsize,
                                         offset=base + begin).reshape(shape)
        except ValueError as e:
            raise CheckpointError(f"{where}: tensor {brief(key, 80)}: {e}") from None
        # NOTE: a BOOL byte other than 0 or 1 is no bool: NumPy would carry it along silently
        if dt == np.bool_ and end > begin and out[key].view(np.uint8).max() > 1:
            raise CheckpointError(f"{where}: tensor {brief(key, 80)}: BOOL bytes other than 0 "
                                  "and 1")
    return out


