"""The LSTM and GRU bricks against the straightforward formulation they replaced (slice
``pre[:, t]`` at each step, the gates composed from tanh, sigmoid and split), and the shape of
their backward graph: no slice gradients (each one was a zero array of the whole input)."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F


def reference_lstm(brick, x, mask=None):
    n, h = x.shape[0], brick.hidden_size
    c = hh = lk.tensor(np.zeros((n, h), np.float32), device=x.device)
    pre = F.linear(x, brick.W, brick.b)
    hs = []
    for t in range(x.shape[1]):
        a, i, f, o = F.split(pre[:, t] + F.matmul(hh, F.transpose(brick.U)), 4, axis=1)
        c_new = F.tanh(a) * F.sigmoid(i) + F.sigmoid(f) * c
        h_new = F.sigmoid(o) * F.tanh(c_new)
        if mask is not None:
            m = lk.tensor(mask[:, t:t + 1], device=x.device)
            c_new, h_new = c_new * m + c * (1 - m), h_new * m + hh * (1 - m)
        c, hh = c_new, h_new
        hs.append(hh)
    return F.stack(hs, axis=1)


def reference_gru(brick, x, mask=None):
    hh = lk.tensor(np.zeros((x.shape[0], brick.hidden_size), np.float32), device=x.device)
    pre = F.linear(x, brick.W, brick.b)
    Ur, Uz, Un = F.split(brick.U, 3, axis=0)
    hs = []
    for t in range(x.shape[1]):
        xr, xz, xn = F.split(pre[:, t], 3, axis=1)
        r = F.sigmoid(xr + F.matmul(hh, F.transpose(Ur)))
        z = F.sigmoid(xz + F.matmul(hh, F.transpose(Uz)))
        new = (1.0 - z) * F.tanh(xn + r * F.matmul(hh, F.transpose(Un))) + z * hh
        if mask is not None:
            m = lk.tensor(mask[:, t:t + 1], device=x.device)
            new = new * m + hh * (1 - m)
        hs.append(new)
        hh = new
    return F.stack(hs, axis=1)


@pytest.mark.parametrize("make,ref", [(B.LSTM, reference_lstm), (B.GRU, reference_gru)],
                         ids=["lstm", "gru"])
@pytest.mark.parametrize("masked", [False, True], ids=["", "masked"])
def test_recurrent_brick_matches_the_per_step_reference(make, ref, masked, dev, rng):
    brick = make(3, 4).to(dev)
    x = lk.tensor(rng.standard_normal((2, 5, 3)).astype(np.float32), device=dev,
                  requires_grad=True)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.float32) if masked else None
    gy = lk.tensor(rng.standard_normal((2, 5, 4)).astype(np.float32), device=dev)
    wrt = [x] + list(brick.params().values())
    got_y = brick(x, mask=mask)
    want_y = ref(brick, x, mask)
    np.testing.assert_allclose(got_y.numpy(), want_y.numpy(), rtol=1e-5, atol=1e-6)
    got = lk.grad([F.sum(got_y * gy)], wrt)
    want = lk.grad([F.sum(want_y * gy)], wrt)
    for name, g, w in zip(["x"] + list(brick.params()), got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=f"{make.__name__}: gradient of {name} on {dev}")


def _nodes(ts):
    """Every node of the graph that made ``ts``."""
    seen, stack = {}, [t.creator for t in ts if t.creator is not None]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            stack += [x.creator for x in node.inputs if x.creator is not None]
    return list(seen.values())


@pytest.mark.parametrize("make", [B.LSTM, B.GRU], ids=["lstm", "gru"])
def test_the_backward_graph_has_no_slice_gradients(make, rng):
    steps = 6
    brick = make(3, 4)
    x = lk.tensor(rng.standard_normal((2, steps, 3)).astype(np.float32), requires_grad=True)
    y = F.sum(brick(x))
    names = [n.name for n in _nodes([y])]
    # the loop is one node (lk.scan), no getitem per step
    assert names.count("scan") == 1 and "getitem" not in names, names
    grads = lk.grad([y], [x] + list(brick.params().values()), create_graph=True)
    back = [n.name for n in _nodes(grads)]
    assert "getitem_grad" not in back, back
    # double backprop recomputes the loop as a whole: one unbind of the steps' projections,
    # one stack of their gradients
    assert back.count("stack") == 1 and back.count("unbind") == 1, back


def test_the_gates_sigmoid_on_the_cpu_against_float64():
    """The LSTM's cheaper gate sigmoid (recurrent._gate_sigmoid): within 3.5 ulp of the
    float64 value wherever that is a normal float32, and at most the smallest normal away
    where it is subnormal; special values as sigmoid; no overflow warning; float16 takes the
    stable form."""
    import warnings

    from labkit.functions._util import sigmoid_array
    from labkit.functions.recurrent import _gate_sigmoid

    x = np.linspace(-110, 110, 400_001).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _gate_sigmoid(x)
    exact = 1 / (1 + np.exp(-x.astype(np.float64)))
    tiny = np.finfo(np.float32).tiny
    normal = exact >= tiny
    ulp = np.spacing(exact[normal].astype(np.float32)).astype(np.float64)
    assert (np.abs(got[normal] - exact[normal]) / ulp).max() <= 3.5
    assert np.abs(got[~normal] - exact[~normal]).max() <= tiny
    special = np.array([np.nan, np.inf, -np.inf, 0, -1e30, 1e30], np.float32)
    np.testing.assert_array_equal(_gate_sigmoid(special), sigmoid_array(special))
    h = np.linspace(-20, 20, 101).astype(np.float16)
    np.testing.assert_array_equal(_gate_sigmoid(h), sigmoid_array(h))
