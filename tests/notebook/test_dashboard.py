"""The Dashboard headless: the output it displays (the live cockpit's data, a static copy with
SVG plots, a text form), the static copy written again when training ends, its controls for a
loop here and for a run training elsewhere (through the run store), bad arguments."""

import json
import re
import time

import pytest

import labkit as lk
from labkit import training as T
from labkit.errors import LabkitError
from labkit.notebook import MIME_TYPE, Dashboard, _static

from ..training.helpers import make_loop


def wait_for(cond, timeout=30.0):
    t = time.monotonic()
    while not cond():
        assert time.monotonic() - t < timeout, "timed out"
        time.sleep(0.01)


def test_the_output_carries_live_data_a_static_copy_and_text():
    loop = T.build(make_loop, {"epochs": 2})
    dash = Dashboard(loop, max_rate=5)
    assert loop.recorder.flush_every == pytest.approx(0.2)  # the store gets data 5 times/s
    before = dash._repr_mimebundle_()
    assert before[MIME_TYPE]["run_id"] == loop.run_id and before[MIME_TYPE]["max_rate"] == 5
    assert "created" in before["text/plain"] and "no values yet" in before["text/html"]
    loop.run()
    b = dash._repr_mimebundle_()
    data = b[MIME_TYPE]
    json.dumps(data, allow_nan=False)  # JSON the browser can read
    series = data["snapshot"]["series"]
    assert set(series) >= {"loss", "accuracy", "train_loss"}
    for s in series.values():
        its = s["iteration"]
        assert its == sorted(set(its)) and len(s["value"]) == len(its)
    assert series["loss"]["iteration"] == list(range(1, 25))
    assert data["snapshot"]["run"]["status"] == "finished"
    html = b["text/html"]
    assert html.count("<svg") == 2 and "<script" not in html
    # loss first, then accuracy; each figure's legend names its curves
    assert html.index('aria-label="loss"') < html.index('aria-label="accuracy"')
    assert "train_loss" in html and "finished" in html
    assert re.search(r"Dashboard\(run \S+: finished; epoch 2/2 · iteration 24/24", b["text/plain"])


def test_training_end_rewrites_every_display(monkeypatch):
    import IPython.display

    updates = []
    monkeypatch.setattr(IPython.display, "update_display",
                        lambda obj, raw, display_id: updates.append((display_id, obj)))
    loop = T.build(make_loop, {"epochs": 1})
    dash = Dashboard(loop)
    dash._display_ids += ["first", "second"]  # what two display(dash) calls record
    loop.run()
    assert [d for d, _ in updates] == ["first", "second"]
    final = updates[0][1]
    assert "finished" in final["text/html"] and "<svg" in final["text/html"]
    assert len(final[MIME_TYPE]["snapshot"]["series"]["loss"]["iteration"]) == 12
    snap = dash.snapshot()  # also by hand: returns the static copy
    assert "<svg" in snap._repr_html_() and len(updates) == 4
    dash.close()
    assert dash._feed not in loop.extensions


def test_a_loop_without_a_store_draws_from_its_log():
    loop = T.build(make_loop, {"epochs": 1})
    loop = T.MainLoop(loop.model, loop.optimizer, loop.stream, loop.loss_fn, store=False,
                      extensions=[T.FinishAfter(epochs=1)])
    with pytest.warns(UserWarning, match="records no run store"):
        dash = Dashboard(loop)
    loop.run()
    series = dash._repr_mimebundle_()[MIME_TYPE]["snapshot"]["series"]
    assert series["loss"]["iteration"] == list(range(1, 13))


def test_controls_of_a_run_training_elsewhere_go_through_the_store(monkeypatch):
    send = lk.runs.send  # NOTE: its default wait (5 s) is tight for a stalled machine; the
    # answer normally comes in about 0.1 s, and send returns as soon as it does
    monkeypatch.setattr(lk.runs, "send", lambda run_id, command: send(run_id, command, wait=60))
    loop = T.build(make_loop, {"epochs": 100_000})
    loop.ensure_run()
    loop.start()
    try:
        wait_for(lambda: lk.runs.listening(lk.runs.get(loop.run_id)))
        dash = Dashboard(loop.run_id)  # not given the loop: as from another process
        assert dash.pause().startswith("paused at iteration") and loop.paused
        assert dash.checkpoint().endswith("written")
        assert dash.resume() == "resumed"
        assert dash.stop() == "stopping after this batch"
        loop.wait()
        assert loop.stop_reason == "stopped by a command"
        with pytest.raises(lk.runs.RunStoreError, match="not training now"):
            dash.pause()
    finally:
        if loop.running:
            loop.stop()
            loop.resume()
            loop.wait()


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(LabkitError, match="give a MainLoop or a run id"):
        Dashboard("not a run")
    with pytest.raises(lk.runs.RunStoreError, match="no run"):
        Dashboard("20261203-000000-0123456789abcdef")
    loop = T.build(make_loop, {"epochs": 1})
    for rate in (0, -1, 100, "4", True):
        with pytest.raises(LabkitError, match="max_rate must be"):
            Dashboard(loop, max_rate=rate)


