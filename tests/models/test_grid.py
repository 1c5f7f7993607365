"""image_grid against an independent PNG reader (Pillow)."""

import io

import numpy as np
import pytest

import labkit as lk


def test_layout_scaling_and_range():
    imgs = np.arange(5 * 2 * 3, dtype=np.float32).reshape(5, 1, 2, 3)
    g = lk.models.image_grid(imgs, ncols=2, pad=1, scale=2)
    assert g.shape == (3, 2) and g.array.shape == ((3 * 3 + 1) * 2, (2 * 4 + 1) * 2)
    a = g.array
    assert a[0, 0] == 255                                  # padding is white
    assert a[2, 2] == 0 and a[2 + 2 * 3 * 2 + 1, 2 + 4 * 2 + 2 * 2 + 1] == 255  # min, max
    assert (a[2:4, 2:4] == a[2, 2]).all()                   # one pixel -> 2x2
    assert (a[-4:-2, -8:-2] == 255).all()                   # the empty 6th cell stays white


def test_png_decodes_to_the_array():
    pil = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(0)
    for imgs in (rng.random((7, 8, 8)), rng.random((4, 3, 5, 6))):
        g = lk.models.image_grid(imgs, value_range=(0, 1))
        back = np.asarray(pil.open(io.BytesIO(g._repr_png_())))
        np.testing.assert_array_equal(back, g.array)


def test_tensor_input_and_errors(tmp_path):
    g = lk.models.image_grid(lk.tensor(np.ones((2, 1, 4, 4), np.float32)), scale=1)
    assert g.save(tmp_path / "g.png").read_bytes() == g.png()
    with pytest.raises(ValueError, match=r"image_grid: expected images .* got shape \(4, 4\)"):
        lk.models.image_grid(np.ones((4, 4)))
