"""pytest-jupyter's server fixtures, for these tests only (its autouse fixtures would otherwise
run around every test of the suite)."""

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"labkit.server": True}}}


@pytest.fixture(autouse=True)
def fresh_store(tmp_path):
    """Each test sees only its own runs (the server reads the same process-wide store)."""
    import labkit as lk

    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        yield store
