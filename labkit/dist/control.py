"""Pause, stop, checkpoint and Ctrl-C for every rank at the same iteration.

The run store's commands reach rank 0 only, and a Ctrl-C reaches the ranks at slightly
different moments: acted on as they come, one rank would stop while another waits for it in the
next all-reduce. Here a request from outside the training thread (the store's listener, a
notebook button, the Ctrl-C handler) is only *proposed*; after every batch all ranks combine
their proposals in one all-reduce (with the step's metrics) and act on the union, between the
same two batches. A request made by the training thread itself (an extension's ``loop.stop()``,
which sees the same global metrics on every rank) acts at once, as in one process.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

import numpy as np

from ..training.control import Control

#: the proposals, in their place in the agreement vector ("terminate": a SIGTERM, which also
#: interrupts)
FLAGS = ("stop", "checkpoint", "pause", "unpause", "interrupt", "terminate")


class AgreedControl(Control):
    """A ``Control`` whose requests from other threads wait for the ranks' agreement."""

    def __init__(self, comm):
        super().__init__()
        self.comm = comm
        self._asked = dict.fromkeys(FLAGS, 0)
        self._reason: str | None = None
        self._trainer = threading.get_ident()
        self.terminated = False  # a SIGTERM reached a rank: agreed, the loop then ends the job

    def install_sigint(self):
        """Ctrl-C once: proposed (every rank finishes the agreed batch, checkpoints and stops);
        twice: ``KeyboardInterrupt`` now (``python -m mpi4py`` then ends every rank)."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = signal.getsignal(signal.SIGINT)

        def handler(signum, frame):
            self._asked["interrupt"] += 1
            self._sigints += 1
            if self._sigints == 1:
                print(f"\n[labkit] Ctrl-C on rank {self.comm.rank}: every rank finishes the "
                      "current batch, writes a checkpoint and stops. Press Ctrl-C again to stop "
                      "at once, without a checkpoint.", file=sys.stderr, flush=True)
            else:
                signal.signal(signal.SIGINT, previous)
                raise KeyboardInterrupt

        signal.signal(signal.SIGINT, handler)
        return lambda: signal.signal(signal.SIGINT, previous)

    def reset(self) -> None:
        super().reset()
        self._asked["interrupt"] = self._asked["stop"] = self._asked["terminate"] = 0
        self._sigints = 0
        self.terminated = False
        self._trainer = threading.get_ident()

    def terminate(self) -> None:
        """A SIGTERM on this rank: proposed; every rank interrupts after the same batch (with
        its interrupt checkpoint), then ``DataParallelLoop.run`` raises ``Terminated``."""
        self._asked["terminate"] = 1

    def _mine(self) -> bool:
        return threading.get_ident() == self._trainer

    def stop(self, reason: str) -> None:
        if self._mine():
            super().stop(reason)
        else:
            self._reason = self._reason or reason
            self._asked["stop"] = 1

    def pause(self) -> None:
        if self._mine():
            super().pause()
        else:
            self._asked["pause"] = 1

    def unpause(self) -> None:
        self._asked["unpause"] = 1

    def request_checkpoint(self) -> None:
        self._asked["checkpoint"] = 1

    # -- agreement (called by the training thread of every rank at the same point)
    def proposals(self) -> np.ndarray:
        """This rank's proposals as numbers (taken: they are cleared)."""
        out = np.array([self._asked[k] for k in FLAGS], dtype=np.float64)
        for k in FLAGS:
            self._asked[k] = 0
        return out

    def apply(self, agreed) -> None:
        """Act on the ranks' combined proposals (the same on every rank)."""
        got = {k: bool(v > 0) for k, v in zip(FLAGS, agreed)}
        if got["stop"]:
            Control.stop(self, self._reason or "stopped (asked on another rank)")
        if got["checkpoint"]:
            Control.request_checkpoint(self)
        if got["pause"]:
            Control.pause(self)
        if got["unpause"]:
            Control.unpause(self)
        if got["interrupt"] or got["terminate"]:
            self.interrupts += 1
        if got["terminate"]:
            self.terminated = True

    def agree(self) -> None:
        self.apply(self.comm.allreduce(self.proposals(), "sum"))

    def wait_while_paused(self, save_checkpoint, beat=lambda: None) -> None:
        """Paused on every rank: agree every 0.2 s (an unpause, a stop, a checkpoint request or
        a Ctrl-C on any rank acts on all), writing requested checkpoints together."""
        while self.paused and self.stop_reason is None and not self.interrupts:
            time.sleep(0.2)
            beat()
            self.agree()
            if self.take_checkpoint_request():
                save_checkpoint()
