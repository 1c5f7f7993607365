"""Asynchronous successive halving (ASHA; Li et al., "A System for Massively Parallel
Hyperparameter Tuning", MLSys 2020): decisions only, no scheduling.

Rung ``k`` ends at epoch ``grace * reduction**k``. A trial that reaches a rung reports its
metric there and stops (its checkpoint is kept; its run is *paused*). Whenever a worker is
free, the driver asks ``next_promotion``: from the highest rung down, a stopped trial that is
among the best ``len(rung) // reduction`` of its rung (ties: the lower trial number; a trial
without a finite value counts as the worst, and never goes on) is promoted — it continues from
its checkpoint to the next rung; if there is none, a new trial starts. A trial whose own stopping
rules end it before a rung simply finishes.
"""

from __future__ import annotations

import math

from .space import SweepError, _integer


class ASHA:
    """Early stopping for ``lk.sweep.run``: rungs at ``grace * reduction**k`` epochs; the best
    ``1/reduction`` of each rung go on."""

    def __init__(self, grace: int = 1, reduction: int = 3):
        # NOTE: NumPy integers as Python ints (the settings are stored as JSON)
        grace, reduction = (_integer(v, f"ASHA: {name}")
                            for v, name in ((grace, "grace"), (reduction, "reduction")))
        if grace < 1 or reduction < 2:
            raise SweepError(f"ASHA: needs grace >= 1 (epochs before the first decision) and "
                             f"reduction >= 2 (keep 1 in reduction), got grace={grace}, "
                             f"reduction={reduction}")
        self.grace, self.reduction = grace, reduction

    def budget(self, rung: int) -> int:
        """The epoch at which rung ``rung`` ends."""
        return self.grace * self.reduction ** rung

    def to_json(self) -> dict:
        return {"asha": {"grace": self.grace, "reduction": self.reduction}}

    @classmethod
    def from_json(cls, d):
        return None if not d else cls(**d["asha"])

    def __repr__(self):
        return f"ASHA(grace={self.grace}, reduction={self.reduction})"

    def __eq__(self, other):
        return isinstance(other, ASHA) and self.to_json() == other.to_json()

    def next_promotion(self, trials, mode: str):
        """``(trial number, next rung)`` to continue now, or None.

        ``trials``: ``{number: (status, results)}`` where ``results`` maps each rung reached
        (an int) to the metric there (None when missing or not finite: the worst), and status
        ``"stopped"`` marks a trial waiting at its highest rung."""
        rungs: dict[int, list] = {}
        for number, (_status, results) in trials.items():
            for rung, value in results.items():
                rungs.setdefault(int(rung), []).append((number, value))
        for rung in sorted(rungs, reverse=True):
            members = rungs[rung]
            k = len(members) // self.reduction
            if k == 0:
                continue
            # NOTE: ties go to the lower trial number; a trial without a finite value (NaN,
            # none) counts in its rung as the worst and is never promoted
            top = sorted(members, key=lambda nv: (_rank(nv[1], mode), nv[0]))[:k]
            for number, value in top:
                status, results = trials[number]
                if status == "stopped" and max(int(r) for r in results) == rung and \
                        _rank(value, mode) != math.inf:
                    return number, rung + 1
        return None


def _rank(value, mode):
    if value is None or not math.isfinite(value):
        return math.inf
    return -value if mode == "max" else value
