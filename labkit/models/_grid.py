"""image_grid: a batch of images tiled into one picture, as an array, a PNG or a notebook
output (``_repr_png_``: Jupyter, nbconvert and GitHub show it without a widget)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from .. import _fs


def _png(rows: np.ndarray) -> bytes:
    """A PNG of a uint8 (H, W) grey or (H, W, 3) RGB array (no filter, deflate)."""
    h, w = rows.shape[:2]
    colour = 0 if rows.ndim == 2 else 2
    raw = b"".join(b"\x00" + r.tobytes() for r in rows)

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b""))


class ImageGrid:
    """Images tiled in rows of ``ncols``. ``.array`` is the picture (uint8, (H, W) or
    (H, W, 3)), ``.png()`` its PNG bytes, ``.save(path)`` writes it; a notebook shows it."""

    def __init__(self, array: np.ndarray, shape: tuple):
        self.array, self.shape = array, shape

    def png(self) -> bytes:
        return _png(self.array)

    def _repr_png_(self):
        return self.png()

    def save(self, path) -> Path:
        _fs.atomic_write(path, self.png())
        return Path(path)

    def __repr__(self):
        rows, cols = self.shape
        return f"ImageGrid({rows}x{cols} images, {self.array.shape[1]}x{self.array.shape[0]} px)"


def image_grid(images, ncols=None, pad=1, scale=4, value_range=None) -> ImageGrid:
    """Tile ``images`` (N, H, W), (N, 1, H, W) or (N, 3, H, W); a Tensor or an array.

    ``value_range=(low, high)`` maps low to black and high to white (default: the images' own
    minimum and maximum); ``scale`` enlarges each pixel to scale x scale; ``pad`` pixels of
    white (before scaling) separate the images; ``ncols`` defaults to about sqrt(N).

    Examples
    --------
    >>> import numpy as np
    >>> g = image_grid(np.zeros((6, 8, 8)), ncols=3, pad=1, scale=2)
    >>> g.array.shape, g.shape
    ((38, 56), (2, 3))
    >>> g.png()[:4]
    b'\\x89PNG'
    """
    a = np.asarray(images.numpy() if hasattr(images, "numpy") else images, dtype=np.float64)
    if a.ndim == 4 and a.shape[1] in (1, 3):
        a = a[:, 0] if a.shape[1] == 1 else a.transpose(0, 2, 3, 1)
    if a.ndim not in (3, 4) or (a.ndim == 4 and a.shape[-1] != 3) or len(a) == 0:
        raise ValueError(f"image_grid: expected images (N, H, W), (N, 1, H, W) or (N, 3, H, W) "
                         f"with N >= 1, got shape {np.shape(images)}")
    lo, hi = value_range if value_range is not None else (a.min(), a.max())
    a = np.clip((a - lo) / (hi - lo if hi > lo else 1.0), 0, 1)
    n, h, w = a.shape[:3]
    ncols = int(ncols or np.ceil(np.sqrt(n)))
    nrows = -(-n // ncols)
    out = np.ones((nrows * (h + pad) + pad, ncols * (w + pad) + pad) + a.shape[3:])
    for i, img in enumerate(a):
        r, c = divmod(i, ncols)
        out[pad + r * (h + pad):pad + r * (h + pad) + h,
            pad + c * (w + pad):pad + c * (w + pad) + w] = img
    out = np.repeat(np.repeat(out, scale, axis=0), scale, axis=1)
    return ImageGrid(np.round(out * 255).astype(np.uint8), (nrows, ncols))
