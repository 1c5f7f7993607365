"""A float a step returns that one arithmetic operation makes of checked numbers (its
arguments, the values its guards check, its constants: ``epoch / n_epochs``) follows them at
each call; it was refused as a value a replay would return unchanged. A value made of
anything else still is refused."""

import time

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.errors import CompileError

CFG = {"lr": 0.1}


def test_floats_made_of_arguments_and_checked_values_follow_them(dev):
    x = lk.tensor(np.ones(3, np.float32), device=dev)

    @lk.compile
    def step(x, epoch, n_epochs):
        return F.sum(x), {"progress": epoch / n_epochs, "half_lr": CFG["lr"] * 0.5,
                          "next": epoch + 1.0}

    for epoch in (0, 0, 0, 1, 1, 1, 2):
        CFG["lr"] = 0.1 / (epoch + 1)
        _, got = step(x, epoch, 10)
        assert got == {"progress": epoch / 10, "half_lr": CFG["lr"] * 0.5,
                       "next": epoch + 1.0}
    assert step.stats["replays"] == 2  # NOTE: the third call of each of the first two epochs


T0 = time.time()


def test_a_float_from_elsewhere_is_still_refused(dev):
    x = lk.tensor(np.ones(3, np.float32), device=dev)

    @lk.compile
    def step(x):
        return F.sum(x), time.time() - T0  # NOTE: a clock: not checked at each call

    with pytest.raises(CompileError, match=r"returns the Python float .*replay would return"):
        step(x)


def test_a_count_is_not_taken_for_a_sum_of_checked_numbers(dev):
    history = [0.0] * 100  # NOTE: past 64 items: its length is not checked

    @lk.compile
    def step(x, k):
        return F.sum(x), len(history)

    with pytest.raises(CompileError, match=r"returns the Python int 100"):
        step(lk.tensor(np.ones(3, np.float32), device=dev), 99)


def test_a_scheduled_rate_read_after_the_update_follows_the_schedule(dev):
    """opt.lr read after opt.update() (logged): the update moves a schedule within the call,
    and a replay returned the traced rate, one call behind at each decay (found by a
    review, /tmp/adv31/f4b_lr_only.py). The rate after the call's update is checked too."""
    import warnings

    import labkit.bricks as B
    import labkit.optimizers as O
    from labkit.compile import CompileWarning

    def run(compiled):
        B.set_seed(1)
        model = B.Linear(3, 1).to(dev)
        opt = O.SGD(lr=O.StepDecay(0.1, every=4, gamma=0.1)).setup(model)
        x = lk.tensor(np.ones((2, 3), np.float32), device=dev)

        def step(x):
            opt.zero_grad()
            loss = F.sum(model(x))
            loss.backward()
            opt.update()
            return loss, {"lr": opt.lr, "half": opt.lr * 0.5}

        f = lk.compile(step) if compiled else step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CompileWarning)
            return [f(x)[1] for _ in range(14)], f

    eager, _ = run(False)
    got, f = run(True)
    assert got == eager
    assert f.stats["replays"] >= 3  # NOTE: the third call of each rate
