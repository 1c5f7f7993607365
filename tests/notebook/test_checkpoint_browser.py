"""CheckpointBrowser headless: listing, restore, fork and delete through its widgets."""

import pytest

import labkit as lk
from labkit import training as T

pytest.importorskip("jupyter_bokeh", reason="the notebook extras are part of [dev]")
from labkit.notebook import CheckpointBrowser  # noqa: E402

from ..training.helpers import make_loop  # noqa: E402


def test_checkpoint_browser_restore_fork_delete():
    loop = T.build(make_loop, {"epochs": 2, "checkpoint_every": 6})
    loop.run()
    browser = CheckpointBrowser(loop)
    steps = [c["iteration"] for c in lk.runs.checkpoints(loop.run_id)]
    assert browser.runs.value == loop.run_id and len(browser.checkpoints.options) == len(steps)
    assert "valid" in browser.table.value and "<td>24</td>" in browser.table.value
    first = lk.runs.checkpoints(loop.run_id)[0]
    browser.checkpoints.value = first["id"]
    browser.restore_button.click()
    assert loop.status["iteration"] == first["iteration"] and "restored" in browser.message.value
    browser.changes.value = '{"lr": 0.001}'
    browser.checkpoints.value = first["id"]
    browser.fork_button.click()
    child = lk.runs.get(browser.last_fork)
    assert child["parent_run"] == loop.run_id and child["config"]["lr"] == 0.001
    browser.changes.value = "not json"
    browser.fork_button.click()
    assert "must be a JSON object" in browser.message.value
    browser.runs.value = loop.run_id
    browser.checkpoints.value = first["id"]
    browser.delete_button.click()
    assert len(lk.runs.checkpoints(loop.run_id)) == len(steps) - 1
    assert not __import__("pathlib").Path(first["path"]).exists()
    assert repr(browser).startswith("CheckpointBrowser(run ")
