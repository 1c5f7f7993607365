"""A second probe of files: HDF5 dataset splits that cross, and checkpoint states whose
versions, counters, step numbers and seeds are of the wrong type or out of range, each refused
with a labkit error that names the field, before anything loads."""

import copy

import h5py
import numpy as np
import pytest

from labkit import checkpoint as ckpt
from labkit.data import DataStream, H5Dataset, write_h5
from labkit.errors import CheckpointError, DataError

from ..training.helpers import make_loop, manifest_counters, refused_checkpoint


# ---- dataset splits -------------------------------------------------------------------------
def _crafted(path, splits_text, n=10):
    """A labkit dataset file of ``n`` rows whose splits attribute is ``splits_text`` as is."""
    with h5py.File(path, "w", libver=("v110", "v110")) as f:
        f.attrs["labkit_dataset"] = np.int64(1)
        f.attrs["splits"] = np.array(splits_text.encode(),
                                     dtype=h5py.string_dtype("utf-8", len(splits_text)))
        f["x"] = np.arange(n, dtype=np.float32)
    return path


@pytest.mark.parametrize("splits,match", [
    ('{"train": [0, 6], "test": [4, 8]}', r"splits 'train' \[0, 6\] and 'test' \[4, 8\] cross"),
    ('{"test": [4, 10], "train": [0, 5]}', r"'train' \[0, 5\] and 'test' \[4, 10\] cross"),
    ('{"a": [0, 10], "b": [2, 4], "c": [3, 6]}', r"'b' \[2, 4\] and 'c' \[3, 6\] cross"),
    ('{"train": [-1, 5]}', r"split 'train'.*0 <= start <= stop <= 10"),
    ('{"train": [6, 2]}', r"split 'train'.*0 <= start <= stop <= 10"),
    ('{"train": [0, 11]}', r"split 'train'.*0 <= start <= stop <= 10"),
    ('{"train": [0, 4.0]}', r"split 'train'.*two integers"),
    ('{"train": [0, true]}', r"split 'train'.*two integers"),
    ('{"train": [0, 4, 5]}', r"split 'train'.*two integers"),
    ('{"train": [[0, 1, 2]]}', r"split 'train'.*two integers"),
    ('{"train": {"start": 0, "stop": 4}}', r"split 'train'.*two integers"),
    ('{"train": null}', r"split 'train'.*two integers"),
    ('[[0, 4]]', r"attribute 'splits': expected a JSON object"),
])
def test_crossing_or_bad_split_ranges_in_a_file_are_refused_on_open(tmp_path, splits, match):
    path = _crafted(tmp_path / "d.h5", splits)
    with pytest.raises(DataError, match=match) as e:
        H5Dataset(path, split=[])
    assert str(path) in str(e.value) and "rebuild it" in str(e.value)


def test_write_h5_refuses_crossing_splits():
    with pytest.raises(DataError, match=r"write_h5.*'train' \[0, 6\] and 'test' \[4, 8\] cross"):
        write_h5("/nonexistent/never-written.h5", {"x": np.arange(10)},
                 {"train": (0, 6), "test": (4, 8)})


@pytest.mark.parametrize("splits", [
    {"train": (0, 6), "valid": (6, 8), "train_full": (0, 8), "test": (8, 10)},  # converters
    {"train": (0, 4), "valid": (4, 4), "train_full": (0, 4), "test": (4, 10)},  # no valid rows
    {"train": (0, 8), "small": (2, 4), "test": (8, 10)},  # a subset inside its split
    {"a": (0, 0), "b": (0, 10), "c": (3, 3), "d": (10, 10)},  # empty splits meet nothing
    {"train": (0, 5), "test": (5, 10)},
])
def test_splits_that_nest_or_are_disjoint_are_read_as_written(tmp_path, splits):
    path = write_h5(tmp_path / "d.h5", {"x": np.arange(10)}, splits)
    for name, (a, b) in splits.items():
        ds = H5Dataset(path, split=name)
        assert ds.num_examples == b - a
        assert ds.get_data(slice(None))["x"].tolist() == list(range(a, b))


