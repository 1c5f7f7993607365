"""The notebook widgets headless: their models, the messages they send, throttling, the
controls' effect on a training loop, history from the run store."""

import time

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
from labkit import training as T

pytest.importorskip("jupyter_bokeh", reason="the notebook extras are part of [dev]")
from jupyter_bokeh import BokehModel  # noqa: E402

from labkit.notebook import CheckpointBrowser, Dashboard, GraphView, collapse, layout  # noqa: E402

from ..training.helpers import make_loop  # noqa: E402


@pytest.fixture
def patches(monkeypatch):
    """Every Bokeh document patch the widgets send to the browser."""
    sent = []

    def send(self, content, buffers=None):
        sent.append(content)
    monkeypatch.setattr(BokehModel, "send", send)
    return sent


def wait_for(cond, timeout=20.0):
    t = time.monotonic()
    while not cond():
        assert time.monotonic() - t < timeout, "timed out"
        time.sleep(0.01)


def test_dashboard_streams_throttled_and_bounded(patches):
    loop = make_loop({"epochs": 40, "batch_size": 8})  # 480 fast batches
    dash = Dashboard(loop, max_rate=5.0, max_points=100)
    t = time.monotonic()
    loop.start()
    loop.wait()
    secs = time.monotonic() - t
    loss = dash._sources["loss"].data
    assert len(loss["y"]) == 100  # rollover: the newest points only
    assert loss["x"][-1] == 480 and loss["y"][-1] == loop.log.last("loss")
    assert dash._sources["train_loss"].data["x"][-1] == 480
    # a few pushes per second, not one per batch
    assert dash.pushes <= secs * 5.0 + 6, (dash.pushes, secs)
    # no browser showed the figures: nothing went as patches, all of it is in their state
    assert not [p for p in patches if p.get("msg") == "patch"]
    assert repr(float(loss["y"][-1])) in str(bundle_json(dash._figures["loss"][1]))
    dash._figures["loss"][1]._view_count = 1  # a browser shows one: its data is sent
    assert 0 < len([p for p in patches if p.get("msg") == "patch"])
    assert dash.progress.max == 12 and "epoch 40" in dash.info.value
    assert "finished" in repr(dash) and "loss" in repr(dash)
    assert set(dash._figures) == {"loss", "accuracy"}
    bundle = dash._repr_mimebundle_()
    assert bundle["text/plain"].startswith("Dashboard(run ")
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_dashboard_buttons_control_the_loop(patches, tmp_path):
    loop = make_loop({"epochs": 1000})
    loop.add(lambda loop: time.sleep(0.005), event="after_batch")
    dash = loop.show()
    loop.start()
    wait_for(lambda: loop.status["iteration"] >= 3)
    dash.pause_button.click()
    wait_for(lambda: lk.runs.get(loop.run_id)["status"] == "paused")
    at = loop.status["iteration"]
    time.sleep(0.2)
    assert loop.status["iteration"] == at
    assert dash.pause_button.disabled and not dash.resume_button.disabled
    dash.checkpoint_button.click()
    wait_for(lambda: loop.last_checkpoint is not None)
    assert lk.checkpoint.manifest(loop.last_checkpoint)["iteration"] == at
    wait_for(lambda: "written" in dash.message.value)
    dash.resume_button.click()
    wait_for(lambda: loop.status["iteration"] > at + 2)
    dash.stop_button.click()
    loop.wait()
    assert lk.runs.get(loop.run_id)["status"] == "finished"
    assert loop.stop_reason == "stopped from the dashboard"
    assert [c["iteration"] for c in lk.runs.checkpoints(loop.run_id)][0] == at


def test_dashboard_of_a_stored_run_redraws_its_history(patches):
    loop = make_loop({"epochs": 3})
    loop.run()
    dash = Dashboard(loop.run_id)  # e.g. in a new kernel: from the store alone
    assert dash._sources["loss"].data["y"] == loop.log.series("loss")[1]
    assert dash._sources["train_loss"].data["x"] == [12, 24, 36]
    # what the browser draws first holds every curve (each figure was built with its points)
    loss_figure = bundle_json(dash._figures["loss"][1])
    for v in lk.runs.metrics(loop.run_id, keys=["valid_loss"])["valid_loss"]["value"]:
        assert repr(v) in str(loss_figure) or repr(np.float32(v).item()) in str(loss_figure)
    assert "finished" in repr(dash)
    assert dash.pause_button.disabled and dash.checkpoint_button.disabled
    dash.close()


def bundle_json(widget):
    import json

    from bokeh.core.json_encoder import serialize_json

    return json.loads(serialize_json(widget.render_bundle))


