"""The cockpit at the edges a probe found: a checkpoint asked for as training ends (it fired
at the next run's first batch), a pause pressed after the end (it paused the next run), a
checkpoint pressed twice at one iteration (two store records of one checkpoint), one metric
name given as a string (read as its letters), a huge int reported (the run failed), a loop
without a store (its series not downsampled), an unknown run id for the checkpoint browser
(another run's shown), and an infinite planned time (the output was invalid JSON)."""

import json

import numpy as np
import pytest

import labkit as lk
from labkit import training as T
from labkit.notebook import MIME_TYPE, Dashboard

from ..training.helpers import make_loop


def _ckpts(loop):
    return [c["iteration"] for c in lk.runs.checkpoints(loop.run_id)]


def test_a_checkpoint_asked_for_as_training_ends_is_written_then(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = make_loop({"epochs": 1})
        loop.add(lambda lp: lp.request_checkpoint(), event="after_training").transient = True
        loop.start()
        loop.wait()
        assert _ckpts(loop) == [12]
        loop.run(max_iterations=1)   # NOTE: the request is not carried into the next run
        assert _ckpts(loop) == [12]


def test_pause_and_checkpoint_pressed_when_not_training(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = make_loop({"epochs": 1})
        dash = Dashboard(loop)
        loop.run(max_iterations=2)
        assert dash.pause() == "not training: nothing to pause" and not loop.paused
        assert dash.checkpoint() == dash.checkpoint() == "checkpoint ckpt-00000002"
        assert _ckpts(loop) == [2]   # NOTE: one record of one checkpoint, not two
        loop.start(max_iterations=3)
        loop.wait()
        assert loop.status["iteration"] == 5 and not loop.paused


def test_one_metric_name_as_a_string_and_a_huge_int_reported(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = make_loop({"epochs": 1})
        loop.add(lambda lp: lp.log.report(big=2 ** 1100), event="after_batch")
        dash = Dashboard(loop, metrics="loss")
        loop.run(max_iterations=3)
        data = dash._repr_mimebundle_()[MIME_TYPE]
        assert data["metrics"] == ["loss"]
        assert lk.runs.metrics(loop.run_id, ["big"])["big"]["value"][-1] == float("inf")


def test_a_loop_without_a_store_sends_a_downsampled_series():
    base = make_loop({"epochs": 40, "batch_size": 2})   # NOTE: 48 batches an epoch
    loop = T.MainLoop(base.model, base.optimizer, base.stream, base.loss_fn, store=False,
                      extensions=[T.FinishAfter(iterations=1500)])
    with pytest.warns(UserWarning, match="records no run store"):
        dash = Dashboard(loop)
    loop.run()
    loss = dash._repr_mimebundle_()[MIME_TYPE]["snapshot"]["series"]["loss"]
    assert len(loss["value"]) <= 1000 and loss["iteration"][0] == 1
    assert loss["iteration"][-1] == 1500   # NOTE: the ends and each bucket's extremes kept
    _, full = loop.log.series("loss")
    assert max(loss["value"]) == pytest.approx(max(full))
    assert min(loss["value"]) == pytest.approx(min(full))


def test_an_unknown_run_id_for_the_checkpoint_browser_is_refused(tmp_path):
    from labkit.notebook import CheckpointBrowser

    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        make_loop({"epochs": 1}).run(max_iterations=2)
        with pytest.raises(lk.runs.RunStoreError, match="no run '20261203-000000-0123"):
            CheckpointBrowser(run_id="20261203-000000-0123456789abcdef")


def test_an_infinite_planned_time_gives_valid_json(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = make_loop({"epochs": 1})
        loop.add(T.FinishAfter(seconds=float("inf")))
        dash = Dashboard(loop)
        loop.run(max_iterations=2)
        json.dumps(dash._repr_mimebundle_()[MIME_TYPE], allow_nan=False)
        assert np.isfinite(loop.status["iteration"])


@pytest.mark.parametrize("values", [np.full(4, 1.7e308), np.array([5e-324, 1e-323, 1.5e-323]),
                                    np.array([-1e308, 1e308]), np.array([1.0, 2.0])])
def test_graphview_details_of_values_near_the_float_limits(values):
    # NOTE: a ValueError in the click handler: an infinite range, or bins too narrow
    from labkit.notebook import GraphView
    from labkit.notebook.graphview import _stats

    x = lk.tensor(values, requires_grad=True)
    view = GraphView(x * 1.0)
    node = next(n["id"] for n in view.current["nodes"] if n["kind"] == "input")
    view.select(node)
    assert sum(view.hist_sources[0].data["top"]) == len(values)
    s = _stats(values)
    m = np.abs(values).max()
    assert np.isfinite(s["mean"]) and s["mean"] == pytest.approx(values.mean() if m < 1e300
                                                                 else (values / m).mean() * m)
    with np.errstate(over="ignore"):  # NOTE: 3.4e308 is past the float range: inf is right
        assert s["norm"] == pytest.approx(float(np.sqrt(np.sum((values / m) ** 2)) * m))


def test_the_static_copy_breaks_its_curves_at_values_that_were_not_finite():
    import re

    from labkit.notebook import _static

    its = list(range(1, 101))
    vals = [1.0 + i / 100 for i in range(100)]
    vals[40:60] = [None] * 20   # NOTE: NaN in the store is null
    svg = _static.figure("loss", [("loss", its, vals)])
    lines = re.findall(r'<polyline points="([^"]+)"', svg)
    assert [len(p.split()) for p in lines] == [40, 40]   # NOTE: one line joined across it
    assert "loss (20 not finite)" in svg
    gone = [1.0] * 49 + [None] * 51
    svg = _static.figure("loss", [("loss", its, gone)])
    ticks = re.findall(r'text-anchor="middle" fill="currentColor" opacity="0.75">([^<]+)<', svg)
    assert ticks[-1] == "100" and "(51 not finite)" in svg


def test_a_stop_pressed_before_the_training_thread_runs_is_kept(tmp_path, monkeypatch):
    import time

    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = make_loop({"epochs": 100_000})
        real = loop.run

        def late(*a, **k):  # NOTE: the thread not scheduled yet (a busy kernel)
            time.sleep(0.2)
            return real(*a, **k)

        monkeypatch.setattr(loop, "run", late)
        loop.start()
        loop.stop("pressed Stop")
        loop.resume()
        loop.wait(timeout=30)
        assert not loop.running and loop.stop_reason == "pressed Stop"
        assert loop.status["iteration"] <= 1


def test_the_checkpoint_browser_does_not_reread_the_run_list_at_each_checkpoint(
        tmp_path, monkeypatch):
    # NOTE: on the training thread: 60-90 ms a checkpoint with 5,000 runs in the store
    from labkit import runs
    from labkit.notebook import CheckpointBrowser

    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = make_loop({"epochs": 1, "checkpoint_every": 2})
        loop.run(max_iterations=2)
        browser = CheckpointBrowser(loop)
        calls = []
        real = runs.list
        monkeypatch.setattr(runs, "list", lambda *a, **k: calls.append(1) or real(*a, **k))
        loop.run(max_iterations=6)
        assert calls == [] and [r["iteration"] for r in browser.records] == [6, 8]
        browser.close()
