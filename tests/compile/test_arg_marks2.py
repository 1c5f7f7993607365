"""Raw NumPy code on a plain array made from a compiled step's NumPy argument
(``np.asarray(ids) != 0``, ``np.array(ids)``, ``ids.view(np.ndarray)``): refused at the first
traced call as code on the argument itself is (compile/argmarks.py), where it was replayed
with the traced calls' values whenever the first two calls agreed."""

import numpy as np
import pytest

import labkit as lk
from labkit.errors import CompileError

from .test_arg_marks import _batches, _host

MAKE = {
    "asarray": lambda ids: np.asarray(ids) != 0,
    "asarray dtype": lambda ids: np.asarray(ids, dtype=np.float64) != 0,
    "array": lambda ids: np.array(ids) != 0,
    "ascontiguousarray": lambda ids: np.ascontiguousarray(ids[:, ::1]) != 0,
    "asfortranarray": lambda ids: np.asfortranarray(ids) != 0,
    "view": lambda ids: ids.view(np.ndarray) != 0,
    "view type": lambda ids: ids.view(type=np.ndarray) != 0,
}


@pytest.mark.parametrize("how", list(MAKE))
def test_a_mask_computed_from_a_plain_view_of_an_argument_is_refused(dev, how):
    """The padding starts at the third batch: replayed with the traced mask (all ones), the
    padded batches were summed unmasked."""
    make = MAKE[how]

    def f(x, ids):
        mask = lk.tensor(make(ids).astype(np.float32), device=dev)
        return (lk.tensor(x, device=dev) * mask).sum()

    c = lk.compile(f)
    with pytest.raises(CompileError, match=r"computed from ids at test_arg_marks2.py:\d+"):
        for x, ids in _batches():
            got = float(_host(c(x, ids).data))
            want = float((x * (ids != 0)).sum())
            assert got == pytest.approx(want, rel=1e-5)  # not reached: refused at call 1


@pytest.mark.parametrize("how", ["asarray", "array", "view"])
def test_a_value_read_from_a_plain_view_of_an_argument_is_refused(dev, how):
    conv = {"asarray": lambda a: np.asarray(a), "array": lambda a: np.array(a),
            "view": lambda a: a.view(np.ndarray)}[how]

    def f(x, lengths):
        return lk.tensor(x, device=dev)[:, :int(conv(lengths).max())].sum()

    with pytest.raises(CompileError, match="reads the values of lengths"):
        lk.compile(f)(np.ones((2, 5), np.float32), np.array([4, 5]))


def test_plain_views_given_to_labkit_stay_the_argument(dev):
    """np.asarray(x) and x.view(np.ndarray) given to labkit as they are: the argument (each
    call's batch), not refused."""
    def f(x):
        a = lk.tensor(np.asarray(x), device=dev)
        b = lk.tensor(x.view(np.ndarray), device=dev)
        c = lk.tensor(np.ascontiguousarray(x), device=dev)
        return (a + b + c).sum()

    c = lk.compile(f)
    rng = np.random.default_rng(2)
    for _ in range(4):
        x = rng.standard_normal((3, 4)).astype(np.float32)
        assert float(_host(c(x).data)) == pytest.approx(3 * float(x.sum()), rel=1e-5)
    assert c.stats["replays"] == 2


def test_numpy_is_itself_again_after_the_trace(dev):
    """np.asarray and friends are NumPy's own outside a trace, also after a refused one, and
    printing an argument inside the step prints its values."""
    funcs = {n: getattr(np, n) for n in ("asarray", "array", "ascontiguousarray",
                                         "asfortranarray")}
    seen = []

    def f(x):
        seen.append(repr(x))
        return lk.tensor(x, device=dev).sum() * float(np.asarray(x).sum())

    with pytest.raises(CompileError):
        lk.compile(f)(np.ones(3, np.float32))
    assert seen == [repr(np.ones(3, np.float32))]
    for n, fn in funcs.items():
        assert getattr(np, n) is fn
    assert type(np.asarray(np.ones(2))) is np.ndarray


def test_a_mask_computed_from_a_list_of_argument_rows_is_refused(dev):
    """A batch given as a list of rows: np.array(rows) != 0 was the traced calls' mask."""
    def f(x, rows):
        mask = lk.tensor((np.array(rows) != 0).astype(np.float32), device=dev)
        return (lk.tensor(x, device=dev) * mask).sum()

    x, ids = _batches()[0]
    with pytest.raises(CompileError, match="computed from rows"):
        lk.compile(f)(x, list(ids))


def test_numpy_keeps_its_signatures_and_pickles_while_a_step_is_traced(dev):
    """Keywords (np.array(object=...)), pickling np.asarray (a multiprocessing pool sends
    it), and printing an argument with NumPy's own formatting in a log line."""
    import pickle

    seen = []

    def f(x):
        seen.append((np.array(object=[1, 2]).tolist(), np.asarray(a=[3]).tolist(),
                     pickle.loads(pickle.dumps(np.asarray)) is np.asarray,
                     np.array2string(np.asarray(x))))
        return lk.tensor(x, device=dev).sum()

    x = np.full(3, 2.0, np.float32)
    assert float(_host(lk.compile(f)(x).data)) == 6.0  # the first call, traced
    assert seen == [([1, 2], [3], True, "[2. 2. 2.]")]


def test_a_function_the_user_put_in_numpy_is_wrapped_and_left_in_place(dev):
    """A spy on np.asarray (unittest.mock) sees the step's calls and stays where it was put;
    NumPy's own comes back when it is removed."""
    from unittest import mock

    real = np.asarray

    def f(x):
        return lk.tensor(np.asarray(x), device=dev).sum()

    with mock.patch.object(np, "asarray", wraps=np.asarray) as spy:
        assert float(_host(lk.compile(f)(np.ones(3, np.float32)).data)) == 3.0
        assert np.asarray is spy and spy.call_count >= 1
    assert np.asarray is real


@pytest.mark.parametrize("call", ["asarray", "array"])
def test_a_converter_given_the_argument_by_keyword_after_another_is_seen(dev, call):
    """np.asarray(dtype=..., a=ids): the array is the one named a (object for np.array),
    not the first keyword."""
    conv = {"asarray": lambda ids: np.asarray(dtype=np.int64, a=ids),
            "array": lambda ids: np.array(dtype=np.int64, object=ids)}[call]

    def f(x, ids):
        mask = lk.tensor((conv(ids) != 0).astype(np.float32), device=dev)
        return (lk.tensor(x, device=dev) * mask).sum()

    x, ids = _batches()[0]
    with pytest.raises(CompileError, match="computed from ids"):
        lk.compile(f)(x, ids)