def test_plot_widgets_lose_no_change_made_before_the_browser_shows_them(patches):
    from bokeh.models import ColumnDataSource
    from bokeh.plotting import figure

    from labkit.notebook import _bokeh

    src = ColumnDataSource(data={"x": [1], "y": [0.5]})
    fig = figure()
    fig.line("x", "y", source=src)
    widget = _bokeh.model(fig)
    src.stream({"x": [2], "y": [0.25]})
    # not shown yet: the change is in the state a new view draws from, and not sent
    assert "0.25" in str(bundle_json(widget))
    assert not patches
    before = len(patches)
    widget._view_count = 1  # the frontend reports a view: the data is sent again, whole
    resent = " ".join(str(p.get("payload")) for p in patches[before:])
    assert "ColumnDataChanged" in resent and "[0.5,0.25]" in resent
    src.stream({"x": [3], "y": [0.125]})
    assert "0.125" not in str(bundle_json(widget))
    assert sum(p.get("msg") == "patch" for p in patches) >= 6  # and as patches to the view


def test_dashboard_follows_a_run_training_elsewhere(patches):
    loop = make_loop({"epochs": 200})
    loop.add(lambda loop: time.sleep(0.002), event="after_batch")
    loop.start()
    wait_for(lambda: loop.status["iteration"] >= 20)
    dash = Dashboard(loop.run_id, poll=0.1)  # not given the loop: reads the store
    n0 = len(dash._sources["loss"].data["y"])
    wait_for(lambda: len(dash._sources["loss"].data["y"]) > n0 + 5)
    loop.stop()
    loop.wait()
    dash.close()


def test_graphview_draws_collapses_and_explains():
    lk.bricks.set_seed(0)
    model = B.Sequence(B.Linear(4, 8), B.Tanh(), B.MLP([8, 6, 3]))
    x = lk.tensor(np.ones((5, 4), np.float32))
    loss = model(x).sum()
    loss.backward(retain_graph=True)
    view = GraphView(loss)
    kinds = view.node_source.data["kind"]
    assert "brick" in kinds and "output" in kinds and "input" in kinds
    before = len(kinds)
    mlp = next(i for i, (k, b) in enumerate(zip(kinds, view.node_source.data["brick"]))
               if k == "brick" and b.endswith("/mlp_2"))
    view.node_source.selected.indices = [mlp]  # what a click in the browser does
    assert "/sequence/mlp_2" in view.expanded and len(view.node_source.data["kind"]) > before
    assert "expanded" in view.details.value
    pid = next(n["id"] for n in view.full["nodes"] if n.get("name") == "/sequence/linear_0.W")
    view.expanded.add("/sequence/linear_0")
    view.redraw()
    text = view.select(pid)
    assert "mean" in text and "norm" in text and "gradient" in text and "<svg" in text
    w = model.params()["/sequence/linear_0.W"].numpy()
    assert f"{w.mean():.4g}" in text
    assert repr(view).startswith("GraphView(")
    hover = [t for t in view.figure.tools if type(t).__name__ == "HoverTool"][0]
    assert {name for name, _ in hover.tooltips} >= {"shape", "dtype", "device", "brick", "role"}


def test_graphview_of_a_shape_error():
    model = B.Sequence(B.Linear(4, 8), B.Tanh(), B.Linear(7, 2))
    with pytest.raises(lk.ShapeError) as info:
        model(lk.tensor(np.ones((3, 4), np.float32)))
    err = info.value
    assert err.brick == "/sequence/linear_2" and "GraphView(error)" in err.__notes__[0]
    view = GraphView(err)
    assert view.failed_brick == "/sequence/linear_2"
    assert len(view.graph.nodes) == 2  # linear and tanh: up to the failing op


def test_layout_is_layered_for_thousands_of_nodes():
    n = 2500
    g = {"nodes": [{"id": f"n{i}", "kind": "function", "op": "add"} for i in range(n)],
         "edges": [[f"n{i}", f"n{i + 1}"] for i in range(n - 1)]
         + [[f"n{i}", f"n{i + 7}"] for i in range(0, n - 7, 5)]}
    pos = layout(g)
    assert len(pos) == n
    assert all(pos[b][0] > pos[a][0] for a, b in g["edges"])  # every edge points forward
    c = collapse({"nodes": [{"id": "a", "kind": "function", "op": "x", "brick": "/m/l1/in"},
                            {"id": "b", "kind": "function", "op": "y", "brick": "/m/l1"},
                            {"id": "c", "kind": "function", "op": "z", "brick": "/m/l2"}],
                  "edges": [["a", "b"], ["b", "c"]]})
    assert [n["id"] for n in c["nodes"]] == ["brick:/m/l1", "brick:/m/l2"]
    assert c["edges"] == [["brick:/m/l1", "brick:/m/l2"]]


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
