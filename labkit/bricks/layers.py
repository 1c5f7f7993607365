"""The bricks: Linear, Conv2D, ConvTranspose2D, MLP, Sequence, Embedding, LSTM, GRU,
BatchNorm, LayerNorm, Dropout, Flatten and activation bricks."""

from __future__ import annotations

import numpy as np

from .. import functions as F
from .. import roles
from ..autograd import trace as _trace
from ..autograd.tensor import Tensor
from ..autograd.trace import host
from ..backend import zeros
from ..backend.random import Generator
from ..compile.scan import scan
from ..errors import ShapeError
from .base import Brick, unique_name
from .initializers import Constant, GlorotUniform, HeNormal, Orthogonal


class Linear(Brick):
    """``y = x @ W.T + b`` with W of shape (out, in); ``in_size=None`` is resolved on the first
    call.

    Examples
    --------
    >>> import numpy as np, labkit as lk, labkit.bricks as B
    >>> lin = B.Linear(None, 3)
    >>> lin(lk.tensor(np.ones((2, 5), np.float32))).shape
    (2, 3)
    >>> sorted(lin.params())
    ['/linear.W', '/linear.b']
    """

    def __init__(self, in_size, out_size, bias=True, weight_init=None, bias_init=None,
                 name=None, seed=None):
        super().__init__(name, seed)
        _counts(self, 0, out_size=out_size, **({} if in_size is None else {"in_size": in_size}))
        self.in_size, self.out_size, self.use_bias = in_size, out_size, bias
        self.weight_init = weight_init or GlorotUniform()
        self.bias_init = bias_init or Constant(0.0)
        if in_size is not None:
            self._create(in_size)

    def _create(self, in_size):
        self.in_size = in_size
        self.add_param("W", (self.out_size, in_size), self.weight_init, roles.WEIGHT)
        if self.use_bias:
            self.add_param("b", (self.out_size,), self.bias_init, roles.BIAS)
        self.built = True

    def build(self, x):
        _rank(self, x, (1,), "(..., features): at least one dimension")
        self._create(x.shape[-1])

    def forward(self, x):
        return F.linear(x, self.W, self.b if self.use_bias else None)


