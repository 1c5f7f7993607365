"""Spaces, search, Sobol' points, ASHA's decisions (by hand), and the store's schema v5."""

import json
import sqlite3

import numpy as np
import pytest

import labkit as lk
from labkit.sweep import ASHA, SweepError
from labkit.sweep import space as S
from labkit.sweep.sobol import MAX_DIMS, sobol

SPACE = {"lr": lk.sweep.loguniform(1e-4, 1e-1), "hidden": [64, 128, 256],
         "depth": lk.sweep.range(1, 8), "drop": lk.sweep.uniform(0.0, 0.5), "epochs": 3}


@pytest.mark.parametrize("search", ["random", "sobol"])
def test_draws_are_in_range_and_repeatable(search):
    dims = S.check(SPACE)
    a = [S.draw(dims, search, i, seed=3) for i in range(200)]
    assert a == [S.draw(dims, search, i, seed=3) for i in range(200)]
    assert a != [S.draw(dims, search, i, seed=4) for i in range(200)]
    for p in a:
        assert 1e-4 <= p["lr"] <= 1e-1 and 0 <= p["drop"] <= 0.5 and p["epochs"] == 3
        assert p["hidden"] in (64, 128, 256) and p["depth"] in range(1, 9)
        assert isinstance(p["depth"], int) and isinstance(p["lr"], float)
    assert {p["depth"] for p in a} == set(range(1, 9)) and {p["hidden"] for p in a} == {
        64, 128, 256}
    logs = np.log10([p["lr"] for p in a])  # loguniform: uniform in log scale
    assert abs(np.mean(logs) - (-2.5)) < 0.15


def test_grid_is_the_product_in_order():
    dims = S.check({"a": [1, 2], "b": lk.sweep.range(0, 4, 2), "lr": lk.sweep.loguniform(
        1e-3, 1e-1, points=3), "fixed": "x"})
    n = S.check_search(dims, "grid", None)
    assert n == 2 * 3 * 3
    pts = [S.draw(dims, "grid", i) for i in range(n)]
    assert len({json.dumps(p, sort_keys=True) for p in pts}) == n
    assert pts[0] == {"a": 1, "b": 0, "lr": 1e-3, "fixed": "x"}
    assert pts[1]["lr"] == pytest.approx(1e-2) and pts[-1] == {"a": 2, "b": 4, "lr": 0.1,
                                                                "fixed": "x"}


def test_sobol_points_are_balanced():
    for k in range(1, 9):
        q = sobol(2**k, MAX_DIMS)
        for d in range(MAX_DIMS):  # one point in each interval [j/2^k, (j+1)/2^k)
            assert sorted((q[:, d] * 2**k).astype(int)) == list(range(2**k)), (k, d)
        for m in range(k + 1):  # dims 0 and 1: a (0, k, 2)-net, one point per box
            boxes = {(int(x * 2**m), int(y * 2**(k - m))) for x, y in q[:, :2]}
            assert len(boxes) == 2**k
    assert np.array_equal(sobol(3, 3, skip=5), sobol(8, 3)[5:])
    assert sobol(4, 3)[1:].tolist() == [[.5, .5, .5], [.75, .25, .25], [.25, .75, .75]]


@pytest.mark.parametrize("space, words", [
    ({}, "non-empty dict"),
    ({"lr": [1, 2]}, None),
    ({"x": range(3)}, "lk.sweep.range"),
    ({"x": {1, 2}}, "not a spec"),
    ({"x": object()}, "not a JSON value"),
    ({"x": (1, 2)}, None),
    ({"x": [[1, 2], (3, 4)]}, "survive JSON"),
])
def test_bad_spaces_are_named(space, words):
    if words is None:
        S.check(space)
        return
    with pytest.raises(SweepError, match=words):
        S.check(space)


