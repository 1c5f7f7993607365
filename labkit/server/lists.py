"""The handlers that read many runs at once: the sidebar's list (``GET runs``), the compare
page's runs and metrics (``GET compare``) and a run's lineage (``GET runs/ID/lineage``).

The compare page's reads run on a small thread pool, off the server's event loop (50 runs with
long histories take seconds to read); each answer holds at most ``MAX_COMPARE_POINTS`` points.
"""

from __future__ import annotations

import re

import tornado.ioloop

from .. import runs
from ..errors import RunStoreError
from ..runs import STATUSES, is_run_id
from ..runs.listing import MAX_POINTS, SORTS
from .handlers import MAX_LIMIT, BadRequest, Base, _reader, endpoint, public_run

#: the most runs one compare request may name
MAX_COMPARE = 50
#: the most points one compare answer holds, every run and key together: ``max_points`` is
#: lowered so that (series in the answer) x ``max_points`` stays within it
MAX_COMPARE_POINTS = 60_000


class Runs(Base):
    """``GET runs``: every run, newest first (the old form); ``name=`` matches part of the name,
    ``q=`` part of the name or id; with ``limit``, ``offset``, ``sort``, ``metric``, ``points``
    or ``ids``, a window of them as the sidebar shows it, with
    ``total``, ``counts`` (runs per status in the whole store, ``live``: training now) and,
    with ``metric=KEY``, each run's ``metric``: ``{iteration, value, last, last_iteration}``,
    a sparkline of at most ``points`` points downsampled in SQLite, or null. ``ids=1`` adds
    the ids of the matching runs, at most ``MAX_COMPARE + 1`` of them (what "compare every
    match" needs to refuse more than ``MAX_COMPARE``; ``total`` says how many match). A run
    whose row cannot be read is listed with status ``damaged`` and ``damaged`` (why; its own
    ``runs/ID`` answers 503), not a 503 for the whole list."""

    @endpoint
    def get(self):
        status = self.query("status")
        if status == "all":
            status = None
        if status is not None and status not in (*STATUSES, "dead", "live"):
            raise BadRequest(f"status must be one of {['all', *STATUSES, 'dead', 'live']}, "
                             f"got {status[:40]!r}")
        name = self.query("name")
        if name is not None and len(name) > 200:
            raise BadRequest("name is longer than 200 characters")
        text = self.query("q")
        if text is not None and len(text) > 200:
            raise BadRequest("q is longer than 200 characters")
        sort = self.query("sort", "newest")
        if sort not in SORTS:
            raise BadRequest(f"sort must be one of {list(SORTS)}, got {sort[:40]!r}")
        offset = self.int_query("offset", 0, 10**9) or 0
        limit = self.int_query("limit", 1, MAX_LIMIT)
        metric = self.query("metric")
        if metric is not None and len(metric) > 200:
            raise BadRequest("metric is longer than 200 characters")
        if metric is not None and limit is None:
            raise BadRequest(f"metric needs limit: sparklines are drawn for a window of at "
                             f"most {MAX_LIMIT} runs (e.g. limit=50)")
        points = self.int_query("points", 2, MAX_POINTS)
        body = runs.store().page(status=status, name=name, text=text, sort=sort, offset=offset,
                                 limit=limit, metric=metric, points=points or 40,
                                 ids=self.bool_query("ids"), max_ids=MAX_COMPARE + 1)
        shown = []
        for r in body["runs"]:
            if is_run_id(r["id"]):
                shown.append(public_run(r))
            else:  # the API could not address it: never list it
                self.log.warning("labkit: run %r in the store is not a valid run id; the API "
                                 "skips it", str(r["id"])[:80])
        body["runs"] = shown
        if "ids" in body:
            body["ids"] = [i for i in body["ids"] if is_run_id(i)]
        self.write_json(body)


