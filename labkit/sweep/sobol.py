"""Sobol' low-discrepancy points in [0, 1)^d (up to ``MAX_DIMS`` dimensions), Gray-code order.

Direction numbers: the first dimension is van der Corput's (base 2); the others come from
primitive polynomials over GF(2) (degree ``s``, inner coefficients ``a``) and initial odd
numbers ``m`` (Joe and Kuo's table, "new-joe-kuo-6.21201", dimensions 2 to 21). The first
``2**k`` points of any one dimension fall one in each interval ``[j/2**k, (j+1)/2**k)``; the
first two dimensions together form a (0, k, 2)-net (``tests/sweep/test_space.py`` checks both).
"""

from __future__ import annotations

import numpy as np

#: (s, a, m_1..m_s) for dimensions 2, 3, ...
_TABLE = [
    (1, 0, (1,)), (2, 1, (1, 3)), (3, 1, (1, 3, 1)), (3, 2, (1, 1, 1)), (4, 1, (1, 1, 3, 3)),
    (4, 4, (1, 3, 5, 13)), (5, 2, (1, 1, 5, 5, 17)), (5, 4, (1, 1, 5, 5, 5)),
    (5, 7, (1, 1, 7, 11, 19)), (5, 11, (1, 1, 5, 1, 1)), (5, 13, (1, 1, 1, 3, 11)),
    (5, 14, (1, 3, 5, 5, 31)), (6, 1, (1, 3, 3, 9, 7, 49)), (6, 13, (1, 1, 1, 15, 21, 21)),
    (6, 16, (1, 3, 1, 13, 27, 49)), (6, 19, (1, 1, 1, 15, 7, 5)),
    (6, 22, (1, 3, 1, 15, 13, 25)), (6, 25, (1, 1, 5, 5, 19, 61)),
    (7, 1, (1, 3, 7, 11, 23, 15, 103)), (7, 4, (1, 3, 7, 13, 13, 15, 69)),
]
MAX_DIMS = 1 + len(_TABLE)
_BITS = 32


def _directions(dims: int) -> np.ndarray:
    """``v[d, k]``: the k-th direction number of dimension d, scaled to ``_BITS`` bits."""
    v = np.zeros((dims, _BITS), dtype=np.uint64)
    v[0] = [1 << (_BITS - 1 - k) for k in range(_BITS)]
    for d in range(1, dims):
        s, a, m = _TABLE[d - 1]
        mm = list(m)
        for k in range(s, _BITS):
            new = mm[k - s] ^ (mm[k - s] << s)
            for j in range(1, s):
                if (a >> (s - 1 - j)) & 1:
                    new ^= mm[k - j] << j
            mm.append(new)
        v[d] = [mm[k] << (_BITS - 1 - k) for k in range(_BITS)]
    return v


def sobol(n: int, dims: int, skip: int = 0) -> np.ndarray:
    """Points ``skip .. skip+n-1`` of the ``dims``-dimensional Sobol' sequence, shape (n, dims).
    The sequence starts at the origin (point 0)."""
    if not 1 <= dims <= MAX_DIMS:
        raise ValueError(f"sobol: {dims} dimensions; this generator has 1 to {MAX_DIMS} (use "
                         "search='random' for a larger space)")
    if n < 0 or skip < 0 or n + skip > 2**_BITS - 1:
        raise ValueError(f"sobol: points {skip}..{skip + n} are outside 0..2**{_BITS}-1")
    v = _directions(dims)
    x = np.zeros(dims, dtype=np.uint64)
    # NOTE: point i is the XOR of the directions of the set bits of its Gray code i ^ (i >> 1)
    g = skip ^ (skip >> 1)
    for k in range(_BITS):
        if (g >> k) & 1:
            x ^= v[:, k]
    out = np.empty((n, dims), dtype=np.float64)
    for i in range(skip, skip + n):
        out[i - skip] = x
        c = (~i & (i + 1)).bit_length() - 1  # the lowest zero bit of i
        x ^= v[:, c]
    return out / float(2**_BITS)