@pytest.mark.parametrize("make, words", [
    (lambda: lk.sweep.loguniform(0, 1), "low must be > 0"),
    (lambda: lk.sweep.uniform(1, 1), "low must be below high"),
    (lambda: lk.sweep.uniform(0, float("nan")), "finite number"),
    (lambda: lk.sweep.range(1.5, 3), "must be an integer"),
    (lambda: lk.sweep.range(5, 3), "low <= high"),
    # NOTE: an OverflowError from len() before, in every search and the JSON form
    (lambda: lk.sweep.range(0, 2**64 - 1), r"64-bit integers .* fewer than 2\*\*63 values"),
    (lambda: lk.sweep.range(-2**63, 2**63 - 1), "fewer than 2\\*\\*63 values"),
    (lambda: lk.sweep.range(2**63, 2**63 + 4), "64-bit integers"),
    (lambda: S.check({"seed": {"range": [0, 2**64]}}), "64-bit integers"),
    (lambda: lk.sweep.uniform(0, 1, points=1), "points must be an integer >= 2"),
    (lambda: ASHA(grace=0), "grace >= 1"),
    (lambda: ASHA(reduction=1), "reduction >= 2"),
])
def test_bad_dimensions_are_named(make, words):
    with pytest.raises(SweepError, match=words):
        make()


def test_search_checks():
    dims = S.check(SPACE)
    with pytest.raises(SweepError, match="continuous here: lr = loguniform.*points=N"):
        S.check_search(dims, "grid", None)
    with pytest.raises(SweepError, match="search must be one of"):
        S.check_search(dims, "bayes", 3)
    with pytest.raises(SweepError, match="positive integer"):
        S.check_search(dims, "random", 0)
    with pytest.raises(SweepError, match="has 2 points"):
        S.check_search(S.check({"a": [1, 2]}), "grid", 3)
    many = {f"x{i}": lk.sweep.uniform(0, 1) for i in range(MAX_DIMS + 1)}
    with pytest.raises(SweepError, match="use search='random'"):
        S.check_search(S.check(many), "sobol", 3)


def test_space_json_round_trip():
    dims = S.check({**SPACE, "lr": lk.sweep.loguniform(1e-4, 1e-1, points=4)})
    back = S.from_json(S.to_json(dims))
    assert back == dims and repr(back["lr"]) == "loguniform(0.0001, 0.1, points=4)"
    cli = S.from_json('{"lr": {"loguniform": [0.001, 0.1]}, "h": [8, 16], "d": {"range": '
                      '[1, 3]}, "e": 2}')
    assert cli["h"].values == [8, 16] and cli["d"].values == [1, 2, 3] and cli["e"].v == 2


def test_asha_by_hand():
    """reduction 3: a rung promotes its best third, counted over everyone who reached it."""
    a = ASHA(grace=1, reduction=3)
    assert [a.budget(k) for k in range(3)] == [1, 3, 9]
    t = {0: ("stopped", {0: 0.5}), 1: ("stopped", {0: 0.7})}
    assert a.next_promotion(t, "max") is None  # 2 in rung 0: 2 // 3 = 0 go on
    t[2] = ("stopped", {0: 0.6})
    assert a.next_promotion(t, "max") == (1, 1)  # 3 in rung 0: the best (trial 1) goes on
    assert a.next_promotion(t, "min") == (0, 1)  # lower is better: trial 0
    t[1] = ("running", {0: 0.7})  # promoted: now training towards rung 1
    assert a.next_promotion(t, "max") is None
    t.update({3: ("stopped", {0: 0.9}), 4: ("stopped", {0: 0.1}), 5: ("stopped", {0: None})})
    assert a.next_promotion(t, "max") == (3, 1)  # 6 in rung 0: top 2 = trials 3 and 1
    t[3] = ("stopped", {0: 0.9, 1: 0.95})
    t[1] = ("stopped", {0: 0.7, 1: 0.8})
    t[6] = ("stopped", {0: 0.65, 1: 0.85})
    # rung 1 has 3 (trials 1, 3, 6): trial 3 goes to rung 2 before anything in rung 0
    assert a.next_promotion(t, "max") == (3, 2)
    t[3] = ("finished", {0: 0.9, 1: 0.95, 2: 0.97})
    assert a.next_promotion(t, "max") is None  # rung 0's top 2 (3, 1) are both beyond it
    assert a.next_promotion({0: ("stopped", {0: float("nan")}), 1: ("stopped", {0: 2.0}),
                             2: ("stopped", {0: 3.0})}, "min") == (1, 1)  # NaN: the worst


