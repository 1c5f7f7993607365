"""Data-parallel training with the main loop: every rank runs a ``DataParallelLoop``.

Each rank reads its share of every global batch (``ShardedScheme`` at the bottom of the stream),
the gradients are averaged in buckets while backward runs (``DataParallel``), and every rank then
takes the same optimizer step, so the parameters stay bitwise equal. The stream's state is the
*global* position (the sharded scheme saves its base scheme's state), so one checkpoint, written by
rank 0 once every rank agrees on the iteration and the parameters, resumes on any number of ranks
(or in one process with a plain ``MainLoop``) and replays the same global sample order.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import zlib
from pathlib import Path

import numpy as np

from ..backend import opencl
from ..bricks import Brick
from ..data import DataStream, ShardedScheme
from ..data.schemes import smallest_batch
from ..errors import CheckpointError
from ..functions import noise
from ..training.events import Extension
from ..training.loop import MainLoop
from ..training.state import brick_generators
from .buckets import DataParallel
from .comm import Communicator, DistError, world
from .control import AgreedControl
from .job import RESUME_VAR, RUN_ID_VAR

#: seconds in which a second SIGTERM is the first one again, not a request to stop at once:
#: a launcher (``labkit launch``, a script or notebook kernel that called ``lk.dist.start(...,
#: detach=False)``) killed outright sends mpiexec its parent-death SIGTERM once per thread of
#: it, as each ends (Linux reparents mpiexec to the next one), and mpiexec passes each on
SIGTERM_ECHO = 1.0


class Terminated(KeyboardInterrupt):
    """A rank got SIGTERM while its ``DataParallelLoop`` trained (the run: interrupted)."""


class GlobalShardedScheme(ShardedScheme):
    """A ``ShardedScheme`` whose state is its base scheme's: the global position, which any
    number of ranks (or one process with the base scheme alone) can load."""

    def state_dict(self):
        return self.base.state_dict()

    def load_state_dict(self, state, where: str | None = None):
        self.base.load_state_dict(state, where)


def _bottom(stream) -> DataStream:
    s = stream
    while s is not None and not isinstance(s, DataStream):
        s = s.stream
    if s is None:
        raise DistError(f"data parallel: no DataStream under {stream!r} to shard")
    return s


def shard_stream(stream, comm: Communicator | None = None):
    """Give this rank its share of every global batch of ``stream`` (in place; returns it).

    The DataStream at the bottom must read batches (``batch_size=`` or a batch scheme): rank
    ``i`` gets the ``i``-th contiguous part of each global batch. Every rank starts from rank
    0's stream state (so a shuffle seed left to chance is the same everywhere)."""
    comm = comm if comm is not None else world()
    ds = _bottom(stream)
    base = ds.scheme.base if isinstance(ds.scheme, GlobalShardedScheme) else ds.scheme
    if not base.batched:
        raise DistError("data parallel: the stream's DataStream reads single examples; give it "
                        "a batch scheme (DataStream(dataset, batch_size=GLOBAL_BATCH, ...)) so "
                        "each global batch is split between the ranks")
    smallest = smallest_batch(base)
    if smallest is not None and smallest < comm.size:
        raise DistError(f"data parallel: a global batch of {smallest} examples cannot be "
                        f"split between {comm.size} ranks (batch_size={base.batch_size}, "
                        f"{base.num_examples} examples); use a larger batch_size or "
                        "drop_last=True")
    _same_data(ds, base, comm)
    ds.scheme = GlobalShardedScheme(base, comm.rank, comm.size)
    state = comm.bcast_object(stream.state_dict() if comm.rank == 0 else None)
    stream.load_state_dict(state)
    return stream


def _crc(a) -> tuple:
    """A source's sampled examples, summed up: (dtype, shape of an example, CRC-32)."""
    a = np.asarray(a)
    if a.dtype.kind in "biufcmM":
        return str(a.dtype), list(a.shape[1:]), zlib.crc32(np.ascontiguousarray(a))
    crc = 0
    for v in a.reshape(-1):  # sequences of arrays, strings
        v = np.asarray(v)
        crc = zlib.crc32(np.ascontiguousarray(v) if v.dtype.kind in "biufc" else
                         repr(v.tolist()).encode(), crc)
    return str(a.dtype), list(a.shape[1:]), crc


