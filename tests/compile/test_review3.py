"""Third review: what the one-piece, rows and gather passes must leave alone (results kept in
replay buffers, views, in-place changes, values that leave the step), each case found by a
reviewer's probe, compiled against eager."""

import numpy as np

import labkit as lk
import labkit.functions as F
import labkit.optimizers as O


def _stable(compiled, make_args, want, calls=5):
    """Every call's result still equal to its own eager value after the later calls (a
    result left in a buffer the next replay writes would change)."""
    rng = np.random.default_rng(0)
    args = [make_args(rng) for _ in range(calls)]
    outs = [compiled(*a) for a in args]
    for a, o in zip(args, outs):
        np.testing.assert_allclose(o.numpy(), want(*a), rtol=1e-5, atol=1e-6)


def test_a_view_of_a_stacks_slice_is_not_left_in_a_buffer(dev):
    def f(x):
        return F.reshape(F.stack([F.tanh(xt) for xt in F.unbind(x, axis=0)])[1], (-1,))
    _stable(lk.compile(f), lambda r: (lk.tensor(r.standard_normal((3, 2, 4)).astype(
        np.float32), device=dev),), lambda x: np.tanh(x.numpy()[1]).reshape(-1))


def test_a_gradient_that_views_the_piece_is_not_left_in_a_buffer(dev):
    ps = [lk.tensor(np.full(8, k, np.float32), device=dev, requires_grad=True) for k in range(3)]

    def f(x):
        for p in ps:
            p.grad = None
        y = F.stack([F.reshape(p, (2, 4)) for p in ps])[1]
        (y * x).sum().backward()
        return ps[1].grad
    _stable(lk.compile(f), lambda r: (lk.tensor(r.standard_normal((2, 4)).astype(np.float32),
                                                device=dev),), lambda x: x.numpy().reshape(-1))


def test_a_view_of_a_transposed_sum_is_not_left_in_a_buffer(dev):
    def f(a, b, c, d):
        return F.transpose(F.matmul(a, b) + F.matmul(c, d))[1]

    def make(r):
        return tuple(lk.tensor(r.standard_normal(s).astype(np.float32), device=dev)
                     for s in ((6, 4), (4, 5), (6, 4), (4, 5)))
    _stable(lk.compile(f), make, lambda a, b, c, d: (
        a.numpy() @ b.numpy() + c.numpy() @ d.numpy()).T[1])


def test_a_transpose_of_a_product_of_a_transposed_product(dev):
    """The inner transpose is rewritten too: the outer product must not read its input,
    which nothing makes any more (a NameError in the replay)."""
    def f(a, b, c):
        return F.transpose(F.matmul(F.transpose(F.matmul(a, b)), c)) * 1.0

    def make(r):
        return tuple(lk.tensor(r.standard_normal(s).astype(np.float32), device=dev)
                     for s in ((4, 3), (3, 5), (4, 6)))
    _stable(lk.compile(f), make,
            lambda a, b, c: ((a.numpy() @ b.numpy()).T @ c.numpy()).T)


def _updated_rows(dev, compiled):
    W = lk.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=dev,
                  requires_grad=True)
    opt = O.SGD(0.5).setup({"W": W})

    def step(x):
        opt.zero_grad()
        y = F.stack([W[0], W[1], W[2]])[1]  # NOTE: eagerly a copy of row 1 before the update
        (y * x).sum().backward()
        opt.update()
        return y
    f = lk.compile(step) if compiled else step
    return [f(lk.tensor(np.full(4, i, np.float32), device=dev)).numpy() for i in range(4)]


def test_a_slice_of_a_stack_of_a_parameters_rows_is_taken_before_its_update(dev):
    for want, got in zip(_updated_rows(dev, False), _updated_rows(dev, True)):
        np.testing.assert_array_equal(got, want)


def test_a_returned_slice_does_not_view_the_argument(dev):
    def f(x):
        return F.stack(F.unbind(x, axis=1), axis=1)[:, 2]
    g = lk.compile(f)
    for _ in range(3):
        t = lk.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=dev)
        y = g(t)
    t.data[...] = -1  # NOTE: the caller reuses its batch's array
    np.testing.assert_array_equal(y.numpy(), [2.0, 6.0, 10.0])


