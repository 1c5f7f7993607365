"""Counter-based random numbers (Philox4x32-10) whose whole state is two integers.

``Generator(seed, device)`` draws on ``cpu`` (NumPy) or ``cl:N`` (kernels_cl/random.cl). Both
compute the same 32-bit words, so ``bits``, ``uniform``, ``integers`` and ``bernoulli`` give
bitwise-identical results on every device; ``normal`` uses the device's log/cos and agrees to a
few ulps. ``state_dict()`` is ``{"seed": s, "counter": c}``: saving it and loading it later
continues the stream exactly. The counter counts the 2**64 blocks of four words a seed has: a
draw that would pass the last one raises ``CheckpointError`` instead of wrapping around to
numbers already drawn (only an edited state's counter gets near it).

Examples
--------
>>> from labkit.backend.random import Generator
>>> g = Generator(seed=42)
>>> s = g.state_dict()
>>> a = g.uniform((3,))
>>> g.load_state_dict(s)
>>> bool((g.uniform((3,)) == a).all())
True
"""

from __future__ import annotations

import contextlib
import reprlib
import threading

import numpy as np

from ..errors import CheckpointError
from . import opencl
from .device import Device
from .device import device as _device
from .opencl.context import runtime
from .opencl.ndarray import CTYPES, check_dtype
from .opencl.program import header, kernels, source

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK = np.uint64(0xFFFFFFFF)
#: the blocks of one key: the counter (blocks drawn) never passes it
_BLOCKS = 1 << 64


def philox4x32_10(blocks: np.ndarray, key: tuple[int, int]) -> np.ndarray:
    """The four 32-bit words of each block index in ``blocks`` (uint64), as (n, 4) uint32."""
    b = blocks.astype(np.uint64)
    c0 = b & _MASK
    c1 = b >> np.uint64(32)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    k0, k1 = key[0] & 0xFFFFFFFF, key[1] & 0xFFFFFFFF
    for _ in range(10):
        p0 = _M0 * c0
        p1 = _M1 * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
        k0 = (k0 + _W0) & 0xFFFFFFFF
        k1 = (k1 + _W1) & 0xFFFFFFFF
    return np.stack([c0, c1, c2, c3], axis=1).astype(np.uint32)


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


_RECORDING = threading.local()


class recording:
    """``with recording() as drawn:`` -- ``drawn`` maps each generator this thread drew from
    inside the block to its state ``(seed, counter)`` before its first draw there. ``rewind``
    puts them back, so code run again (lk.scan's recomputed steps) draws the numbers it drew
    the first time; generators it did not draw from, and other threads', are left alone."""

    def __enter__(self) -> dict:
        self.drawn: dict = {}
        _RECORDING.__dict__.setdefault("stack", []).append(self.drawn)
        return self.drawn

    def __exit__(self, *exc) -> None:
        _RECORDING.stack.pop()


def rewind(drawn: dict) -> dict:
    """Set each generator in ``drawn`` to its state there; returns their states before."""
    now = {g: (g.seed, g.counter) for g in drawn}
    for g, (seed, counter) in drawn.items():
        g.seed, g.counter = seed, counter
    return now


def _short(v, n: int) -> str:
    """``repr(v)`` cut to ``n`` characters, nested values elided (a deeply nested state would
    exhaust the recursion limit in repr)."""
    r = reprlib.Repr()
    r.maxlevel, r.maxother, r.maxstring = 3, n, n
    return r.repr(v)[:n]


