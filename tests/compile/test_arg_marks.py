"""Raw NumPy code on a compiled step's NumPy arguments (compile/argmarks.py): an array or a
Python value it computes from an argument is refused at the first traced call, naming the
argument and the line, where it was replayed with the traced calls' values whenever the first
two calls agreed; the argument itself, and plain views of it, stay the argument."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.errors import CompileError


def _host(a):
    return a if isinstance(a, np.ndarray) else a.get()


def _batches(n=5, pad_from=2):
    """Token batches whose padding (zeros) starts at batch ``pad_from``: a mask computed from
    them is all ones in the two traced calls."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        x = rng.standard_normal((4, 5)).astype(np.float32)
        ids = rng.integers(1, 9, (4, 5))
        if i >= pad_from:
            ids[:, 3:] = 0
        out.append((x, ids))
    return out


def test_a_mask_computed_from_an_argument_is_refused_not_frozen(dev):
    """The padding mask was all ones in calls 1 and 2, so it was folded as a constant and the
    padded batches after were summed unmasked (3.47 for eager's 4.99)."""
    def f(x, ids):
        mask = lk.tensor((ids != 0).astype(np.float32), device=dev)
        return (lk.tensor(x, device=dev) * mask).sum()

    c = lk.compile(f)
    x, ids = _batches()[0]
    with pytest.raises(CompileError, match=r"computed from ids at test_arg_marks.py:\d+"):
        c(x, ids)
    # the fixes the message names give the eager results
    def g(x, ids):
        mask = lk.tensor(ids, device=dev) != 0
        return (lk.tensor(x, device=dev) * F.cast(mask, np.float32)).sum()

    def h(x, mask):
        return (lk.tensor(x, device=dev) * lk.tensor(mask, device=dev)).sum()

    cg, ch = lk.compile(g), lk.compile(h)
    for x, ids in _batches():
        mask = (ids != 0).astype(np.float32)
        want = float((x * mask).sum())
        assert float(_host(cg(x, ids).data)) == pytest.approx(want, rel=1e-5)
        assert float(_host(ch(x, mask).data)) == pytest.approx(want, rel=1e-5)
    assert cg.stats["replays"] == ch.stats["replays"] == 3


@pytest.mark.parametrize("how", ["where", "divide", "astype", "reduce", "concatenate"])
def test_arrays_numpy_computes_from_an_argument_are_refused(dev, how):
    make = {
        "where": lambda x: np.where(x > 0, x, 0),
        "divide": lambda x: x / 255,
        "astype": lambda x: x.astype(np.float64).astype(np.float32),
        "reduce": lambda x: x.sum(axis=0),
        "concatenate": lambda x: np.concatenate([x, x]),
    }[how]

    def f(x):
        return lk.tensor(make(x), device=dev).sum()

    x = np.ones((4, 5), np.float32)
    with pytest.raises(CompileError, match="NumPy code computed from x"):
        lk.compile(f)(x)


@pytest.mark.parametrize("how", ["branch", "int", "element", "item", "tolist", "iterate"])
def test_python_values_read_from_an_argument_are_refused(dev, how):
    """A branch or a number taken from an argument's values would be the traced call's at
    every replay."""
    def f(x, lengths):
        t = lk.tensor(x, device=dev)
        if how == "branch":
            return t.sum() * (2.0 if (lengths > 3).any() else 1.0)
        if how == "int":
            return t[:, :int(lengths.max())].sum()
        if how == "element":
            return t.sum() * lengths[0]
        if how == "item":
            return t.sum() * lengths.max().item()
        if how == "tolist":
            return t.sum() * sum(lengths.tolist())
        return t.sum() * sum(v for v in lengths)

    x = np.ones((2, 5), np.float32)
    with pytest.raises(CompileError, match="reads the values of lengths .* at test_arg_marks"):
        lk.compile(f)(x, np.array([4, 5]))


