"""Checkpoints: a directory of safetensors and JSON, written atomically, loaded without code.

A checkpoint directory holds

- ``tensors.safetensors`` — every array of the state, in the safetensors format (an 8-byte
  header length, a JSON header of dtypes, shapes and offsets, then the raw little-endian bytes);
  any safetensors reader can open it;
- ``state.json`` — everything else: a JSON object, the nested state with each array replaced by
  ``{"__tensor__": key}``;
- ``manifest.json`` — written last: the format name and version, the iteration, epoch and
  metrics,
  each file's size and CRC-32, and ``fields_crc32``, a CRC-32 of the manifest's other fields
  (everything but ``files``, whose entries are checked against the files themselves), so a
  damaged iteration, metric or run id is caught instead of believed (every manifest of format
  2 is sealed: one without the seal was edited). (Format 1, before labkit 0.2, said ``step``
  for the iteration, and its first manifests had no seal; it is still read.)

``save`` writes into a hidden temporary directory, fsyncs every file, renames the directory into
place and fsyncs its parent, so a process killed at any instant leaves either the new checkpoint
or none — never half of one — and the previous checkpoints untouched. The hidden directory's
name carries the writer's host, pid and process start time, and the writer holds an advisory
lock on it, so the next ``save`` into the same directory removes what killed writers left
(``cleanup``) and never what a live writer is still writing.

``load`` reads only regular files inside the checkpoint directory (no links, FIFOs or paths),
checks sizes and checksums before parsing anything, validates the safetensors header, the
manifest and the state field by field, and parses only JSON and raw bytes (no pickle, no code).
Whatever is damaged or crafted raises ``CheckpointError`` naming the file and the field;
``latest`` skips such checkpoints with a warning. Non-finite floats in the state (a diverged
loss in the log) are written as JSON's common ``NaN``/``Infinity`` extension and read back as
floats; everywhere a manifest or header needs an integer, they are refused.

Examples
--------
>>> import numpy as np, tempfile
>>> from labkit import checkpoint
>>> root = tempfile.mkdtemp()
>>> path = checkpoint.save(root, {"w": np.arange(3.0), "n": 7, "note": "hi"}, iteration=7)
>>> path.name
'ckpt-00000007'
>>> state = checkpoint.load(checkpoint.latest(root))
>>> state["w"], state["n"], state["note"], checkpoint.manifest(path)["iteration"]
(array([0., 1., 2.]), 7, 'hi', 7)
"""

from ..errors import CheckpointError
from ._common import FILES, FORMAT, MANIFEST, VERSION, is_count, listed, shown_key
from ._directory import latest, list_checkpoints, load, load_latest, remove, save, verify
from ._manifest import check_manifest, manifest
from ._state import join_state, split_state
from ._tensors import tensors_bytes, tensors_from_bytes
from ._writers import cleanup

__all__ = ["FILES", "FORMAT", "MANIFEST", "VERSION", "CheckpointError", "check_manifest",
           "cleanup", "is_count", "join_state", "latest", "list_checkpoints", "listed", "load",
           "load_latest", "manifest", "remove", "save", "shown_key", "split_state",
           "tensors_bytes", "tensors_from_bytes", "verify"]
