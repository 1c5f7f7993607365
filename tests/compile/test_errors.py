"""What lk.compile refuses, and that each refusal says what was done, where, and the fix."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.errors import CompileError


def t(values, dev, rg=False):
    return lk.tensor(np.asarray(values, np.float32), device=dev, requires_grad=rg)


def line_of(marker):
    with open(__file__) as f:
        n = next(i for i, s in enumerate(f, 1) if s.rstrip().endswith(f"# {marker}"))
    return f"test_errors.py:{n}"


class Result:
    pass


@pytest.mark.parametrize("make", [lambda y: Result(), lambda y: {y}, lambda y: (y, object())],
                         ids=["object", "set", "tuple_with_object"])
def test_returning_an_unsupported_object(make, dev):
    @lk.compile
    def step(x):
        return make(x * 2.0)

    with pytest.raises(CompileError) as e:
        step(t([1], dev))
    msg = str(e.value)
    assert msg.startswith("lk.compile: step returned a ")
    assert "returns tensors, arrays, numbers, None, and tuples, lists or dicts of them" in msg


@pytest.mark.parametrize("read", ["item", "numpy", "float", "print"])
def test_reading_values_inside(read, dev):
    @lk.compile
    def step(x):
        loss = (x * x).sum()
        if read == "item":
            v = loss.item()  # read item
        elif read == "numpy":
            v = loss.numpy()  # read numpy
        elif read == "float":
            v = float(loss)  # read float
        else:
            v = print(loss)  # read print
        return loss, v

    with pytest.raises(CompileError) as e:
        step(t([1, 2], dev))
    msg = str(e.value)
    assert f" at {line_of('read ' + read)} " in msg, msg  # the user's line, not labkit's
    assert "step reads the values of a tensor of shape ()" in msg
    assert "Return the tensor from the step and read it after the call" in msg


def test_replacing_data_with_a_raw_array_is_refused(dev):
    w = t([1.0, 2.0], dev, rg=True)

    @lk.compile
    def step(x):
        y = (x * w).sum()
        w.data = w.data * 0.5  # NOTE: raw array code, not an op
        return y

    with pytest.raises(CompileError, match=r"replaced the data of a tensor of shape \(2,\) "
                                           r"with an array no labkit op made"):
        step(t([1, 1], dev))


def test_refused_step_can_be_called_again_after_a_fix(dev):
    """A refusal leaves no tracer installed: eager labkit keeps working."""
    @lk.compile
    def step(x):
        return (x * 2.0).sum().item()

    with pytest.raises(CompileError):
        step(t([1], dev))
    assert (t([1], dev) * 2.0).sum().item() == 2.0
    assert lk.compile(lambda x: (x * 2.0).sum())(t([1], dev)).item() == 2.0


def test_compile_needs_a_function():
    with pytest.raises(TypeError, match="lk.compile: expected a function, got int"):
        lk.compile(3)


def test_options_as_decorator_arguments(dev):
    @lk.compile(fuse=False, cse=False, warn_after=1)
    def step(x):
        return F.exp(x)

    for _ in range(3):
        np.testing.assert_array_equal(step(t([0.0], dev)).numpy(), [1.0])
    assert (step.fuse, step.cse, step.warn_after) == (False, False, 1)
    assert step.stats["replays"] == 1
    assert "1 replayed" in step.explain()


def test_a_recurrent_state_passed_back_with_its_graph_is_refused_naming_it(dev):
    """An LSTM's (h, c) returned and passed back in undetached: the backward goes into the
    last call's graph, whose ops read U from before the call. That was refused as "raw
    array code" naming neither the argument nor the fix; it names both now, and the
    detached state (truncated backpropagation through time) compiles."""
    rng = np.random.default_rng(0)
    u = t(rng.standard_normal((64, 16)) * 0.3, dev, rg=True)

    def step(xs, h, c):
        u.grad = None
        for xt in F.unbind(xs, axis=1):
            c, h = F.lstm(c, xt + F.matmul(h, F.transpose(u)))
        loss = F.sum(h * h)
        loss.backward()
        return loss, h, c

    f = lk.compile(step)
    h = c = t(rng.standard_normal((4, 16)) * 0.5, dev)
    xs = [t(rng.standard_normal((4, 3, 64)), dev) for _ in range(5)]
    _, h, c = f(xs[0], h, c)
    with pytest.raises(CompileError, match=r"back-propagates into argument array [12], a tensor of "
                                           r"shape \(4, 16\) computed before the call \(by lstm\)"
                                           r".*detached"):
        f(xs[1], h, c)
    eager_h = eager_c = f_h = f_c = t(rng.standard_normal((4, 16)) * 0.5, dev)
    for x in xs:
        le, eager_h, eager_c = step(x, eager_h.detach(), eager_c.detach())
        lf, f_h, f_c = f(x, f_h.detach(), f_c.detach())
        np.testing.assert_allclose(lf.numpy(), le.numpy(), rtol=1e-6)
    assert f.stats["replays"] >= 2