def test_an_argument_and_plain_views_of_it_stay_the_argument(dev):
    """np.asarray, a dtype it already has, a contiguous copy that is no copy, shape-only
    functions and shape reads: replayed with each call's batch."""
    def f(x, y):
        a = lk.tensor(np.asarray(x), device=dev)
        b = lk.tensor(np.asarray(x, dtype=np.float32), device=dev)
        c = lk.tensor(np.ascontiguousarray(x), device=dev)
        z = lk.tensor(np.zeros_like(x), device=dev)
        logits = a + b + c + z
        return F.softmax_cross_entropy(logits, y) * x.shape[0], lk.tensor(x, device=dev).sum()

    c = lk.compile(f)
    rng = np.random.default_rng(1)
    for _ in range(4):
        x = rng.standard_normal((4, 5)).astype(np.float32)
        y = rng.integers(0, 5, 4)
        want = [float(_host(t.data)) for t in f(x, y)]
        got = [float(_host(t.data)) for t in c(x, y)]
        assert got == pytest.approx(want, rel=1e-6)
    assert c.stats["replays"] == 2


def test_containers_get_their_arrays_back_after_a_traced_call(dev):
    """Arrays in a dict or a list argument are marked for the call only: the caller's
    container holds its own arrays after it, and what the step stored in it stays."""
    def f(batch, extra):
        batch["seen"] = True
        return lk.tensor(batch["x"], device=dev).sum() + lk.tensor(extra[0], device=dev).sum()

    c = lk.compile(f)
    x, e = np.ones((2, 3), np.float32), np.ones(3, np.float32)
    batch, extra = {"x": x}, [e]
    c(batch, extra)
    assert batch["x"] is x and type(batch["x"]) is np.ndarray and batch["seen"] is True
    assert extra[0] is e and type(extra[0]) is np.ndarray


def test_a_kept_marked_view_does_not_trip_another_step(dev):
    """A step that keeps its argument (a replay buffer) keeps a marked view: reading it later,
    or inside another compiled step, is not refused."""
    kept = []

    def f(x):
        kept.append(x)
        return lk.tensor(x, device=dev).sum()

    lk.compile(f)(np.arange(6, dtype=np.float32))
    assert float(kept[0].sum()) == 15.0 and bool(kept[0][1] == 1)

    def g(y):
        return lk.tensor(y, device=dev).sum() * float(kept[0][2])

    cg = lk.compile(g)
    y = np.ones(3, np.float32)
    assert [float(_host(cg(y).data)) for _ in range(3)] == [6.0, 6.0, 6.0]


def test_an_array_computed_from_an_argument_is_not_a_result(dev):
    def f(x):
        return lk.tensor(x, device=dev).sum(), x * 2

    with pytest.raises(CompileError, match="computed from x"):
        lk.compile(f)(np.ones(3, np.float32))


def test_labkit_reads_argument_values_itself(dev):
    """labkit's own checks read a marked argument's values (a label out of range raises the
    eager IndexError, not a CompileError); labels and index arrays are replayed."""
    logits = lk.tensor(np.zeros((3, 4), np.float32), device=dev, requires_grad=True)

    def f(y):
        return F.softmax_cross_entropy(logits, y) + logits[np.arange(3), y].sum()

    c = lk.compile(f)
    with pytest.raises(IndexError):
        c(np.array([0, 1, 7]))
    for y in ([0, 1, 2], [3, 3, 3], [1, 0, 2]):
        want = float(_host(f(np.array(y)).data))
        assert float(_host(c(np.array(y)).data)) == pytest.approx(want)


def test_values_labkit_would_bake_from_an_argument_are_refused(dev):
    """A bound, a gather index or a number computed from an argument and given to labkit:
    each would be the traced call's at every replay (a slice by lengths.max() replayed 4.71
    for eager's 3.08)."""
    def bound(h, lengths):
        return lk.tensor(h, device=dev)[:, :lengths.max()].sum()

    def gather(h, lengths):
        return lk.tensor(h, device=dev)[np.arange(3), lengths - 1].sum()

    def count(h, ids):
        return lk.tensor(h, device=dev).sum() / np.count_nonzero(ids)

    def clip(h, lengths):
        return F.clip(lk.tensor(h, device=dev), -1.0, lengths.max()).sum()

    h = np.ones((3, 5), np.float32)
    lengths = np.array([2, 3, 4])
    for f in (bound, gather, count, clip):
        with pytest.raises(CompileError, match=r"(computed from|reads the values of) "
                                               r"(lengths|ids) .*test_arg_marks.py"):
            lk.compile(f)(h, lengths)


