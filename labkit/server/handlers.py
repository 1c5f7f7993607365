"""The REST handlers (paired with ``extensions/labkit-runs/src/api.ts``).

Every request is checked before the store is touched: ids against ``labkit.runs.RUN_ID``,
query values by type, range and length, bodies as UTF-8 JSON objects of known fields. Anything
else is a 4xx with a JSON ``{"message": ...}``, never a 500 and never a change to the store.
Responses carry ids, never filesystem paths: a run's ``directory`` stays on the server, its
``parent_checkpoint`` is a checkpoint id, ``source`` and a script ``factory`` name only their
file, and paths in messages become ``<path>``. Config values are passed through as their owner
wrote them.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePath

import tornado.ioloop
import tornado.web
from jupyter_server.auth.decorator import HTTP_METHOD_TO_AUTH_ACTION
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import ensure_async

from .. import checkpoint, runs
from .._json import loads_strict
from ..errors import RunStoreError
from ..runs import is_run_id
from ..runs.notes import check_name, check_note, check_tags
from .scrub import scrub, scrub_values

#: the largest request body (a fork's changes are a config: 64 KiB of JSON at most)
MAX_BODY = 256 * 1024
#: the longest query value (a list of metric keys)
MAX_QUERY = 4096
#: the most runs one ``GET runs?limit=`` window holds
MAX_LIMIT = 1000
#: RunStoreError.reason → HTTP status
STATUS_FOR = {"not_found": 404, "deleted": 404, "invalid": 400, "live": 409, "damaged": 503,
              "failed": 503, "not_training": 409}
_INT_RE = re.compile(r"-?[0-9]{1,19}")  # NOTE: 2**62 has 19 digits; the bounds decide


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status, self.message = status, message


def _clean(v):
    """JSON-safe: NaN and infinities become None (JSON has neither)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def public_run(run: dict) -> dict:
    """A run record as the API shows it: no paths."""
    out = {k: v for k, v in run.items()
           if k not in ("directory", "parent_checkpoint", "parent_checkpoint_id")}
    out["parent_checkpoint"] = run.get("parent_checkpoint_id") if run.get("parent_run") \
        else None
    src, factory = run.get("source"), run.get("factory")
    out["source"] = PurePath(src).name if isinstance(src, str) and "/" in src else src
    if isinstance(factory, str) and "/" in factory:  # "/path/script.py:make_loop"
        where, _, qual = factory.rpartition(":")
        out["factory"] = f"{PurePath(where).name}:{qual}"
    out["error"] = scrub(run["error"]) if run.get("error") else run.get("error")
    if "damaged" in run:  # a list's stand-in for a run whose row cannot be read
        out["damaged"] = scrub(run["damaged"])
    out["progress"] = scrub_values(run.get("progress") or {})
    # NOTE: the run page reads them from runs/ID; a list of many runs stays small without
    out.pop("note", None)
    out.pop("traceback", None)
    return out


# a traceback's frame lines: `File "/abs/path/loop.py", line 290` keeps only "loop.py"
_FRAME_FILE = re.compile(r'File "([^"\n]+)"')


def public_traceback(text) -> str | None:
    """A failed run's traceback tail as the API shows it: each frame's file by its name,
    any other path ``<path>``."""
    if not text:
        return None
    text = _FRAME_FILE.sub(lambda m: f'File "{PurePath(m.group(1)).name}"', str(text))
    return scrub(text)


def run_page(run: dict) -> dict:
    """One run as ``runs/ID`` shows it: ``public_run`` with its note, traceback tail and
    the runs forked from it."""
    out = public_run(run)
    out["note"] = run.get("note") or ""
    out["traceback"] = public_traceback(run.get("traceback"))
    out["children"] = [c for c in runs.store().children(run["id"]) if is_run_id(c)]
    return out


