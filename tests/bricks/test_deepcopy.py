"""copy.deepcopy of a model (a target network, an averaged copy): its own parameters, the
same outputs, on either device. A Sequence raised (its layer list rebuilt itself into a
Sequence not yet copied), and an OpenCL array could not be copied at all."""

import copy

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F


def _model(dev):
    lk.bricks.set_seed(0)
    return B.Sequence(B.Linear(3, 4), B.ReLU(), B.Dropout(0.5),
                      B.Sequence(B.Linear(4, 2), B.Tanh())).to(dev)


def test_a_deep_copy_computes_alike_and_owns_its_parameters(dev):
    m = _model(dev).eval()
    x = lk.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=dev)
    want = m(x).numpy()
    c = copy.deepcopy(m)
    assert sorted(c.params()) == sorted(m.params()) and str(c.device) == str(m.device)
    assert np.array_equal(c(x).numpy(), want)
    for k, p in c.params().items():
        assert p is not m.params()[k] and p.data is not m.params()[k].data
    for p in m.params().values():
        p.data = p.data * 0
    assert np.array_equal(c(x).numpy(), want)
    # its layer list is its own: a layer appended registers in the copy only
    assert c.layers[0] is c.linear_0 and c.layers[0] is not m.layers[0]
    c.layers.append(B.Linear(2, 2))
    assert "linear_4" in c._children and "linear_4" not in m._children


def test_a_copy_trains_on_its_own(dev):
    """An online network and a target copy: the optimizer steps the online one only."""
    online = _model(dev).eval()
    target = copy.deepcopy(online)
    before = {k: p.numpy().copy() for k, p in target.params().items()}
    opt = lk.optimizers.SGD(lr=0.1).setup(online)
    x = lk.tensor(np.ones((2, 3), np.float32), device=dev)
    with lk.no_grad():
        y = target(x)
    loss = F.sum((online(x) - y) ** 2 + online(x))
    opt.zero_grad()
    loss.backward()
    opt.update()
    for k, p in target.params().items():
        assert np.array_equal(p.numpy(), before[k]), k
        assert p.grad is None
    assert not all(np.array_equal(p.numpy(), before[k]) for k, p in online.params().items())


def test_copying_an_opencl_array_copies_its_elements():
    a = lk.backend.opencl.asarray(np.arange(4, dtype=np.float32))
    for c in (copy.copy(a), copy.deepcopy(a)):
        assert c.data is not a.data and np.array_equal(c.get(), a.get())
