"""Optimizer.load_state_dict with state from a file: keys that are not plain names are quoted
and escaped (they cannot pose as other keys or break the message), keys that are not strings
are named with their type, not sorted into a TypeError, and long lists are cut."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
from labkit.errors import CheckpointError


def _adam():
    model = B.Linear(3, 2)
    opt = lk.optimizers.Adam(lr=0.1).setup(model)
    model(lk.tensor(np.ones((1, 3), np.float32))).sum().backward()
    opt.update()
    return opt, opt.state_dict()


def _message(opt, state):
    with pytest.raises(CheckpointError) as e:
        opt.load_state_dict(state)
    return str(e.value)


def test_odd_keys_are_quoted_and_escaped():
    opt, st = _adam()
    spoof = "/linear.W, /linear.b\nOptimizer state OK"
    msg = _message(opt, {**st, "state": {**st["state"], spoof: {}}})
    assert ascii(spoof) in msg and "\n" not in msg
    msg = _message(opt, {**st, "x y": 1, "\u202egnp.exe": 2})
    assert "'x y'" in msg and "'\\u202egnp.exe'" in msg


def test_keys_that_are_not_strings_do_not_crash_the_message():
    opt, st = _adam()
    msg = _message(opt, {**st, 3: 1, (1, 2): 2, b"t": 3})
    assert "3" in msg and "(1, 2)" in msg and "b't'" in msg
    name = next(iter(st["state"]))
    entry = {**st["state"][name], 7: np.zeros(1)}
    msg = _message(opt, {**st, "state": {**st["state"], name: entry}})
    assert f"state[{name!r}] has an unexpected 7" in msg


def test_a_long_list_of_unknown_names_is_cut():
    opt, st = _adam()
    many = {f"/p{i}": {} for i in range(5000)}
    msg = _message(opt, {**st, "state": {**st["state"], **many}})
    assert "... and 4988 more" in msg and len(msg) < 2000


def test_an_object_equal_to_a_name_is_not_what_the_message_shows():
    opt, st = _adam()
    name = next(iter(st["state"]))

    class Pose(str):
        def __repr__(self):
            return "'everything is fine'"
    bad = {(Pose(n) if n == name else n): ({"0.m": "not an array"} if n == name else v)
           for n, v in st["state"].items()}
    assert any(type(k) is Pose for k in bad)
    msg = _message(opt, {**st, "state": bad})
    assert "everything is fine" not in msg and f"state[{name!r}]" in msg
