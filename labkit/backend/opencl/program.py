"""Kernel sources and builds: each program is built once per (device, source, options).

Builds are cached in memory (per device) and on disk as device binaries under
``$LABKIT_CACHE_DIR`` (default: the user cache dir, e.g. ``~/.cache/labkit/kernels``).
Set ``LABKIT_KERNEL_CACHE=0`` to disable the disk cache; delete the folder, or run
``labkit doctor --clear-cache``, to clear it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from ...errors import KernelBuildError
from .context import Runtime, env_flag


@functools.lru_cache(maxsize=1)
def kernels_dir() -> Path:
    """Where the ``.cl`` sources are: inside the installed package, else the repository root."""
    here = Path(__file__).resolve()
    for cand in (here.parents[2] / "kernels_cl", here.parents[3] / "kernels_cl"):
        if (cand / "common.cl").is_file():
            return cand
    raise FileNotFoundError(
        "labkit's OpenCL sources (kernels_cl/*.cl) were not found next to the package; "
        "reinstall labkit (`pip install labkit` ships them inside the wheel)"
    )


@functools.cache
def source(name: str) -> str:
    """The text of ``kernels_cl/<name>.cl``."""
    return (kernels_dir() / f"{name}.cl").read_text()


def cache_dir() -> Path:
    d = os.environ.get("LABKIT_CACHE_DIR")
    if d:
        return Path(d) / "kernels"
    import platformdirs

    return Path(platformdirs.user_cache_dir("labkit")) / "kernels"


def clear_disk_cache() -> Path:
    d = cache_dir()
    shutil.rmtree(d, ignore_errors=True)
    return d


def _key(rt: Runtime, src: str, options: str) -> str:
    import pyopencl as cl

    info = rt.info
    h = hashlib.sha256()
    for part in (src, options, info.name, info.platform, info.version, info.driver_version,
                 cl.VERSION_TEXT):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def build(rt: Runtime, src: str, options: str = "", *, name: str = "<generated>"):
    """Build ``src`` for ``rt``'s device; cached in memory and on disk. Returns a Program."""
    return rt.cached(_key(rt, src, options), lambda: _build(rt, src, options, name))


def _build(rt: Runtime, src: str, options: str, name: str):
    import pyopencl as cl

    key = _key(rt, src, options)

    use_disk = env_flag("LABKIT_KERNEL_CACHE", True)
    path = cache_dir() / f"{key}.bin"
    prg = None
    if use_disk and path.is_file():
        try:
            binary = path.read_bytes()
            prg = cl.Program(rt.context, [rt.cl_device], [binary]).build(options=options)
        except (cl.Error, OSError):
            prg = None  # a stale or damaged binary: rebuild from source below
    if prg is None:
        try:
            prg = cl.Program(rt.context, src).build(options=options)
        except cl.Error as e:
            log = str(e).strip() or "(the driver returned no build log)"
            raise KernelBuildError(
                f"OpenCL build of {name} failed on cl:{rt.info.index} ({rt.info.name}, "
                f"{rt.info.platform}) with options {options!r}:\n{log}",
                device=f"cl:{rt.info.index}", log=log, source_name=name,
            ) from None
        if use_disk:
            _store(path, prg.get_info(cl.program_info.BINARIES)[0])
    return prg


def _store(path: Path, binary: bytes) -> None:
    # NOTE: written to a temp file and renamed, so a crash never leaves a half binary behind.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(binary)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache dir only costs rebuild time