def _labkit_lines(fn, limit: int) -> int:
    """How many lines of labkit's code ``fn()`` runs (counted up to just past ``limit``, then
    it runs untraced): the work it does, whatever the clock (a busy machine) says."""
    import sys
    from pathlib import Path

    import labkit

    root, count = str(Path(labkit.__file__).parent), [0]

    def line(frame, event, arg):
        count[0] += event == "line"
        if count[0] > limit:
            sys.settrace(None)
            frame.f_trace = None
            return None
        return line

    def call(frame, event, arg):
        return line if frame.f_code.co_filename.startswith(root) else None

    old = sys.gettrace()
    sys.settrace(call)
    try:
        fn()
    finally:
        sys.settrace(old)
    return count[0]


def test_many_splits_are_checked_quickly(tmp_path):
    """5000 splits before the two that cross: checking them is not quadratic (a check of
    every pair runs 25 million times; this one about 16 lines per split)."""
    import json

    splits = {f"s{i}": [i, i + 1] for i in range(5000)}
    splits.update({"all": [0, 5000], "big": [100, 200], "cross": [150, 300]})
    path = _crafted(tmp_path / "d.h5", json.dumps(splits), n=5000)

    def refused():
        with pytest.raises(DataError, match=r"'big' \[100, 200\] and 'cross' \[150, 300\] "
                                            "cross"):
            H5Dataset(path, split=[])

    assert _labkit_lines(refused, limit=100 * len(splits)) <= 100 * len(splits)


# ---- checkpoint states: versions, counters, seeds -------------------------------------------
@pytest.fixture(scope="module")
def saved():
    loop = make_loop({"epochs": 1})
    loop.run()
    return loop.state_dict()


_load = refused_checkpoint


def _with(saved, *path_value):
    state = copy.deepcopy(saved)
    for path, value in zip(path_value[::2], path_value[1::2]):
        d = state
        for k in path[:-1]:
            d = d[k]
        if value is _DELETE:
            del d[path[-1]]
        else:
            d[path[-1]] = value
    return state


_DELETE = object()
#: values of the wrong type, or out of every counter's range
WRONG = ["7", 1.5, True, None, [1], {"a": 1}, -1, 2 ** 63, 2 ** 70]


def test_a_loop_state_of_a_newer_version_says_upgrade(tmp_path, saved):
    message = _load(tmp_path, _with(saved, ("version",), 99))
    assert "version 99, written by a newer labkit" in message and "upgrade labkit" in message


@pytest.mark.parametrize("value", ["1", 1.0, True, None, [1], 0, -1, 2 ** 70, _DELETE])
def test_a_loop_state_version_that_is_not_1_is_refused(tmp_path, saved, value):
    message = _load(tmp_path, _with(saved, ("version",), value))
    assert "'version' must be 1" in message or "newer labkit" in message


@pytest.mark.parametrize("path", [("extra",), ("status", "batch")])
def test_unknown_keys_in_a_loop_state_are_refused(tmp_path, saved, path):
    assert f"unknown keys {path[-1]!r}" in _load(tmp_path, _with(saved, path, 1))


@pytest.mark.parametrize("value", WRONG)
@pytest.mark.parametrize("key", ["iteration", "epoch", "epoch_iteration"])
def test_status_counters_must_be_integers_below_2_63(tmp_path, saved, key, value):
    assert f"status['{key}'] must be an integer in [0, 2**63)" in _load(
        tmp_path, _with(saved, ("status", key), value))


def test_more_iterations_in_the_epoch_than_in_all_is_refused(tmp_path, saved):
    state = _with(saved, ("status", "epoch_iteration"), saved["status"]["iteration"] + 1)
    assert "status['epoch_iteration']" in _load(tmp_path, state)


@pytest.mark.parametrize("value", WRONG)
def test_the_optimizer_step_count_must_be_an_integer_below_2_63(tmp_path, saved, value):
    message = _load(tmp_path, _with(saved, ("optimizer", "t"), value))
    assert "optimizer" in message and "'t' (the steps taken)" in message


def test_the_largest_optimizer_step_count_loads():
    """Up to 2**62 - 1: one a step short of 2**63 loaded, and the run's next checkpoint (its
    count past 2**63) was refused by its own loader."""
    import labkit as lk

    opt = lk.optimizers.SGD(lr=0.1).setup({})
    opt.load_state_dict({"t": 2 ** 62 - 1, "state": {}})
    assert opt.t == 2 ** 62 - 1
    with pytest.raises(lk.CheckpointError, match=r"integer in \[0, 2\*\*62\)"):
        opt.load_state_dict({"t": 2 ** 62, "state": {}})