#: the longest reason a re-checked checkpoint is invalid, in characters
MAX_REASON = 300
#: why a checkpoint the store marks invalid is: the store keeps no reason, and it is marked so
#: by a resume that passed it over (damaged, its state refused, or its files gone), or by
#: whoever recorded it so (``RunStore.add_checkpoint(valid=False)``)
INVALID = ("the run store marks it invalid (as a resume does with a checkpoint it cannot use: "
           "damaged, its state refused, or its files gone)")


def public_checkpoint(c: dict) -> dict:
    return {k: v for k, v in c.items() if k != "path"}


def verified_checkpoint(c: dict) -> dict:
    """``c`` as the API shows it, its files checked again now with ``labkit.checkpoint.verify``
    (every file's size and CRC-32 against the manifest, then parsed as ``load`` would): a
    damaged or missing one is ``valid: false`` with a ``reason`` (no paths)."""
    out = public_checkpoint(c)
    path = c.get("path")
    if not c.get("valid"):
        reason = INVALID
    else:
        try:
            reason = checkpoint.verify(path) if isinstance(path, str) and Path(path).is_dir() \
                else "its files are gone"
        except OSError as e:  # NOTE: verify reports damage; an unreadable disk is still one
            reason = f"its files cannot be read ({e.strerror or type(e).__name__})"
    if reason is not None:
        if isinstance(path, str) and path:
            # a file of the checkpoint by its name ("tensors.safetensors: ..."); paths hidden
            reason = reason.replace(os.path.join(path, ""), "").replace(path, "the checkpoint")
        reason = scrub(reason)[:MAX_REASON]
    out["valid"] = reason is None
    out["reason"] = reason
    return out


def endpoint(method):
    """An authenticated and authorized handler method (plain or ``async``) whose
    ``BadRequest`` and ``RunStoreError`` become JSON errors with the right status (and no
    paths); an ``OSError`` of the files the store names (a damaged path, an unreadable disk)
    is a 503, not a 500."""

    def failed(self, e):
        if isinstance(e, BadRequest):
            self.fail(e.status, e.message)
            return
        if isinstance(e, OSError):
            self.log.error("labkit: %s", e, exc_info=e)
            self.fail(503, f"the server could not read or write the files of the run store "
                           f"({e.strerror or type(e).__name__})")
            return
        status = STATUS_FOR.get(getattr(e, "reason", None), 500)
        if status >= 500:
            self.log.error("labkit: %s", e)
        self.fail(status, scrub(e))

    @functools.wraps(method)
    async def call(self, *args):
        await self.authorize()
        try:
            out = method(self, *args)
            if inspect.isawaitable(out):
                await out
        except (BadRequest, RunStoreError, OSError) as e:
            failed(self, e)

    call.labkit_endpoint = True  # NOTE: tests/server/test_authz checks every handler has it
    return tornado.web.authenticated(call)