def test_a_v4_store_migrates_to_v5(tmp_path):
    """A store as version 4 left it (this version's, less what 5 added) keeps its runs."""
    path = tmp_path / "runs.sqlite"
    lk.runs.RunStore(path).close()
    c = sqlite3.connect(path)
    c.execute("DROP TABLE sweeps")
    c.execute("DROP TABLE trials")
    c.execute("DROP INDEX runs_sweep")
    c.execute("ALTER TABLE runs DROP COLUMN sweep_id")
    c.execute("INSERT INTO runs (id, name, status, config, tags) VALUES ('r1', 'old', "
              "'finished', '{\"lr\": 0.1}', '[\"keep\"]')")
    c.execute("PRAGMA user_version = 4")
    c.commit()
    c.close()
    store = lk.runs.RunStore(path)
    run = store.get("r1")
    assert run["name"] == "old" and run["config"] == {"lr": 0.1} and run["tags"] == ["keep"]
    assert run["sweep_id"] is None
    c = sqlite3.connect(path)
    assert c.execute("PRAGMA user_version").fetchone()[0] == 5
    tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master")}
    assert {"sweeps", "trials", "runs_sweep", "metrics", "commands"} <= tables
    c.close()
    sid = store.create_sweep("s", None, "{}", {"metric": "m"}, [{"a": 1}, {"a": 2}])
    rid = store.start_trial_run(sid, 1, "s-1", {"a": 2}, None, tmp_path)
    assert store.get(rid)["sweep_id"] == sid and store.get_sweep(sid)["counts"] == {
        "pending": 2}
    assert [t["run_id"] for t in store.trials(sid)] == [None, rid]


@pytest.mark.parametrize("text, words", [
    ('{"a": {"logunifrom": [1e-3, 1]}}', "is not a spec: expected one of loguniform"),
    ('{"a": {"loguniform": [1, 2, 3]}}', r"loguniform takes \[low, high\]"),
    ('{"a": {"range": [3]}}', r"range takes \[low, high\]"),
    ('{"a": {"points": 3}}', "is not a spec"),
    ('{"a": {"choice": [1], "points": 3}}', '"points" goes with uniform or loguniform'),
    ('{"a": 1, "a": 2}', "names 'a' more than once"),
])
def test_mistyped_json_specs_are_errors_not_fixed_values(text, words):
    with pytest.raises(SweepError, match=words):
        S.from_json(text)


def test_dict_values_stay_fixed_when_said_so():
    assert S.from_json('{"a": {"value": {"x": 1}}}')["a"].v == {"x": 1}
    assert S.from_json('{"a": {"x": 1, "y": 2}}')["a"].v == {"x": 1, "y": 2}


@pytest.mark.parametrize("name", ["status", "trial", "rung", "run_id", "error", "_x",
                                  "valid_loss"])
def test_parameters_may_not_take_a_column_of_the_table(name):
    dims = S.check({name: [1, 2], "lr": [0.1]})
    with pytest.raises(SweepError, match=f"'{name}' is the name of a column"):
        S.check_names(dims, "valid_loss")
    S.check_names(S.check({"lr": [0.1]}), "valid_loss")


def test_python_spaces_read_dict_specs_as_json_does():
    dims = S.check({"lr": {"loguniform": [1e-4, 0.1]}, "opt": {"value": {"name": "adam"}}})
    assert dims["lr"] == lk.sweep.loguniform(1e-4, 0.1) and dims["opt"].v == {"name": "adam"}
    with pytest.raises(SweepError, match="is not a spec"):
        S.check({"lr": {"logunifrom": [1e-4, 0.1]}})