def test_static_copy_escapes_and_keeps_spikes():
    n = 5000
    xs = list(range(n))
    ys = [1.0] * n
    ys[3217] = 50.0  # one spike among 5,000 points, drawn from 600
    svg = _static.figure("loss", [("loss", xs, ys), ("<b>valid_loss</b>", [10], [2.0])])
    assert "&lt;b&gt;valid_loss" in svg and "<b>valid" not in svg
    points = re.search(r'<polyline points="([^"]+)"', svg).group(1).split()
    assert len(points) <= _static.POINTS
    top = min(float(p.split(",")[1]) for p in points)  # SVG y grows downwards
    assert top < 20, "the spike was dropped by downsampling"
    html = _static.render("<i>run</i>", "finished", "x", {"loss": {"iteration": xs,
                                                                   "value": ys}})
    assert "<i>" not in html and "&lt;i&gt;run" in html


def test_figures_are_ordered_loss_first_then_by_name():
    keys = ["valid_accuracy", "train_loss", "accuracy", "zeta", "loss", "valid_loss", "alpha"]
    assert _static.ordered_groups(keys) == [
        ("loss", ["loss", "train_loss", "valid_loss"]), ("accuracy", ["accuracy",
                                                                      "valid_accuracy"]),
        ("alpha", ["alpha"]), ("zeta", ["zeta"])]


def test_the_final_copy_says_how_training_ended_and_never_changes_it(monkeypatch):
    import IPython.display

    updates = []
    monkeypatch.setattr(IPython.display, "update_display",
                        lambda obj, raw, display_id: updates.append(obj))
    loop = T.build(make_loop, {"epochs": 5})

    def fail(loop):
        if loop.status["iteration"] == 3:
            raise ValueError("boom")
    loop.add(fail, event="after_batch")
    dash = Dashboard(loop)
    dash._display_ids.append("one")
    with pytest.raises(ValueError, match="boom"):
        loop.run()
    assert "failed" in updates[-1]["text/html"] and "running" not in updates[-1]["text/html"]

    def broken(*a, **k):
        raise OSError("the display went away")
    monkeypatch.setattr(IPython.display, "update_display", broken)
    loop2 = T.build(make_loop, {"epochs": 1})
    Dashboard(loop2)._display_ids.append("two")
    with pytest.warns(UserWarning, match="static copy was not written"):
        loop2.run()
    assert lk.runs.get(loop2.run_id)["status"] == "finished"  # not failed by the display


def test_a_run_that_ends_on_its_budget_rewrites_the_static_copy_as_paused(monkeypatch):
    """run(max_iterations=N) in a cell, then again: the copy saved in the notebook said what it
    said when displayed (no event fired when the budget ran out); now each chunk rewrites it."""
    import IPython.display

    updates = []
    monkeypatch.setattr(IPython.display, "update_display",
                        lambda obj, raw, display_id: updates.append(obj))
    loop = T.build(make_loop, {"epochs": 2})  # 12 iterations an epoch
    dash = Dashboard(loop)
    dash._display_ids.append("one")
    loop.run(max_iterations=5)
    assert len(updates) == 1
    assert "paused" in updates[-1]["text/plain"] and "iteration 5/" in updates[-1]["text/plain"]
    assert "paused" in updates[-1]["text/html"]
    assert updates[-1][MIME_TYPE]["snapshot"]["series"]["loss"]["iteration"][-1] == 5
    loop.run(max_iterations=4)
    assert "iteration 9/" in updates[-1]["text/plain"] and len(updates) == 2
    loop.run()
    assert len(updates) == 3 and "finished" in updates[-1]["text/plain"]
