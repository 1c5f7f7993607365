"""The sweep view (``sw.show()``): its HTML from a store seeded directly (no training), the
downsampling of a large sweep, escaping, sorting, and the refresh while a sweep runs."""

import re

import pytest

import labkit as lk
from labkit.sweep import SweepError, view
from labkit.sweep import space as S

EVIL = "<script>alert(1)</script>"
SPACE = {"lr": lk.sweep.loguniform(1e-4, 1e-1), "act": ["relu", "tanh"],
         EVIL: lk.sweep.range(1, 4), "tag": ["<img src=x>"], "epochs": 2}


@pytest.fixture
def store(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as s:
        yield s


def seed(store, values, statuses=None, space=SPACE, mode="max", t0=1000.0):
    """A sweep whose trial i has value ``values[i]`` (None: no value yet), done at t0 + i."""
    dims = S.check(space)
    params = [S.draw(dims, "random", i) for i in range(len(values))]
    sid = store.create_sweep("seeded", None, S.to_json(dims),
                             {"metric": "valid_accuracy", "mode": mode, "trials": len(values),
                              "search": "random", "engine": "inprocess"}, params)
    statuses = statuses or ["finished"] * len(values)
    store.update_trials(sid, {i: {"status": s, "value": v, "epoch": 2, "updated": t0 + i}
                              for i, (v, s) in enumerate(zip(values, statuses))})
    store.update_sweep(sid, status="finished", started=t0)
    return lk.sweep.get(sid)


def trial_rows(text):
    return [int(n) for n in re.findall(r'class="trial-row" data-trial="(\d+)"', text)]


def test_one_line_per_trial_with_a_value_and_the_table_best_first(store):
    sw = seed(store, [0.5, 0.7, None, 0.6, 0.9, None],
              ["finished", "finished", "failed", "stopped", "finished", "pending"])
    text = sw.show().html()
    lines = re.findall(r'<polyline class="trial" data-trial="(\d+)" points="([^"]*)"', text)
    assert sorted(int(n) for n, _ in lines) == [0, 1, 3, 4]
    assert all(len(p.split()) == 5 for _, p in lines)  # lr, act, EVIL, tag, the metric
    assert lines[-1][0] == "4"  # the best drawn last (on top)
    assert trial_rows(text) == [4, 1, 3, 0, 2, 5]
    assert "best: trial 4, valid_accuracy 0.9" in text
    assert "failed 1, finished 3, pending 1, stopped 1 of 6" in text
    assert len(re.findall(r'<circle class="point"', text)) == 4 * 4  # one scatter per param
    # best so far: 0.5 at 1 s, 0.7 at 2 s, 0.9 at 5 s (from the sweep's start), drawn as steps
    best = re.search(r'<polyline class="best" points="([^"]*)"', text).group(1).split()
    assert len(best) == 6 and "best valid_accuracy 0.9)" in text


def test_mode_min_and_sorting_by_a_column(store):
    sw = seed(store, [0.5, 0.2, 0.9], mode="min")
    v = sw.show()
    assert trial_rows(v.html()) == [1, 0, 2]
    lrs = {r["trial"]: r["lr"] for r in sw.table()}
    assert trial_rows(v.sort("lr").html()) == sorted(lrs, key=lrs.get)
    assert trial_rows(v.sort("trial").html()) == [0, 1, 2]
    with pytest.raises(SweepError, match=r"sort must be 'value' or a column \(trial, status"):
        v.sort("nope")
    assert trial_rows(v.html()) == [0, 1, 2]  # the old order kept


def test_hostile_names_and_values_are_escaped(store):
    sw = seed(store, [0.5, 0.7, 0.6, 0.8, 0.1, 0.3])
    text = sw.show(sort=EVIL).html()
    assert "<script" not in text and "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", text)
    assert cells.count("&lt;img src=x&gt;") == 6  # the value, in each row of the table
    assert f"<th {view.CELL}>&lt;script&gt;alert(1)&lt;/script&gt; ▼</th>" in text


def test_ten_thousand_trials_are_downsampled(store):
    n = 10_000
    sw = seed(store, [(i * 7919 % n) / n for i in range(n)])
    text = sw.show().html()
    drawn = [int(x) for x in re.findall(r'<polyline class="trial" data-trial="(\d+)"', text)]
    assert len(drawn) == view.LINES and len(set(drawn)) == view.LINES
    best = sw.best()["trial"]
    assert best in drawn and f"lines: {view.LINES} of {n} trials" in text
    assert len(trial_rows(text)) == view.ROWS and f"{n - view.ROWS} more trials" in text


class Handle:
    def __init__(self):
        self.updates = []

    def update(self, bundle, raw):
        self.updates.append(bundle["text/html"])


def test_refresh_renders_when_a_trial_changes_and_stops_with_the_sweep(store):
    sw = seed(store, [0.5, None], ["finished", "running"])
    store.update_sweep(sw.id, status="running")  # this process is its driver: alive
    v, h = sw.show(), Handle()
    v._handle = h
    assert v.refresh() is True and v.refresh() is False
    store.update_trials(sw.id, {1: {"status": "finished", "value": 0.9, "updated": 1002.0}})
    assert v.refresh() is True and len(h.updates) == 2 and "best: trial 1" in h.updates[-1]
    store.update_sweep(sw.id, status="finished")
    v.start(h)  # the thread sees the sweep ended: one last render, then it ends by itself
    v._thread.join(timeout=30)
    assert not v._thread.is_alive() and "finished" in h.updates[-1] and len(h.updates) == 3
    bundle = v._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"} and "Sweep(" in bundle["text/plain"]


@pytest.mark.parametrize("kw, words", [
    ({"rows": -1}, "rows must be an integer >= 1"),
    ({"rows": "10"}, "rows must be an integer >= 1"),
    ({"every": 0}, "every must be a number of seconds >= 0.1"),
    ({"every": "1"}, "every must be a number of seconds"),
    ({"every": float("nan")}, "every must be a number of seconds"),
])
def test_bad_rows_or_period_are_named(store, kw, words):
    """rows=-1 showed all but the last trial and '-1 more'; rows='10' was a TypeError; every=0
    refreshed in a busy loop and every='1' ended the refresh thread silently."""
    sw = seed(store, [0.5])
    with pytest.raises(SweepError, match=words):
        sw.show(**kw)
