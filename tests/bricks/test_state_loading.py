"""Loading a state into a model or an optimizer is exact: dtype and shape as the model's (never
cast or broadcast), every key present and no other, JSON values of the right type; otherwise a
CheckpointError that names the key, what was expected and what was found, and nothing is
loaded."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
from labkit import optimizers as O


def model(dev):
    lk.bricks.set_seed(3)
    return B.Sequence(B.Linear(4, 3), B.BatchNorm(3)).to(dev)


def snapshot(m):
    return {k: v.copy() for k, v in m.state_dict().items()}


BRICK_CASES = {
    # key changed -> (new value, error fragments)
    "int32_into_float32": ("/sequence/linear_0.W", lambda v: v.astype(np.int32),
                           ["dtype mismatches", "/sequence/linear_0.W: checkpoint int32, "
                            "model float32", "nothing is cast"]),
    "float64_into_float32": ("/sequence/linear_0.b", lambda v: v.astype(np.float64),
                             ["/sequence/linear_0.b: checkpoint float64, model float32"]),
    "buffer_dtype": ("/sequence/batchnorm_1.running_var", lambda v: v.astype(np.float16),
                     ["/sequence/batchnorm_1.running_var: checkpoint float16, model float32"]),
    "broadcastable_shape": ("/sequence/linear_0.W", lambda v: v[:1],
                            ["shape mismatches: /sequence/linear_0.W: checkpoint (1, 4), "
                             "model (3, 4)"]),
    "a_list": ("/sequence/linear_0.b", lambda v: v.tolist(),
               ["not arrays: /sequence/linear_0.b: list, model an array float32(3,)"]),
    "a_number": ("/sequence/batchnorm_1.gamma", lambda v: 1.0,
                 ["/sequence/batchnorm_1.gamma: float, model an array float32(3,)"]),
}


@pytest.mark.parametrize("case", sorted(BRICK_CASES))
def test_model_refuses_a_state_that_does_not_fit_exactly(case, dev):
    key, change, fragments = BRICK_CASES[case]
    m = model(dev)
    before = snapshot(m)
    state = {k: (v + 1).astype(v.dtype) for k, v in before.items()}  # every value differs
    state[key] = change(state[key])
    with pytest.raises(lk.CheckpointError) as e:
        m.load_state_dict(state)
    msg = str(e.value)
    assert msg.startswith("load_state_dict into /sequence: ")
    for f in fragments:
        assert f in msg, msg
    after = snapshot(m)
    for k in before:  # nothing was loaded, not even the keys that fit
        assert after[k].tobytes() == before[k].tobytes(), k


def test_model_missing_and_unexpected_keys_and_a_state_that_is_not_a_dict(dev):
    m = model(dev)
    state = m.state_dict()
    del state["/sequence/linear_0.b"]
    state["/sequence/linear_9.W"] = np.zeros(2, np.float32)
    with pytest.raises(lk.CheckpointError, match=r"missing keys: /sequence/linear_0.b; "
                                                 r"unexpected keys: /sequence/linear_9.W"):
        m.load_state_dict(state)
    with pytest.raises(lk.CheckpointError, match="expected a dict of arrays keyed by "
                                                 "parameter name.*got list"):
        m.load_state_dict([1, 2])
    # non-strict: missing and unexpected keys are fine, a wrong dtype still is not
    m.load_state_dict(state, strict=False)
    state["/sequence/linear_0.W"] = state["/sequence/linear_0.W"].astype(np.int32)
    with pytest.raises(lk.CheckpointError, match="checkpoint int32, model float32"):
        m.load_state_dict(state, strict=False)


def test_model_loads_an_exact_state_as_a_copy(dev):
    src, dst = model(dev), model("cpu")
    for p in src.params().values():
        p.data = p.data + 1
    state = src.state_dict()
    dst.load_state_dict(state)
    for k, v in dst.state_dict().items():
        assert v.tobytes() == state[k].tobytes(), k
    state["/sequence/linear_0.W"][...] = 7  # the model does not alias the state's arrays
    assert not (dst.state_dict()["/sequence/linear_0.W"] == 7).any()


def trained(dev, rule=None):
    lk.bricks.set_seed(1)
    m = B.Linear(64, 64).to(dev)
    opt = (rule or O.Adam(lr=0.01)).setup(m)
    for p in m.params().values():
        p.grad = lk.tensor(np.ones(p.shape, np.float32), device=dev)
    opt.update()
    return m, opt


OPT_CASES = {
    "moment_of_wrong_shape": (
        lambda s: s["state"]["/linear.W"].update({"0.m": np.zeros(64, np.float32)}),
        "state['/linear.W']['0.m'] is float32(64,), the parameter's state is float32(64, 64)"),
    "moment_of_wrong_dtype": (
        lambda s: s["state"]["/linear.b"].update({"0.v": np.zeros(64, np.float64)}),
        "state['/linear.b']['0.v'] is float64(64,), the parameter's state is float32(64,)"),
    "moment_as_a_list": (
        lambda s: s["state"]["/linear.b"].update({"0.v": [0.0] * 64}),
        "state['/linear.b']['0.v'] must be an array, got list"),
    "t_as_a_string": (lambda s: s.update(t="3"),
                      "'t' (the steps taken) must be an integer in [0, 2**62) (no run takes "
                      "more), got '3' (str)"),
    "t_negative": (lambda s: s.update(t=-1),
                   "'t' (the steps taken) must be an integer in [0, 2**62)"),
    "t_a_bool": (lambda s: s.update(t=True), "got True (bool)"),
    "t_a_float": (lambda s: s.update(t=1.0), "got 1.0 (float)"),
    "t_missing": (lambda s: s.pop("t"), "got None (NoneType)"),
    "state_not_a_dict": (lambda s: s.update(state=[]), "'state' must be a dict of parameter "
                                                       "name -> {rule.key: array}, got list"),
    "entry_not_a_dict": (lambda s: s["state"].update({"/linear.b": 3}),
                         "state['/linear.b'] must be a dict of rule.key -> array, got int"),
    "missing_parameter": (lambda s: s["state"].pop("/linear.b"), "no state for /linear.b"),
    "unknown_parameter": (lambda s: s["state"].update({"/other.W": {}}),
                          "state for parameters this optimizer has no state for: /other.W"),
    "missing_moment": (lambda s: s["state"]["/linear.W"].pop("0.v"),
                       "state['/linear.W'] has no '0.v'"),
    "unexpected_moment": (lambda s: s["state"]["/linear.W"].update({"1.m": np.zeros(1)}),
                          "state['/linear.W'] has an unexpected '1.m' (this optimizer's keys: "
                          "0.m, 0.v)"),
    "unexpected_top_key": (lambda s: s.update(lr=0.1), "unexpected keys lr"),
    # NOTE: Adam's v is a mean of squares: a negative value would give NaN steps, silently
    "negative_second_moment": (
        lambda s: s["state"]["/linear.W"]["0.v"].__setitem__((3, 5), -1e-3),
        "state['/linear.W']['0.v'] has 1 negative values (the least -0.001): "
        "Adam's 'v' holds squares and is never negative"),
    "not_a_dict": (None, "expected a dict with 't' and 'state'"),
}


@pytest.mark.parametrize("case", sorted(OPT_CASES))
def test_optimizer_refuses_a_state_that_does_not_fit_exactly(case, dev):
    change, fragment = OPT_CASES[case]
    _, src = trained(dev)
    state = src.state_dict()
    if change is None:
        state = "oops"
    else:
        change(state)
    m, opt = trained(dev)
    before = opt.state_dict()
    with pytest.raises(lk.CheckpointError) as e:
        opt.load_state_dict(state)
    assert str(e.value).startswith("Optimizer.load_state_dict: ")
    assert fragment in str(e.value), str(e.value)
    after = opt.state_dict()  # nothing was loaded
    assert after["t"] == before["t"]
    for name, entries in before["state"].items():
        for k, v in entries.items():
            assert after["state"][name][k].tobytes() == v.tobytes(), (name, k)


def test_optimizer_lists_every_problem_at_once(dev):
    _, src = trained(dev)
    state = src.state_dict()
    state["t"] = "x"
    state["state"]["/linear.W"]["0.m"] = np.zeros(64, np.float32)
    state["state"].pop("/linear.b")
    _, opt = trained(dev)
    with pytest.raises(lk.CheckpointError) as e:
        opt.load_state_dict(state)
    msg = str(e.value)
    assert "'t'" in msg and "no state for /linear.b" in msg and "['0.m'] is float32(64,)" in msg


def test_optimizer_round_trip_is_exact_and_does_not_alias(dev):
    _, src = trained(dev)
    state = src.state_dict()
    state["t"] = np.int64(state["t"])  # a NumPy integer is an int too
    _, opt = trained(dev, O.Adam(lr=0.01))
    opt.load_state_dict(state)
    assert opt.t == 1 and type(opt.t) is int
    got = opt.state_dict()
    for name, entries in state["state"].items():
        for k, v in entries.items():
            assert got["state"][name][k].tobytes() == v.tobytes()
    state["state"]["/linear.W"]["0.m"][...] = 5
    assert not (opt.state_dict()["state"]["/linear.W"]["0.m"] == 5).any()


@pytest.mark.parametrize("rule,key", [(O.AdaGrad, "sum_sq"), (O.RMSProp, "sq"),
                                      (O.Adam, "v"), (O.AdamW, "v")])
def test_a_sum_of_squares_may_be_nan_or_infinite_but_not_negative(rule, key, dev):
    """A run that diverged saves NaN or infinity (it loads, as it was); a negative sum of
    squares no run writes (refused). A first moment (Adam's m) may be negative."""
    _, src = trained(dev, rule(lr=0.01))
    state = src.state_dict()
    v = state["state"]["/linear.W"][f"0.{key}"]
    v[0, :3] = [np.nan, np.inf, -0.0]
    _, opt = trained(dev, rule(lr=0.01))
    opt.load_state_dict(state)
    got = opt.state_dict()["state"]["/linear.W"][f"0.{key}"]
    assert got.tobytes() == v.tobytes()
    v[1, 1] = -np.inf
    with pytest.raises(lk.CheckpointError, match=f"'0.{key}'.* has 1 negative values"):
        opt.load_state_dict(state)
    if rule in (O.Adam, O.AdamW):  # the first moment is a mean of gradients: any sign
        state = src.state_dict()
        state["state"]["/linear.W"]["0.m"][...] = -1
        opt.load_state_dict(state)


def test_a_negative_running_variance_is_refused():
    """A variance is never negative (NaN is, in a run that diverged): a state with one there
    loaded silently, and every output of the model was NaN."""
    import labkit.bricks as B

    model = B.Sequence(B.Linear(3, 4), B.BatchNorm(4))
    state = model.state_dict()
    key = next(k for k in state if k.endswith("running_var"))
    before = {k: v.copy() for k, v in state.items()}
    bad = dict(state)
    bad[key] = state[key].copy()
    bad[key][1] = -0.5
    with pytest.raises(lk.CheckpointError, match=rf"damaged: {key}: 1 negative values \(the "
                                                 r"least -0.5\) in a variance"):
        model.load_state_dict(bad)
    assert all(np.array_equal(v, before[k]) for k, v in model.state_dict().items())
    bad[key][1] = np.nan  # NOTE: a diverged run's: loaded as it is
    model.load_state_dict(bad)
    assert np.isnan(model.state_dict()[key][1])
