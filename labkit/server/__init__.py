"""The jupyter_server extension: labkit's run store as a REST API under ``{base_url}labkit/api/``.

Enabled on install (``jupyter-config/jupyter_server_config.d/labkit.json``). Every handler is
behind Jupyter's own authentication (token or session cookie, XSRF for writes). Run and
checkpoint ids are checked against a pattern and then against the store: nothing from a request
becomes a filesystem path. Errors are JSON ``{"message": ...}``.

=======  ===========================================  ==============================================
GET      ``runs?status=&name=``                       runs, newest first (``dead`` when stale)
GET      ``runs/ID``                                  one run: config, status, progress, lineage
GET      ``runs/ID/metrics?keys=a,b&since_step=&``    ``{key: {step, epoch, value, time}}``
         ``max_points=``
GET      ``runs/ID/checkpoints``                      step, epoch, size, metrics, valid
POST     ``runs/ID/fork`` ``{"checkpoint", "changes"}``  a new run from a checkpoint
DELETE   ``runs/ID``                                  the run and its files
DELETE   ``runs/ID/checkpoints/CID``                  one checkpoint and its files
=======  ===========================================  ==============================================
"""

from __future__ import annotations

import json
import math
import re

RUN_ID = r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6}"
_RUN_RE = re.compile(f"^{RUN_ID}$")


def _jupyter_server_extension_points():
    return [{"module": "labkit.server"}]


def _clean(v):
    """JSON-safe: NaN and infinities become None (JSON has neither)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def _handlers():
    import tornado.web
    from jupyter_server.base.handlers import APIHandler

    from .. import runs

    class Base(APIHandler):
        def write_json(self, obj, status=200):
            self.set_status(status)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(_clean(obj)))

        def fail(self, status, message):
            self.write_json({"message": message}, status)

        def run_or_404(self, run_id):
            if not _RUN_RE.match(run_id):
                self.fail(400, f"not a run id: {run_id[:40]!r}")
                return None
            try:
                return runs.get(run_id)
            except runs.RunStoreError:
                self.fail(404, f"no run {run_id}")
                return None

        def write_error(self, status_code, **kwargs):
            self.set_header("Content-Type", "application/json")
            reason = self._reason or "error"
            exc = kwargs.get("exc_info", (None, None, None))[1]
            msg = getattr(exc, "log_message", None) or str(exc or reason)
            self.finish(json.dumps({"message": msg}))

    class Runs(Base):
        @tornado.web.authenticated
        def get(self):
            status = self.get_query_argument("status", None)
            name = self.get_query_argument("name", None)
            self.write_json({"runs": runs.list(status=status, name=name)})

    class Run(Base):
        @tornado.web.authenticated
        def get(self, run_id):
            run = self.run_or_404(run_id)
            if run is not None:
                run["children"] = [r["id"] for r in runs.list() if r["parent_run"] == run_id]
                self.write_json(run)

        @tornado.web.authenticated
        def delete(self, run_id):
            if self.run_or_404(run_id) is not None:
                runs.delete(run_id, files=True)
                self.write_json({"deleted": run_id})

    class Metrics(Base):
        @tornado.web.authenticated
        def get(self, run_id):
            if self.run_or_404(run_id) is None:
                return
            keys = self.get_query_argument("keys", None)
            try:
                since = self.get_query_argument("since_step", None)
                since = int(since) if since not in (None, "") else None
                mp = self.get_query_argument("max_points", None)
                mp = int(mp) if mp not in (None, "") else None
            except ValueError:
                self.fail(400, "since_step and max_points must be integers")
                return
            if mp is not None and not 2 <= mp <= 100_000:
                self.fail(400, "max_points must be between 2 and 100000")
                return
            store = runs.store()
            known = store.metric_keys(run_id)
            wanted = known if not keys else [k for k in keys.split(",") if k]
            missing = [k for k in wanted if k not in known]
            if missing:
                self.fail(404, f"run {run_id} has no metric {missing[0]!r} (it has {known})")
                return
            self.write_json({"keys": known,
                             "metrics": store.metrics(run_id, wanted, since, mp)})

    class Checkpoints(Base):
        @tornado.web.authenticated
        def get(self, run_id):
            if self.run_or_404(run_id) is not None:
                cks = runs.checkpoints(run_id)
                for c in cks:
                    c.pop("path", None)  # ids, not paths, cross the API
                self.write_json({"checkpoints": cks})

    class Checkpoint(Base):
        @tornado.web.authenticated
        def delete(self, run_id, cid):
            from .. import checkpoint

            if self.run_or_404(run_id) is None:
                return
            rec = next((c for c in runs.checkpoints(run_id) if c["id"] == int(cid)), None)
            if rec is None:
                self.fail(404, f"run {run_id} has no checkpoint {cid}")
                return
            checkpoint.remove(rec["path"])
            runs.store().remove_checkpoint(rec["id"])
            self.write_json({"deleted": int(cid)})

    class Fork(Base):
        @tornado.web.authenticated
        def post(self, run_id):
            if self.run_or_404(run_id) is None:
                return
            try:
                body = json.loads(self.request.body or b"{}")
            except ValueError:
                self.fail(400, "the body must be JSON: {\"checkpoint\": id, \"changes\": {...}}")
                return
            cid, changes = body.get("checkpoint"), body.get("changes") or {}
            if not isinstance(changes, dict) or (cid is not None and not isinstance(cid, int)):
                self.fail(400, "checkpoint must be an id (int) and changes an object")
                return
            if cid is not None and cid not in {c["id"] for c in runs.checkpoints(run_id)}:
                self.fail(404, f"run {run_id} has no checkpoint {cid}")
                return
            try:
                child = runs.fork(run_id, cid, **changes)
            except runs.RunStoreError as e:
                self.fail(400, str(e))
                return
            self.write_json({"run": runs.get(child)}, 201)

    class BadId(Base):
        """Anything under runs/ that is not a run id (e.g. ``..%2F..%2Fetc``) is refused."""

        @tornado.web.authenticated
        def get(self, what, rest=None):
            self.fail(400, f"not a run id: {what[:40]!r}")

        delete = post = get

    return [
        (r"runs/?", Runs),
        (rf"runs/({RUN_ID})/?", Run),
        (rf"runs/({RUN_ID})/metrics/?", Metrics),
        (rf"runs/({RUN_ID})/checkpoints/?", Checkpoints),
        (rf"runs/({RUN_ID})/checkpoints/([0-9]{{1,12}})/?", Checkpoint),
        (rf"runs/({RUN_ID})/fork/?", Fork),
        (r"runs/([^/]+)(/.*)?", BadId),
    ], Base


def _load_jupyter_server_extension(serverapp):
    from jupyter_server.utils import url_path_join

    handlers, base = _handlers()
    root = url_path_join(serverapp.web_app.settings["base_url"], "labkit", "api")
    serverapp.web_app.add_handlers(".*$", [(url_path_join(root, p), h) for p, h in handlers])
    serverapp.log.info(f"labkit: run store API at {root}")