def _data_summary(ds, base) -> dict:
    """What every rank's stream must share: the dataset's size and sources, up to 16 examples
    spread over it, the scheme's kind and batch size (not its seed: rank 0's state is loaded)."""
    n = getattr(ds.dataset, "num_examples", None)
    out = {"dataset": type(ds.dataset).__name__, "examples": n, "sources": list(ds.sources),
           "scheme": type(base).__name__, "batch_size": getattr(base, "batch_size", None),
           "drop_last": getattr(base, "drop_last", None)}
    if isinstance(n, int) and n > 0:
        idx = np.unique(np.linspace(0, n - 1, min(n, 16)).astype(np.int64))
        try:
            got = ds.dataset.get_data(idx, ds.sources)
            out["sample"] = {k: _crc(v) for k, v in got.items()}
        except Exception as e:  # noqa: BLE001 - a check: a dataset that cannot be sampled
            out["sample"] = f"not read ({type(e).__name__})"
    return out


def _same_data(ds, base, comm) -> None:
    """Every rank reads the same data (its share of it): a rank that built other data (another
    seed, another file, another size) is a ``DistError`` naming what differs."""
    mine = _data_summary(ds, base)
    every = comm.allgather_object(mine, "agreement")
    ref = every[0]
    for r, theirs in enumerate(every[1:], start=1):
        diff = [k for k in ref if k != "sample" and theirs.get(k) != ref[k]]
        if diff:
            k = diff[0]
            what = f"its {k} is {theirs.get(k)!r}, rank 0's {ref[k]!r}"
        elif theirs.get("sample") != ref.get("sample"):
            a, b = ref.get("sample"), theirs.get("sample")
            k = next((k for k in a if a[k] != b.get(k)), None) if isinstance(a, dict) and \
                isinstance(b, dict) else None
            what = (f"the examples of source {k!r} differ" if k else "the examples differ") + \
                " (16 compared, spread over the dataset)"
        else:
            continue
        raise DistError(f"data parallel: rank {r}'s data is not rank 0's: {what}. Build the "
                        "same dataset and stream on every rank (the same files; the same seed "
                        "for random data): each rank reads its share of every global batch")


class _Weight(Extension):
    """Before each batch: this rank's weight in the gradient average (its examples) and, on
    more than one rank, its rows of the global batch for the random generators (``shard``)."""

    transient = True
    priority = 1000
    every = None

    def __init__(self, dp, comm, generators):
        super().__init__(name="DataParallelWeight")
        self.dp, self.comm, self.generators = dp, comm, generators

    def before_batch(self, loop):
        if loop.batch_size < 1:
            raise DistError(f"data parallel: rank {loop.comm.rank} got an empty batch")
        self.dp.weight = float(loop.batch_size)
        if self.comm.size > 1 and self.generators:
            rows = np.zeros(self.comm.size)
            rows[self.comm.rank] = loop.batch_size
            rows = self.comm.allreduce(rows, "sum").astype(np.int64)
            shard = (int(rows[:self.comm.rank].sum()), int(loop.batch_size), int(rows.sum()))
            for g in self.generators():
                g.shard = shard

    def _unshard(self, loop):
        for g in self.generators() if self.generators else ():
            g.shard = None

    after_batch = after_training = on_error = _unshard


#: the agreement's head, one row per rank: what each rank reports, the length of its values,
#: where it is, and its parameters' CRC-32 (-1 when not checked at this batch)
SIGNATURE, LENGTH, ITERATION, EPOCH, EPOCH_ITERATION, PARAMS = range(6)


