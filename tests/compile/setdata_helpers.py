"""What the tests of replays setting ``.data`` and ``.grad`` share (test_data_set*.py)."""

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F


def host(d):
    """An array's values on the host."""
    return d if isinstance(d, np.ndarray) else d.get()


def same(run):
    """``run(compiled)`` gives the same with a compiled step as with the eager one."""
    eager, compiled = run(False), run(True)
    assert compiled == eager


def noisy_step(dev, outputs, std, compiled):
    """(step, model, WeightNoise) of a Linear(4, outputs) trained by SGD under WeightNoise."""
    lk.bricks.set_seed(0)
    m = B.Linear(4, outputs).to(dev)
    opt = lk.optimizers.SGD(lr=0.1).setup(m)
    noise = lk.regularizers.WeightNoise(m, std, seed=3)

    def step(x, y):
        opt.zero_grad()
        with noise:
            loss = F.softmax_cross_entropy(m(x), y)
        loss.backward()
        opt.update()
        return loss
    return (lk.compile(step) if compiled else step), m, noise


def calls_with_a_bad_label(f, dev, tensor, bad, n, *args):
    """``f(*args, labels)`` ``n`` times, the labels out of range at the calls in ``bad``: each
    call's error name, if any, and ``tensor``'s values after it."""
    out = []
    for i in range(n):
        try:
            f(*args, lk.tensor(np.array([7 if i in bad else 1]), device=dev))
        except lk.errors.LabkitError as e:
            out.append(type(e).__name__)
        out.append(tensor.numpy().tolist())
    return out
