"""Every op of labkit.functions through the shared checker, on cpu, cl and an OpenCL device
without fp64 (float32 only there; see checker.py)."""

import math

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F

from .checker import OpCase, check_backward, check_double_backward, check_forward

erf = np.vectorize(math.erf)


def np_logsumexp(x, axis, keepdims=False):
    m = x.max(axis=axis, keepdims=True)
    r = np.log(np.exp(x - m).sum(axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis)


def np_log_softmax(x, axis=1):
    return x - np_logsumexp(x, axis, keepdims=True)


def np_conv2d(x, w, b=None, stride=1, pad=0, dilation=1, groups=1):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    y = np.zeros((n, o, oh, ow))
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                hs = slice(i * stride, i * stride + dilation * (kh - 1) + 1, dilation)
                ws = slice(j * stride, j * stride + dilation * (kw - 1) + 1, dilation)
                patch = x[:, g * cg:(g + 1) * cg, hs, ws]
                y[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return y if b is None else y + b.reshape(1, -1, 1, 1)


def np_conv_transpose2d(x, w, stride=1, pad=0):
    n, c, h, wd = x.shape
    _, o, kh, kw = w.shape
    hf, wf = (h - 1) * stride + kh, (wd - 1) * stride + kw
    y = np.zeros((n, o, hf, wf))
    for i in range(h):
        for j in range(wd):
            y[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw] += np.einsum(
                "nc,cokl->nokl", x[:, :, i, j], w)
    return y[:, :, pad:hf - pad, pad:wf - pad]


def np_pool(x, k, s, p, op, fill):
    x = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
    n, c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            y[:, :, i, j] = op(x[:, :, i * s:i * s + k, j * s:j * s + k], axis=(2, 3))
    return y


def distinct(shape, low=-2, high=2):
    """Values far from ties (max, min, abs, relu, pooling have kinks at ties and at 0)."""
    def gen(rng):
        n = int(np.prod(shape))
        v = rng.permutation(n) / n * (high - low) + low + 0.5 / n * (high - low)
        return [v.reshape(shape)]
    return gen


LABELS = np.array([2, 0, 4, 1])
LABELS_IGN = np.array([2, -1, 4, -1])
MASK = np.array([[True, False, True], [False, True, True]])
BN_GAMMA = np.array([1.5, 0.5, 2.0])


def np_lstm(c, x):
    """(c, h) of one LSTM step, side by side."""
    a, i, f, o = np.split(x, 4, axis=1)
    c = np.tanh(a) / (1 + np.exp(-i)) + c / (1 + np.exp(-f))
    return np.concatenate([c, np.tanh(c) / (1 + np.exp(-o))], axis=1)


def bn_ref(x, g, b):
    m = x.mean(axis=(0, 2, 3), keepdims=True)
    v = x.var(axis=(0, 2, 3), keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * g.reshape(1, -1, 1, 1) + b.reshape(1, -1, 1, 1)


def dropout_fn(x):
    g = lk.Generator(7, x.device)
    return F.dropout(x, 0.4, generator=g)


def dropout_ref(x):
    keep = lk.Generator(7, "cpu").bernoulli(x.shape, 0.6)
    return x * keep / 0.6


CASES = [
    OpCase("add", F.add, np.add, [(3, 4), (4,)], double=False),
    OpCase("add_scalar", lambda x: x + 2.5, lambda x: x + 2.5, [(5,)], double=False),
    OpCase("sub", F.sub, np.subtract, [(2, 1, 3), (4, 1)], double=False),
    OpCase("rsub_scalar", lambda x: 1.5 - x, lambda x: 1.5 - x, [(5,)], double=False),
    OpCase("mul", F.mul, np.multiply, [(3, 4), (3, 1)]),
    OpCase("div", F.div, np.divide, [(3, 4), (4,)], low=0.5, high=2),
    OpCase("rdiv_scalar", lambda x: 2.0 / x, lambda x: 2.0 / x, [(5,)], low=0.5, high=2),
    OpCase("neg", F.neg, np.negative, [(4,)], double=False),
    OpCase("pow_scalar", lambda x: x ** 3, lambda x: x ** 3, [(5,)]),
    OpCase("pow_half", lambda x: x ** 0.5, np.sqrt, [(5,)], low=0.5, high=2),
    OpCase("pow", F.pow, np.power, [(2, 3), (3,)], low=0.5, high=2),
    OpCase("rpow_scalar", lambda x: 2.0 ** x, lambda x: 2.0 ** x, [(4,)]),
    OpCase("matmul", F.matmul, np.matmul, [(3, 4), (4, 2)]),
    OpCase("matmul_batched", F.matmul, np.matmul, [(2, 1, 3, 4), (3, 4, 2)]),
    OpCase("matmul_vec", F.matmul, np.matmul, [(4,), (4, 3)]),
    OpCase("matmul_matvec", F.matmul, np.matmul, [(3, 4), (4,)]),
    OpCase("exp", F.exp, np.exp, [(2, 3)]),
    OpCase("log", F.log, np.log, [(2, 3)], low=0.5, high=3),
    OpCase("log1p", F.log1p, np.log1p, [(2, 3)], low=-0.5, high=3),
    OpCase("expm1", F.expm1, np.expm1, [(2, 3)]),
    OpCase("sqrt", F.sqrt, np.sqrt, [(2, 3)], low=0.5, high=3),
    OpCase("abs", F.abs, np.abs, [(6,)], gen=distinct((6,)), double=False),
    OpCase("sin", F.sin, np.sin, [(2, 3)]),
    OpCase("cos", F.cos, np.cos, [(2, 3)]),
    OpCase("tanh", F.tanh, np.tanh, [(2, 3)]),
    OpCase("sigmoid", F.sigmoid, lambda x: 1 / (1 + np.exp(-x)), [(2, 3)]),
    OpCase("softplus", F.softplus, lambda x: np.logaddexp(0, x), [(6,)], gen=distinct((6,))),
    OpCase("log_sigmoid", F.log_sigmoid, lambda x: -np.logaddexp(0, -x), [(6,)],
           gen=distinct((6,))),
    OpCase("erf", F.erf, erf, [(5,)]),
    OpCase("erfc", F.erfc, np.vectorize(math.erfc), [(5,)]),
    OpCase("maximum", F.maximum, np.maximum,
           [(2, 3), (3,)], gen=lambda r: [r.uniform(-2, 2, (2, 3)), r.uniform(-2, 2, 3) + 0.01],
           double=False),
    OpCase("minimum", F.minimum, np.minimum, [(2, 3), (2, 3)], double=False),
    OpCase("where", lambda a, b: F.where(MASK, a, b), lambda a, b: np.where(MASK, a, b),
           [(2, 3), (3,)], double=False),
    OpCase("clip", lambda x: F.clip(x, -0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5), [(8,)],
           gen=distinct((8,)), double=False),
    OpCase("sum", lambda x: F.sum(x, axis=1), lambda x: x.sum(axis=1), [(2, 3, 4)],
           double=False),
    OpCase("sum_all", F.sum, np.sum, [(2, 3)], double=False),
    OpCase("mean_keepdims", lambda x: F.mean(x, axis=(0, 2), keepdims=True),
           lambda x: x.mean(axis=(0, 2), keepdims=True), [(2, 3, 4)], double=False),
    OpCase("max", lambda x: F.max(x, axis=1), lambda x: x.max(axis=1), [(3, 4)],
           gen=distinct((3, 4)), double=False),
    OpCase("min_all", F.min, np.min, [(3, 4)], gen=distinct((3, 4)), double=False),
    OpCase("logsumexp", lambda x: F.logsumexp(x, axis=1), lambda x: np_logsumexp(x, 1),
           [(3, 4)]),
    OpCase("var", lambda x: F.var(x, axis=0), lambda x: x.var(axis=0), [(4, 3)]),
    OpCase("reshape", lambda x: F.reshape(x, (3, 4)), lambda x: x.reshape(3, 4), [(2, 6)],
           double=False),
    OpCase("transpose", lambda x: F.transpose(x, (2, 0, 1)), lambda x: x.transpose(2, 0, 1),
           [(2, 3, 4)], double=False),
    OpCase("T", lambda x: x.T, lambda x: x.T, [(2, 3)], double=False),
    OpCase("broadcast_to", lambda x: F.broadcast_to(x, (3, 2, 4)),
           lambda x: np.broadcast_to(x, (3, 2, 4)), [(2, 1)], double=False),
    OpCase("expand_dims", lambda x: F.expand_dims(x, 1), lambda x: np.expand_dims(x, 1),
           [(2, 3)], double=False),
    OpCase("squeeze", F.squeeze, np.squeeze, [(2, 1, 3)], double=False),
    OpCase("flatten", F.flatten, lambda x: x.reshape(2, -1), [(2, 3, 2)], double=False),
    OpCase("concat", lambda a, b: F.concat([a, b], axis=1),
           lambda a, b: np.concatenate([a, b], axis=1), [(2, 3), (2, 2)], double=False),
    OpCase("stack", lambda a, b: F.stack([a, b], axis=0), lambda a, b: np.stack([a, b]),
           [(2, 3), (2, 3)], double=False),
    OpCase("split", lambda x: F.split(x, [1, 3], axis=1)[1],
           lambda x: np.split(x, [1, 3], axis=1)[1], [(2, 5)], double=False),
    # products of the pieces: the second derivative goes through split's backward (a concat)
    OpCase("split_products", lambda x: (lambda a, b, c: a * b + c * c)(*F.split(x, 3, axis=1)),
           lambda x: x[:, :2] * x[:, 2:4] + x[:, 4:] ** 2, [(2, 6)]),
    OpCase("unbind", lambda x: F.unbind(x, axis=-1)[1], lambda x: x[..., 1], [(2, 3, 2)],
           double=False),
    OpCase("unbind_products", lambda x: (lambda a, b, c: a * b - c * c)(*F.unbind(x, axis=1)),
           lambda x: x[:, 0] * x[:, 1] - x[:, 2] ** 2, [(2, 3, 4)]),
    OpCase("unbind_one", lambda x: F.unbind(x, axis=0)[0] ** 2, lambda x: x[0] ** 2, [(1, 3)]),
    OpCase("stack_products", lambda a, b: F.stack([a * b, b * b], axis=1),
           lambda a, b: np.stack([a * b, b * b], axis=1), [(2, 3), (2, 3)]),
    OpCase("getitem_slices", lambda x: x[1:, ::-2, None], lambda x: x[1:, ::-2, None],
           [(3, 4)], double=False),
    OpCase("getitem_int_array", lambda x: x[np.array([2, 0, 2, 1])],
           lambda x: x[np.array([2, 0, 2, 1])], [(3, 4)], double=False),
    OpCase("getitem_pairs", lambda x: x[np.arange(3), np.array([1, 0, 1])],
           lambda x: x[np.arange(3), np.array([1, 0, 1])], [(3, 2)], double=False),
    OpCase("getitem_mask", lambda x: x[MASK], lambda x: x[MASK], [(2, 3)], double=False),
    OpCase("pad", lambda x: F.pad(x, ((1, 0), (2, 1))),
           lambda x: np.pad(x, ((1, 0), (2, 1))), [(2, 3)], double=False),
    OpCase("relu", F.relu, lambda x: np.maximum(x, 0), [(6,)], gen=distinct((6,)),
           double=False),
    OpCase("leaky_relu", F.leaky_relu, lambda x: np.where(x > 0, x, 0.2 * x), [(6,)],
           gen=distinct((6,)), double=False),
    OpCase("elu", F.elu, lambda x: np.where(x > 0, x, np.expm1(x)), [(6,)],
           gen=distinct((6,))),
    OpCase("gelu", F.gelu, lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))), [(6,)]),
    OpCase("softmax", F.softmax, lambda x: np.exp(np_log_softmax(x)), [(2, 4)]),
    OpCase("log_softmax", F.log_softmax, np_log_softmax, [(2, 4)]),
    OpCase("softmax_cross_entropy", lambda x: F.softmax_cross_entropy(x, LABELS),
           lambda x: -np_log_softmax(x)[np.arange(4), LABELS].mean(), [(4, 5)]),
    OpCase("softmax_cross_entropy_ignore",
           lambda x: F.softmax_cross_entropy(x, LABELS_IGN, reduce="sum"),
           lambda x: -np_log_softmax(x)[[0, 2], [2, 4]].sum(), [(4, 5)]),
    OpCase("softmax_cross_entropy_none",
           lambda x: F.softmax_cross_entropy(x, LABELS_IGN, reduce="none"),
           lambda x: -np_log_softmax(x)[np.arange(4), LABELS_IGN.clip(0)] * (LABELS_IGN >= 0),
           [(4, 5)]),
    OpCase("sigmoid_cross_entropy",
           lambda x: F.sigmoid_cross_entropy(x, np.array([[0.0, 1, 1], [1, 0, 0.5]])),
           lambda x: np.mean(np.logaddexp(0, x) - x * np.array([[0.0, 1, 1], [1, 0, 0.5]])),
           [(2, 3)], gen=distinct((2, 3))),
    OpCase("mean_squared_error", F.mean_squared_error, lambda a, b: ((a - b) ** 2).mean(),
           [(3, 2), (3, 2)]),
    OpCase("linear", F.linear, lambda x, w, b: x @ w.T + b, [(3, 4), (2, 4), (2,)]),
    OpCase("linear_nobias", F.linear, lambda x, w: x @ w.T, [(2, 3, 4), (5, 4)]),
    OpCase("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=1, pad=1),
           lambda x, w, b: np_conv2d(x, w, b, 1, 1), [(2, 2, 4, 4), (3, 2, 3, 3), (3,)]),
    OpCase("conv2d_stride_dilation",
           lambda x, w: F.conv2d(x, w, stride=2, pad=1, dilation=2),
           lambda x, w: np_conv2d(x, w, None, 2, 1, 2), [(1, 2, 5, 5), (2, 2, 2, 2)]),
    OpCase("conv2d_groups", lambda x, w: F.conv2d(x, w, groups=2),
           lambda x, w: np_conv2d(x, w, groups=2), [(1, 4, 3, 3), (4, 2, 2, 2)]),
    OpCase("conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w, stride=2, pad=1),
           lambda x, w: np_conv_transpose2d(x, w, 2, 1), [(1, 2, 3, 3), (2, 3, 3, 3)]),
    OpCase("embed_id", lambda w: F.embed_id(np.array([[1, 3], [3, 0]]), w),
           lambda w: w[np.array([[1, 3], [3, 0]])], [(4, 3)], double=False),
    OpCase("max_pool2d", lambda x: F.max_pool2d(x, 2, 2, 1),
           lambda x: np_pool(x, 2, 2, 1, np.max, -np.inf), [(1, 2, 4, 4)],
           gen=distinct((1, 2, 4, 4)), double=False),
    OpCase("max_pool2d_tiled", lambda x: F.max_pool2d(x, 2),
           lambda x: np_pool(x, 2, 2, 0, np.max, -np.inf), [(2, 2, 4, 6)],
           gen=distinct((2, 2, 4, 6)), double=False),
    OpCase("avg_pool2d", lambda x: F.avg_pool2d(x, 3, 1, 1),
           lambda x: np_pool(x, 3, 1, 1, np.mean, 0.0), [(1, 2, 3, 3)], double=False),
    OpCase("batch_normalization", lambda x, g, b: F.batch_normalization(x, g, b),
           bn_ref, [(3, 3, 2, 2), (3,), (3,)]),
    OpCase("layer_normalization", F.layer_normalization,
           lambda x, g, b: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True)
                                                                    + 1e-5) * g + b,
           [(3, 4), (4,), (4,)]),
    OpCase("dropout", dropout_fn, dropout_ref, [(4, 5)], double=False),
    OpCase("lstm", lambda c, x: F.lstm(c, x)[1],
           lambda c, x: (1 / (1 + np.exp(-x[:, 9:]))) * np.tanh(
               np.tanh(x[:, :3]) / (1 + np.exp(-x[:, 3:6])) + c / (1 + np.exp(-x[:, 6:9]))),
           [(2, 3), (2, 12)]),
    # both outputs at once: lstm_grad's backward (by hand) sees gradients of c and of h
    OpCase("lstm_c_and_h", lambda c, x: F.concat(list(F.lstm(c, x)), axis=1), np_lstm,
           [(2, 3), (2, 12)]),
]


@pytest.fixture(params=CASES, ids=repr)
def case(request):
    return request.param


def test_forward(case, op_dev, rng):
    check_forward(case, op_dev, rng)


def test_backward(case, op_dev, rng):
    check_backward(case, op_dev, rng)


# ops whose second derivative is zero almost everywhere (linear, piecewise-linear) are
# declared double=False and not listed here
@pytest.mark.parametrize("dcase", [c for c in CASES if c.double], ids=repr)
def test_double_backward(dcase, op_dev, rng):
    check_double_backward(dcase, op_dev, rng)