class Base(APIHandler):
    #: what Jupyter's authorizer is asked about (``ServerApp.authorizer_class``: JupyterHub,
    #: read-only sharing): ``read`` for GET, ``write`` for POST, PATCH and DELETE
    auth_resource = "labkit"

    async def authorize(self):
        """A 403 unless Jupyter's authorizer lets the user do this request's action.
        NOTE: not jupyter_server's ``@authorized``: it keeps the first request's action for
        every later one, and the catch-all handlers share one method for every verb."""
        action = HTTP_METHOD_TO_AUTH_ACTION.get(self.request.method.upper(), "write")
        user = self.current_user
        if not user or not await ensure_async(
                self.authorizer.is_authorized(self, user, action, self.auth_resource)):
            raise tornado.web.HTTPError(403, f"User is not authorized to {action} on "
                                             f"resource: {self.auth_resource}.")

    def write_json(self, obj, status=200):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(_clean(obj), allow_nan=False))

    def fail(self, status, message):
        self.write_json({"message": message}, status)

    def write_error(self, status_code, **kwargs):
        # NOTE: an unexpected exception's text may hold paths: the log gets it, not the client
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, tornado.web.HTTPError):
            msg = exc.log_message or self._reason
        else:
            msg = f"{self._reason or 'error'} (the Jupyter server's log has the details)"
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": scrub(msg)}))

    # -- checked inputs
    def query(self, name: str, default=None) -> str | None:
        given = self.get_query_arguments(name, strip=False)
        if len(given) > 1:  # NOTE: not the last one silently (force=0&force=1 would force)
            raise BadRequest(f"{name} is given {len(given)} times; give it once")
        v = given[0] if given else None
        if v is None or v == "":
            return default
        if len(v) > MAX_QUERY:
            raise BadRequest(f"{name} is {len(v)} characters long; at most {MAX_QUERY}")
        return v

    def int_query(self, name: str, lo: int, hi: int, alias: str | None = None) -> int | None:
        v = self.query(name)
        if alias is not None and self.query(alias) is not None:
            if v is not None:
                raise BadRequest(f"give {name} or its old name {alias}, not both")
            v, name = self.query(alias), alias
        if v is None:
            return None
        if not _INT_RE.fullmatch(v) or not lo <= int(v) <= hi:
            raise BadRequest(f"{name} must be an integer from {lo} to {hi}, got {v[:40]!r}")
        return int(v)

    def bool_query(self, name: str, default: bool = False) -> bool:
        v = self.query(name)
        if v is None:
            return default
        if v not in ("0", "1", "true", "false"):
            raise BadRequest(f"{name} must be 0, 1, true or false, got {v[:40]!r}")
        return v in ("1", "true")

    def body_object(self, fields: tuple) -> dict:
        """The body as a JSON object with only ``fields`` (an empty body is ``{}``)."""
        raw = self.request.body or b""
        if len(raw) > MAX_BODY:
            raise BadRequest(f"the body is {len(raw):,} bytes; at most {MAX_BODY:,}", 413)
        if not raw.strip():
            return {}
        want = "the body must be a JSON object: {" + ", ".join(f'"{f}": ...' for f in fields) \
            + "}"
        try:
            body = loads_strict(raw)
        except UnicodeDecodeError:
            raise BadRequest(f"{want}, in UTF-8") from None
        except ValueError as e:
            raise BadRequest(f"{want} ({str(e)[:80]})") from None
        if not isinstance(body, dict):
            raise BadRequest(f"{want}, got {type(body).__name__}")
        unknown = sorted(set(body) - set(fields))
        if unknown:
            raise BadRequest(f"{want}; unknown fields {[u[:40] for u in unknown[:5]]}")
        return body

    def run_or_404(self, run_id) -> dict:
        if not is_run_id(run_id):
            raise BadRequest(f"not a run id: {run_id[:40]!r}")
        try:
            return runs.get(run_id)
        except RunStoreError as e:
            if getattr(e, "reason", None) == "not_found":
                raise BadRequest(f"no run {run_id}", 404) from None
            raise


#: what ``PATCH runs/ID`` may change, and the check of each value
EDITABLE = {"name": check_name, "tags": check_tags, "add_tags": check_tags,
            "remove_tags": check_tags, "note": check_note}


class Run(Base):
    @endpoint
    def get(self, run_id):
        self.write_json(run_page(self.run_or_404(run_id)))

    @endpoint
    def patch(self, run_id):
        """``{"name"?, "tags"?, "add_tags"?, "remove_tags"?, "note"?}``: rename the run,
        replace its tags or add and remove some (what two pages editing at once need: neither
        overwrites the other's), set its note; every value is checked before anything is
        written (a bad one names its field)."""
        self.run_or_404(run_id)
        body = self.body_object(tuple(EDITABLE))
        if not body:
            raise BadRequest('give at least one of "name", "tags" and "note", e.g. '
                             '{"name": "wide-mlp", "tags": ["baseline"], "note": "..."}')
        for field, check in EDITABLE.items():
            if field in body:
                check(body[field], field)
        self.write_json(run_page(runs.store().annotate(run_id, **body)))

    @endpoint
    def delete(self, run_id):
        # NOTE: not run_or_404: a damaged run, a 503 to read, can still be deleted
        if not runs.store().exists(run_id):
            raise BadRequest(f"no run {run_id}", 404)
        runs.delete(run_id, files=True, force=self.bool_query("force"))
        self.write_json({"deleted": run_id})