SEEDS = [-5, -1, 2 ** 64, 2 ** 70, "5", 5.0, True, None, [5]]


@pytest.mark.parametrize("value", SEEDS)
@pytest.mark.parametrize("stage", [0, 1])  # the scheme's seed, RandomFlip's seed
def test_data_seeds_must_be_numpys_non_negative_64_bit_integers(tmp_path, saved, stage, value):
    path = ("stream", "stages", stage) + (("scheme", "seed") if stage == 0 else ("seed",))
    message = _load(tmp_path, _with(saved, path, value))
    assert "the saved stream" in message and "'seed'" in message


@pytest.mark.parametrize("value", SEEDS[:-3])
def test_a_data_seed_out_of_range_is_refused_when_the_stream_is_built(value):
    from labkit.data import IndexableDataset, RandomFlip, ShuffledScheme

    with pytest.raises(DataError, match=r"ShuffledScheme: seed=.*an integer in \[0, 2\*\*64\)"):
        ShuffledScheme(10, 2, seed=value)
    data = DataStream(IndexableDataset({"features": np.zeros((4, 1, 2, 2))}), batch_size=2)
    with pytest.raises(DataError, match=r"RandomFlip: seed="):
        RandomFlip(data, seed=value)
    assert ShuffledScheme(10, 2, seed=2 ** 64 - 1).seed == 2 ** 64 - 1
    assert ShuffledScheme(10, 2, seed=np.uint64(7)).seed == 7


@pytest.mark.parametrize("key,value", [("seed", v) for v in SEEDS[:-2]]
                         + [("counter", v) for v in WRONG]
                         + [("extra", 1), ("seed", _DELETE)])
def test_generator_states_are_checked_before_anything_loads(tmp_path, saved, key, value):
    (name,) = saved["rng"]["bricks"]
    message = _load(tmp_path, _with(saved, ("rng", "bricks", name, key), value))
    assert f"rng['bricks'][{name!r}]" in message


@pytest.mark.parametrize("value", WRONG)
def test_log_counters_must_be_integers_below_2_63(tmp_path, saved, value):
    assert "log: row 0 has iteration=" in _load(tmp_path, _with(
        saved, ("log", "rows", 0, "iteration"), value))


@pytest.mark.parametrize("part,value", [("id", 5), ("name", ["x"]), ("config", "x"),
                                        ("other", 1)])
def test_the_run_part_of_a_loop_state_is_checked(tmp_path, saved, part, value):
    assert "'run' must be" in _load(tmp_path, _with(saved, ("run", part), value))


@pytest.mark.parametrize("sums,counts", [({"loss": "x"}, {"loss": 2}), ({"loss": 1.0}, {}),
                                         ({"loss": 1.0}, {"loss": 0}),
                                         ({"loss": 1.0}, {"loss": 2 ** 63}),
                                         ({"loss": 1.0}, {"loss": 2.0}), (None, {})])
def test_training_data_monitoring_state_is_checked(tmp_path, saved, sums, counts):
    state = _with(saved, ("extensions", "TrainingDataMonitoring"),
                  {"sums": sums, "counts": counts})
    assert "TrainingDataMonitoring: the saved state must be" in _load(tmp_path, state)


@pytest.mark.parametrize("change,match", [
    ({"bad": -1}, "'bad' must be"), ({"bad": 2 ** 63}, "'bad' must be"),
    ({"bad": "1"}, "'bad' must be"), ({"best": "0.5"}, "'best' must be"),
    ({"best_iteration": 2 ** 63}, "'best_iteration' must be"),
    ({"best_iteration": True}, "'best_iteration' must be"),
    ({"best_params": {"w": 1}}, "'best_params' must be"),
    ({"best_params": None}, "all null or all set"), ({"extra": 1}, "must be an object"),
])
def test_early_stopping_state_is_checked(change, match):
    from labkit.training import EarlyStopping

    state = {"best": 0.5, "best_iteration": 3, "bad": 0, "best_params": {"w": np.zeros(2)},
             **change}
    e = EarlyStopping()
    with pytest.raises(CheckpointError, match=match):
        e.load_state_dict(state)
    assert e.best is None and e.bad == 0
    e.load_state_dict({"best": 0.5, "best_iteration": 3, "bad": 2,
                       "best_params": {"w": np.zeros(2)}})
    assert (e.best, e.best_iteration, e.bad) == (0.5, 3, 2)