class Compare(Base):
    """``GET compare?ids=a,b,c&max_points=500&since_iteration=``: the compare page's data in one
    request, each run's public record and its metrics downsampled (``max_points`` per key, 2
    to 5,000, default 500, lowered so that the whole answer holds at most
    ``MAX_COMPARE_POINTS``; the answer's ``max_points`` says what was used), in the order
    asked. ``since_iteration`` (one integer, or one per id, comma-separated) keeps only the
    points after it: what a page that has the history asks for a live run's new points. Ids
    are checked first (at most ``MAX_COMPARE``, each a run id, none twice), then against the
    store: unknown ones are a 404 that lists them all. A run whose row cannot be read is in its
    place as ``GET runs`` lists it (status ``damaged``, ``damaged``: why, config empty) with
    the metrics that can be read, not a 503 for the whole comparison."""

    def since(self, n: int) -> list[int | None]:
        raw = self.query("since_iteration")
        if raw is None:
            return [None] * n
        parts = raw.split(",")
        if len(parts) == 1:
            parts = parts * n
        if len(parts) != n or not all(_is_int(p) for p in parts):
            raise BadRequest(f"since_iteration must be one integer or one per id ({n}), "
                             f"comma-separated, got {raw[:40]!r}")
        return [int(p) for p in parts]

    @endpoint
    async def get(self):
        raw = self.query("ids")
        if raw is None:
            raise BadRequest("ids is required: run ids separated by commas, e.g. "
                             "compare?ids=20261204-101500-0123456789abcdef,...")
        ids = raw.split(",")
        if len(ids) > MAX_COMPARE:
            raise BadRequest(f"ids names {len(ids)} runs; compare at most {MAX_COMPARE}")
        bad = [i for i in ids if not is_run_id(i)]
        if bad:
            raise BadRequest(f"ids: not a run id: {bad[0][:40]!r} (ids are separated by "
                             "commas, without spaces)")
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise BadRequest(f"ids: run {twice[0]} is named twice")
        mp = self.int_query("max_points", 2, 5000) or 500
        since = self.since(len(ids))
        store = runs.store()

        def read():
            missing = [i for i in ids if not store.exists(i)]
            if missing:
                return missing, [], mp
            keys = {i: store.metric_keys(i) for i in ids}
            series = sum(len(k) for k in keys.values())
            used = max(2, min(mp, MAX_COMPARE_POINTS // max(series, 1)))
            out = []
            for i, after in zip(ids, since):
                run = public_run(_record(store, i))
                run["metrics"] = store.metrics(i, keys[i], after, used)
                out.append(run)
            return [], out, used

        # NOTE: 50 runs x 3 keys x 20k points took 3.6 s on the event loop, stalling every
        # other request (kernels included): read on the pool instead
        missing, out, used = await tornado.ioloop.IOLoop.current().run_in_executor(
            _reader(), read)
        if missing:
            self.write_json({"message": f"no run {', '.join(missing[:5])}"
                             + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
                             + " (deleted? the Runs sidebar lists the runs there are)",
                             "missing": missing}, 404)
            return
        self.write_json({"runs": out, "max_points": used})


def _record(store, run_id: str) -> dict:
    """Run ``run_id`` as ``get`` reads it or, for a row that cannot be decoded, as the run list
    shows it (``listing.listed``: status ``damaged`` and why)."""
    try:
        return store.get(run_id)
    except RunStoreError as e:
        if getattr(e, "reason", None) != "damaged":
            raise
        # NOTE: the list's stand-in, found by the id (text= matches names and ids alike)
        found = [r for r in store.page(text=run_id)["runs"] if r["id"] == run_id]
        if not found:
            raise
        return found[0]


def _is_int(text: str) -> bool:
    """An iteration as the metrics endpoint takes it: ASCII digits (not "²"), one optional
    minus (not "--5"), within +-2**62."""
    return re.fullmatch(r"-?[0-9]{1,19}", text) is not None and abs(int(text)) <= 2**62


def _valid_tree(nodes: list[dict]) -> list[dict]:
    """``nodes`` without any whose id the API could not address (and their subtrees)."""
    return [{**n, "children": _valid_tree(n.get("children", []))} for n in nodes
            if is_run_id(n["id"])]


class Lineage(Base):
    """``GET runs/ID/lineage``: the runs the run was forked from (``ancestors``, the parent
    first, at most ``lineage.MAX_ANCESTORS``) and the tree of runs forked from it
    (``children``, nested; at most ``lineage.MAX_DEPTH`` levels and
    ``lineage.MAX_DESCENDANTS`` runs; ``truncated`` when a cap cut it short). Each run is
    ``{id, name, status, parent_run, checkpoint: {id, iteration} | null}``."""

    @endpoint
    def get(self, run_id):
        self.run_or_404(run_id)
        tree = runs.store().lineage(run_id)
        ancestors = []
        for a in tree["ancestors"]:
            if not is_run_id(a["id"]):
                tree["truncated"] = True
                break
            ancestors.append(a)
        tree["ancestors"] = ancestors
        tree["children"] = _valid_tree(tree["children"])
        self.write_json(tree)
