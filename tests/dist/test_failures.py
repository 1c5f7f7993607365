"""Data-parallel jobs whose ranks disagree by mistake: each must end within a bounded time with
an error that names the difference (tests/dist/disagree.py's modes), never hang or train on.
Every job runs in its own session with a hard timeout (tests/dist/mpirun.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

from . import mpirun  # noqa: E402

DISAGREE = {
    "data": "rank 1's data is not rank 0's: the examples of source 'x' differ",
    "epoch": "rank 0 at iteration 6 (epoch 0, batch 6 of it), rank 1 at iteration 6 (epoch 1, "
             "batch 1 of it)",
    "diverge": "parameters differ at the end of training (they were equal at iteration 1): "
               "'/mlp/linear_0.W' on rank 1 is not rank 0's",
    "nan": "NonFiniteGradientError: DataParallel: non-finite gradients on rank 1 "
           "('/mlp/linear_1.b': 3 NaN",
    "fewer": "rank 0 has left the job (its script ended after its collective 5: gradient "
             "bucket #0) while rank 1 waits in gradient bucket #0",
    "collective": "the all-reduce of gradient bucket #0 on rank 1 did not sum the 2 ranks' "
                  "gradients of this step",
}


def test_ranks_that_disagree_stop_with_the_difference_named():
    """Each mode of disagree.py (its docstring says what differs), as 2-rank jobs run side by
    side: a DistError naming the difference, not a hang or a job that trains on."""
    script = Path(__file__).with_name("disagree.py")
    with ThreadPoolExecutor(len(DISAGREE)) as pool:
        done = dict(zip(DISAGREE, pool.map(
            lambda mode: mpirun.run(2, [mode], timeout=90, script=script), DISAGREE)))
    for mode, message in DISAGREE.items():
        job = done[mode]
        assert job.rc != 0 and not job.left, (mode, job)
        assert message in job.err, (mode, job)
        if mode != "fewer":  # NOTE: there, rank 0 ends its 3 steps before rank 1 fails
            assert "trained on" not in job.out, (mode, job)
