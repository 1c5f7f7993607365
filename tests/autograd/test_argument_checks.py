"""Every public function of labkit.functions checks its arguments before it computes: one row
per bad call, with the error class it must raise and a fragment of the message (which names the
op, the argument, what was expected and what was found). Each row runs on cpu and cl, and
must fail before any op runs (no Function is applied)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.autograd.function import Function
from labkit.errors import DeviceError, DeviceMismatchError, DTypeError, LabkitError, ShapeError


def T(shape, d, dtype=np.float32, fill=None):
    """A tensor of ``shape`` on device ``d`` (distinct values, or ``fill``)."""
    n = int(np.prod(shape))
    a = (np.arange(n) if fill is None else np.full(n, fill)).reshape(shape).astype(dtype)
    return lk.tensor(a, device=d)


@dataclass
class Bad:
    name: str
    call: object            # (device) -> the bad call
    error: type
    message: str            # a fragment of the message, starting with the op's name
    devices: tuple = ("cpu", "cl")

    def __repr__(self):
        return self.name


x23 = lambda d: T((2, 3), d)  # noqa: E731 - the rows' common input
img = lambda d: T((1, 2, 4, 4), d)  # noqa: E731
LOGITS = lambda d: T((3, 5), d)  # noqa: E731

ROWS = [
    # -- a non-Tensor where a Tensor is expected (was: AttributeError: no attribute 'data')
    Bad("relu_numpy", lambda d: F.relu(np.ones(3)), DTypeError,
        "relu: x must be a Tensor, got a numpy.ndarray of shape (3,); make one with lk.tensor"),
    Bad("exp_list", lambda d: F.exp([1.0, 2.0]), DTypeError, "exp: x must be a Tensor, got a list"),
    Bad("sum_numpy", lambda d: F.sum(np.ones(3)), DTypeError, "sum: x must be a Tensor"),
    Bad("reshape_numpy", lambda d: F.reshape(np.ones(4), (2, 2)), DTypeError,
        "reshape: x must be a Tensor"),
    Bad("transpose_none", lambda d: F.transpose(None), DTypeError,
        "transpose: x must be a Tensor, got None"),
    Bad("getitem_numpy", lambda d: F.getitem(np.ones(3), 0), DTypeError,
        "getitem: x must be a Tensor"),
    Bad("softplus_numpy", lambda d: F.softplus(np.ones(3)), DTypeError,
        "softplus: x must be a Tensor"),
    Bad("linear_W_numpy", lambda d: F.linear(x23(d), np.ones((4, 3), np.float32)), DTypeError,
        "linear: W must be a Tensor, got a numpy.ndarray of shape (4, 3)"),
    Bad("conv2d_x_numpy", lambda d: F.conv2d(np.ones((1, 2, 4, 4)), T((3, 2, 3, 3), d)),
        DTypeError, "conv2d: x must be a Tensor"),
    Bad("sce_logits_numpy", lambda d: F.softmax_cross_entropy(np.ones((3, 5)), [0, 1, 2]),
        DTypeError, "softmax_cross_entropy: logits must be a Tensor"),
    Bad("sce_int_logits", lambda d: F.softmax_cross_entropy(T((3, 5), d, np.int32), [0, 1, 2]),
        DTypeError, "softmax_cross_entropy: logits must be floating, got dtype int32"),
    Bad("batchnorm_gamma_numpy",
        lambda d: F.batch_normalization(T((2, 3), d), np.ones(3), T((3,), d)), DTypeError,
        "batch_normalization: gamma must be a Tensor"),
    Bad("dropout_numpy", lambda d: F.dropout(np.ones(3)), DTypeError,
        "dropout: x must be a Tensor"),
    Bad("lstm_numpy", lambda d: F.lstm(np.ones((2, 1)), T((2, 4), d)), DTypeError,
        "lstm: c_prev must be a Tensor"),
    Bad("max_pool_numpy", lambda d: F.max_pool2d(np.ones((1, 1, 2, 2)), 2), DTypeError,
        "max_pool2d: x must be a Tensor"),
    *[Bad(f"{n}_numpy", lambda d, n=n: getattr(F, n)(np.ones(2)), DTypeError,
          f"{n}: x must be a Tensor, got a numpy.ndarray of shape (2,)")
      for n in ("abs", "cos", "elu", "erf", "erfc", "expm1", "flatten", "gelu", "log", "log1p",
                "log_sigmoid", "neg", "sigmoid", "sin", "sqrt", "tanh", "leaky_relu")],
    Bad("div_two_arrays", lambda d: F.div(np.ones(2), [1.0, 2.0]), DTypeError,
        "div: expected at least one Tensor"),
    Bad("minimum_two_lists", lambda d: F.minimum([1.0], [2.0]), DTypeError,
        "minimum: expected at least one Tensor"),
    Bad("add_two_arrays", lambda d: F.add(np.ones(2), np.ones(2)), DTypeError,
        "add: expected at least one Tensor, got ndarray and ndarray"),
    Bad("mul_string", lambda d: x23(d) * "2", DTypeError,
        "mul: y must be a Tensor, a number or a list of numbers, got str"),
    Bad("sub_none", lambda d: F.sub(None, x23(d)), DTypeError,
        "sub: x must be a Tensor, a number or a list of numbers, got NoneType"),
    Bad("pow_two_arrays", lambda d: F.pow(np.ones(2), np.ones(2)), DTypeError,
        "pow: expected at least one Tensor"),
    Bad("matmul_two_lists", lambda d: F.matmul([[1.0]], [[1.0]]), DTypeError,
        "matmul: expected at least one Tensor"),
    Bad("maximum_two_arrays", lambda d: F.maximum(np.ones(2), 0.0), DTypeError,
        "maximum: expected at least one Tensor"),
    Bad("where_no_tensor", lambda d: F.where(np.ones(2, bool), np.ones(2), 0.0), DTypeError,
        "where: expected at least one Tensor"),
    Bad("where_int_cond", lambda d: F.where(np.ones((2, 3), np.int64), x23(d), 0.0),
        DTypeError, "where: cond must be boolean, got dtype int64; compare first"),
    Bad("where_cond_string", lambda d: F.where("yes", x23(d), 0.0), DTypeError,
        "where: cond must be an array, a list or a Tensor, got a str"),
    Bad("mul_numpy_on_cl", lambda d: x23(d) * np.ones((2, 3), np.float32), DeviceMismatchError,
        "mul: got a NumPy array (cpu) and a tensor on cl:0; make it a tensor there",
        devices=("cl",)),
    Bad("concat_a_tensor", lambda d: F.concat(x23(d)), DTypeError,
        "concat: xs must be a list or tuple of Tensors, got a Tensor; pass a list such as "
        "[x, y]"),
    Bad("concat_numpy_item", lambda d: F.concat([x23(d), np.ones((2, 3))]), DTypeError,
        "concat: xs[1] must be a Tensor, got a numpy.ndarray"),
    Bad("concat_empty", lambda d: F.concat([]), ValueError, "concat: xs is empty"),
    Bad("concat_dtypes", lambda d: F.concat([x23(d), T((2, 3), d, np.float64)]), DTypeError,
        "concat: xs[1] is float64 but xs[0] is float32"),
    Bad("stack_dtypes", lambda d: F.stack([x23(d), T((2, 3), d, np.float64)]), DTypeError,
        "stack: xs[1] is float64 but xs[0] is float32"),
    Bad("stack_shapes", lambda d: F.stack([x23(d), T((3, 2), d)]), ShapeError,
        "stack: tensor 1 has shape (3, 2) but tensor 0 has (2, 3)"),
    Bad("cast_not_a_dtype", lambda d: F.cast(x23(d), "floaty"), DTypeError,
        "cast: 'floaty' is not a dtype"),
    Bad("to_device_unknown", lambda d: F.to_device(x23(d), "gpu"), DeviceError,
        "to_device: "),  # the rest is the backend's message about devices
    Bad("clip_lo_above_hi", lambda d: F.clip(x23(d), 1.0, -1.0), ValueError,
        "clip: lo must be at most hi, got lo=1.0, hi=-1.0"),
    Bad("clip_lo_string", lambda d: F.clip(x23(d), "0", 1.0), DTypeError,
        "clip: lo must be a real number, got '0'"),
    Bad("leaky_relu_slope_string", lambda d: F.leaky_relu(x23(d), "0.1"), DTypeError,
        "leaky_relu: slope must be a real number"),
    Bad("dropout_ratio_one", lambda d: F.dropout(x23(d), 1.0), ValueError,
        "dropout: ratio must be in [0, 1), got 1.0"),
    Bad("dropout_generator_type", lambda d: F.dropout(x23(d), 0.5, generator=1), DTypeError,
        "dropout: generator must be a labkit Generator, got int"),
    Bad("dropout_generator_device", lambda d: F.dropout(x23(d), 0.5, generator=lk.Generator(
        0, "cpu")), DeviceMismatchError, "dropout: the generator is on cpu but x on cl:0",
        devices=("cl",)),
    # -- axes that wrapped around silently
    Bad("expand_dims_7_on_2d", lambda d: F.expand_dims(x23(d), 7), ShapeError,
        "expand_dims: axis 7 is out of range for a result of 3 dimensions (x.shape=(2, 3)); "
        "use -3 <= axis < 3"),
    Bad("expand_dims_minus_4", lambda d: F.expand_dims(x23(d), -4), ShapeError,
        "expand_dims: axis -4 is out of range"),
    Bad("expand_dims_repeated", lambda d: F.expand_dims(x23(d), (0, -4)), ShapeError,
        "expand_dims: axis (0, -4) names axis 0 twice"),
    Bad("transpose_axis_3_on_2d", lambda d: F.transpose(x23(d), (0, 3)), ShapeError,
        "transpose: axes (0, 3) is not a permutation of the 2 axes of x (x.shape=(2, 3))"),
    Bad("transpose_repeated", lambda d: F.transpose(x23(d), (1, -1)), ShapeError,
        "transpose: axes (1, -1) is not a permutation"),
    Bad("transpose_too_few", lambda d: F.transpose(x23(d), (0,)), ShapeError,
        "transpose: axes (0,) has 1 entries but x has 2 dimensions"),
    Bad("T_method_bad_axes", lambda d: x23(d).transpose(2, 0), ShapeError,
        "transpose: axes (2, 0) is not a permutation"),
    Bad("concat_axis_5", lambda d: F.concat([x23(d), x23(d)], axis=5), ShapeError,
        "concat: axis 5 is out of range for xs[0] of shape (2, 3); use -2 <= axis < 2"),
    Bad("concat_axis_minus_3", lambda d: F.concat([x23(d), x23(d)], axis=-3), ShapeError,
        "concat: axis -3 is out of range"),
    Bad("stack_axis_4", lambda d: F.stack([x23(d), x23(d)], axis=4), ShapeError,
        "stack: axis 4 is out of range for a result of 3 dimensions (xs[0].shape=(2, 3))"),
    Bad("split_axis_2", lambda d: F.split(x23(d), 2, axis=2), ShapeError,
        "split: axis 2 is out of range for x of shape (2, 3)"),
    Bad("unbind_axis_2", lambda d: F.unbind(x23(d), axis=2), ShapeError,
        "unbind: axis 2 is out of range for x of shape (2, 3)"),
    Bad("unbind_numpy", lambda d: F.unbind(np.ones((2, 3))), DTypeError,
        "unbind: x must be a Tensor"),
    Bad("squeeze_axis_3", lambda d: F.squeeze(T((2, 1), d), 3), ShapeError,
        "squeeze: axis 3 is out of range"),
    Bad("squeeze_size_not_1", lambda d: F.squeeze(x23(d), 0), ShapeError,
        "squeeze: axis 0 has size 2, not 1"),
    Bad("sum_axis_2_on_2d", lambda d: F.sum(x23(d), axis=2), ShapeError,
        "sum: axis 2 is out of range for x of shape (2, 3); use -2 <= axis < 2"),
    Bad("sum_repeated", lambda d: F.sum(x23(d), axis=(0, -2)), ShapeError,
        "sum: axis (0, -2) names axis 0 twice (x.shape=(2, 3)); give each axis once"),
    Bad("sum_float_axis", lambda d: F.sum(x23(d), axis=1.0), DTypeError,
        "sum: axis must be an int, got 1.0 (float)"),
    Bad("sum_bool_axis", lambda d: F.sum(x23(d), axis=True), DTypeError,
        "sum: axis must be an int, got True (bool)"),
    Bad("method_sum_axis", lambda d: x23(d).sum(axis=-3), ShapeError, "sum: axis -3"),
    Bad("mean_axis_5", lambda d: F.mean(x23(d), axis=5), ShapeError, "mean: axis 5"),
    Bad("var_axis_minus_3", lambda d: F.var(x23(d), axis=-3), ShapeError, "var: axis -3"),
    Bad("max_axis_2", lambda d: F.max(x23(d), axis=2), ShapeError, "max: axis 2"),
    Bad("min_repeated", lambda d: F.min(x23(d), axis=[1, 1]), ShapeError,
        "min: axis (1, 1) names axis 1 twice"),
    Bad("max_of_nothing", lambda d: F.max(T((0, 3), d)), ShapeError,
        "max: x of shape (0, 3) has no elements"),
    Bad("logsumexp_axis_3", lambda d: F.logsumexp(x23(d), axis=3), ShapeError,
        "logsumexp: axis 3"),
    Bad("softmax_axis_2", lambda d: F.softmax(x23(d), axis=2), ShapeError, "softmax: axis 2"),
    Bad("log_softmax_axis_minus_3", lambda d: F.log_softmax(x23(d), axis=-3), ShapeError,
        "log_softmax: axis -3"),
    Bad("sum_axis_on_0d", lambda d: F.sum(T((), d), axis=0), ShapeError,
        "sum: axis 0 given for a 0-dimensional x; use axis=None"),
    # -- shapes
    Bad("reshape_size", lambda d: F.reshape(x23(d), (4, 2)), ShapeError,
        "reshape: x of shape (2, 3) has 6 elements, which do not fill shape (4, 2)"),
    Bad("reshape_two_minus_ones", lambda d: F.reshape(x23(d), (-1, -1)), ShapeError,
        "reshape: shape (-1, -1) has a negative size (one -1 at most)"),
    Bad("reshape_minus_one_no_fit", lambda d: F.reshape(x23(d), (4, -1)), ShapeError,
        "reshape: x of shape (2, 3) has 6 elements, which do not fill shape (4, -1)"),
    Bad("broadcast_to_incompatible", lambda d: F.broadcast_to(x23(d), (2, 4)), ShapeError,
        "broadcast_to: shapes (2, 3) and (2, 4) do not broadcast (axis -1: 3 against 4)"),
    Bad("broadcast_to_fewer_axes", lambda d: F.broadcast_to(x23(d), (3,)), ShapeError,
        "broadcast_to: x of shape (2, 3) cannot be broadcast to (3,)"),
    Bad("sum_to_incompatible", lambda d: F.sum_to(x23(d), (2, 2)), ShapeError,
        "sum_to: shapes (2, 2) and (2, 3) do not broadcast"),
    Bad("add_no_broadcast", lambda d: x23(d) + T((4,), d), ShapeError,
        "add: shapes (2, 3) and (4,) do not broadcast (axis -1: 3 against 4)"),
    Bad("mul_list_no_broadcast", lambda d: x23(d) * [1.0, 2.0], ShapeError,
        "mul: shapes (2, 3) and (2,) do not broadcast"),
    Bad("where_cond_shape", lambda d: F.where(np.ones(4, bool), x23(d), 0.0), ShapeError,
        "where: shapes (4,) and (2, 3) do not broadcast"),
    Bad("matmul_inner", lambda d: F.matmul(x23(d), x23(d)), ShapeError,
        "matmul: a has 3 columns but b has 2 rows"),
    Bad("matmul_batch", lambda d: F.matmul(T((2, 2, 3), d), T((3, 3, 2), d)), ShapeError,
        "matmul: shapes (2,) and (3,) do not broadcast"),
    Bad("matmul_scalar", lambda d: F.matmul(T((), d), x23(d)), ShapeError,
        "matmul: operands need at least one dimension"),
    Bad("mse_shapes", lambda d: F.mean_squared_error(x23(d), T((3, 2), d)), ShapeError,
        "mean_squared_error: shapes (2, 3) and (3, 2) differ"),
    Bad("sigmoid_ce_shape", lambda d: F.sigmoid_cross_entropy(x23(d), np.zeros((3, 2))),
        ShapeError, "sigmoid_cross_entropy: targets of shape (3, 2) do not match x of shape"),
    Bad("sigmoid_ce_reduce", lambda d: F.sigmoid_cross_entropy(x23(d), np.zeros((2, 3)),
                                                               reduce="avg"),
        ValueError, "sigmoid_cross_entropy: reduce must be one of 'mean', 'sum', 'none'"),
    Bad("pad_negative", lambda d: F.pad(x23(d), -1), ShapeError,
        "pad: pad_width -1 does not fit a tensor of shape (2, 3)"),
    Bad("pad_wrong_count", lambda d: F.pad(x23(d), ((1, 1),) * 3), ShapeError,
        "pad: pad_width ((1, 1), (1, 1), (1, 1)) does not fit"),
    Bad("split_zero_sections", lambda d: F.split(x23(d), 0, axis=1), ValueError,
        "split: the number of sections must be positive, got 0"),
    Bad("split_unequal", lambda d: F.split(x23(d), 2, axis=1), ShapeError,
        "split: axis 1 of size 3 does not divide into 2 equal sections"),
    # -- layers
    Bad("linear_features", lambda d: F.linear(T((32, 783), d), T((10, 784), d)), ShapeError,
        "linear: x has 783 features but W expects 784; x.shape=(32, 783), W.shape=(10, 784)"),
    Bad("linear_dtypes", lambda d: F.linear(x23(d), T((4, 3), d, np.float64)), DTypeError,
        "linear: W is float64 but x is float32; cast one with .astype(...)"),
    Bad("linear_bias_shape", lambda d: F.linear(x23(d), T((4, 3), d), T((3,), d)), ShapeError,
        "linear: b must have shape (4,), got b.shape=(3,)"),
    Bad("linear_0d", lambda d: F.linear(T((), d), T((4, 1), d)), ShapeError,
        "linear: x must have at least one dimension"),
    Bad("conv2d_channels", lambda d: F.conv2d(img(d), T((3, 3, 3, 3), d)), ShapeError,
        "conv2d: x has 2 channels but W expects 3 per group"),
    Bad("conv2d_stride_0", lambda d: F.conv2d(img(d), T((3, 2, 3, 3), d), stride=0),
        ValueError, "conv2d: stride must be at least 1, got 0"),
    Bad("conv2d_pad_negative", lambda d: F.conv2d(img(d), T((3, 2, 3, 3), d), pad=-1),
        ValueError, "conv2d: pad must be at least 0, got -1"),
    Bad("conv2d_pad_triple", lambda d: F.conv2d(img(d), T((3, 2, 3, 3), d), pad=(1, 1, 1)),
        ValueError, "conv2d: pad must be an int or a pair of ints, got (1, 1, 1)"),
    Bad("conv2d_groups_0", lambda d: F.conv2d(img(d), T((3, 2, 3, 3), d), groups=0),
        ValueError, "conv2d: groups must be at least 1, got 0"),
    Bad("conv2d_dtypes", lambda d: F.conv2d(img(d), T((3, 2, 3, 3), d, np.float64)),
        DTypeError, "conv2d: W is float64 but x is float32"),
    Bad("conv2d_window", lambda d: F.conv2d(img(d), T((3, 2, 5, 5), d)), ShapeError,
        "does not fit an input of 4x4"),
    Bad("conv_transpose2d_bias", lambda d: F.conv_transpose2d(img(d), T((2, 3, 2, 2), d),
                                                              T((2,), d)),
        ShapeError, "conv_transpose2d: b must have shape (3,), got (2,)"),
    Bad("conv_transpose2d_output_padding",
        lambda d: F.conv_transpose2d(img(d), T((2, 3, 2, 2), d), stride=2, output_padding=2),
        ValueError, "conv_transpose2d: output_padding (2, 2) must be smaller than the stride"),
    Bad("max_pool2d_ksize_0", lambda d: F.max_pool2d(img(d), 0), ValueError,
        "max_pool2d: ksize must be at least 1, got 0"),
    Bad("max_pool2d_3d", lambda d: F.max_pool2d(T((2, 4, 4), d), 2), ShapeError,
        "max_pool2d: x must be (N, C, H, W), got shape (2, 4, 4)"),
    Bad("avg_pool2d_pad", lambda d: F.avg_pool2d(img(d), 2, pad=2), ShapeError,
        "avg_pool2d: padding (2, 2) must be at most half the window (2, 2)"),
    Bad("avg_pool2d_stride_negative", lambda d: F.avg_pool2d(img(d), 2, stride=-1), ValueError,
        "avg_pool2d: stride must be at least 1, got -1"),
    Bad("batchnorm_gamma_shape",
        lambda d: F.batch_normalization(T((2, 3), d), T((2,), d), T((3,), d)), ShapeError,
        "batch_normalization: gamma and beta must have shape (3,)"),
    Bad("batchnorm_one_running_stat",
        lambda d: F.batch_normalization(T((2, 3), d), T((3,), d), T((3,), d),
                                        running_mean=T((3,), d).data), ValueError,
        "batch_normalization: give both running_mean and running_var, or neither"),
    Bad("batchnorm_momentum", lambda d: F.batch_normalization(T((2, 3), d), T((3,), d),
                                                              T((3,), d), momentum=2),
        ValueError, "batch_normalization: momentum must be in [0, 1], got 2"),
    Bad("batchnorm_running_shape",
        lambda d: F.batch_normalization(T((2, 3), d), T((3,), d), T((3,), d),
                                        T((4,), d).data, T((4,), d).data), ShapeError,
        "batch_normalization: running_mean must have shape (3,)"),
    Bad("layernorm_beta_shape", lambda d: F.layer_normalization(x23(d), None, T((2,), d)),
        ShapeError, "layer_normalization: beta must have shape (3,) for x of shape (2, 3)"),
    Bad("layernorm_gamma_dtype",
        lambda d: F.layer_normalization(x23(d), T((3,), d, np.float64)), DTypeError,
        "layer_normalization: gamma is float64 but x is float32"),
    Bad("lstm_3d", lambda d: F.lstm(T((2, 1), d), T((2, 1, 4), d)), ShapeError,
        "lstm: x must be (N, 4H), got x.shape=(2, 1, 4)"),
    Bad("lstm_c_prev_shape", lambda d: F.lstm(T((2, 2), d), T((2, 4), d)), ShapeError,
        "lstm: x must be (N, 4H) and c_prev (N, H)"),
    # -- labels and ids (were: a label >= C or < 0 contributed 0 but counted in the mean)
    Bad("sce_label_too_large", lambda d: F.softmax_cross_entropy(LOGITS(d), [0, 1, 5]),
        IndexError, "softmax_cross_entropy: labels[2] is 5, outside [0, 5) for x with 5 "
        "classes; every label must be in [0, 5) or ignore_label=-1"),
    Bad("sce_label_negative", lambda d: F.softmax_cross_entropy(LOGITS(d), np.array([0, -2, 1])),
        IndexError, "softmax_cross_entropy: labels[1] is -2"),
    Bad("sce_ignore_none", lambda d: F.softmax_cross_entropy(LOGITS(d), [0, -1, 1],
                                                             ignore_label=None),
        IndexError, "softmax_cross_entropy: labels[1] is -1, outside [0, 5)"),
    Bad("sce_device_labels_too_large",
        lambda d: F.softmax_cross_entropy(LOGITS(d), lk.tensor(np.array([7, 1, 2]), device=d)),
        IndexError, "softmax_cross_entropy: labels[0] is 7"),
    Bad("sce_device_array_labels",
        lambda d: F.softmax_cross_entropy(LOGITS(d), lk.tensor(np.array([0, 1, 9]),
                                                               device=d).data),
        IndexError, "softmax_cross_entropy: labels[2] is 9"),
    Bad("sce_labels_2d", lambda d: F.softmax_cross_entropy(T((2, 3, 2), d),
                                                           np.array([[0, 1], [3, 0]])),
        IndexError, "softmax_cross_entropy: labels[1, 0] is 3, outside [0, 3)"),
    Bad("sce_float_labels", lambda d: F.softmax_cross_entropy(LOGITS(d), [0.0, 1.0, 2.0]),
        DTypeError, "softmax_cross_entropy: labels must be integers, got dtype float64"),
    Bad("sce_labels_shape", lambda d: F.softmax_cross_entropy(LOGITS(d), [0, 1]), ShapeError,
        "softmax_cross_entropy: labels of shape (2,) do not match x of shape (3, 5)"),
    Bad("sce_reduce", lambda d: F.softmax_cross_entropy(LOGITS(d), [0, 1, 2], reduce="avg"),
        ValueError, "softmax_cross_entropy: reduce must be one of 'mean', 'sum', 'none', got "
        "'avg'"),
    Bad("sce_ignore_label_float", lambda d: F.softmax_cross_entropy(LOGITS(d), [0, 1, 2],
                                                                    ignore_label=-1.5),
        DTypeError, "softmax_cross_entropy: ignore_label must be an int"),
    Bad("sce_labels_other_device",
        lambda d: F.softmax_cross_entropy(LOGITS(d), lk.tensor([0, 1, 2], device="cl")),
        DeviceMismatchError, "softmax_cross_entropy: labels is on cl:0 but the op's tensors are on "
        "cpu",
        devices=("cpu",)),
    Bad("accuracy_label_too_large", lambda d: F.accuracy(LOGITS(d), [0, 1, 5]), IndexError,
        "accuracy: t[2] is 5, outside [0, 5)"),
    Bad("embed_id_too_large", lambda d: F.embed_id(np.array([[1, 10]]), T((10, 3), d)),
        IndexError, "embed_id: ids[0, 1] is 10, outside [0, 10) for W of 10 rows"),
    Bad("embed_id_negative", lambda d: F.embed_id([3, -1], T((10, 3), d)), IndexError,
        "embed_id: ids[1] is -1"),
    Bad("embed_id_device_ids", lambda d: F.embed_id(lk.tensor([3, 12], device=d), T((10, 3), d)),
        IndexError, "embed_id: ids[1] is 12"),
    Bad("embed_id_float_ids", lambda d: F.embed_id([1.0], T((10, 3), d)), DTypeError,
        "embed_id: ids must be integers, got dtype float64"),
    Bad("embed_id_W_1d", lambda d: F.embed_id([1], T((10,), d)), ShapeError,
        "embed_id: W must be 2-D (vocab, dim), got W.shape=(10,)"),
]


@pytest.fixture
def applied(monkeypatch):
    """The ops applied while the test runs (a bad call must fail before the first)."""
    calls = []
    original = Function.apply

    def counting(self, inputs):
        calls.append(self.name)
        return original(self, inputs)

    monkeypatch.setattr(Function, "apply", counting)
    return calls


@pytest.mark.parametrize("row,device", [(r, d) for r in ROWS for d in ("cpu", "cl")
                                        if d in r.devices], ids=lambda v: repr(v))
def test_bad_call_is_refused_before_computing(row, device, applied):
    dev = lk.device(device)
    with pytest.raises(row.error) as e:
        row.call(dev)
    assert row.message in str(e.value), f"{row.name}: {e.value}"
    assert applied == [], f"{row.name}: ops ran before the error: {applied}"


def test_errors_are_labkit_errors_of_the_builtin_kind():
    # a wrong type is a TypeError, a wrong shape a ValueError, and both are LabkitErrors:
    # `except TypeError` in user code and `except lk.LabkitError` both see them
    assert issubclass(DTypeError, TypeError) and issubclass(DTypeError, LabkitError)
    assert issubclass(ShapeError, ValueError) and issubclass(ShapeError, LabkitError)
    assert len(ROWS) >= 100
    assert len({r.name for r in ROWS}) == len(ROWS)
    # every public function has at least one row (the checker is used everywhere)
    tested = " ".join(r.message.split(":")[0] for r in ROWS)
    untested = [n for n in F.__all__ if n not in tested.split()]
    assert untested == [], f"no bad-call row for {untested}"


def test_labels_on_the_device_are_checked_only_while_the_switch_is_on(monkeypatch):
    x = T((3, 5), "cl")
    bad = lk.tensor(np.array([0, 1, 7]), device="cl")
    monkeypatch.setenv("LABKIT_CHECK_INDICES", "off")
    F.softmax_cross_entropy(x, bad)  # no device-to-host read: not checked
    monkeypatch.setenv("LABKIT_CHECK_INDICES", "on")
    with pytest.raises(IndexError, match=r"labels\[2\] is 7"):
        F.softmax_cross_entropy(x, bad)
    # host labels cost no read: they are checked whatever the switch says
    monkeypatch.setenv("LABKIT_CHECK_INDICES", "off")
    with pytest.raises(IndexError, match=r"labels\[2\] is 7"):
        F.softmax_cross_entropy(x, np.array([0, 1, 7]))


def test_ignored_labels_do_not_count_in_the_mean(dev):
    # the documented meaning of ignore_label, which the range check must leave alone
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    labels = np.array([2, -1, 0, -1])
    got = F.softmax_cross_entropy(lk.tensor(x, device=dev), labels).item()
    logp = x - np.log(np.exp(x).sum(1, keepdims=True))
    assert got == pytest.approx(-(logp[0, 2] + logp[2, 0]) / 2, rel=1e-5)
    got7 = F.softmax_cross_entropy(lk.tensor(x, device=dev), np.array([2, 7, 0, 7]),
                                   ignore_label=7).item()
    assert got7 == pytest.approx(got, rel=1e-6)


def test_constants_follow_one_rule(dev):
    x = T((2, 3), dev)
    # numbers and lists are values: they go to the tensor's device, floats in its dtype
    for y in (x + 1.5, x + [1.0, 2.0, 3.0], F.maximum(x, [[0.5] * 3] * 2), x * np.float32(2)):
        assert y.device == dev and y.dtype == np.float32
    np.testing.assert_allclose((x + [1.0, 2.0, 3.0]).numpy(), x.numpy() + [1, 2, 3])
    # non-differentiable data may come from the host whatever the device
    assert F.where(np.array([True, False, True]), x, 0.0).device == dev
    assert F.embed_id([[1, 0]], T((2, 3), dev)).shape == (1, 2, 3)


def test_max_and_min_over_non_empty_axes_of_an_empty_array(dev):
    """NumPy reduces (0, 3) along axis 1 to shape (0,); only a reduction over an empty axis
    (or over all of an empty array) has no value."""
    x = lk.tensor(np.zeros((0, 3), np.float32), device=dev)
    for f in (F.max, F.min):
        assert f(x, axis=1).shape == (0,)
        with pytest.raises(ShapeError, match="no elements along axis 0"):
            f(x, axis=0)
        with pytest.raises(ShapeError, match="no elements"):
            f(x)


@pytest.mark.parametrize("devname", ["cpu", "cl"])
@pytest.mark.parametrize("dtype", [">f4", ">f8", ">i8", ">u2"])
def test_big_endian_data_becomes_the_same_numbers_in_native_order(devname, dtype):
    """A big-endian array (from a file written elsewhere) is taken as its values in this
    machine's byte order on both devices (the cpu kept '>f4', which cl refused)."""
    a = np.arange(5).astype(dtype)
    t = lk.tensor(a, device=devname)
    assert t.dtype == a.dtype.newbyteorder("=") and t.dtype.isnative
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal((t + t).numpy(), a.astype(t.dtype) * 2)