def test_a_stack_changed_in_place_after_its_slice(dev):
    def f(x):
        out = F.stack([F.tanh(xt) for xt in F.unbind(x)])
        y = out[1]

        def bump(a):
            a += 1.0
        lk.compile.host(bump, out.data, effect=True, mutates=(out.data,))
        return y * 1.0
    x = np.zeros((3, 2), np.float32)
    want = f(lk.tensor(x, device=dev)).numpy()
    g = lk.compile(f)
    for _ in range(3):
        got = g(lk.tensor(x, device=dev)).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, [1.0, 1.0])


def test_two_parameters_keep_gradients_of_their_own(dev):
    ps = [lk.tensor(np.full(4, k, np.float32), device=dev, requires_grad=True) for k in range(3)]
    q = lk.tensor(np.ones(4, np.float32), device=dev, requires_grad=True)

    def f(x):
        for p in ps + [q]:
            p.grad = None
        ((F.stack(ps)[2] * x).sum() + ((ps[1] + q) * x).sum()).backward()
        return ps[1].grad, q.grad
    g = lk.compile(f)
    for _ in range(3):
        a, b = g(lk.tensor(np.ones(4, np.float32), device=dev))
    a.data[...] = 0
    np.testing.assert_array_equal(b.numpy(), np.ones(4))


def test_gathered_products_of_a_parameters_rows_read_before_its_update(dev):
    def run(compiled):
        W = lk.tensor(np.linspace(-1, 1, 30, dtype=np.float32).reshape(6, 5), device=dev,
                      requires_grad=True)
        opt = O.SGD(0.1).setup({"W": W})

        def step(a1, a2, a3):
            opt.zero_grad()
            p1 = F.matmul(F.transpose(a1), W[0:2])
            p2 = F.matmul(F.transpose(a2), W[2:4])
            p3 = F.matmul(F.transpose(a3), W[4:6])
            s = p1 + p2
            (W * W).sum().backward()
            opt.update()
            return s + p3
        f = lk.compile(step) if compiled else step
        rng = np.random.default_rng(1)
        A = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3)]
        return [f(*[lk.tensor(a, device=dev) for a in A]).numpy() for _ in range(4)]
    for want, got in zip(run(False), run(True)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# ---- second review: a reshape that copied when traced is a view after a pass ---------------


def test_a_reshape_of_a_transposed_sum_is_not_left_in_a_buffer(dev):
    """Traced, transpose(sum) is not contiguous and the reshape copies; replayed, the sum is
    computed into rows and the reshape is a view of it."""
    def f(a, b, c, d):
        return F.reshape(F.transpose(F.matmul(a, b) + F.matmul(c, d)), (-1,))

    def make(r):
        return tuple(lk.tensor(r.standard_normal(s).astype(np.float32), device=dev)
                     for s in ((6, 4), (4, 5), (6, 4), (4, 5)))
    _stable(lk.compile(f), make, lambda a, b, c, d: (
        a.numpy() @ b.numpy() + c.numpy() @ d.numpy()).T.reshape(-1))


def test_a_reshape_of_a_stacks_slice_along_axis_1_is_not_left_in_a_buffer(dev):
    def f(x):
        y = F.stack([F.tanh(xt) for xt in F.unbind(x, axis=0)], axis=1)[:, 1]
        return F.reshape(y, (-1,))
    _stable(lk.compile(f), lambda r: (lk.tensor(r.standard_normal((3, 2, 4)).astype(
        np.float32), device=dev),), lambda x: np.tanh(x.numpy()[1]).reshape(-1))


def test_a_reshaped_gradient_of_a_stack_slice_is_not_left_in_a_buffer(dev):
    ps = [lk.tensor(np.full((2, 4), k, np.float32), device=dev, requires_grad=True)
          for k in range(3)]

    def f(x):
        for p in ps:
            p.grad = None
        y = F.stack([F.transpose(p) for p in ps], axis=1)[:, 1]
        (y * x).sum().backward()
        return F.reshape(ps[1].grad * 1.0, (-1,))
    _stable(lk.compile(f), lambda r: (lk.tensor(r.standard_normal((4, 2)).astype(np.float32),
                                                device=dev),), lambda x: x.numpy().T.reshape(-1))
