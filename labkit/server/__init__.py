"""The jupyter_server extension: labkit's run store as a REST API under ``{base_url}labkit/api/``.

Enabled on install (``jupyter-config/jupyter_server_config.d/labkit.json``). Every handler is
behind Jupyter's own authentication (token or session cookie, XSRF for writes) and its
authorizer (resource ``"labkit"``: ``read`` for GET, ``write`` for the others; a 403). Run and
checkpoint ids are checked against a pattern and then against the store: nothing from a request
becomes a filesystem path, and no path leaves in a response. Errors are JSON
``{"message": ...}``: 400 for a malformed request, 404 for an unknown run, checkpoint or
sweep, 409 for deleting a run that trains or stopping a sweep no driver runs, 413 for a body
over 256 KiB, 503 for a damaged or locked store or files it names that cannot be read. A
query parameter given twice is a 400. A run or sweep whose row cannot be read is a
503 by itself (``runs/ID``, ``sweeps/ID``), but the lists and ``compare`` show it among the
others with ``"status": "damaged"`` and ``"damaged"``: why (e.g. ``"its config is not JSON
(...)"``); its other fields are what could be read (``config``, ``progress`` and ``settings``
empty; ``compare`` adds its metrics). Such a run can still be deleted.

=======  ================================================  ====================================
GET      ``runs?status=&name=``                            runs, newest first (``dead`` when
                                                           stale); ``status=all`` for all
GET      ``runs?limit=&offset=&sort=&q=&status=&``         a window: ``total``, ``counts`` per
         ``metric=&points=&ids=1``                         status (``live``), each run's
                                                           sparkline of ``metric``; ``ids=1``:
                                                           the matching ids, at most 51
GET      ``runs/ID``                                       one run: config, status, progress,
                                                           tags, note, a failed run's
                                                           traceback tail, lineage
                                                           (``parent_run``,
                                                           ``parent_checkpoint`` id, children)
GET      ``runs/ID/lineage``                               ancestors (parent first) and the
                                                           tree of forks (nested, capped;
                                                           ``truncated``)
GET      ``runs/ID/metrics?keys=a,b&since_iteration=&``    ``{key: {iteration, epoch, value,
         ``max_points=`` (``since_step`` = old name)       time}}``
GET      ``runs/ID/checkpoints?verify=0``                  id, iteration, epoch, size, metrics,
                                                           valid (``verify=1``: files re-checked
                                                           now, with a ``reason``)
PATCH    ``runs/ID`` ``{"name"?, "tags"?, "note"?}``       rename, tag, note (each value checked;
                                                           an unknown field is a 400 naming it)
POST     ``runs/ID/fork`` ``{"checkpoint", "changes"}``    a new run from a checkpoint (201;
                                                           one the store marks invalid: 400)
DELETE   ``runs/ID?force=0``                               the run and its files (409 while it
                                                           trains, unless ``force=1``)
DELETE   ``runs/ID/checkpoints/CID?force=0``               one checkpoint and its files (kept,
                                                           ``kept``: why, when they are not
                                                           surely the run's: outside its real
                                                           folder, another run's manifest, a
                                                           link; lk.runs.delete_checkpoint);
                                                           409 while an unfinished fork with
                                                           no checkpoint of its own starts
                                                           from it, unless ``force=1``
GET      ``compare?ids=A,B&max_points=500&``               the compare page's runs (at most
         ``since_iteration=``                              50) with downsampled metrics, in
                                                           one request, read off the event
                                                           loop; ``max_points`` lowered so an
                                                           answer holds at most 60,000 points;
                                                           ``since_iteration`` (one, or one per
                                                           id): only newer points; unknown ids:
                                                           a 404 listing them (``missing``); a
                                                           damaged run: as ``runs`` lists it
GET      ``sweeps?limit=50``                               the newest sweeps: status (``dead``
                                                           when its driver is gone), trials
                                                           per status, ``done``, ``best``,
                                                           metric, mode; ``total``
GET      ``sweeps/ID?limit=&best=``                        settings (no directory) and trials
                                                           (trial, status, params, value,
                                                           run_id, rung, epoch, error);
                                                           ``best=N``: the N best with a run
POST     ``sweeps/ID/stop|pause|resume``                   ask its driver to stop, pause or
                                                           continue, as ``Sweep.stop()`` etc.
                                                           (202; 409 when no driver runs it in
                                                           a state that takes it)
=======  ================================================  ====================================
"""

from __future__ import annotations

from ..runs.ids import RUN_ID

__all__ = ["RUN_ID"]


def _jupyter_server_extension_points():
    return [{"module": "labkit.server"}]


def _load_jupyter_server_extension(serverapp):
    from jupyter_server.utils import url_path_join

    from .routes import HANDLERS

    root = url_path_join(serverapp.web_app.settings["base_url"], "labkit", "api")
    serverapp.web_app.add_handlers(".*$", [(url_path_join(root, p), h) for p, h in HANDLERS])
    serverapp.log.info(f"labkit: run store API at {root}")
