"""Jupyter's authorization (``ServerApp.authorizer_class``: what JupyterHub and read-only
sharing use) applies to every handler, as to Jupyter's own: resource ``"labkit"``, action
``read`` for GET and ``write`` for POST, PATCH and DELETE."""

import json

import pytest
from jupyter_server.auth import Authorizer

import labkit as lk

from .test_hostile import raw, seed


class ReadOnly(Authorizer):
    def is_authorized(self, handler, user, action, resource):
        return action == "read"


class NotLabkit(Authorizer):
    async def is_authorized(self, handler, user, action, resource):  # an async one too
        return resource != "labkit"


WRITES = [("DELETE", "runs/{run}", None), ("DELETE", "runs/{run}?force=1", None),
          ("DELETE", "runs/{run}/checkpoints/{ck}", None),
          ("PATCH", "runs/{run}", b'{"name": "renamed"}'),
          ("POST", "runs/{run}/fork", b"{}"),
          ("POST", "runs/{run}/commands", b'{"command": "stop"}'),
          ("POST", "sweeps/{run}/stop", b"{}"),
          ("POST", "runs/nope/fork", b"{}"), ("DELETE", "runs/{run}/nope", None)]
READS = ["runs", "runs?limit=5", "runs/{run}", "runs/{run}/metrics", "runs/{run}/lineage",
         "runs/{run}/checkpoints?verify=1", "runs/{run}/commands/1", "compare?ids={run}",
         "sweeps", "sweeps/{run}"]


@pytest.fixture
def jp_server_config(request):
    return {"ServerApp": {"jpserver_extensions": {"labkit.server": True},
                          "authorizer_class": request.param}}


def _state(ids):
    return (sorted(r["id"] for r in lk.runs.list()), lk.runs.get(ids["run"])["name"],
            [c["id"] for c in lk.runs.checkpoints(ids["run"])])


@pytest.mark.parametrize("jp_server_config", [ReadOnly], indirect=True)
async def test_a_read_only_user_reads_but_changes_nothing(
        http_server_client, jp_base_url, jp_auth_header, fresh_store, tmp_path):
    ids = seed(fresh_store, tmp_path)
    before = _state(ids)
    for method, path, body in WRITES:
        r = await raw(http_server_client, jp_base_url, jp_auth_header, method,
                      path.format(**ids), body=body)
        assert r.code == 403, (method, path, r.code, r.body[:200])
        assert "not authorized to write" in json.loads(r.body)["message"]
    assert _state(ids) == before
    assert (tmp_path / "runs" / ids["run"]).is_dir()
    for path in READS:
        r = await raw(http_server_client, jp_base_url, jp_auth_header, "GET",
                      path.format(**ids))
        assert r.code in (200, 404), (path, r.code, r.body[:200])  # 404: no command, sweep


@pytest.mark.parametrize("jp_server_config", [NotLabkit], indirect=True)
async def test_a_user_without_the_labkit_resource_gets_403_everywhere(
        http_server_client, jp_base_url, jp_auth_header, fresh_store, tmp_path):
    ids = seed(fresh_store, tmp_path)
    before = _state(ids)
    for method, path, body in [*WRITES, *(("GET", p, None) for p in READS)]:
        r = await raw(http_server_client, jp_base_url, jp_auth_header, method,
                      path.format(**ids), body=body)
        assert r.code == 403, (method, path, r.code, r.body[:200])
        assert "resource: labkit" in json.loads(r.body)["message"]
    assert _state(ids) == before


def test_every_method_of_every_handler_is_an_endpoint():
    """Authentication and authorization come from ``handlers.endpoint``: a handler method
    without it would be open to any user the authorizer refuses."""
    import tornado.web

    from labkit.server.routes import HANDLERS

    for _, cls in HANDLERS:
        for verb in cls.SUPPORTED_METHODS:
            m = getattr(cls, verb.lower())
            if m is not getattr(tornado.web.RequestHandler, verb.lower()) and \
                    verb not in ("OPTIONS", "HEAD"):
                assert getattr(m, "labkit_endpoint", False), (cls.__name__, verb)
