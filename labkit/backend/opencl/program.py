"""Kernel sources and builds: each program is built once per (device, source, options).

Builds are cached in memory (per device) and on disk as device binaries under
``config.kernel_cache_dir()`` (``$LABKIT_CACHE_DIR/kernels``, default the user cache dir); on
PoCL from a program's second build from source on (see ``POCL``).
``LABKIT_KERNEL_CACHE=off`` disables the disk cache; ``labkit doctor --clear-cache`` clears it.

Every kernel source starts with :func:`header` (the one place that enables fp64) and every
kernel object comes from :func:`kernels` (retrieved once, typed once, cached per device).
"""

from __future__ import annotations

import functools
import hashlib
import time
from pathlib import Path

from ... import config
from ..._fs import atomic_write
from ...errors import KernelBuildError
from .context import Runtime, no_fp64_error


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


def header(rt: Runtime, ctypes=(), defines=None, *, what: str = "kernel") -> str:
    """The first lines of every kernel source: the fp64 pragma when one of ``ctypes`` (OpenCL
    type names) is ``double``, then ``#define K V`` for each of
    ``defines``. ``double`` on a device without fp64 is a DTypeError naming ``what``, so no
    kernel reaches the compiler with a type the device lacks."""
    lines = []
    if "double" in ctypes:
        if not rt.info.fp64:
            raise no_fp64_error(rt.info, what)
        lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    lines += [f"#define {k} {v}" for k, v in (defines or {}).items()]
    return "\n".join(lines) + "\n" if lines else ""


def _key(rt: Runtime, src: str, options: str) -> str:
    import pyopencl as cl

    h = hashlib.sha256()
    # NOTE: per hardware, not per name: a device derived from this one (a no-fp64 test
    # device) builds the same source to the same binary
    for part in (src, options, rt.info.hardware, cl.VERSION_TEXT):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def build(rt: Runtime, src: str, options: str = "", *, name: str = "<generated>"):
    """Build ``src`` for ``rt``'s device; cached in memory and on disk. Returns a Program."""
    key = _key(rt, src, options)
    return rt.cached(key, lambda: _build(rt, src, options, name, key))


def _build(rt: Runtime, src: str, options: str, name: str, key: str):
    import pyopencl as cl

    use_disk = config.get("LABKIT_KERNEL_CACHE")
    path = config.kernel_cache_dir() / f"{key}.bin"
    prg = None
    if use_disk and path.is_file():
        try:
            binary = _unsealed(path.read_bytes())
            if binary is not None:
                prg = cl.Program(rt.context, [rt.cl_device], [binary]).build(options=options)
        except (cl.Error, OSError):
            prg = None  # a stale binary: rebuilt from source below
    if prg is None:
        prg = _build_source(rt, src, options, name)
        if use_disk:
            seen = path.with_suffix(".built")
            if rt.info.platform != POCL or seen.is_file():
                _store(path, _sealed(prg.get_info(cl.program_info.BINARIES)[0]))
            else:
                _store(seen, b"")
    return prg


#: a stored binary is ``SEAL``, the SHA-256 of the driver's binary, then the binary. PoCL
#: crashes the process (a segmentation fault) on a binary cut short, so a damaged file (a
#: copy that stopped, a disk error) is found here and built again from source; a file of an
#: older labkit (no seal) is built again once
SEAL = b"labkit OpenCL binary 1\n"


def _sealed(binary: bytes) -> bytes:
    return SEAL + hashlib.sha256(binary).digest() + binary


def _unsealed(data: bytes) -> bytes | None:
    """The driver's binary in a stored file, or None where the file is not whole."""
    n = len(SEAL) + 32
    if not data.startswith(SEAL) or len(data) <= n:
        return None
    binary = data[n:]
    return binary if hashlib.sha256(binary).digest() == data[len(SEAL):n] else None


#: PoCL's platform name. PoCL keeps built programs in a cache of its own, but reading a
#: binary back (``get_info(BINARIES)``) first compiles every kernel of the program for any
#: work-group size: 0.2-0.47 s a program here, once per machine. The first process to build
#: a program therefore only marks it (``<key>.built``) and the next one stores the binary
#: (from PoCL's cache, that build takes 0.03-0.05 s): an MLP's first 8 eager steps on a new
#: machine took 14.4 s storing at once and 8.2 s without; a later process loading the
#: binaries took 0.10 s, 0.9-1.4 s building from PoCL's cache (/tmp/me/cold.py in the notes)
POCL = "Portable Computing Language"


#: builds of one program before a failure without a compiler diagnostic is an error: PoCL (3.0
#: and later) sometimes fails a build when another process builds the same source into the
#: same cache directory at that moment, with an empty log (4 processes building the same 150
#: kernels: 2-6 failures in 600 builds, in four runs; none in 1,200 with retries), as pytest's
#: workers, MPI ranks and sweep workers do; the next build finds the other's result
BUILD_TRIES = 3


def _build_source(rt: Runtime, src: str, options: str, name: str):
    import pyopencl as cl

    attempt = 1
    while True:
        try:
            return cl.Program(rt.context, src).build(options=options)
        except cl.Error as e:
            log = str(e).strip()
            if attempt == BUILD_TRIES or "error:" in log:
                log = log or "(the driver returned no build log)"
                raise KernelBuildError(
                    f"OpenCL build of {name} failed on cl:{rt.info.index} ({rt.info.name}, "
                    f"{rt.info.platform}) with options {options!r}:\n{log}",
                    device=f"cl:{rt.info.index}", log=log, source_name=name,
                ) from None
        time.sleep(0.02 * attempt)  # NOTE: only to let the other process finish its build
        attempt += 1


def _store(path: Path, binary: bytes) -> None:
    try:
        atomic_write(path, binary)
    except OSError:
        pass  # a read-only cache dir only costs rebuild time


class Kernels:
    """The kernel objects of one program, each retrieved once and given its argument types.

    NOTE: every attribute access on a pyopencl Program makes a new kernel object (and warns
    after the first), and ``set_scalar_arg_dtypes`` is worth doing once: hence this holder.
    """

    def __init__(self, program, signatures: dict):
        for kname, arg_types in signatures.items():
            k = getattr(program, kname)
            k.set_scalar_arg_dtypes(arg_types)
            k.lk_types = list(arg_types)  # NOTE: for a copy of the kernel (compile/capture.py)
            setattr(self, kname, k)


def kernels(rt: Runtime, src: str, signatures: dict, *, name: str, options: str = ""):
    """The kernels named in ``signatures`` (name -> argument dtypes, None for buffers) of
    ``src`` built for ``rt``: built, retrieved and typed once per device, then one lookup."""
    key = ("kernels", src, options, tuple(signatures))
    return rt.cached(key, lambda: Kernels(build(rt, src, options, name=name), signatures))
