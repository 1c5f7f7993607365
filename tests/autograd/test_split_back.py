"""split at indices that go back (NumPy allows them: the pieces overlap or are empty): the
forward is NumPy's, and the backward adds each piece's gradient at its place (it raised, as
the pieces' gradients do not tile the input); against NumPy on both devices."""

from __future__ import annotations

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F


@pytest.mark.parametrize("idx", [[3, 1], [4, 2, 3], [2, 9], [0, 0], [-2, 1], [-2], [2, -1],
                                 [-3, 3], [-9, 2], [1, -1, -1], [-1, -4]])
def test_split_gradient_adds_each_piece_at_its_place(dev, idx):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    xt = lk.tensor(x, device=dev, requires_grad=True)
    pieces = F.split(xt, idx, axis=1)
    want = np.split(x, idx, axis=1)
    assert [p.shape for p in pieces] == [w.shape for w in want]
    ws = [rng.standard_normal(w.shape).astype(np.float32) for w in want]
    loss = sum((p * lk.tensor(w, device=dev)).sum() for p, w in zip(pieces, ws))
    loss.backward()
    g = np.zeros_like(x)
    # NOTE: where each piece is, by NumPy's own slicing of the positions 0..4
    edges = [0] + list(idx) + [5]
    for w, lo, hi in zip(ws, edges[:-1], edges[1:]):
        g[:, np.arange(5)[lo:hi]] += w
    np.testing.assert_allclose(xt.grad.numpy(), g, rtol=1e-6, atol=1e-6)
