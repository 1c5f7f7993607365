"""labkit.dist: data-parallel training over MPI (mpi4py and the MPICH wheel: ``labkit[dist]``).

::

    import labkit as lk

    comm = lk.dist.world()                # rank, size; MPI starts here, not at `import labkit`
    lk.dist.allreduce(x, op="mean")       # labkit arrays and Tensors, cpu and cl
    loop = lk.dist.DataParallelLoop(model, opt, stream, loss_fn)   # global batches in stream
    loop.run(max_iterations=100)

Run it on N ranks with ``labkit launch -n N script.py`` (``mpiexec -n N python -m mpi4py``, one
BLAS thread per rank); in one process the same script trains alone. From a notebook,
``job = lk.dist.start("script.py", n=N)`` starts it in the background: ``job.run_id``,
``job.dashboard()``, ``job.log()``, ``job.wait()``, ``job.stop()``; a job killed or failed
continues from its newest checkpoint with ``lk.dist.resume(run_id, n=M)`` (any number of
ranks). ``DataParallel`` is the
gradient averaging by itself, for loops of your own. ``convert_sync_batchnorm(model)`` makes
its BatchNorm bricks normalize with the global batch's statistics (``SyncBatchNorm``).
"""

from .buckets import DataParallel, NonFiniteGradientError
from .comm import (
    Communicator,
    DistError,
    allreduce,
    barrier,
    broadcast,
    rank,
    size,
    world,
)
from .job import Job, resume, start
from .loop import DataParallelLoop, GlobalShardedScheme, shard_stream
from .syncbn import (
    AllReduceSum,
    SyncBatchNorm,
    allreduce_sum,
    convert_sync_batchnorm,
    sync_batch_normalization,
)

__all__ = ["AllReduceSum", "Communicator", "DataParallel", "DataParallelLoop", "DistError",
           "GlobalShardedScheme", "Job", "NonFiniteGradientError", "SyncBatchNorm", "allreduce",
           "allreduce_sum",
           "barrier", "broadcast", "convert_sync_batchnorm", "rank", "resume", "shard_stream",
           "size", "start", "sync_batch_normalization", "world"]
