"""MainLoop(compile=True): the same run as eager, bit for bit, and it resumes exactly."""

import numpy as np
import pytest

from labkit import training as T
from labkit.training import TrainingError

from ..training.helpers import make_loop


def _run(cfg):
    loop = make_loop(cfg)
    loop.recorder.enabled = False
    loop.run()
    return loop


def test_compiled_loop_trains_bitwise_like_the_eager_one(dev):
    """Shuffling, random flips, dropout, gradient clipping + Adam, accuracy: the log and the
    final parameters are the same numbers (the fused kernels round as the unfused ones)."""
    eager = _run({"device": str(dev), "epochs": 2})
    comp = _run({"device": str(dev), "epochs": 2, "compile": True})
    assert comp.compiled.stats["replays"] == len(comp.log) - 2
    assert comp.compiled.stats["retraces"] == 0
    for ra, rc in zip(eager.log.rows, comp.log.rows):
        assert ra["loss"] == rc["loss"] and ra["accuracy"] == rc["accuracy"], (ra, rc)
    pa, pc = eager.model.state_dict(), comp.model.state_dict()
    for k in pa:
        assert np.array_equal(pa[k], pc[k]), k


@pytest.mark.parametrize("at", [1, 7, 13])
def test_compiled_loop_resumes_exactly(dev, at):
    r = T.check_resume(lambda: make_loop({"device": str(dev), "compile": True}),
                       at_iteration=at)
    assert r.identical, r


def test_loading_a_checkpoint_into_a_running_compiled_loop(tmp_path):
    """The compiled step reads parameters and optimizer state afresh at each replay, so a
    checkpoint loaded in the same process takes effect (no stale arrays)."""
    loop = make_loop({"compile": True, "epochs": 100})
    loop.recorder.enabled = False
    loop.run(max_iterations=5)
    path = loop.save_checkpoint(tmp_path / "at5")
    loop.run(max_iterations=5)
    first = loop.model.state_dict()
    losses = [r["loss"] for r in loop.log.rows[5:10]]
    loop.load_checkpoint(path)
    loop.run(max_iterations=5)
    again = loop.model.state_dict()
    assert [r["loss"] for r in loop.log.rows[5:10]] == losses
    for k in first:
        assert np.array_equal(first[k], again[k]), k


def test_compile_needs_loss_fn():
    loop = make_loop()
    with pytest.raises(TrainingError, match="compile=True compiles loss_fn"):
        T.MainLoop(loop.model, loop.optimizer, loop.stream, step=lambda loop, batch: {},
                   compile=True)


def test_a_compiled_loop_at_batch_1_resumes_exactly():
    """At batch 1 on the CPU the compiled update of a weight is a rank-1 update when
    reassociate=True; a resumed run traces (the eager update) where the run it resumes
    replayed, so MainLoop compiles without it: a resume is bit for bit."""
    import labkit as lk
    import labkit.bricks as B
    import labkit.functions as F
    from labkit.data import DataStream, ScaleAndShift

    def make():
        lk.bricks.set_seed(0)
        model = B.Sequence(B.Flatten(), B.Linear(64, 96), B.ReLU(), B.Linear(96, 10))
        opt = lk.optimizers.SGD(lr=0.05).setup(model)
        s = ScaleAndShift(DataStream(lk.data.get("digits", split="train", load_in_memory=True),
                                     batch_size=1, shuffle=True, seed=0), 1 / 16, -0.5,
                          which_sources="features")

        def loss_fn(model, batch):
            return F.softmax_cross_entropy(model(lk.tensor(batch["features"])),
                                           batch["targets"])
        loop = T.MainLoop(model, opt, s, loss_fn, compile=True, store=False,
                          extensions=[T.FinishAfter(iterations=30)])
        return loop

    r = T.check_resume(make, at_iteration=15)
    assert r.identical, r


def test_compile_takes_lk_compile_options():
    """compile={"reassociate": True}: the rank-1 update at batch 1 (faster, a resume within
    float32 rounding); compile=True keeps the exact one; unknown options are refused."""
    loop = make_loop({"compile": True})
    assert loop.compiled.reassociate is False and loop.compiled.warn_after == 8
    fast = make_loop({"compile": {"reassociate": True, "warn_after": 2}})
    assert fast.compiled.reassociate is True and fast.compiled.warn_after == 2
    with pytest.raises(TrainingError, match="compile must be True, False or a dict"):
        make_loop({"compile": {"reasociate": True}})
    with pytest.raises(TrainingError, match="compile must be True, False or a dict"):
        make_loop({"compile": "yes"})