class Generator:
    """A seeded stream of random numbers on one device; its state is ``(seed, counter)``."""

    def __init__(self, seed: int = 0, device=None):
        self.seed = int(seed) & 0xFFFFFFFFFFFFFFFF
        self.counter = 0
        self.device: Device = _device(device)
        self._shard: tuple[int, int, int] | None = None

    # ---- sharding (data parallel) -------------------------------------------------------
    @property
    def shard(self) -> tuple[int, int, int] | None:
        """``(offset, rows, total)`` while this process holds rows ``offset:offset+rows`` of a
        global batch of ``total`` rows (data-parallel training sets it for each batch), else
        None. A draw whose first dimension is ``rows`` is then taken as batch-shaped: it gives
        those rows of the draw of ``(total, *rest)`` that one process would make, and the
        counter advances as that whole draw would, so every rank's stream stays equal to one
        process's. Other draws are unaffected."""
        return self._shard

    @shard.setter
    def shard(self, value) -> None:
        if value is not None:
            ok = (isinstance(value, tuple) and len(value) == 3
                  and all(type(v) is int for v in value))
            if not ok or not (0 <= value[0] and 0 <= value[1] and value[0] + value[1]
                              <= value[2]):
                raise ValueError(f"Generator.shard: expected (offset, rows, total) integers "
                                 f"with 0 <= offset and offset + rows <= total, got {value!r}")
        self._shard = value

    @contextlib.contextmanager
    def unsharded(self):
        """Draws inside are never taken as batch-shaped (``shard``): noise on weights, which
        every rank of a data-parallel run must draw alike."""
        shard, self._shard = self._shard, None
        try:
            yield self
        finally:
            self._shard = shard

    # ---- state --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"seed": self.seed, "counter": self.counter}

    def load_state_dict(self, state: dict) -> None:
        """Restore ``{"seed", "counter"}``: integers (not bools, floats or strings), the seed in
        [0, 2**64), the counter in [0, 2**64] (2**64: every block drawn, as ``state_dict()``
        says after the last one); anything else is a ``CheckpointError`` and changes nothing.
        A counter near the end loads; the draw that would pass the end raises (see ``_take``).
        """
        def value(key):
            v = state.get(key) if isinstance(state, dict) else None
            top = _BLOCKS if key == "counter" else _BLOCKS - 1
            if type(v) is not int or not 0 <= v <= top:
                span = "[0, 2**64]" if key == "counter" else "[0, 2**64)"
                raise CheckpointError(f"Generator.load_state_dict: {key!r} must be an integer in "
                                      f"{span}, got {_short(v, 60)} (state "
                                      f"{_short(state, 80)})")
            return v

        seed, counter = value("seed"), value("counter")
        self.seed, self.counter = seed, counter

    def __repr__(self) -> str:
        return f"Generator(seed={self.seed}, counter={self.counter}, device='{self.device}')"

    @property
    def _key(self):
        return (self.seed & 0xFFFFFFFF, self.seed >> 32)

    def _take(self, nblocks: int) -> int:
        if self.counter + nblocks > _BLOCKS:
            # NOTE: Philox's block index is 64 bits: past the end it would wrap to blocks
            # already drawn and repeat their numbers. No run draws 2**64 blocks (centuries at
            # 1e10 a second), so the counter came from a crafted or damaged state
            raise CheckpointError(
                f"{self!r}: drawing {nblocks} blocks would pass the last of its 2**64 blocks "
                f"({_BLOCKS - self.counter} left) and repeat random numbers already drawn; its "
                "counter was loaded from a damaged or edited state. Load the state the run "
                "saved, or give the generator a new seed")
        stack = _RECORDING.__dict__.get("stack")
        if stack:
            for drawn in stack:
                drawn.setdefault(self, (self.seed, self.counter))
        start = self.counter
        self.counter += nblocks
        return start

    def _span(self, shape, per: int) -> tuple[int, int, int]:
        """Advance the counter for a draw of ``shape`` (``per`` values per block) and return
        ``(first block, values to skip in it, blocks to compute)`` for this process's part."""
        n, first, total = _size(shape), 0, _size(shape)
        sh = self._shard
        if sh is not None and len(shape) >= 1 and shape[0] == sh[1] and sh[1] != sh[2]:
            inner = _size(shape[1:])
            first, total = sh[0] * inner, sh[2] * inner
        start = self._take(-(-total // per))
        skip = first % per
        return start + first // per, skip, -(-(skip + n) // per)

    def _words(self, b0: int, nb: int) -> np.ndarray:
        return philox4x32_10(np.arange(b0, b0 + nb, dtype=np.uint64), self._key)

    # ---- draws --------------------------------------------------------------------------
    def bits(self, shape) -> object:
        """Uniform 32-bit words (uint32)."""
        n = _size(shape)
        b0, skip, nb = self._span(shape, 4)
        if self.device.kind == "cpu":
            return self._words(b0, nb).reshape(-1)[skip:skip + n].reshape(shape)
        return self._cl("random_bits", np.uint32, shape, n, b0, skip, nb, ())

    def uniform(self, shape, low=0.0, high=1.0, dtype=np.float32):
        """Uniform on ``[low, high)``; float32 uses 24 bits per value, float64 53."""
        dt = np.dtype(dtype)
        n = _size(shape)
        per = 4 if dt == np.float32 else 2
        b0, skip, nb = self._span(shape, per)
        if self.device.kind == "cpu":
            w = self._words(b0, nb)
            if dt == np.float32:
                u = (w.reshape(-1)[skip:skip + n] >> np.uint32(8)).astype(np.float32) \
                    * np.float32(2**-24)
            else:
                w = w.reshape(-1, 2)[skip:skip + n]
                u = ((w[:, 0] >> np.uint32(5)).astype(np.float64) * 67108864.0
                     + (w[:, 1] >> np.uint32(6)).astype(np.float64)) * (1.0 / 9007199254740992.0)
            lo, hi = dt.type(low), dt.type(high)
            return (lo + (hi - lo) * u.astype(dt)).reshape(shape)
        return self._cl("random_uniform", dt, shape, n, b0, skip, nb, (low, high))

    def normal(self, shape, mean=0.0, std=1.0, dtype=np.float32):
        """Normal by Box-Muller (two values per block)."""
        dt = np.dtype(dtype)
        n = _size(shape)
        b0, skip, nb = self._span(shape, 2)
        if self.device.kind == "cpu":
            w = self._words(b0, nb)
            if dt == np.float32:
                scale = np.float32(2**-24)
                u1 = np.float32(1) - (w[:, 0] >> np.uint32(8)).astype(np.float32) * scale
                u2 = (w[:, 2] >> np.uint32(8)).astype(np.float32) * scale
            else:
                def unit(a, b):
                    return ((a >> np.uint32(5)).astype(np.float64) * 67108864.0
                            + (b >> np.uint32(6)).astype(np.float64)) / 9007199254740992.0
                u1 = 1.0 - unit(w[:, 0], w[:, 1])
                u2 = unit(w[:, 2], w[:, 3])
            r = np.sqrt(dt.type(-2) * np.log(u1))
            t = dt.type(2 * np.pi) * u2
            z = np.stack([r * np.cos(t), r * np.sin(t)], axis=1).reshape(-1)[skip:skip + n]
            return (dt.type(mean) + dt.type(std) * z).astype(dt).reshape(shape)
        return self._cl("random_normal", dt, shape, n, b0, skip, nb, (mean, std))

    def bernoulli(self, shape, p: float):
        """Booleans that are True with probability ``p`` (from float32 uniforms)."""
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"bernoulli: p must be in [0, 1], got {p}")
        u = self.uniform(shape, dtype=np.float32)
        return u < np.float32(p)

    def integers(self, low: int, high: int, shape):
        """Integers in ``[low, high)`` (int64), from 64 random bits each (bias < 2**-32)."""
        if high <= low:
            raise ValueError(f"integers: high ({high}) must exceed low ({low})")
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),)
        w = self.bits(shape + (2,))  # NOTE: a shard's rows stay whole rows of pairs
        w = (w.get() if self.device.kind == "cl" else w).reshape(-1)
        v = (w[0::2].astype(np.uint64) << np.uint64(32)) | w[1::2].astype(np.uint64)
        r = (v % np.uint64(high - low)).astype(np.int64) + low
        r = r.reshape(shape)
        if self.device.kind == "cl":
            return opencl.asarray(r, device=self.device)
        return r

    def permutation(self, n: int) -> np.ndarray:
        """A permutation of ``range(n)`` as a NumPy int64 array (the same on every device)."""
        dev, self.device = self.device, Device("cpu")
        try:
            with self.unsharded():  # NOTE: never batch-shaped
                keys = self.bits((2 * n,))
        finally:
            self.device = dev
        k = (keys[0::2].astype(np.uint64) << np.uint64(32)) | keys[1::2].astype(np.uint64)
        return np.argsort(k, kind="stable").astype(np.int64)

    # ---- OpenCL -------------------------------------------------------------------------
    def _cl(self, kernel, dt, shape, n, b0, skip, nb, extra):
        rt = runtime(self.device.index)
        dt = np.dtype(dt)
        check_dtype(dt, rt, f"Generator.{kernel[7:]}")
        out = opencl.ndarray(rt, shape, dt)
        if n == 0:
            return out
        ct, defs = CTYPES[dt], {}
        if dt != np.uint32:
            defs = {"T": ct, "LK_DOUBLE": int(ct == "double")}
        src = header(rt, (ct,), defs, what=f"Generator.{kernel[7:]}") + source("random")
        arg_types = [np.int64, None, np.uint64, np.int32, np.uint32, np.uint32] \
            + [dt.type] * len(extra)
        k = getattr(kernels(rt, src, {kernel: arg_types}, name=f"random.cl:{kernel}"), kernel)
        with rt.lock:
            k(rt.queue, (-(-nb // 64) * 64,), None, n, out.data, b0, skip, *self._key,
              *(dt.type(x) for x in extra))
        return out
