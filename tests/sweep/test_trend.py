"""lk.sweep.trend: least squares against NumPy's, R², the SVG, and clear errors."""

import numpy as np
import pytest

import labkit as lk
from labkit.sweep import SweepError, linear_fit
from labkit.sweep.trend import Trend


def test_linear_fit_matches_numpy_and_r2_is_the_explained_share():
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 16, 40)
    y = 0.3 * x + 2 + rng.normal(0, 0.5, 40)
    slope, intercept, r2 = linear_fit(list(x), list(y))
    s2, i2 = np.polyfit(x, y, 1)
    assert slope == pytest.approx(s2, rel=1e-9) and intercept == pytest.approx(i2, rel=1e-9)
    assert r2 == pytest.approx(np.corrcoef(x, y)[0, 1] ** 2, rel=1e-9)
    assert linear_fit([1, 2, 3], [5, 7, 9]) == pytest.approx((2, 3, 1))
    assert linear_fit([1, 2, 3], [4, 4, 4])[2] == 1.0  # flat: the line explains all of it
    with pytest.raises(SweepError, match="every x is the same"):
        linear_fit([2, 2], [1, 3])
    with pytest.raises(SweepError, match="two points"):
        linear_fit([1], [1])


def test_linear_fit_near_the_float_limits_and_of_numpy_scalars():
    # NOTE: (x - mean) ** 2 of floats near 1e308 raised a bare OverflowError
    x = np.array([1e308, -1e308, 5e307, -3e307])
    y = 0.5 * x + np.array([0, 1e306, -2e306, 5e305])
    got = linear_fit(list(x), list(y))
    s2, i2 = np.polyfit(x / 1e308, y / 1e308, 1)  # the same line, scaled for NumPy
    assert got[:2] == pytest.approx((s2, i2 * 1e308), rel=1e-9)
    assert 0.99 < got[2] <= 1
    assert linear_fit([np.float32(1), np.int64(2), 3], [5, 7, 9]) == pytest.approx((2, 3, 1))
    slope, intercept, r2 = linear_fit([1e-308, 2e-308], [1e308, -1e308])  # too steep
    assert slope == -np.inf and r2 == 1.0
    svg = Trend("x", "y", [(1e-308, 1e308), (2e-308, -1e308)]).svg()  # points, no line
    assert svg.count('class="point"') == 2 and 'class="fit"' not in svg and "nan" not in svg
    for bad in (float("nan"), float("inf"), True, "3", None):
        with pytest.raises(SweepError, match=r"point 1 is .*finite number"):
            linear_fit([1, bad, 3], [1, 2, 3])


def test_the_svg_has_every_point_the_line_and_escapes_names():
    t = Trend("<depth>", "time & more", [(1, 1.0), (2, 2.1), (4, 3.9)])
    svg = t._repr_html_()
    assert svg.count('class="point"') == 3 and svg.count('class="fit"') == 1
    assert "<depth>" not in svg and "&lt;depth&gt;" in svg and "time &amp; more" in svg
    assert "R² 0.99" in svg and "R²" in repr(t)


class _Sweep:
    def __init__(self, rows):
        self.rows = rows

    def table(self):
        return self.rows


def test_trend_reads_columns_and_training_time_of_done_trials(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        rows = []
        for i, depth in enumerate([1, 2, 4, 8]):
            rid = store.create_run(name=f"t{i}", config={"depth": depth})
            store.update_run(rid, progress={"elapsed": 0.5 + 0.25 * depth})
            rows.append({"trial": i, "status": "finished", "depth": depth, "run_id": rid,
                         "valid_accuracy": 0.9 - 0.01 * depth})
        rows.append({"trial": 4, "status": "failed", "depth": 16, "run_id": rid,
                     "valid_accuracy": None})  # not done: left out
        t = lk.sweep.trend(_Sweep(rows), "depth", "time")
        assert t.slope == pytest.approx(0.25) and t.r2 == pytest.approx(1.0)
        assert len(t.points) == 4
        acc = lk.sweep.trend(_Sweep(rows), "depth", "valid_accuracy")
        assert acc.slope == pytest.approx(-0.01)
        with pytest.raises(SweepError, match="no column 'width'"):
            lk.sweep.trend(_Sweep(rows), "width")
        with pytest.raises(SweepError, match="'time' or a column"):
            lk.sweep.trend(_Sweep(rows), "depth", "speed")
        with pytest.raises(SweepError, match="two values of 'depth'"):
            lk.sweep.trend(_Sweep(rows[:1]), "depth", "time")


def test_trend_takes_a_sweeps_id_and_names_anything_else(tmp_path):
    """An id (as lk.sweep.get takes) was an AttributeError: 'str' object has no 'table'."""
    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        sid = store.create_sweep("s", None, '{"depth": {"choice": [1, 2]}}', {
            "metric": "m", "mode": "min"}, [{"depth": 1}, {"depth": 2}])
        store.update_trials(sid, {0: {"status": "finished", "value": 0.5},
                                  1: {"status": "finished", "value": 0.25}})
        assert lk.sweep.trend(sid, "depth", "m").slope == pytest.approx(-0.25)
        for bad, words in ((None, "sweep must be a Sweep"), ("nope", "no sweep 'nope'")):
            with pytest.raises(SweepError, match=words):
                lk.sweep.trend(bad, "depth")
