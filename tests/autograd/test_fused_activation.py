"""``activation="relu"`` on linear and conv2d: one node (on OpenCL one GEMM launch with the
bias and relu as its epilogue) whose result, gradients and second-order gradients are bit for
bit those of ``relu`` applied to the unfused op, on both devices."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F


def _bits(a):
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _run(f, arrays, dev):
    ts = [lk.tensor(a, device=dev, requires_grad=True) for a in arrays]
    y = f(*ts)
    grads = lk.grad((y * y).sum(), ts, create_graph=True)
    second = lk.grad(sum((g * g).sum() for g in grads), ts)
    return [y.numpy()] + [g.numpy() for g in grads] + [g.numpy() for g in second]


CASES = {
    "linear": (lambda x, W, b, act=None: F.linear(x, W, b, activation=act),
               [(32, 50), (40, 50), (40,)]),
    "linear_3d_nobias": (lambda x, W, act=None: F.linear(x, W, activation=act),
                         [(2, 5, 50), (40, 50)]),
    "linear_batch1": (lambda x, W, b, act=None: F.linear(x, W, b, activation=act),
                      [(1, 100), (64, 100), (64,)]),
    "conv_pad": (lambda x, W, b, act=None: F.conv2d(x, W, b, pad=1, activation=act),
                 [(4, 3, 9, 9), (6, 3, 3, 3), (6,)]),
    "conv_stride_dilation": (lambda x, W, act=None: F.conv2d(x, W, stride=2, pad=(2, 1),
                                                             dilation=(2, 1), activation=act),
                             [(2, 2, 11, 10), (5, 2, 3, 2)]),
    "conv_groups": (lambda x, W, b, act=None: F.conv2d(x, W, b, groups=2, activation=act),
                    [(2, 4, 6, 6), (6, 2, 3, 3), (6,)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fused_relu_is_bit_for_bit_relu_of_the_op(name, dev, rng):
    f, shapes = CASES[name]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    arrays[0].flat[:2] = [np.nan, -0.0]
    fused = _run(lambda *t: f(*t, act="relu"), arrays, dev)
    composed = _run(lambda *t: F.relu(f(*t)), arrays, dev)
    for got, want in zip(fused, composed):
        assert got.shape == want.shape
        assert np.array_equal(_bits(got), _bits(want))
    assert (fused[0][~np.isnan(fused[0])] >= 0).all()


def test_the_fused_node_is_one_node_named_for_both(dev, rng):
    x = lk.tensor(rng.standard_normal((3, 4)).astype(np.float32), device=dev,
                  requires_grad=True)
    W = lk.tensor(rng.standard_normal((2, 4)).astype(np.float32), device=dev)
    y = F.linear(x, W, activation=F.relu)
    assert y.creator.name == "linear_relu"
    assert y.creator.inputs[0] is x
    xc = lk.tensor(rng.standard_normal((1, 1, 4, 4)).astype(np.float32), device=dev,
                   requires_grad=True)
    Wc = lk.tensor(rng.standard_normal((2, 1, 3, 3)).astype(np.float32), device=dev)
    assert F.conv2d(xc, Wc, activation="relu").creator.name == "conv2d_relu"


def test_a_conv_reads_the_previous_convs_layout_without_a_copy(dev, rng):
    """A convolution's output is (C, N, H, W) in memory; the next one takes its windows
    through the strides. Both devices agree with NumPy's float64 result."""
    x = rng.standard_normal((3, 2, 8, 8))
    W1, W2 = rng.standard_normal((4, 2, 3, 3)), rng.standard_normal((5, 4, 3, 3))
    h = F.conv2d(lk.tensor(x.astype(np.float32), device=dev),
                 lk.tensor(W1.astype(np.float32), device=dev), pad=1, activation="relu")
    y = F.conv2d(h, lk.tensor(W2.astype(np.float32), device=dev), pad=1)

    def ref_conv(a, w):
        n, c, hh, ww = a.shape
        ap = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((n, w.shape[0], hh, ww))
        for i in range(3):
            for j in range(3):
                out += np.einsum("nchw,oc->nohw", ap[:, :, i:i + hh, j:j + ww], w[:, :, i, j])
        return out
    want = ref_conv(np.maximum(ref_conv(x, W1), 0), W2)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bad", ["tanh", "RELU", 1, F.sigmoid])
def test_an_activation_that_cannot_be_fused_is_refused_by_name(bad):
    x, W = lk.tensor(np.ones((2, 3), np.float32)), lk.tensor(np.ones((4, 3), np.float32))
    with pytest.raises(ValueError, match="linear: activation=.* cannot be fused; pass 'relu'"):
        F.linear(x, W, activation=bad)
    xc, Wc = lk.tensor(np.ones((1, 1, 3, 3), np.float32)), lk.tensor(np.ones((1, 1, 2, 2),
                                                                           np.float32))
    with pytest.raises(ValueError, match="conv2d: activation=.* cannot be fused"):
        F.conv2d(xc, Wc, activation=bad)


def test_integer_arrays_take_separate_ops(dev):
    x = lk.tensor(np.array([[1, 2], [3, -4]], np.int32), device=dev)
    W = lk.tensor(np.ones((3, 2), np.int32), device=dev)
    b = lk.tensor(np.array([1, -10, 0], np.int32), device=dev)
    assert F.linear(x, W, b, activation="relu").numpy().tolist() == [[4, 0, 3], [0, 0, 0]]
    xc = lk.tensor(np.arange(9, dtype=np.int32).reshape(1, 1, 3, 3) - 4, device=dev)
    Wc = lk.tensor(np.ones((2, 1, 2, 2), np.int32), device=dev)
    bc = lk.tensor(np.array([1, -9], np.int32), device=dev)
    got = F.conv2d(xc, Wc, bc, activation="relu").numpy()
    want = np.maximum(F.conv2d(lk.tensor(xc.numpy()), lk.tensor(Wc.numpy()),
                               lk.tensor(bc.numpy())).numpy(), 0)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int32


def test_an_array_as_activation_is_refused_by_name():
    x, W = lk.tensor(np.ones((2, 3), np.float32)), lk.tensor(np.ones((4, 3), np.float32))
    with pytest.raises(ValueError, match="activation=array"):
        F.linear(x, W, activation=np.zeros(3))