class _Agreement(Extension):
    """After each batch, one all-reduce on every rank: the numbers of the log's new row become
    their mean over ranks weighted by examples (``metrics``: rank 0 then records the global
    batch's loss, as one process would), and the control requests proposed on any rank (the
    store's commands, Ctrl-C) are combined, so every rank acts on them after the same batch.

    The vector starts with a head of fixed size (a row per rank, ``SIGNATURE``...``PARAMS``)
    and its values are padded to a capacity every rank knows, so the ranks always reduce
    vectors of one length (MPI sums vectors of different lengths into garbage, or waits
    forever). From the head every rank sees, after the same batch, whether the ranks are at
    the same iteration and epoch, report the same values, and (every ``check_every``
    iterations, at each ``run()``'s first batch and at its last) hold the same parameters; if
    not, every rank raises the same ``DistError``."""

    transient = True
    priority = 1000
    every = None

    def __init__(self, comm, control, metrics: bool, buffers, check_every: int):
        super().__init__(name="DataParallelAgreement")
        self.comm, self.control, self.metrics = comm, control, metrics
        self.buffers = buffers  # NOTE: called per batch: loading a state replaces the arrays
        self.check_every = check_every
        self.capacity = 64  # the values' length every rank pads to (grows when one needs more)
        self.check_next = True  # the parameters at the next batch (set by run())
        self.agreed_at: int | None = None  # the last iteration the parameters were compared

    def _reduce(self, head, values):
        """The all-reduce of ``head`` (n x 6) and ``values`` (padded to the capacity): the
        summed head, and the summed values (None where a rank's did not fit: the head says
        how many it has)."""
        vec = np.zeros(head.size + self.capacity)
        vec[:head.size] = head.ravel()
        if values.size <= self.capacity:
            vec[head.size:head.size + values.size] = values
        total = self.comm.allreduce(vec, "sum")
        heads = total[:head.size].reshape(self.comm.size, -1)
        fits = heads[:, LENGTH].max() <= self.capacity
        return heads, total[head.size:head.size + values.size] if fits else None

    def after_batch(self, loop):
        row = loop.log.rows[-1]
        keys = [k for k in loop.step_keys if isinstance(row.get(k), (int, float))
                and not isinstance(row.get(k), bool)] if self.metrics else []
        w = float(loop.batch_size)
        live = [b for b in self.buffers().values() if np.dtype(b.dtype).kind == "f"]
        bufs = [np.asarray(b if isinstance(b, np.ndarray) else b.get(), np.float64)
                for b in live]
        asked = self.control.proposals()
        vals = np.concatenate([[row[k] * w for k in keys], *(b.ravel() * w for b in bufs),
                               [w], asked])
        st = loop.status
        it = st["iteration"]
        check = self.check_next or it % self.check_every == 0 or it == loop._budget_end
        self.check_next = False
        shapes = [(list(b.shape), str(b.dtype)) for b in live]
        head = np.zeros((self.comm.size, 6))
        head[self.comm.rank] = (zlib.crc32(repr((keys, shapes)).encode()), vals.size, it,
                                st["epoch"], st["epoch_iteration"],
                                loop.fingerprint() if check else -1)
        heads, total = self._reduce(head, vals)
        self._check(loop, heads, keys, shapes)
        if total is None:  # NOTE: a rank's values did not fit: every rank grows and sends again
            self.capacity = int(heads[:, LENGTH].max())
            heads, total = self._reduce(head, vals)
        weight = total[-len(asked) - 1]
        for k, v in zip(keys, total[:len(keys)] / weight):
            row[k] = float(v)
        at = len(keys)
        for b, host in zip(live, bufs):
            mean = (total[at:at + host.size] / weight).reshape(host.shape).astype(b.dtype)
            b[...] = mean if isinstance(b, np.ndarray) else opencl.asarray(mean, device=b.rt)
            at += host.size
        self.control.apply(total[len(total) - len(asked):])

    def after_training(self, loop):
        loop.check_parameters("at the end of training", self.agreed_at)

    def _check(self, loop, heads, keys, shapes) -> None:
        """Raise the same ``DistError`` on every rank when the head shows ranks that are not
        at the same point, report other values, or hold other parameters."""
        absent = [r for r in range(len(heads)) if heads[r, LENGTH] <= 0]
        if absent:  # NOTE: MPI paired this all-reduce with another collective of those ranks
            raise DistError(f"data parallel: ranks {absent} took no part in the all-reduce "
                            "after this batch: the ranks are in different collectives (a "
                            "collective inside an if on some ranks, or another number of "
                            "steps)")
        pos = heads[:, ITERATION:PARAMS].astype(np.int64)
        if (pos != pos[0]).any():
            at = ", ".join(f"rank {r} at iteration {p[0]} (epoch {p[1]}, batch {p[2]} of it)"
                           for r, p in enumerate(pos.tolist()))
            raise DistError(f"data parallel: after this batch the ranks are at different "
                            f"points: {at}. Every rank must read the same number of global "
                            "batches per epoch and stop after the same one (a stream that "
                            "gives one rank other batches, a seconds trigger)")
        if (heads[:, SIGNATURE] != heads[0, SIGNATURE]).any():
            every = self.comm.allgather_object((keys, shapes), "agreement")
            said = "; ".join(f"rank {r}: values {k}, buffers {b}"
                             for r, (k, b) in enumerate(every))
            raise DistError(f"data parallel: the ranks reported different things at iteration "
                            f"{int(pos[0, 0])} ({said}). Every rank must run the same step "
                            "(the same loss_fn outputs, the same model buffers)")
        crcs = heads[:, PARAMS]
        if crcs[0] >= 0:
            if (crcs != crcs[0]).any():
                loop.check_parameters(f"at iteration {int(pos[0, 0])}", self.agreed_at)
            self.agreed_at = int(pos[0, 0])