def test_checkpoint_extension_iterations_must_be_below_2_63():
    from labkit.training import Checkpoint

    with pytest.raises(CheckpointError, match=r"saved\[0\]\['iteration'\] must be an integer "
                                              r"in \[0, 2\*\*63\)"):
        Checkpoint().load_state_dict({"saved": [{"iteration": 2 ** 63, "metric": None,
                                                 "name": "ckpt-1"}]})


def test_resuming_the_newest_checkpoint_checks_its_state_before_believing_it(tmp_path, saved):
    """Its iteration (a string here) is not believed (it decides which of the run's
    checkpoints a resume marks invalid): the state is refused, passed over like a damaged
    checkpoint, and the newest one that loads is taken; named by its path, it raises."""
    import labkit as lk

    loop = make_loop({"epochs": 1, "checkpoint_every": 6})
    loop.run()
    bad = ckpt.save(loop.checkpoint_dir, _with(saved, ("status", "iteration"), "12"),
                    iteration=99)
    fresh = make_loop({"epochs": 1, "checkpoint_every": 6})
    fresh.attach(lk.runs.get(loop.run_id))
    with pytest.warns(UserWarning, match=r"skipping checkpoint .*ckpt-00000099: .*"
                                         r"status\['iteration'\] must be an integer"):
        assert fresh.load_checkpoint().name == "ckpt-00000012"
    assert fresh.status["iteration"] == 12
    assert all(c["valid"] for c in lk.runs.store().checkpoints(loop.run_id))
    with pytest.raises(CheckpointError, match=r"ckpt-00000099: .*status\['iteration'\] must "
                                              r"be an integer"):
        make_loop({"epochs": 1, "checkpoint_every": 6}).load_checkpoint(bad)


def _leaves(v, p=()):
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _leaves(x, p + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v[:2]):
            yield from _leaves(x, p + (i,))
    elif not isinstance(v, np.ndarray):
        yield p, v


def test_every_field_of_a_real_checkpoint_with_a_wrong_value_is_refused_or_fits(tmp_path, saved):
    """Each JSON value of a real loop's checkpoint replaced by values of other types and out of
    range: loading either refuses it with a CheckpointError that names the part (never a raw
    KeyError or TypeError, wrapped or not), or the value is one a loop could have written (a
    log value, a name, a number of the right type and range); nothing outside is ever hit."""
    fresh = make_loop({"epochs": 1})
    raw, accepted = [], []
    for path, orig in _leaves(saved):
        if path[:2] == ("run", "config"):
            continue
        for bad in WRONG + ["x", 0.0, _DELETE]:
            if type(bad) is type(orig) and bad == orig:
                continue
            state = _with(saved, path, bad)
            where = ckpt.save(tmp_path / "c", state, name="x", **manifest_counters(state))
            try:
                fresh.load_checkpoint(where)
                accepted.append((path, bad))
                fresh.load_state_dict(saved)
            except CheckpointError as e:
                if any(f"({n}:" in str(e) for n in ("KeyError", "TypeError", "ValueError",
                                                    "AttributeError", "IndexError")):
                    raw.append((path, bad, str(e)[:200]))
            except Exception as e:  # noqa: BLE001 - what the test looks for
                raw.append((path, bad, f"{type(e).__name__}: {e}"[:200]))
    assert not raw, raw
    # NOTE: saved under the state's own counters, what may differ is still accepted
    assert {p[0] for p, _ in accepted} >= {"log", "status", "run"}, accepted
    for path, bad in accepted:
        # NOTE: what may take another value: logged values, the time, the run's names, a
        # checkpoint's origin, a boolean flag flipped, and counters and seeds within range
        ok = (path[0] == "log" and path[-1] not in ("iteration", "epoch")) or \
            path in (("status", "time_total"), ("status", "resumed_from"),
                     ("run", "id"), ("run", "name")) or \
            (type(bad) is type(saved_value(saved, path)) and bad not in (-1, 2 ** 70)
             and (bad != 2 ** 63 or path[-1] == "seed"))  # a seed is 64 bits
        assert ok, (path, bad)


def saved_value(saved, path):
    for k in path:
        saved = saved[k]
    return saved
