"""Big-endian arrays (from a file written on another machine) in an IndexableDataset: batches
come in the machine's byte order with and without worker processes, values unchanged."""

import numpy as np

from labkit.data import DataStream, IndexableDataset, Parallel


def test_batches_alike_with_and_without_workers():
    x = np.arange(24 * 3, dtype=">f4").reshape(24, 3) / 7
    seqs = [np.arange(i % 4 + 1, dtype=">i4") for i in range(24)]
    ds = IndexableDataset({"x": x, "y": np.arange(24, dtype=">i8"), "seq": seqs})
    got = {}
    for workers in (0, 1):
        s = DataStream(ds, batch_size=8)
        if workers:
            s = Parallel(s, workers=workers)
        got[workers] = list(s)
        if workers:
            s.close()
    for a, b in zip(got[0], got[1]):
        for k in ("x", "y"):
            assert a[k].dtype == b[k].dtype and a[k].dtype.isnative
            assert a[k].tobytes() == b[k].tobytes()
        assert all(u.dtype.isnative and np.array_equal(u, v) for u, v in zip(a["seq"], b["seq"]))
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in got[0]]), x)