#: the most points one ``GET runs/ID/metrics`` returns, over all its keys
MAX_METRIC_POINTS = 200_000


class Metrics(Base):
    @endpoint
    async def get(self, run_id):
        self.run_or_404(run_id)
        keys = self.query("keys")
        since = self.int_query("since_iteration", -(2**62), 2**62, alias="since_step")
        mp = self.int_query("max_points", 2, 100_000)
        store = runs.store()
        known = store.metric_keys(run_id)
        wanted = known if not keys else [k for k in keys.split(",") if k]
        missing = [k for k in wanted if k not in known]
        if missing:
            raise BadRequest(f"run {run_id} has no metric {missing[0][:80]!r} (it has "
                             f"{known[:50]})", 404)
        # NOTE: at most MAX_METRIC_POINTS in all, read off the event loop (a long run's every
        # row, 34 MB, took 4 s there, stalling every other request)
        used = max(2, min(mp or MAX_METRIC_POINTS, MAX_METRIC_POINTS // max(len(wanted), 1)))
        metrics = await tornado.ioloop.IOLoop.current().run_in_executor(
            _reader(), lambda: store.metrics(run_id, wanted, since, used))
        self.write_json({"keys": known, "metrics": metrics, "max_points": used})


#: how many long store reads (metrics, compare) run at once (more requests wait their turn,
#: not the server)
READ_THREADS = 2
#: how many checkpoint verifications run at once (each reads every file of a checkpoint)
VERIFY_THREADS = 2
_pools: dict[str, ThreadPoolExecutor] = {}


def _pool(name: str, threads: int) -> ThreadPoolExecutor:
    """The server's thread pool ``name``, made on first use."""
    if name not in _pools:
        _pools[name] = ThreadPoolExecutor(threads, f"labkit-{name}")
    return _pools[name]


def _reader() -> ThreadPoolExecutor:
    return _pool("read", READ_THREADS)


def _verifier() -> ThreadPoolExecutor:
    return _pool("verify", VERIFY_THREADS)


class Checkpoints(Base):
    """``GET``: the run's checkpoints as recorded; with ``?verify=1`` each one's files are read
    and checked again (what a run page shows), ``valid`` and ``reason`` from that check."""

    @endpoint
    async def get(self, run_id):
        self.run_or_404(run_id)
        recs = runs.checkpoints(run_id)
        if not self.bool_query("verify"):
            self.write_json({"checkpoints": [public_checkpoint(c) for c in recs]})
            return
        # NOTE: reading every file of big checkpoints takes seconds: off the server's event
        # loop, on a pool of VERIFY_THREADS (more requests wait their turn, not the server)
        shown = await tornado.ioloop.IOLoop.current().run_in_executor(
            _verifier(), lambda: [verified_checkpoint(c) for c in recs])
        self.write_json({"checkpoints": shown})


def _owned(run_id: str, what: str, rid: int) -> dict:
    """The store's ``what`` (checkpoint or command) ``rid``, if it belongs to ``run_id``; 404
    otherwise (another run's is never shown or touched)."""
    try:
        rec = getattr(runs.store(), what)(rid)
    except RunStoreError as e:
        if getattr(e, "reason", None) != "not_found":
            raise
        rec = None
    if rec is None or rec["run_id"] != run_id:
        raise BadRequest(f"run {run_id} has no {what} {rid}", 404)
    return rec


def _own_checkpoint(run_id: str, cid: int) -> dict:
    return _owned(run_id, "checkpoint", cid)


class Checkpoint(Base):
    @endpoint
    def delete(self, run_id, cid):
        """The checkpoint's record and its files (``files_removed``); files that are not
        surely this run's stay (``kept``: why). One an unfinished fork starts from (it has no
        checkpoint of its own) is refused (409) unless ``?force=1``."""
        self.run_or_404(run_id)
        rec = _own_checkpoint(run_id, int(cid))
        # NOTE: runs.delete_checkpoint decides (one home for every caller) and logs why
        files, kept = runs.delete_checkpoint(rec["id"], run_id=run_id, explain=True,
                                             force=self.bool_query("force"))
        self.write_json({"deleted": rec["id"], "files_removed": files,
                         "kept": None if kept is None else scrub(kept)})


class Fork(Base):
    @endpoint
    async def post(self, run_id):
        self.run_or_404(run_id)
        body = self.body_object(("checkpoint", "changes"))
        cid, changes = body.get("checkpoint"), body.get("changes")
        if cid is not None and (isinstance(cid, bool) or not isinstance(cid, int)
                                or not 1 <= cid < 2**63):
            raise BadRequest(f"checkpoint must be a checkpoint id (a positive integer) or null, "
                             f"got {json.dumps(cid)[:40]}")
        if changes is not None and not isinstance(changes, dict):
            raise BadRequest(f"changes must be an object of config keys and values, got "
                             f"{type(changes).__name__}")
        if cid is not None and not _own_checkpoint(run_id, cid)["valid"]:
            # NOTE: as the fork form, which offers it disabled: its child could not resume
            raise BadRequest(f"checkpoint {cid} cannot be used: {INVALID}; fork from another")
        # NOTE: off the event loop: the fork verifies its checkpoint's files (400 MB: 0.6 s)
        child = await tornado.ioloop.IOLoop.current().run_in_executor(
            _verifier(), lambda: runs.fork(run_id, cid, changes or {}))
        self.write_json({"run": public_run(runs.get(child))}, 201)


def public_command(c: dict) -> dict:
    return {k: c[k] for k in ("id", "command", "created", "acked", "result", "iteration")}


class Commands(Base):
    """``POST {"command": "pause"}``: ask the loop training the run (in any process) to pause,
    resume, stop or checkpoint after its current batch; 202 with the command, whose ``acked``
    the client polls at ``commands/<id>``. 409 when no loop is training the run."""

    @endpoint
    def post(self, run_id):
        self.run_or_404(run_id)
        body = self.body_object(("command",))
        command = body.get("command")
        if command not in runs.COMMANDS:
            raise BadRequest(f"command must be one of {list(runs.COMMANDS)}, got "
                             f"{json.dumps(command)[:40]}")
        rec = runs.send(run_id, command, wait=None)
        self.write_json({"command": public_command(rec)}, 202)


class Command(Base):
    @endpoint
    def get(self, run_id, cid):
        self.run_or_404(run_id)
        self.write_json({"command": public_command(_owned(run_id, "command", int(cid)))})


class NoSuchEndpoint(Base):
    """A valid run id followed by a path the API does not have."""

    @endpoint
    def get(self, run_id, rest):
        raise BadRequest(f"no such endpoint: runs/{run_id}/{rest[:40]}", 404)

    delete = post = put = patch = get


class NoRoute(Base):
    """Any other path under the API's root: a JSON 404, as every other refusal is (not the
    server's HTML page)."""

    @endpoint
    def get(self, path):
        raise BadRequest(f"no such endpoint: {path[:60]!r}; the API has runs, compare and "
                         "sweeps", 404)

    delete = post = put = patch = get


class BadId(Base):
    """Anything under runs/ that is not a run id (e.g. ``..%2F..%2Fetc``) is refused."""

    @endpoint
    def get(self, what, rest=None):
        raise BadRequest(f"not a run id: {what[:40]!r}")

    delete = post = put = patch = get