class Conv2D(Brick):
    """2-D convolution, NCHW; W (out, in/groups, kh, kw) has role FILTER."""

    def __init__(self, in_channels, out_channels, ksize, stride=1, pad=0, dilation=1, groups=1,
                 bias=True, weight_init=None, name=None, seed=None):
        super().__init__(name, seed)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.ksize = (ksize, ksize) if isinstance(ksize, int) else tuple(ksize)
        _counts(self, 1, out_channels=out_channels, ksize=self.ksize, groups=groups,
                **({} if in_channels is None else {"in_channels": in_channels}))
        self.stride, self.pad, self.dilation, self.groups = stride, pad, dilation, groups
        self.use_bias = bias
        self.weight_init = weight_init or HeNormal()
        if in_channels is not None:
            self._create(in_channels)

    def _create(self, c):
        if c % self.groups:
            raise ShapeError(f"{self.path}: {c} input channels do not divide into "
                             f"{self.groups} groups")
        self.in_channels = c
        self.add_param("W", (self.out_channels, c // self.groups) + self.ksize,
                       self.weight_init, roles.FILTER)
        if self.use_bias:
            self.add_param("b", (self.out_channels,), Constant(0.0), roles.BIAS)
        self.built = True

    def build(self, x):
        _rank(self, x, 4, "(N, C, H, W)")
        self._create(x.shape[1])

    def forward(self, x):
        return F.conv2d(x, self.W, self.b if self.use_bias else None, self.stride, self.pad,
                        self.dilation, self.groups)


class ConvTranspose2D(Brick):
    """Transposed convolution; W (in, out, kh, kw) has role FILTER."""

    def __init__(self, in_channels, out_channels, ksize, stride=1, pad=0, output_padding=0,
                 bias=True, weight_init=None, name=None, seed=None):
        super().__init__(name, seed)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.ksize = (ksize, ksize) if isinstance(ksize, int) else tuple(ksize)
        _counts(self, 1, out_channels=out_channels, ksize=self.ksize,
                **({} if in_channels is None else {"in_channels": in_channels}))
        self.stride, self.pad, self.output_padding = stride, pad, output_padding
        self.use_bias = bias
        self.weight_init = weight_init or GlorotUniform()
        if in_channels is not None:
            self._create(in_channels)

    def _create(self, c):
        self.in_channels = c
        self.add_param("W", (c, self.out_channels) + self.ksize, self.weight_init, roles.FILTER)
        if self.use_bias:
            self.add_param("b", (self.out_channels,), Constant(0.0), roles.BIAS)
        self.built = True

    def build(self, x):
        _rank(self, x, 4, "(N, C, H, W)")
        self._create(x.shape[1])

    def forward(self, x):
        return F.conv_transpose2d(x, self.W, self.b if self.use_bias else None, self.stride,
                                  self.pad, output_padding=self.output_padding)


def _counts(brick, low, **values):
    """Each of ``values`` an int >= ``low`` (a size, a kernel size, a stride), or a
    ShapeError naming it (a raw ZeroDivisionError or NumPy error came later)."""
    for what, v in values.items():
        for x in (v if isinstance(v, tuple) else (v,)):
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < low:
                raise ShapeError(f"{type(brick).__name__}: {what} must be an integer >= {low}, "
                                 f"got {v!r}")


def _rank(brick, x, ndim, what):
    """The first call's input: a Tensor of ``ndim`` dimensions (at least, for ``ndim`` an
    int with ``+``), else a ShapeError naming the expected layout."""
    n = getattr(x, "ndim", None)
    if n is not None and (n < ndim[0] if isinstance(ndim, tuple) else n != ndim):
        raise ShapeError(f"{brick.path}: x must be {what}, got shape {x.shape}")


class _Layers(list):
    """``Sequence.layers``: a list whose changes (append, insert, a layer replaced or removed)
    register and drop the children, so a layer appended is trained and saved (it was used in
    forward, but not registered)."""

    def __init__(self, owner):
        super().__init__()
        self._owner = owner


def _changing(name):
    def method(self, *args, **kwargs):
        out = getattr(list, name)(self, *args, **kwargs)
        owner = self.__dict__.get("_owner")
        # NOTE: not while copy.deepcopy rebuilds the list, before its Sequence has it (the
        # copy's children are copied with it): deepcopy of any Sequence raised
        if owner is not None and owner.__dict__.get("layers") is self:
            owner._sync()
        return self if name in ("__iadd__", "__imul__") else out
    method.__name__ = name
    return method


for _name in ("append", "extend", "insert", "pop", "remove", "clear", "reverse", "sort",
              "__setitem__", "__delitem__", "__iadd__", "__imul__"):
    setattr(_Layers, _name, _changing(_name))
del _name


class Sequence(Brick):
    """Apply bricks (or plain functions) in order; children are named ``<class>_<i>``."""

    def __init__(self, *layers, name=None):
        super().__init__(name)
        object.__setattr__(self, "layers", _Layers(self))
        self.layers.extend(layers)
        self.built = True

    def _sync(self):
        """The children after ``layers`` changed: a brick no longer in it is dropped, a new
        one registered as ``<class>_<its index>`` (made unique); the others keep their
        names (and so their parameters' paths)."""
        # NOTE: a compiled step sees the change through layer_tuple ("its layers changed"),
        # not through the version add_child moves on (a vaguer reason)
        version = self.__dict__.get("_version")
        now = [x for x in self.layers if isinstance(x, Brick)]
        for name, c in list(self._children.items()):
            if not any(c is x for x in now):
                del self._children[name]
                self.__dict__.pop(name, None)
                if c._parent is self:
                    c._parent = None
        for i, x in enumerate(self.layers):
            if isinstance(x, Brick) and not self._is_child(x):
                self.add_child(x, unique_name(f"{type(x).__name__.lower()}_{i}", self._children))
        if version is None:
            self.__dict__.pop("_version", None)
        else:
            object.__setattr__(self, "_version", version)

    @property
    def layer_tuple(self) -> tuple:
        """The layers as they are now (what a compiled step traced with them compares)."""
        return tuple(self.layers)

    def forward(self, x):
        tr = _trace.tracer()
        if tr is not None:  # NOTE: self.layers changed in place (appended, replaced): retrace
            tr.depends(self, "layer_tuple")
        for layer in self.layers:
            x = layer(x)
        return x


class MLP(Brick):
    """Linear layers with ``activation`` between them (not after the last).

    ``MLP([784, 256, 10])``; ``MLP([None, 256, 10])`` resolves the input size on the first call.
    """

    def __init__(self, sizes, activation=F.relu, weight_init=None, name=None, seed=None):
        super().__init__(name, seed)
        if len(sizes) < 2:
            raise ValueError(f"MLP: need at least two sizes (in, out), got {sizes}")
        if sizes[0] is not None:
            _counts(self, 0, **{"sizes[0]": sizes[0]})
        for i, n in enumerate(sizes[1:], 1):  # NOTE: only the first may be None (resolved)
            _counts(self, 1, **{f"sizes[{i}]": n})
        self.activation = activation
        self.linears = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            self.linears.append(self.add_child(Linear(a, b, weight_init=weight_init),
                                               f"linear_{i}"))
        self.built = True

    def forward(self, x):
        for i, lin in enumerate(self.linears):
            x = lin(x)
            if i < len(self.linears) - 1 and self.activation is not None:
                x = self.activation(x)
        return x


class Embedding(Brick):
    def __init__(self, vocab_size, dim, weight_init=None, name=None, seed=None):
        super().__init__(name, seed)
        from .initializers import Normal

        self.add_param("W", (vocab_size, dim), weight_init or Normal(0, 1.0), roles.WEIGHT)
        self.built = True

    def forward(self, ids):
        return F.embed_id(ids, self.W)


def _mask_step(m, new, old):
    """Keep ``old`` where the sequence has ended (``m``, this step's mask (N,), is 0)."""
    m = F.reshape(m, (m.shape[0], 1))
    return new * m + old * (1.0 - m)


class _Recurrent(Brick):
    """Shared by LSTM and GRU: input weights W (G*H, F), recurrent U (G*H, H), bias b, and a
    zero initial state on the input's device."""

    gates = 1

    def __init__(self, in_size, hidden_size, name=None, seed=None):
        super().__init__(name, seed)
        _counts(self, 1, hidden_size=hidden_size,
                **({} if in_size is None else {"in_size": in_size}))
        self.in_size, self.hidden_size = in_size, hidden_size
        if in_size is not None:
            self._create(in_size)

    def _create(self, f):
        gh = self.gates * self.hidden_size
        self.in_size = f
        self.add_param("W", (gh, f), GlorotUniform(), roles.WEIGHT)
        self.add_param("U", (gh, self.hidden_size), Orthogonal(), roles.WEIGHT)
        self.add_param("b", (gh,), Constant(0.0), roles.BIAS)
        self.built = True

    def build(self, x, mask=None):
        _rank(self, x, 3, "(N, T, F): a batch of sequences")
        self._create(x.shape[-1])

    def _zeros(self, x):
        return Tensor(zeros((x.shape[0], self.hidden_size), x.dtype, x.data))


class LSTM(_Recurrent):
    """An LSTM over whole sequences x (N, T, F) with an optional mask (N, T) for padded
    batches; returns the hidden states (N, T, H). Gates follow F.lstm (a, i, f, o)."""

    gates = 4

    def forward(self, x, mask=None):
        z0 = self._zeros(x)
        # the input projection of all time steps at once, then the loop as one node (lk.scan:
        # each step's slice in one unbind, each step's gradient in one stack)
        pre = F.linear(x, self.W, self.b)
        UT = F.transpose(self.U)

        def step(carry, p, *m):
            c, h = carry
            c_new, h_new = F.lstm(c, p + F.matmul(h, UT))
            if m:
                c_new, h_new = _mask_step(m[0], c_new, c), _mask_step(m[0], h_new, h)
            return (c_new, h_new), h_new

        seqs = (pre,) if mask is None else (pre, _as_mask(mask, x))
        _, hs = scan(step, seqs, (z0, z0), axis=1, params=(UT,))
        return hs


class GRU(_Recurrent):
    """A GRU over whole sequences x (N, T, F), optional mask (N, T); returns (N, T, H).

    Gates r, z, n in that order (W and U stacked as (3H, F) and (3H, H)), one bias ``b`` on
    the input side: n = tanh(x Wn + bn + r * (h Un)), with no recurrent bias inside r * (.)
    (PyTorch and cuDNN have one, b_hn: to port their weights, add b_ih and b_hh for r and z;
    b_hn has no place here). z keeps the old state: h' = (1 - z) n + z h."""

    gates = 3

    def forward(self, x, mask=None):
        pre = F.linear(x, self.W, self.b)  # see LSTM.forward
        Ur, Uz, Un = (F.transpose(u) for u in F.split(self.U, 3, axis=0))

        def step(h, p, *m):
            xr, xz, xn = F.split(p, 3, axis=1)
            r = F.sigmoid(xr + F.matmul(h, Ur))
            zg = F.sigmoid(xz + F.matmul(h, Uz))
            nn = F.tanh(xn + r * F.matmul(h, Un))
            new = (1.0 - zg) * nn + zg * h
            new = _mask_step(m[0], new, h) if m else new
            return new, new

        seqs = (pre,) if mask is None else (pre, _as_mask(mask, x))
        _, hs = scan(step, seqs, self._zeros(x), axis=1, params=(Ur, Uz, Un))
        return hs


def _as_mask(mask, x):
    d = mask.data if isinstance(mask, Tensor) else np.asarray(mask)
    if tuple(d.shape) != x.shape[:2]:
        raise ShapeError(f"mask of shape {tuple(d.shape)} does not match x of shape {x.shape}; "
                         "expected (N, T)")
    if isinstance(mask, Tensor) and mask.dtype == x.dtype:
        return mask
    # NOTE: host: a compiled step converts (and uploads) each call's mask again
    rt = None if x.xp is np else x.data.rt
    dt = x.dtype  # NOTE: the closure holds values, not x (a new tensor at each call)
    return Tensor(host(lambda a: _mask_array(a, dt, rt), d, name="mask"))


def _mask_array(d, dtype, rt):
    d = d.astype(dtype)
    if rt is not None and isinstance(d, np.ndarray):
        from ..backend import opencl

        d = opencl.asarray(d, device=rt)
    return d


class BatchNorm(Brick):
    """Batch normalization over channel axis 1, with running statistics (buffers)."""

    NONNEGATIVE_BUFFERS = ("running_var",)

    def __init__(self, size=None, momentum=0.1, eps=1e-5, name=None):
        super().__init__(name)
        self.size, self.momentum, self.eps = size, momentum, eps
        if size is not None:
            self._create(size)

    def _create(self, c):
        self.size = c
        self.add_param("gamma", (c,), Constant(1.0), roles.WEIGHT)
        self.add_param("beta", (c,), Constant(0.0), roles.BIAS)
        self.register_buffer("running_mean", np.zeros(c, np.float32))
        self.register_buffer("running_var", np.ones(c, np.float32))
        self.built = True

    def build(self, x):
        _rank(self, x, (2,), "(N, C, ...): at least two dimensions")
        self._create(x.shape[1])

    def forward(self, x):
        return F.batch_normalization(x, self.gamma, self.beta, self.running_mean,
                                     self.running_var, training=self.training,
                                     momentum=self.momentum, eps=self.eps)


class LayerNorm(Brick):
    def __init__(self, size=None, eps=1e-5, name=None):
        super().__init__(name)
        self.size, self.eps = size, eps
        if size is not None:
            self._create(size)

    def _create(self, n):
        self.size = n
        self.add_param("gamma", (n,), Constant(1.0), roles.WEIGHT)
        self.add_param("beta", (n,), Constant(0.0), roles.BIAS)
        self.built = True

    def build(self, x):
        self._create(x.shape[-1])

    def forward(self, x):
        return F.layer_normalization(x, self.gamma, self.beta, self.eps)


class Dropout(Brick):
    """Dropout with its own counter-based generator, seeded by ``seed``.

    ``seed=None`` derives the seed from ``lk.bricks.set_seed`` like parameter initialization, so
    two Dropout bricks draw different masks.

    NOTE: the generator's state (``brick.generator.state_dict()``, two integers) is not part of
    the brick's ``state_dict()`` of arrays; checkpoints save every brick's generators beside."""

    def __init__(self, ratio=0.5, seed=None, name=None):
        super().__init__(name, seed=seed)
        self.ratio = ratio
        self.generator = Generator(self.seed, "cpu")
        self.built = True

    def forward(self, x):
        if self.generator.device != x.device:
            # the counter carries over: moving a model does not replay old masks
            self.generator.device = x.device
        return F.dropout(x, self.ratio, training=self.training, generator=self.generator)


class Flatten(Brick):
    def __init__(self, name=None):
        super().__init__(name)
        self.built = True

    def forward(self, x):
        return F.flatten(x)


class Activation(Brick):
    fn = None

    def __init__(self, name=None):
        super().__init__(name)
        self.built = True

    def forward(self, x):
        return type(self).fn(x)


class ReLU(Activation):
    fn = staticmethod(F.relu)


class Tanh(Activation):
    fn = staticmethod(F.tanh)


class Sigmoid(Activation):
    fn = staticmethod(F.sigmoid)


class GELU(Activation):
    fn = staticmethod(F.gelu)


class Softmax(Activation):
    fn = staticmethod(F.softmax)
