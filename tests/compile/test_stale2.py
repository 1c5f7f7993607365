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
