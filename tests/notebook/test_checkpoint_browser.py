"""CheckpointBrowser headless: one linked table, Delete that asks first, Fork from the run's
config, rows that appear while the loop trains, Restore only while it does not, and every
value escaped."""

import json
import re
import threading
from pathlib import Path

import pytest

import labkit as lk
from labkit import training as T

pytest.importorskip("jupyter_bokeh", reason="the notebook extras are part of [dev]")
import ipywidgets as w  # noqa: E402

from labkit.notebook import CheckpointBrowser  # noqa: E402
from labkit.notebook.checkpoints_table import CSS, fork_changes, human_size  # noqa: E402

from ..training.helpers import make_loop  # noqa: E402

HOSTILE = '<img src=x onerror="alert(1)">'


@pytest.fixture
def store(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as s:
        yield s


def trained(**config):
    loop = T.build(make_loop, {"epochs": 2, "checkpoint_every": 6, **config})
    loop.run()
    return loop


def rows(browser):
    """The iterations of the table's rows, as the HTML shows them."""
    return [int(m) for m in re.findall(r"<tr class='[^']*' title='[^']*'><td>(\d+)</td>",
                                       browser.table.value)]


def row_buttons(browser, iteration):
    """The Restore, Fork and Delete buttons beside the row of ``iteration``."""
    i = rows(browser).index(iteration)
    box = browser.actions.children[1 + i]  # the first child stands beside the header
    return dict((b.description, b) for b in box.children)


def walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from walk(child)


def test_one_table_whose_rows_carry_their_actions(store):
    loop = trained()
    browser = CheckpointBrowser(loop)
    recs = lk.runs.checkpoints(loop.run_id)
    assert [c["iteration"] for c in recs] == [18, 24]  # keep_last=2
    assert browser.run_id == loop.run_id and rows(browser) == [18, 24]
    assert len(browser.actions.children) == 1 + len(recs)
    head = re.findall(r"<th>([^<]*)</th>", browser.table.value)
    assert head == ["iteration", "epoch", "loss", "accuracy", "size", "valid"]
    assert re.search(r"<td>\d+\.\d+ kB</td>", browser.table.value), "size is human readable"
    # no second list of the same checkpoints, no unexplained "changes" field
    kinds = {type(x) for x in walk(browser.widget)}
    assert not kinds & {w.Select, w.SelectMultiple, w.Text}
    # the older row's Restore restores that row's checkpoint, and highlights that row
    row_buttons(browser, 18)["Restore"].click()
    assert loop.status["iteration"] == 18, browser.message.value
    assert "restored iteration 18" in browser.message.value
    assert browser.selected == recs[0]["id"]
    assert re.search(r"<tr class='labkit-selected'[^>]*><td>18</td>", browser.table.value)
    assert not re.search(r"<tr class='labkit-selected'[^>]*><td>24</td>", browser.table.value)
    assert repr(browser) == f"CheckpointBrowser(run {loop.run_id}: 2 checkpoints)"


def test_delete_asks_first_and_cancel_deletes_nothing(store):
    loop = trained()
    browser = CheckpointBrowser(loop)
    first, second = lk.runs.checkpoints(loop.run_id)
    assert browser.confirm_panel.layout.display == "none"
    row_buttons(browser, 18)["Delete"].click()
    assert browser.confirm_panel.layout.display == "flex"
    assert browser.confirm_text.value == ("Delete checkpoint at iteration 18? This removes its "
                                          "files.")
    assert len(lk.runs.checkpoints(loop.run_id)) == 2 and Path(first["path"]).is_dir()
    browser.cancel_button.click()
    assert browser.confirm_panel.layout.display == "none"
    assert "nothing deleted" in browser.message.value
    assert len(lk.runs.checkpoints(loop.run_id)) == 2 and Path(first["path"]).is_dir()
    assert rows(browser) == [18, 24]
    row_buttons(browser, 18)["Delete"].click()
    browser.confirm_button.click()
    assert [c["id"] for c in lk.runs.checkpoints(loop.run_id)] == [second["id"]]
    assert not Path(first["path"]).exists() and Path(second["path"]).is_dir()
    assert rows(browser) == [24] and len(browser.actions.children) == 2
    assert "deleted the checkpoint at iteration 18" in browser.message.value
    assert browser.confirm_panel.layout.display == "none"


def test_delete_never_removes_what_the_run_does_not_own(store):
    a, b = trained(), trained()
    theirs = lk.runs.checkpoints(b.run_id)[-1]
    # a record of run a that points into run b's folder (a crafted or stale row)
    store.add_checkpoint(a.run_id, 99, 3, theirs["path"], 1, metrics={})
    browser = CheckpointBrowser(run_id=a.run_id)
    assert 99 in rows(browser)
    row_buttons(browser, 99)["Delete"].click()
    browser.confirm_button.click()
    assert "files were kept" in browser.message.value
    assert Path(theirs["path"]).is_dir() and 99 not in rows(browser)
    assert lk.runs.checkpoints(b.run_id)[-1]["id"] == theirs["id"]
    # another run's checkpoint id is refused before anything is deleted
    browser._act(lambda: browser.delete(theirs["id"]))
    assert "labkit-error" in browser.message.value and "not one of run" in browser.message.value
    assert lk.runs.checkpoints(b.run_id)[-1]["id"] == theirs["id"]


def test_fork_shows_the_config_refuses_bad_json_and_reports_the_new_run(store):
    loop = trained()
    browser = CheckpointBrowser(loop)
    first = lk.runs.checkpoints(loop.run_id)[0]
    before = len(lk.runs.list())
    assert browser.fork_panel.layout.display == "none"
    row_buttons(browser, 18)["Fork"].click()
    assert browser.fork_panel.layout.display == "flex"
    assert json.loads(browser.fork_config.value) == lk.runs.get(loop.run_id)["config"]
    assert "keys you change" in browser.fork_label.value and "iteration 18" in \
        browser.fork_label.value
    for text, says in [("{lr: 0.001}", "not valid JSON"), ("[1, 2]", "must be a JSON object"),
                       ('{"lr": 1, "lr": 2}', "appears twice"), ("", "the config is empty"),
                       ('{"nope": 1}', "keys removed")]:
        browser.fork_config.value = text
        browser.fork_button.click()
        assert says in browser.message.value and "labkit-error" in browser.message.value, text
        assert len(lk.runs.list()) == before, "a refused config made a run"
    config = {**lk.runs.get(loop.run_id)["config"], "extra": 1}
    browser.fork_config.value = json.dumps(config)
    browser.fork_button.click()
    assert "unknown keys: [&#x27;extra&#x27;]" in browser.message.value
    config = {**lk.runs.get(loop.run_id)["config"], "lr": 0.001}
    browser.fork_config.value = json.dumps(config, indent=1)
    browser.fork_button.click()
    child = lk.runs.get(browser.last_fork)
    assert child["parent_run"] == loop.run_id and child["parent_checkpoint_id"] == first["id"]
    assert child["config"]["lr"] == 0.001 and child["config"]["hidden"] == 32
    assert f"forked run {child['id']}" in browser.message.value
    assert "{&quot;lr&quot;: 0.001}" in browser.message.value
    assert browser.fork_panel.layout.display == "none"
    assert browser.run_id == loop.run_id and child["id"] in dict(
        (v, k) for k, v in browser.runs.options)


def test_fork_changes_keeps_only_changed_keys():
    config = {"lr": 0.01, "hidden": 32, "flag": 1}
    assert fork_changes('{"lr": 1e-2, "hidden": 32, "flag": 1}', config) == {}
    assert fork_changes('{"lr": 0.1, "hidden": 32, "flag": true}', config) == {
        "lr": 0.1, "flag": True}
    with pytest.raises(ValueError, match="got a JSON list"):
        fork_changes("[]", config)


def test_new_checkpoints_appear_while_the_loop_trains(store):
    loop = T.build(make_loop, {"epochs": 2, "checkpoint_every": 6})
    browser = CheckpointBrowser(loop)
    assert browser.records == [] and rows(browser) == []
    seen = {}

    def look(loop):  # after the browser's own hook, where a user would look
        if loop.last_checkpoint_iteration == loop.status["iteration"]:
            seen[loop.status["iteration"]] = rows(browser)

    loop.add(look, every=1, unit="iterations", priority=-30)
    loop.run()
    # each checkpoint showed up when written; keep_last=2 pruned the oldest from the table
    assert seen == {6: [6], 12: [6, 12], 18: [12, 18], 24: [18, 24]}
    assert browser.run_id == loop.run_id
    assert "CheckpointBrowser" not in loop.state_dict()["extensions"], "the hook is transient"
    browser.close()
    assert not [e for e in loop.extensions if e.name.startswith("CheckpointBrowser")]


def test_a_checkpoint_written_while_paused_appears_on_resume(store):
    loop = T.build(make_loop, {"epochs": 2})
    browser = CheckpointBrowser(loop)
    loop.run(max_iterations=3)
    loop.save_checkpoint()  # as while paused: no event comes with it
    assert rows(browser) == []
    loop.dispatch("on_unpause")
    assert rows(browser) == [3] and browser.run_id == loop.run_id


def test_restore_is_refused_while_the_loop_trains(store):
    loop = trained()
    browser = CheckpointBrowser(loop)
    held, release = threading.Event(), threading.Event()

    def hold(loop):
        held.set()
        release.wait(30)

    hook = loop.add(hold, every=1, unit="iterations", once=True)
    loop.start(max_iterations=3)
    try:
        assert held.wait(30) and loop.running
        at = loop.status["iteration"]
        row_buttons(browser, 18)["Restore"].click()
        assert "the loop is training" in browser.message.value
        assert "stop it first" in browser.message.value
        assert "labkit-error" in browser.message.value and loop.status["iteration"] == at
    finally:
        release.set()
        loop.wait(30)
    loop.remove(hook)
    row_buttons(browser, 18)["Restore"].click()
    assert loop.status["iteration"] == 18 and "restored iteration 18" in browser.message.value


def test_restore_without_a_loop_rebuilds_the_runs_loop(store):
    run = trained()
    browser = CheckpointBrowser(run_id=run.run_id)
    assert browser.loop is None
    row_buttons(browser, 18)["Restore"].click()
    assert browser.loop is not None and browser.loop is not run, browser.message.value
    assert browser.loop.status["iteration"] == 18 and "browser.loop" in browser.message.value
    assert [e for e in browser.loop.extensions if e.name.startswith("CheckpointBrowser")]


def test_restore_of_another_runs_checkpoint_is_refused(store):
    a, b = trained(), trained()
    browser = CheckpointBrowser(a, run_id=b.run_id)
    row_buttons(browser, 18)["Restore"].click()
    assert "not of this loop&#x27;s run" in browser.message.value and a.status["iteration"] == 24


def test_every_value_shown_is_escaped(store, tmp_path):
    rid = store.create_run(HOSTILE, config={HOSTILE: HOSTILE, "lr": 0.1})
    store.add_checkpoint(rid, 7, 1, tmp_path / "ckpt-00000007", 2_000_000,
                         metrics={HOSTILE: 0.5, "loss": 0.25})
    # another writer (or a crafted file) can put text in any column
    store._conn().execute("INSERT INTO checkpoints (run_id, iteration, epoch, path, size, "
                          "metrics, valid, created) VALUES (?,?,?,?,?,?,?,?)",
                          (rid, 8, HOSTILE, "x", 1, json.dumps({"loss": HOSTILE}), 1, 0.0))
    browser = CheckpointBrowser(run_id=rid)
    assert len(browser.records) == 2
    row_buttons(browser, 7)["Fork"].click()
    # a text area's value is text, never HTML: the config is shown as it is
    assert json.loads(browser.fork_config.value)[HOSTILE] == HOSTILE
    assert "&lt;img" in browser.fork_label.value or "<img" not in browser.fork_label.value
    browser.fork_config.value = json.dumps({HOSTILE: HOSTILE, "lr": 0.1, "<script>": 1})
    browser.fork_button.click()  # refused: the message shows the unknown key
    assert "labkit-error" in browser.message.value
    html_values = [x.value for x in walk(browser.widget) if isinstance(x, w.HTML)]
    assert html_values and not [v for v in html_values if "<img" in v]
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in browser.table.value
    assert "<td>2.00 MB</td>" in browser.table.value
    assert "&lt;script&gt;" in browser.message.value and "<script" not in browser.message.value


def test_the_widget_follows_the_jupyterlab_theme():
    assert "var(--jp-layout-color1)" in CSS and "var(--jp-ui-font-color1)" in CSS
    assert "var(--jp-border-color2)" in CSS
    named = r"(?<![-\w])(?:white|black|gr[ae]y)(?![-\w])"  # not white-space
    colours = re.findall(r"#[0-9a-fA-F]{3,8}\b|rgba?\(|hsla?\(|" + named, CSS)
    assert colours == [], f"hard-coded colours: {colours}"


@pytest.mark.parametrize("n, text", [(0, "0 B"), (812, "812 B"), (12_471, "12.5 kB"),
                                     (2_000_000, "2.00 MB"), (123_400_000, "123 MB"),
                                     (5e12, "5000 GB"), (None, "?")])
def test_human_size(n, text):
    assert human_size(n) == text


def test_delete_through_a_linked_run_folder_keeps_the_other_runs_files(store, tmp_path):
    """lk.runs.delete_checkpoint decides for the browser as for every caller, and the browser
    says why the files stayed."""
    owner = trained()
    theirs = lk.runs.checkpoints(owner.run_id)[-1]
    linked = store.create_run("linked")
    link = tmp_path / "linked" / linked
    link.parent.mkdir()
    link.symlink_to(owner.recorder.directory)
    store.update_run(linked, directory=str(link), status="finished")
    path = link / "checkpoints" / Path(theirs["path"]).name
    store.add_checkpoint(linked, theirs["iteration"], 1, path, 1, metrics={})
    browser = CheckpointBrowser(run_id=linked)
    row_buttons(browser, theirs["iteration"])["Delete"].click()
    browser.confirm_button.click()
    assert "files were kept" in browser.message.value
    assert f"written by run {owner.run_id}" in browser.message.value  # NOTE: its manifest's
    assert lk.checkpoint.verify(theirs["path"]) is None and rows(browser) == []
    assert lk.runs.checkpoints(owner.run_id)[-1]["id"] == theirs["id"]