def test_a_refusal_caught_by_the_steps_code_still_refuses(dev, caplog):
    """logging formats its arguments in a handler that catches errors: the refusal raised
    there is kept and ends the trace, and the message names the step's line."""
    import logging

    log = logging.getLogger("test_arg_marks")

    def f(x):
        log.warning("batch mean %.3f", x.mean())
        return lk.tensor(x, device=dev).sum()

    c = lk.compile(f)
    with pytest.raises(CompileError, match=r"reads the values of x .*\(float\) at "
                                           r"test_arg_marks.py:\d+"):
        c(np.ones(3, np.float32))


def test_argument_forms_are_kept(dev, tmp_path):
    """Tuple types are not rebuilt (a tuple subclass with its own constructor or
    attributes), a memmap batch is marked, a returned argument is that array, and a view the
    step kept pickles as the plain array it is."""
    import pickle

    class Pair(tuple):
        def __new__(cls, x, y):
            return super().__new__(cls, (x, y))

    def f(p, m, keep):
        keep["m"] = m
        return lk.tensor(p[0], device=dev).sum() + lk.tensor(m, device=dev).sum(), m

    c = lk.compile(f)
    x = np.ones(3, np.float32)
    mm = np.memmap(tmp_path / "b.bin", dtype=np.float32, mode="w+", shape=(2, 3))
    mm[:] = 2
    kept = {}
    for _ in range(3):
        loss, back = c(Pair(x, x), mm, kept)
        assert back is mm and float(_host(loss.data)) == 15.0
    assert type(kept["m"]) is not np.memmap  # NOTE: the marked view the first call kept
    assert np.array_equal(pickle.loads(pickle.dumps(kept["m"])), np.full((2, 3), 2, np.float32))

    def g(m):
        return lk.tensor(m * 2, device=dev).sum()

    with pytest.raises(CompileError, match="computed from m"):
        lk.compile(g)(mm)


def test_the_argument_is_named_as_the_step_names_it(dev):
    class Model:
        @lk.compile
        def step(self, x, ids):
            return (lk.tensor(x, device=dev) * lk.tensor(ids != 0, device=dev)).sum()

    def nested(batch, *rest):
        return lk.tensor(rest[0]["ids"][0] + 1, device=dev).sum()

    x, ids = np.ones((2, 3), np.float32), np.ones((2, 3), np.int64)
    with pytest.raises(CompileError, match="computed from ids at"):
        Model().step(x, ids)
    with pytest.raises(CompileError, match=r"computed from rest\[0\]\['ids'\]\[0\] at"):
        lk.compile(nested)(x, {"ids": (ids,)})


def test_shape_functions_pass_and_a_marked_fill_value_does_not(dev):
    def f(x):
        t = lk.tensor(x, device=dev)
        return t.sum() * np.size(x) if np.ndim(x) == 2 else t.sum()

    c = lk.compile(f)
    for _ in range(3):
        assert float(_host(c(np.ones((2, 3), np.float32)).data)) == 36.0

    def g(x):
        return lk.tensor(np.full_like(x, x.max()), device=dev).sum()

    with pytest.raises(CompileError, match="computed from x"):
        lk.compile(g)(np.ones((2, 3), np.float32))


def test_code_in_a_folder_named_like_labkit_is_the_users(dev, tmp_path, monkeypatch):
    """Frames are told apart by folder, not by a prefix of the path: a user's folder
    labkit_runs/ beside labkit/ is not labkit's own code (its branch was let through)."""
    import importlib.util
    import os

    from labkit.compile import argmarks

    (tmp_path / "lab").mkdir()
    (tmp_path / "lab_runs").mkdir()
    (tmp_path / "lab_runs" / "userstep.py").write_text(
        "def branch(x):\n    return 2.0 if (x > 0).all() else 1.0\n")
    spec = importlib.util.spec_from_file_location("userstep",
                                                  tmp_path / "lab_runs" / "userstep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # NOTE: the folder as argmarks spells labkit's (with its trailing separator)
    sep = os.sep if argmarks._PKG.endswith(os.sep) else ""
    monkeypatch.setattr(argmarks, "_PKG", str(tmp_path / "lab") + sep)
    monkeypatch.setattr(argmarks, "_NOT_USER", (argmarks._NUMPY, argmarks._PKG,
                                                argmarks._STDLIB))

    def f(x):
        return lk.tensor(x, device=dev).sum() * mod.branch(x)

    with pytest.raises(CompileError, match="reads the values of x .* at userstep.py:2"):
        lk.compile(f)(np.ones(3, np.float32))
