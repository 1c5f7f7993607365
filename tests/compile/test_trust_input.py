"""trust_input=True as documented (labkit/compile/__init__.py): the guards are skipped, the
arguments still select the program, labels are still checked, and a wrong call raises an op's
error (never a crash) after which the step works again."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
import labkit.optimizers as O


def _setup(dev, trust):
    B.set_seed(0)
    model = B.MLP([4, 8, 3]).to(dev)
    opt = O.Adam(lr=0.01).setup(model)

    def step(x, y):
        opt.zero_grad()
        loss = F.softmax_cross_entropy(model(lk.tensor(x, device=dev)), y)
        loss.backward()
        opt.update()
        return loss

    return model, (lk.compile(step, trust_input=True) if trust else step)


def _batches(sizes):
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((n, 4)).astype(np.float32), rng.integers(0, 3, n)) for n in sizes]


def test_trusted_calls_with_other_batch_sizes_and_a_bad_label(dev):
    sizes = [6, 6, 6, 2, 2, 2, 6, 9]
    batches = _batches(sizes)
    bad = (batches[0][0], np.array([0, 1, 2, 3, 0, 1]))  # 3 is no class
    runs = []
    for trust in (False, True):
        model, step = _setup(dev, trust)
        losses = []
        for k, (x, y) in enumerate(batches):
            if k == 5:
                with pytest.raises(IndexError):
                    step(*bad)
            losses.append(step(x, y).numpy())
        runs.append((losses, {k: p.numpy() for k, p in model.params().items()}))
    (le, pe), (lt, pt) = runs
    for a, b in zip(le, lt):
        np.testing.assert_array_equal(a, b)
    for k in pe:
        np.testing.assert_array_equal(pe[k], pt[k], err_msg=k)
    assert step.stats["traces"] == 5 and step.stats["retraces"] == 2  # 6, 6, 2, 2, 9


def test_a_parameter_of_another_shape_under_trust_input_raises_and_the_step_recovers(dev):
    model, step = _setup(dev, True)
    (x, y), = _batches([5])
    for _ in range(3):
        step(x, y)
    b = model.params()["/mlp/linear_0.b"]
    kept = b.data
    b.data = lk.tensor(np.zeros(5, np.float32), device=dev).data  # 8 expected
    with pytest.raises((ValueError, lk.errors.ShapeError)):
        step(x, y)
    b.data = kept
    assert np.isfinite(step(x, y).numpy())