class DataParallelLoop(MainLoop):
    """A ``MainLoop`` for one rank of a data-parallel job (start it on every rank, e.g. with
    ``labkit launch -n N script.py``; in one process it is a plain ``MainLoop``).

    Arguments as ``MainLoop``'s, with ``stream`` yielding *global* batches, and:

    comm : the ranks (default ``lk.dist.world()``).
    bucket_mb, progress_thread, check_finite : as ``DataParallel``'s.
    global_metrics : report the mean over ranks of each step's numbers (default True), else
        rank-local values. (One small all-reduce per step either way: the control requests.)
    shard_random : each rank draws its rows of the global batch's random numbers (default
        True): dropout (the default generators and the model's bricks', ``Generator.shard``)
        then masks each example as one process would, where otherwise every rank would draw
        the same numbers for its own rows. A draw whose first dimension is the rank's batch
        size counts as batch-shaped. Costs one more tiny all-reduce per step (the ranks'
        batch sizes).

    Floating buffers (BatchNorm's running statistics) are averaged over ranks after each batch,
    weighted by examples, so every rank holds the same model. Each rank normalises with its own
    shard's batch statistics (no synchronised BatchNorm): the running mean is the global batch's,
    the running variance the mean of the shards' variances.

    check_every : every this many iterations (and at the first and last batch of each
        ``run()``, and at the end of training) the ranks compare their parameters (a CRC-32
        each, in the step's all-reduce) and raise ``DistError`` naming the first that differs
        when a rank's have drifted (default 20).

    Every rank must be at the same iteration and epoch after each batch and report the same
    values: checked after each batch (a rank whose stream gives other batches is a
    ``DistError`` there, not a hang at the end). A SIGTERM (``job.stop()``, a killed
    ``labkit launch``) on any rank stops every rank after the same batch, as Ctrl-C does
    (interrupt checkpoint, the run recorded interrupted), then ``run()`` raises ``Terminated``;
    a second SIGTERM raises at once. When ``run()`` ends in an exception, the other ranks
    give rank 0 a moment to record the run before ``python -m mpi4py`` aborts the job.

    Only rank 0 records to the run store and writes checkpoints. Pause, stop and checkpoint
    requests (the store's commands reach rank 0) and Ctrl-C act on every rank after the same
    batch (``AgreedControl``). With ``step=`` instead of
    ``loss_fn``, call ``loop.dp.synchronize()`` between ``backward()`` and ``update()``. Every
    rank must stop at the same iteration: use iteration or epoch triggers, not seconds.
    """

    def __init__(self, model, optimizer, stream, loss_fn=None, *, comm: Communicator | None = None,
                 bucket_mb: float = 1.0, progress_thread: bool = False,
                 global_metrics: bool = True, shard_random: bool = True, store: bool = True,
                 check_every: int = 20, check_finite: bool = True, **kwargs):
        if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 1:
            raise DistError(f"DataParallelLoop: check_every must be a whole number >= 1, got "
                            f"{check_every!r}")
        comm = comm if comm is not None else world()
        if comm.size > 1:
            # NOTE: settings that differ between ranks made a later collective fail with a
            # message that named neither (shard_random: "ranks did not reduce an array like
            # this rank's")
            mine = {"shard_random": bool(shard_random), "global_metrics": bool(global_metrics),
                    "check_every": check_every}
            every = comm.allgather_object(mine)
            for r, theirs in enumerate(every):
                for key, v in theirs.items():
                    if v != every[0][key]:
                        raise DistError(f"DataParallelLoop: the ranks' settings differ: {key} "
                                        f"is {v} on rank {r} but {every[0][key]} on rank 0; "
                                        "give every rank the same settings (the same code and "
                                        "arguments on every rank)")
        super().__init__(model, optimizer, stream, loss_fn, store=store and comm.rank == 0,
                         **kwargs)
        self.comm = comm
        shard_stream(stream, comm)
        self.dp = DataParallel(optimizer.params, comm=comm, bucket_mb=bucket_mb,
                               progress_thread=progress_thread, check_finite=check_finite)
        if self.loss_fn is not None:
            self.gradient_sync = self.dp.synchronize
        devices = sorted({str(p.device) for p in optimizer.params.values()})

        def generators():  # NOTE: looked up per batch: a brick's generator may be replaced
            gens = [noise.default_generator(d) for d in devices]
            return gens + [g for _, g in brick_generators(model)] if isinstance(model, Brick) \
                else gens

        # every rank starts from rank 0's random streams, as from its parameters
        gens = generators()
        states = comm.bcast_object([g.state_dict() for g in gens] if comm.rank == 0 else None)
        if len(states) != len(gens):
            raise DistError(f"data parallel: rank 0's model has {len(states)} random "
                            f"generators (default ones included), rank {comm.rank}'s "
                            f"{len(gens)}; build the same model on every rank")
        for g, state in zip(gens, states):
            g.load_state_dict(state)
        generators = generators if shard_random else None
        self.add(_Weight(self.dp, comm, generators))
        if comm.size > 1:
            self.control = AgreedControl(comm)
            buffers = model.buffers if hasattr(model, "buffers") else dict
            self._agreement = _Agreement(comm, self.control, global_metrics, buffers,
                                         check_every)
            self.add(self._agreement)
        self._resume_pending = False
        # NOTE: a loop that records nothing (store=False) leaves the job's run to the next one
        if os.environ.get(RUN_ID_VAR) and store:
            self._resume_pending = os.environ.pop(RESUME_VAR, None) == "1"
            self._adopt_run(os.environ.pop(RUN_ID_VAR))

    def run(self, max_iterations: int | None = None, **kwargs):
        """``MainLoop.run``; in a job that ``lk.dist.resume`` started, every rank first loads
        the run's newest valid checkpoint (once: after the script has added its extensions)."""
        if self._resume_pending:
            self._resume_pending = False
            path = self.load_checkpoint()
            if self.comm.rank == 0:
                print(f"labkit: resumed run {self.run_id} from {path} (iteration "
                      f"{self.status['iteration']}) on {self.comm.size} rank(s)", flush=True)
        if self.comm.size > 1:
            self._agreement.check_next = True
        self.comm.training()
        restore = self._on_sigterm()
        try:
            out = super().run(max_iterations, **kwargs)
        except BaseException:
            self.comm.ended()  # NOTE: rank 0 records why before any rank's abort ends it
            raise
        finally:
            restore()
        if getattr(self.control, "terminated", False):
            self.comm.ended()
            raise Terminated(f"rank {self.comm.rank} of {self.comm.size}: SIGTERM (job.stop(), "
                             "or the job's launcher ended); every rank stopped after iteration "
                             f"{self.status['iteration']} with a checkpoint")
        return out

    def _on_sigterm(self):
        """While training (main thread): SIGTERM on any rank is proposed as Ctrl-C is: every
        rank stops after the same batch and writes its interrupt checkpoint, the run is
        recorded interrupted, and ``run()`` then raises ``Terminated`` (a KeyboardInterrupt:
        ``python -m mpi4py`` ends the job). A second SIGTERM (``SIGTERM_ECHO`` seconds or more
        later) raises at once; in one process the first does. Returns what puts the previous
        handler back."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = signal.getsignal(signal.SIGTERM)
        agreed = self.comm.size > 1
        first = None

        def handler(signum, frame):
            nonlocal agreed, first
            if first is not None and time.monotonic() - first < SIGTERM_ECHO:
                return  # NOTE: the same stop again (see SIGTERM_ECHO)
            if agreed:
                agreed, first = False, time.monotonic()
                self.control.terminate()
                print(f"[labkit] SIGTERM on rank {self.comm.rank}: every rank finishes the "
                      "current batch, writes a checkpoint and stops (a second SIGTERM stops "
                      "at once)", file=sys.stderr, flush=True)
                return
            signal.signal(signal.SIGTERM, previous)
            raise Terminated(f"rank {self.comm.rank} of {self.comm.size} received SIGTERM (a "
                             "stop from job.stop(), or its launcher ended) at iteration "
                             f"{self.status['iteration']}")

        signal.signal(signal.SIGTERM, handler)
        return lambda: signal.signal(signal.SIGTERM, previous)

    def check_parameters(self, when: str = "now", agreed_at: int | None = None) -> None:
        """On every rank at once: raise ``DistError`` naming the first parameter that differs
        between the ranks (compared by CRC-32), if one does."""
        crcs = [zlib.crc32(np.ascontiguousarray(self.optimizer.params[n].numpy()))
                for n in self.dp.names]
        every = self.comm.allgather_object(crcs, "agreement")
        for r, theirs in enumerate(every[1:], start=1):
            if theirs != every[0]:
                k = next(k for k, (a, b) in enumerate(zip(every[0], theirs)) if a != b)
                since = "" if agreed_at is None else \
                    f" (they were equal at iteration {agreed_at})"
                raise DistError(f"data parallel: the ranks' parameters differ {when}"
                                f"{since}: {self.dp.names[k]!r} on rank {r} is not rank 0's. "
                                "Every rank must take the same step: change parameters, the "
                                "optimizer or its learning rate on every rank or on none, and "
                                "keep rank-dependent random updates out of the step")

    def _adopt_run(self, run_id: str) -> None:
        """Record into the run ``lk.dist.start`` made for this job (its id came in
        ``LABKIT_RUN_ID``; taken by the script's first loop only), with this loop's name and
        config."""
        if not self.recorder.enabled:
            self.attach({"id": run_id})  # ranks > 0: the same run id, nothing recorded
            return
        from .. import runs

        store = runs.store()
        record = store.get(run_id)
        self.attach(record)
        fields = {"config": {**record["config"], **self.config}}
        if self.name:
            fields["name"] = self.name
        store.update_run(run_id, **fields)

    def request_checkpoint(self) -> None:
        """While training: a checkpoint after the batch every rank agrees on (from any thread,
        on any rank). Otherwise: now, which is a collective: call it on every rank."""
        if self._training or self.running:
            self.control.request_checkpoint()
        else:
            self.save_checkpoint()

    def fingerprint(self) -> int:
        """A CRC-32 of every parameter's bytes (equal on every rank while they agree)."""
        crc = 0
        for name in self.dp.names:
            crc = zlib.crc32(np.ascontiguousarray(self.optimizer.params[name].numpy()), crc)
        return crc

    def save_checkpoint(self, directory=None) -> Path | None:
        """On every rank at once: check that all ranks are at the same iteration with the same
        parameters, then rank 0 writes the one checkpoint; every rank returns its path."""
        me = (self.status["iteration"], self.fingerprint())
        every = self.comm.allgather_object(me, "checkpoint")
        if any(e != every[0] for e in every):
            its = {r: e[0] for r, e in enumerate(every)}
            bad = [r for r, e in enumerate(every) if e[1] != every[0][1]]
            raise DistError(f"checkpoint: the ranks disagree (iterations by rank {its}; "
                            f"parameters differing from rank 0's on ranks {bad}); nothing was "
                            "written. Stop every rank at the same iteration (no seconds "
                            "triggers), and keep random or rank-dependent updates out of the "
                            "step")
        outcome = None
        if self.comm.rank == 0:
            try:
                path = super().save_checkpoint(directory)
                outcome = ("ok", None if path is None else str(path))
            except Exception as e:  # NOTE: the other ranks wait for the outcome: tell them
                outcome = ("error", f"{type(e).__name__}: {e}")
                self.comm.bcast_object(outcome)
                raise
        outcome = self.comm.bcast_object(outcome)
        if outcome[0] == "error":
            raise CheckpointError(f"checkpoint: rank 0 failed to write it ({outcome[1]})")
        path = None if outcome[1] is None else Path(outcome[1])
        self.last_checkpoint, self.last_checkpoint_iteration = path, self.status["iteration"]
        self.last_checkpoint_directory = directory
        return path

    def load_checkpoint(self, path=None) -> Path:
        """Rank 0 picks the checkpoint (``path``, or its run's newest valid one) and every rank
        loads it; the number of ranks may differ from the run that wrote it."""
        if self.comm.rank == 0:
            try:
                path = super().load_checkpoint(path)
            except Exception as e:  # NOTE: the other ranks wait for the outcome: tell them
                self.comm.bcast_object(("error", f"{type(e).__name__}: {e}"))
                raise
            self.comm.bcast_object(("ok", str(path)))
            return path
        kind, value = self.comm.bcast_object(None)
        if kind == "error":
            raise CheckpointError(f"load_checkpoint: rank 0 could not load it ({value})")
        return super().load_checkpoint(value)
