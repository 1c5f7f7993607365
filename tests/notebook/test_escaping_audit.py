"""What labkit's own HTML and SVG (the sweep view, the Dashboard's static copy, a sweep's trend,
GraphView's details) make of hostile text and extreme numbers: every value shown as text, none
shipped whole when huge, and no number that a run can record crashing the drawing."""

import re

import pytest

import labkit as lk
from labkit.notebook import _static
from labkit.sweep import space as S
from labkit.sweep.trend import Trend

HUGE = [[1e20], [1e20, 1e20], [1e308, -1e308], [-1.79e308, 1.79e308], [5e-324, 1e-323]]


@pytest.fixture
def store(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as s:
        yield s


def seed(store, values, space, name="seeded", metric="m"):
    dims = S.check(space)
    params = [S.draw(dims, "random", i) for i in range(len(values))]
    sid = store.create_sweep(name, None, S.to_json(dims),
                             {"metric": metric, "mode": "max", "trials": len(values),
                              "search": "random", "engine": "inprocess"}, params)
    store.update_trials(sid, {i: {"status": "finished", "value": v, "epoch": 2,
                                  "updated": 1000.0 + i} for i, v in enumerate(values)})
    store.update_sweep(sid, status="finished", started=1000.0)
    return lk.sweep.get(sid)


def coordinates(text):
    """Every number of the drawing's points and positions."""
    found = re.findall(r'(?:points|cx|cy|x|y|x1|x2|y1|y2)="([^"]*)"', text)
    return [float(v) for f in found for pair in f.split() for v in pair.split(",")]


@pytest.mark.parametrize("values", HUGE)
def test_the_sweep_view_draws_metric_values_of_any_size(store, values):
    # NOTE: a single trial at 1e20 raised ZeroDivisionError (1e20 + 0.5 is 1e20), ±1e308 a
    # ValueError (NaN to integer, from hi - lo = inf): sw.show() failed
    sw = seed(store, values, {"a": [1, 2]})
    text = sw.show().html()
    assert text.count('<polyline class="trial"') == len(values)
    assert all(-1e6 < c < 1e6 for c in coordinates(text))


@pytest.mark.parametrize("values", [[1e20, 1e20], [-1.5e308, 1.5e308]])
def test_the_sweep_view_draws_parameters_of_any_size(store, values):
    sw = seed(store, [0.1, 0.2], {"a": values[:1] if values[0] == values[1] else values})
    text = sw.show().html()
    assert all(-1e6 < c < 1e6 for c in coordinates(text))


@pytest.mark.parametrize("values", HUGE)
def test_the_dashboards_static_copy_draws_metric_values_of_any_size(values):
    # NOTE: a constant loss of 1e20 raised ZeroDivisionError, ±1e308 OverflowError: the
    # Dashboard's output failed to render and its final copy was never written
    series = {"loss": {"iteration": list(range(len(values))), "value": values}}
    text = _static.render("run", "finished", "info", series)
    points = re.search(r'<polyline points="([^"]+)"', text).group(1)
    assert all(-1e6 < c < 1e6 for c in coordinates(f'points="{points}"'))
    assert _static.ticks(-1e308, 1e308)[0] == -1e308 and _static.ticks(0, 5e-324) == [0]


def test_a_trend_of_a_constant_huge_quantity_draws():
    text = Trend("depth", "time", [(1, 1e20), (2, 1e20)]).svg()
    assert all(-1e6 < c < 1e6 for c in coordinates(text))
