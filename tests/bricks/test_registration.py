"""How bricks hold their children, parameters and buffers, as a probe found them wrong: two
children of one name (one dropped out: used in forward, never trained or saved), a child or
parameter replaced or deleted (still registered), a layer appended to a Sequence or a list of
bricks as an attribute (used, never registered), a model moved after its optimizer's setup
(Adam's state stayed behind), a failed first call (built for the wrong sizes), and raw errors
for bad sizes and names."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit.errors import BrickError, ShapeError


def _trains(model, dev="cpu", shape=(3, 4)):
    """Which parameters one SGD step changes."""
    opt = lk.optimizers.SGD(lr=0.1).setup(model)
    before = {k: np.array(p.numpy()) for k, p in model.params().items()}
    opt.zero_grad()
    F.sum(model(lk.tensor(np.ones(shape, np.float32), device=dev)) ** 2).backward()
    opt.update()
    return {k for k, p in model.params().items() if not np.array_equal(p.numpy(), before[k])}


class Two(B.Brick):
    def __init__(self, a, b):
        super().__init__()
        self.enc, self.dec = B.Linear(4, 4, name=a), B.Linear(4, 2, name=b)

    def forward(self, x):
        return self.dec(self.enc(x))


def test_two_children_of_one_name_are_refused():
    with pytest.raises(BrickError, match=r"already has a child named 'proj' \(Linear\); give "
                                         "the bricks different names"):
        Two("proj", "proj")
    m = Two("enc", "dec")
    assert sorted(m.params()) == ["/two/dec.W", "/two/dec.b", "/two/enc.W", "/two/enc.b"]
    assert _trains(m) == set(m.params())
    for bad in ("a/b", "a.b"):
        with pytest.raises(BrickError, match="name must be a non-empty string without"):
            Two(bad, "dec")


def test_add_child_without_a_name_makes_it_unique():
    m = B.Brick()
    for _ in range(3):
        m.add_child(B.Linear(4, 4))
    assert [c.name for c in m.children()] == ["linear", "linear_1", "linear_2"]
    assert m.n_params() == 60


def test_a_child_or_parameter_replaced_or_deleted_is_no_longer_held():
    n = B.Brick(name="net")
    n.fc = B.Linear(4, 3, name="first")
    n.fc = B.Linear(4, 3, name="second")
    assert sorted(n.params()) == ["/net/second.W", "/net/second.b"]
    assert sorted(n.state_dict()) == ["/net/second.W", "/net/second.b"]
    del n.fc
    assert n.params() == {} and n.children() == []
    lin = B.Linear(4, 3)
    del lin.b
    assert sorted(lin.params()) == ["/linear.W"]
    shared = B.Linear(2, 2)
    n.a = shared
    n.b = shared     # NOTE: one brick under two attributes: dropped when neither holds it
    del n.a
    assert n.children() == [shared]
    del n.b
    assert n.children() == []


def test_layers_appended_or_replaced_in_a_sequence_are_trained_and_saved(dev):
    seq = B.Sequence(B.Linear(4, 4), B.Tanh()).to(dev)
    seq.layers.append(B.Linear(4, 2).to(dev))
    assert sorted(seq.params()) == ["/sequence/linear_0.W", "/sequence/linear_0.b",
                                    "/sequence/linear_2.W", "/sequence/linear_2.b"]
    assert _trains(seq, dev) == set(seq.params())
    assert "/sequence/linear_2.W" in seq.state_dict()
    old = seq.layers[0]
    seq.layers[0] = B.Linear(4, 4).to(dev)   # NOTE: the old one is dropped, the new one named
    assert sorted(c.name for c in seq.children()) == ["linear_0", "linear_2", "tanh_1"]
    assert seq.linear_0 is seq.layers[0] is not old and old._parent is None
    del seq.layers[-1]
    assert all(not k.startswith("/sequence/linear_2") for k in seq.params())


def test_a_brick_twice_in_a_sequence_is_one_child():
    lin = B.Linear(3, 3)
    seq = B.Sequence(lin, B.Tanh(), lin)
    assert [c.name for c in seq.children()] == ["linear_0", "tanh_1"]
    assert seq.n_params() == 12 and "(12 params)" in repr(seq).splitlines()[0]


def test_a_list_of_bricks_as_an_attribute_is_registered():
    class Deep(B.Brick):
        def __init__(self):
            super().__init__()
            self.blocks = [B.Linear(4, 4) for _ in range(3)]

        def forward(self, x):
            for b in self.blocks:
                x = F.tanh(b(x))
            return x

    d = Deep()
    assert d.n_params() == 60 and _trains(d) == set(d.params())


@pytest.mark.parametrize("rule", ["Momentum", "Adam"])
def test_a_model_moved_after_its_optimizers_setup_trains_there(rule):
    ref, m = (B.Sequence(B.Linear(3, 4), B.Tanh(), B.Linear(4, 2)) for _ in range(2))
    m.load_state_dict(ref.state_dict())
    opts = [getattr(lk.optimizers, rule)(lr=0.1).setup(x) for x in (ref, m)]
    m.to("cl")   # NOTE: after setup: the state was left on the CPU (a device mismatch)
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    for _ in range(3):
        for model, opt, dev in ((ref, opts[0], "cpu"), (m, opts[1], "cl")):
            opt.zero_grad()
            F.sum(model(lk.tensor(x, device=dev)) ** 2).backward()
            opt.update()
    m.to("cpu")
    opts[1].zero_grad()
    F.sum(m(lk.tensor(x)) ** 2).backward()
    opts[1].update()
    opts[0].zero_grad()
    F.sum(ref(lk.tensor(x)) ** 2).backward()
    opts[0].update()
    for k, v in ref.state_dict().items():
        assert np.allclose(m.state_dict()[k], v, rtol=1e-5, atol=1e-6), k


def test_an_input_passed_through_keeps_its_role():
    x = lk.tensor(np.ones((2, 3), np.float32))
    d = B.Dropout(0.5)
    d.eval()
    # NOTE: the data it was given (INPUT), not made an OUTPUT by passing through
    assert d(x) is x and x.role is lk.roles.INPUT


def test_a_state_name_that_is_not_an_identifier_is_refused():
    b = B.Brick()
    with pytest.raises(BrickError, match=r"a buffer's name must be a Python identifier .* "
                                         "'ema.v1'"):
        b.register_buffer("ema.v1", np.zeros(2))


def test_l2_penalty_of_a_role_no_parameter_has_names_the_roles():
    with pytest.raises(ValueError, match=r"no parameter of the model has the role FILTER .*"
                                         r"\['BIAS', 'WEIGHT'\]"):
        lk.regularizers.l2_penalty(B.MLP([3, 2]), 0.1, role=lk.roles.FILTER)


def test_device_is_where_the_parameters_are(dev):
    lin = B.Linear(4, 3)
    assert lin.device.kind == "cpu"
    seq = B.Sequence(B.Linear(None, 3))
    assert seq.device is None
    seq(lk.tensor(np.ones((2, 4), np.float32), device=dev))
    assert seq.device == dev


def test_a_failed_first_call_leaves_the_brick_unbuilt():
    c = B.Conv2D(None, 8, 3)
    with pytest.raises(ShapeError, match=r"x must be \(N, C, H, W\), got shape \(2, 4\)"):
        c(lk.tensor(np.ones((2, 4), np.float32)))
    assert not c.built and c.params() == {}
    assert c(lk.tensor(np.ones((2, 3, 5, 5), np.float32))).shape == (2, 8, 3, 3)
    lin = B.Linear(None, 3)
    with pytest.raises(ShapeError, match="at least one dimension"):
        lin(lk.tensor(np.float32(1.0)))
    with pytest.raises(ShapeError, match=r"x must be \(N, T, F\)"):
        B.LSTM(None, 4)(lk.tensor(np.ones((2, 3), np.float32)))


@pytest.mark.parametrize("make,words", [
    (lambda: B.Linear(4, -3), "out_size must be an integer >= 0, got -3"),
    (lambda: B.Conv2D(1, 8, 0), r"ksize must be an integer >= 1, got \(0, 0\)"),
    (lambda: B.Conv2D(1, 8, 3, groups=0), "groups must be an integer >= 1"),
    (lambda: B.MLP([4, None, 3]), r"sizes\[1\] must be an integer >= 1, got None"),
    (lambda: B.LSTM(3, 0), "hidden_size must be an integer >= 1"),
])
def test_bad_sizes_are_named(make, words):
    with pytest.raises(ShapeError, match=words):
        make()
