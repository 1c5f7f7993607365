"""Controlling a loop that trains: pause, resume, stop, checkpoint requests and Ctrl-C.

Requests may come from any thread (a notebook button, a background ``start()``, a signal
handler); the training thread acts on them between batches. Nothing here touches the model.
"""

from __future__ import annotations

import signal
import sys
import threading


class Control:
    """The requests pending for one loop, under one condition variable."""

    def __init__(self):
        self._cv = threading.Condition()
        self.paused = False
        self.stop_reason: str | None = None
        self.interrupts = 0
        self.checkpoint_requested = False

    def reset(self) -> None:
        """At the start of ``run()``: no stop, Ctrl-C or checkpoint pending (a pause stays; a
        checkpoint asked for when the last run ended was written then)."""
        self.stop_reason = None
        self.interrupts = 0
        self.checkpoint_requested = False

    @property
    def pending(self) -> bool:
        """Whether the training thread has something to do between batches (cheap)."""
        return self.paused or self.checkpoint_requested

    def stop(self, reason: str) -> None:
        with self._cv:
            if self.stop_reason is None:
                self.stop_reason = reason
            self._cv.notify_all()

    def pause(self) -> None:
        with self._cv:
            self.paused = True

    def unpause(self) -> None:
        with self._cv:
            self.paused = False
            self._cv.notify_all()

    def request_checkpoint(self) -> None:
        with self._cv:
            self.checkpoint_requested = True
            self._cv.notify_all()

    def take_checkpoint_request(self) -> bool:
        with self._cv:
            asked, self.checkpoint_requested = self.checkpoint_requested, False
            return asked

    def wait_while_paused(self, save_checkpoint, beat=lambda: None) -> None:
        """Block the training thread while paused (a stop or a Ctrl-C ends the pause), writing
        a checkpoint whenever one is requested meanwhile and calling ``beat()`` every 0.2 s
        (the run store's heartbeat: a paused run is alive)."""
        with self._cv:
            while self.paused and self.stop_reason is None and not self.interrupts:
                if self.checkpoint_requested:
                    self.checkpoint_requested = False
                    self._cv.release()
                    try:
                        save_checkpoint()
                    finally:
                        self._cv.acquire()
                    continue
                # NOTE: a timeout so that a Ctrl-C (a flag set by the signal handler, which
                # cannot notify) is seen within 0.2 s, and the heartbeat goes on
                self._cv.wait(0.2)
                self._cv.release()
                try:
                    beat()
                finally:
                    self._cv.acquire()

    def install_sigint(self):
        """Ctrl-C once: finish the batch, checkpoint, stop; twice: ``KeyboardInterrupt`` now.
        Returns the function that restores the previous handler (a no-op off the main
        thread, where signals cannot be handled)."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = signal.getsignal(signal.SIGINT)

        def handler(signum, frame):
            self.interrupts += 1
            if self.interrupts == 1:
                print("\n[labkit] Ctrl-C: finishing the current batch, then writing a checkpoint "
                      "and stopping. Press Ctrl-C again to stop at once, without a checkpoint.",
                      file=sys.stderr, flush=True)
            else:
                print("\n[labkit] Ctrl-C again: stopping now; no checkpoint is written.",
                      file=sys.stderr, flush=True)
                signal.signal(signal.SIGINT, previous)
                raise KeyboardInterrupt

        signal.signal(signal.SIGINT, handler)
        return lambda: signal.signal(signal.SIGINT, previous)
