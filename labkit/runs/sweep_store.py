"""The run store's sweep records: ``RunStore``'s methods for sweeps and their trials (the SQL
is in sweeps.py; written by a sweep's driver only), and whether a run is a trial of a sweep
that its driver runs now (a run the store will not delete unforced)."""

from __future__ import annotations

from pathlib import Path

from ..errors import RunStoreError
from . import sweeps
from ._db import guarded, transaction


class SweepRecords:
    """A mixin of ``RunStore`` (which gives ``_conn`` and ``path``)."""

    def create_sweep(self, name, factory, space: str, settings: dict, params: list) -> str:
        """A sweep (status running, this process its driver) with one pending trial per
        entry of ``params``; returns its id."""
        with transaction(self._conn()) as c:
            return sweeps.create(c, name, factory, space, settings, params)

    def get_sweep(self, sweep_id: str) -> dict:
        return sweeps.get(self._conn(), sweep_id, self.path)

    def list_sweeps(self) -> list[dict]:
        """Sweeps, newest first, each with ``counts`` of its trials by status (a damaged row
        as ``sweeps.listed`` shows it)."""
        return sweeps.listing(self._conn())

    def sweep_summaries(self, limit: int = 50) -> dict:
        """The newest ``limit`` sweeps, summed up for a list (``sweeps.summaries``)."""
        from .store import DEAD_AFTER

        return sweeps.summaries(self._conn(), limit, DEAD_AFTER)

    def update_sweep(self, sweep_id: str, **fields) -> None:
        with transaction(self._conn()) as c:
            sweeps.update(c, sweep_id, fields)

    def claim_sweep(self, sweep_id: str, check, **fields) -> None:
        """``check(record)`` (raising to refuse) then ``update_sweep``, in one transaction:
        two drivers resuming one sweep at once cannot both take it."""
        with transaction(self._conn()) as c:
            check(sweeps.get(c, sweep_id, self.path))
            sweeps.update(c, sweep_id, fields)

    def clear_sweep_request(self, sweep_id: str, request: str) -> bool:
        """Clear a sweep's ``request`` only if it still is ``request`` (one statement, so a
        request written since it was read is kept)."""
        with transaction(self._conn()) as c:
            return sweeps.clear_request(c, sweep_id, request)

    def trials(self, sweep_id: str, limit: int | None = None) -> list[dict]:
        """The trials of a sweep, by number (params and rung results decoded); the first
        ``limit``, when given."""
        return sweeps.trials(self._conn(), sweep_id, limit)

    def update_trials(self, sweep_id: str, changes: dict) -> None:
        """``{number: {field: value}}`` for trials of ``sweep_id``, in one transaction."""
        with transaction(self._conn()) as c:
            for number, fields in changes.items():
                sweeps.update_trial(c, sweep_id, number, dict(fields))

    def add_trials(self, sweep_id: str, params: list) -> list[int]:
        """Append one pending trial per entry of ``params`` to a sweep; their numbers."""
        with transaction(self._conn()) as c:
            return sweeps.add_trials(c, sweep_id, params)

    def start_trial_run(self, sweep_id: str, number: int, name, config: dict, factory,
                        runs_folder) -> str:
        """Create trial ``number``'s run (its folder inside ``runs_folder``), linked to its
        sweep, in one transaction."""
        with transaction(self._conn()) as c:
            return sweeps.start_trial_run(c, sweep_id, number, name, config, factory,
                                          lambda rid: Path(runs_folder) / rid)

    def _live_sweep(self, c, row) -> dict | None:
        """The sweep whose trial's run ``row`` is, when its driver is running it (running or
        paused, beating); else None."""
        try:
            sid = row["sweep_id"]
        except (IndexError, KeyError):
            return None
        if not sid:
            return None
        try:
            rec = sweeps.get(c, sid, self.path)
        except RunStoreError:
            return None
        from .store import DEAD_AFTER

        if rec.get("status") in ("running", "paused") and sweeps.driver_alive(rec, DEAD_AFTER):
            return rec
        return None


# NOTE: as RunStore's own: damage reported as RunStoreError (store.py)
for _name, _fn in list(vars(SweepRecords).items()):
    if callable(_fn) and not _name.startswith("_"):
        setattr(SweepRecords, _name, guarded(_fn))
del _name, _fn
