"""The extensions that show a run as it trains: ``Printing`` (a line per epoch) and
``ProgressBar`` (a terminal progress bar). (Re-exported by ``extensions``.)"""

from __future__ import annotations

import math
import sys
import time

from ..errors import LabkitError
from .events import Extension
from .log import is_metric

__all__ = ["Printing", "ProgressBar"]


class Printing(Extension):
    """Print the log's current row (default: after each epoch, and when training ends)."""

    priority = -50

    def __init__(self, every=1, unit="epochs", file=None, digits=4):
        super().__init__(every=every, unit=unit)
        self.file, self.digits = file, digits

    def __call__(self, loop):
        row = loop.log[-1] if len(loop.log) else {}
        parts = [f"epoch {loop.status['epoch']}", f"iteration {loop.status['iteration']}"]
        for k, v in row.items():
            if k in ("iteration", "epoch") or k.startswith("time_") and k != "time_total":
                continue
            parts.append(f"{k} {v:.{self.digits}g}" if is_metric(v) else f"{k} {v}")
        print("  ".join(parts), file=self.file or sys.stdout, flush=True)

    def after_training(self, loop):
        reason = loop.stop_reason or "finished"
        print(f"training finished at epoch {loop.status['epoch']}, iteration "
              f"{loop.status['iteration']} ({reason})", file=self.file or sys.stdout, flush=True)


class ProgressBar(Extension):
    """A one-line terminal progress bar: epoch, batch i/n, samples/s, ETA of the epoch and the
    last loss. Redrawn at most ``fps`` times a second; when the output is not a terminal (CI
    logs, nbconvert) it prints a line every ``quiet_seconds`` instead."""

    every = None
    priority = 10

    def __init__(self, file=None, fps: float = 5.0, quiet_seconds: float = 10.0, width=24):
        super().__init__()
        self.file, self.fps, self.quiet, self.width = file, fps, quiet_seconds, width
        self._last_draw = 0.0
        self._epoch_t0 = None
        self._samples = 0

    @property
    def out(self):
        return self.file or sys.stderr

    def _tty(self):
        return getattr(self.out, "isatty", lambda: False)()

    def before_epoch(self, loop):
        self._epoch_t0 = time.perf_counter()
        self._samples = 0
        self._start_iter = loop.status["epoch_iteration"]

    on_resumption = before_epoch

    def after_batch(self, loop):
        if self._epoch_t0 is None:
            self.before_epoch(loop)
        self._samples += loop.batch_size
        st = loop.status
        try:
            n = loop.stream.num_items(loop.stream.epoch) if loop.stream.indexed else None
        except LabkitError:
            n = None
        self._snap = (st["epoch"] + 1, st["epoch_iteration"], n, loop.log[-1].get("loss"))
        now = time.perf_counter()
        interval = 1.0 / self.fps if self._tty() else self.quiet
        if now - self._last_draw < interval:
            return
        self._last_draw = now
        self.draw(now)

    def draw(self, now, final=False):
        epoch, i, n, loss = self._snap
        dt = max(now - (self._epoch_t0 or now), 1e-9)
        done = max(i - getattr(self, "_start_iter", 0), 0)
        rate = self._samples / dt
        parts = [f"epoch {epoch}"]
        if n:
            frac = min(i / n, 1.0)
            filled = int(frac * self.width)
            bar = "#" * filled + "-" * (self.width - filled)
            eta = (n - i) * dt / done if done else float("nan")
            parts.append(f"[{bar}] {i}/{n}")
            if not final:
                parts.append(f"ETA {_hms(eta)}")
        else:
            parts.append(f"batch {i}")
        parts.append(f"{rate:,.0f} samples/s")
        if is_metric(loss):
            parts.append(f"loss {loss:.4g}")
        line = "  ".join(parts)
        if self._tty():
            print("\r" + line.ljust(100)[:100], end="\n" if final else "", file=self.out,
                  flush=True)
        else:
            print(line, file=self.out, flush=True)

    def after_epoch(self, loop):
        now = time.perf_counter()
        # on a terminal each epoch ends with its full line; in a log, only every quiet_seconds
        if getattr(self, "_snap", None) is not None and (self._tty() or now - self._last_draw
                                                         >= self.quiet):
            self._last_draw = now
            self.draw(now, final=True)
        self._epoch_t0 = None


def _hms(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"
