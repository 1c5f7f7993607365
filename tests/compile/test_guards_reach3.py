"""Settings a compiled step reads by name at run time, or through a descriptor: each replayed
its traced value, silently, when it changed (getattr(cfg, "scale"), getattr(cfg, name),
vars(ns)["a"], obj.__dict__["a"], a descriptor class's __get__). Each is checked now, and a
change traces again."""

import types
import warnings

import numpy as np
import pytest

import labkit as lk
from labkit.compile import CompileWarning


class Cfg:
    pass


def _follows(dev, step, set_value, values=(2.5, 2.5, 2.5, 3.5, 3.5, 3.5, 0.5)):
    x = lk.tensor(np.ones(3, np.float32), device=dev)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        for v in values:
            set_value(v)
            np.testing.assert_array_equal(step(x).numpy(), np.full(3, v, np.float32))
    assert step.stats["replays"] >= 1  # NOTE: still compiled


def test_getattr_with_a_constant_name(dev):
    cfg = Cfg()
    _follows(dev, lk.compile(lambda x: x * getattr(cfg, "scale")),  # noqa: B009
             lambda v: setattr(cfg, "scale", v))


NAME = "scale"
GLOBAL_CFG = Cfg()


def _by_global_name(x):
    return x * getattr(GLOBAL_CFG, NAME)


def test_getattr_with_a_name_held_in_a_global_or_a_closure(dev):
    _follows(dev, lk.compile(_by_global_name), lambda v: setattr(GLOBAL_CFG, "scale", v))
    cfg, name = Cfg(), "temp"
    _follows(dev, lk.compile(lambda x: x * getattr(cfg, name)),
             lambda v: setattr(cfg, "temp", v))


def test_an_objects_dict_read_by_key(dev):
    ns = types.SimpleNamespace(a=1.0)
    _follows(dev, lk.compile(lambda x: x * vars(ns)["a"]), lambda v: setattr(ns, "a", v))
    cfg = Cfg()
    _follows(dev, lk.compile(lambda x: x * cfg.__dict__["b"]), lambda v: setattr(cfg, "b", v))


class Reading:
    """A descriptor whose value is another attribute's (a unit conversion, a config view)."""

    def __get__(self, obj, owner=None):
        if obj is None:
            raise AttributeError("on instances only")
        return obj._scale * 1.0


class Holder:
    scale = Reading()


@pytest.mark.parametrize("how", ["attribute", "getattr"])
def test_a_descriptor_of_the_users_is_read_at_each_call(dev, how):
    h = Holder()
    fn = (lambda x: x * h.scale) if how == "attribute" else (lambda x: x * getattr(h, "scale"))  # noqa: B009
    _follows(dev, lk.compile(fn), lambda v: setattr(h, "_scale", v))


BIG = {i: float(i) for i in range(100)}
BIG_LIST = [float(i) for i in range(100)]


def _from_big(x):
    return x * BIG[5] + x * BIG_LIST[-1] * 0.0


def test_items_of_large_containers_read_at_constant_keys(dev):
    """A dict or list past 64 items is not compared whole; its items at the keys the code
    names are (BIG[5] replayed 5.0 after BIG[5] = 7.0)."""
    _follows(dev, lk.compile(_from_big), lambda v: BIG.__setitem__(5, v))
    table = {f"k{i}": 1.0 for i in range(100)}
    _follows(dev, lk.compile(lambda x: x * table["k7"]), lambda v: table.__setitem__("k7", v))


WEIGHTS = np.array([1.0, 2.0], np.float32)


def _weighted(x):
    return x * float(WEIGHTS[0])


def test_a_small_numpy_arrays_values_read_as_numbers(dev):
    """float(w[0]) of a small array the step names (a global, an attribute): its values are
    checked (the traced 2.5 replayed after w[0] = 3.5)."""
    _follows(dev, lk.compile(_weighted), lambda v: WEIGHTS.__setitem__(0, v))
    cfg = Cfg()
    cfg.table = np.zeros(4)
    _follows(dev, lk.compile(lambda x: x * cfg.table[2].item()),
             lambda v: cfg.table.__setitem__(2, v))


def test_a_small_array_the_step_uploads_changes_without_retracing(dev):
    """An array read as a tensor at each call (a mask updated between calls) is read afresh
    by the replay: a change is not a retrace."""
    mask = np.ones(3, np.float32)
    f = lk.compile(lambda x: x * lk.tensor(mask, device=dev))
    x = lk.tensor(np.full(3, 2.0, np.float32), device=dev)
    for i in range(6):
        mask[:] = i
        np.testing.assert_array_equal(f(x).numpy(), np.full(3, 2.0 * i, np.float32))
    assert f.stats["retraces"] == 0 and f.stats["replays"] == 4, f.stats


# ---- what the names read by string must not reach (found by a review of the above) -------

def _replays_throughout(step, calls):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for args in calls:
            step(*args)
    assert step.stats["traces"] == 2 and step.stats["retraces"] == 0, step.stats


def test_a_key_naming_an_optimizers_counter_or_rate_does_not_guard_it(dev):
    """batch["t"] and HP["lr"] are strings of the step; the optimizer's step count ``t`` and
    scheduled ``lr`` change at every update, and labkit reads them itself: they are not
    guarded (each step traced again at every call)."""
    import labkit.bricks as B
    import labkit.functions as F

    B.set_seed(1)
    model = B.Sequence(B.Linear(4, 8), B.Tanh(), B.Linear(8, 2)).to(dev)
    hp = {"lr": 0.01, "wd": 0.0}
    opt = lk.optimizers.Adam(lr=lk.optimizers.Cosine(hp["lr"], 1000)).setup(model)

    @lk.compile
    def step(batch):
        opt.zero_grad()
        loss = F.softmax_cross_entropy(model(lk.tensor(batch["x"], device=dev)), batch["t"])
        (loss * (1.0 + hp["wd"])).backward()
        opt.update()
        return loss

    rng = np.random.default_rng(0)
    batch = {"x": rng.standard_normal((8, 4)).astype(np.float32), "t": np.arange(8) % 2}
    _replays_throughout(step, [(batch,)] * 8)


def test_an_index_array_changed_in_place_is_read_afresh_not_retraced(dev):
    perm = np.arange(6)
    x = lk.tensor(np.arange(12, dtype=np.float32).reshape(2, 6), device=dev)
    f = lk.compile(lambda x: x[:, perm[:4]] * 1.0)
    rng = np.random.default_rng(1)
    for _ in range(6):
        perm[:] = rng.permutation(6)
        np.testing.assert_array_equal(f(x).numpy(), x.numpy()[:, perm[:4]])
    assert f.stats["traces"] == 2 and f.stats["replays"] == 4, f.stats


HISTORY = [0.0] * 100


def _reads_the_first(x):
    return (x * HISTORY[0]).reshape(-1)


def test_a_large_list_is_checked_at_its_subscripts_only(dev):
    """HISTORY[0] is read; the -1 of a reshape is not a key of HISTORY (whose last item the
    loop appends to at every call)."""
    f = lk.compile(_reads_the_first)
    x = lk.tensor(np.ones((2, 2), np.float32), device=dev)
    for i in range(6):
        HISTORY.append(float(i))
        np.testing.assert_array_equal(f(x).numpy(), np.zeros(4, np.float32))
    assert f.stats["traces"] == 2 and f.stats["replays"] == 4, f.stats


class Token:
    def __init__(self, i):
        self.id = i

    def __hash__(self):
        return self.id

    def __eq__(self, other):
        return self.id == other.id  # NOTE: raises for an int key


def test_a_large_dict_whose_keys_compare_only_to_their_own_kind(dev):
    table = {Token(i): float(i) for i in range(100)}
    key = Token(6)
    f = lk.compile(lambda x: x * table[key] + 0 * x[0])
    x = lk.tensor(np.ones(3, np.float32), device=dev)
    assert [float(f(x).numpy()[0]) for _ in range(3)] == [6.0] * 3


CONFIG_KEYS = ("scale",)


def _by_tuple_name(x):
    return x * getattr(GLOBAL_CFG, CONFIG_KEYS[0])


def test_names_in_tuples_and_passed_as_arguments(dev):
    cfg = Cfg()
    _follows(dev, lk.compile(lambda x: x * sum(getattr(cfg, k) for k in ("scale",))),
             lambda v: setattr(cfg, "scale", v))
    _follows(dev, lk.compile(_by_tuple_name), lambda v: setattr(GLOBAL_CFG, "scale", v))
    x = lk.tensor(np.ones(3, np.float32), device=dev)
    f = lk.compile(lambda x, name: x * getattr(cfg, name))
    for v in (2.0, 2.0, 2.0, 3.0, 3.0):
        cfg.scale = v
        np.testing.assert_array_equal(f(x, "scale").numpy(), np.full(3, v, np.float32))


def test_arrays_and_objects_held_in_containers(dev):
    small = {"w": np.zeros(2)}
    _follows(dev, lk.compile(lambda x: x * float(small["w"][0])),
             lambda v: small["w"].__setitem__(0, v))
    big = {f"k{i}": i for i in range(100)}
    big["cfg"] = Cfg()

    def replace(v):  # NOTE: another object for another value
        if getattr(big["cfg"], "scale", None) != v:
            big["cfg"] = Cfg()
            big["cfg"].scale = v
    _follows(dev, lk.compile(lambda x: x * big["cfg"].scale), replace)


# ---- and what a second review found of those fixes ----------------------------------------

def test_an_array_uploaded_through_a_view_of_it(dev):
    """lk.tensor(w[:4]) copies the view at the call: a replay does not make that copy again,
    so w's values stay checked (its value check had been dropped with w's own upload's)."""
    w = np.zeros(8, np.float32)
    f = lk.compile(lambda x: x * lk.tensor(w[:4], device=dev))
    x = lk.tensor(np.ones(4, np.float32), device=dev)
    for i in range(5):
        w[:] = i
        np.testing.assert_array_equal(f(x).numpy(), np.full(4, i, np.float32))


def test_the_users_attributes_on_labkit_objects_are_read_by_string(dev):
    """getattr(opt, "warm") of an attribute the user set on an optimizer, and of a subclass's
    own attribute: not labkit's, so checked (labkit's own, Optimizer.t, are not)."""
    import labkit.bricks as B

    opt = lk.optimizers.Adam(lr=0.01)
    _follows(dev, lk.compile(lambda x: x * getattr(opt, "warm")),  # noqa: B009
             lambda v: setattr(opt, "warm", v))

    class Scaled(B.Linear):
        pass

    brick = Scaled(3, 3)
    _follows(dev, lk.compile(lambda x: x * getattr(brick, "boost")),  # noqa: B009
             lambda v: setattr(brick, "boost", v))


BIG_HP = {f"k{i}": 0.0 for i in range(100)}
BIG_KEY = "w"


def _big_by_global_key(x):
    return x * BIG_HP[BIG_KEY]


def _hp(k):
    return BIG_HP[k]


def test_keys_of_a_large_dict_from_strings_anywhere_in_the_code(dev):
    def put(v):
        BIG_HP["w"] = v
    _follows(dev, lk.compile(lambda x: x * sum(BIG_HP[k] for k in ("w",))), put)
    _follows(dev, lk.compile(lambda x: x * _hp("w")), put)
    _follows(dev, lk.compile(_big_by_global_key), put)
    f = lk.compile(lambda x, k: x * BIG_HP[k])
    x = lk.tensor(np.ones(3, np.float32), device=dev)
    for v in (2.0, 2.0, 2.0, 3.0, 3.0):
        put(v)
        np.testing.assert_array_equal(f(x, "w").numpy(), np.full(3, v, np.float32))


NAME_TABLE = {"s": ("scale",)}


def test_names_held_in_a_dict_or_set(dev):
    cfg = Cfg()
    names = {"scale"}
    _follows(dev, lk.compile(lambda x: x * getattr(cfg, NAME_TABLE["s"][0])),
             lambda v: setattr(cfg, "scale", v))
    _follows(dev, lk.compile(lambda x: x * sum(getattr(cfg, k) for k in names)),
             lambda v: setattr(cfg, "scale", v))



# ---- and a third review ---------------------------------------------------------------------

class _Meta(type):
    def __eq__(cls, other):  # NOTE: and no __hash__: its classes cannot be hashed
        return cls is other


class _Unhashable(metaclass=_Meta):
    pass


def test_an_object_of_a_class_that_cannot_be_hashed(dev):
    cfg = _Unhashable()
    _follows(dev, lk.compile(lambda x: x * getattr(cfg, "scale")),  # noqa: B009
             lambda v: setattr(cfg, "scale", v))


RUN = {f"mult{i}": 1.0 for i in range(100)}


def _reads_run(x):
    return {"loss": x * RUN["scale"], "step": x * 0.0}


def test_a_result_dicts_keys_are_neither_names_nor_keys_read(dev):
    """{"loss": ..., "step": ...} returned: a large dict the loop writes at "loss" and a
    logger whose step counter the loop moves were guarded by those keys, and the step traced
    at every call."""

    class Log:
        step = 0

    log = Log()
    RUN["scale"] = 2.0
    f = lk.compile(lambda x: _reads_run(x) if log is not None else None)
    x = lk.tensor(np.ones(3, np.float32), device=dev)
    for i in range(6):
        log.step += 1
        out = f(x)
        RUN["loss"] = float(i)
        np.testing.assert_array_equal(out["loss"].numpy(), np.full(3, 2.0, np.float32))
    assert f.stats["traces"] == 2 and f.stats["replays"] == 4, f.stats
    RUN["scale"] = 3.0  # NOTE: the key the step reads is still checked
    np.testing.assert_array_equal(f(x)["loss"].numpy(), np.full(3, 3.0, np.float32))


def test_a_main_loops_extension_is_not_walked_as_a_callee(tmp_path):
    """A KL-annealing extension read by the loss (anneal.beta) whose __call__, run by the loop
    between steps, moves its own counter: walked as an object the step may call, its counter
    was guarded and a compiled MainLoop traced at every call."""
    import labkit.bricks as B
    import labkit.functions as F
    from labkit import training as T
    from labkit.data import DataStream, IndexableDataset

    class KLAnneal(T.Extension):
        def __init__(self):
            super().__init__(every=1, unit="iterations")
            self.beta, self.count = 0.0, 0

        def __call__(self, loop):
            self.count += 1
            self.beta = min(1.0, (self.count // 8) * 0.5)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    data = {"features": x, "targets": (x[:, 0] > 0).astype(np.int64)}

    def run(compiled):
        B.set_seed(1)
        model = B.Sequence(B.Linear(4, 8), B.Linear(8, 2))
        anneal = KLAnneal()

        def loss_fn(model, batch):
            logits = model(lk.tensor(batch["features"]))
            return {"loss": F.softmax_cross_entropy(logits, batch["targets"])
                    * (1.0 + anneal.beta)}

        loop = T.MainLoop(model, lk.optimizers.Adam(lr=0.01).setup(model),
                          DataStream(IndexableDataset(data), batch_size=8, shuffle=True,
                                     seed=3),
                          loss_fn, extensions=[T.FinishAfter(epochs=6), anneal], store=False,
                          compile=compiled)
        loop.recorder.enabled = False
        loop.run()
        return loop

    eager, comp = run(False), run(True)
    assert [r["loss"] for r in eager.log if "loss" in r] == [
        r["loss"] for r in comp.log if "loss" in r]
    s = comp.compiled.stats
    assert s["calls"] == 24 and s["traces"] <= 8, s  # NOTE: two a value of beta, not 24


BIG_W = {f"k{i}": 0.0 for i in range(100)}


def _optional_settings(x, cfg):
    v = x
    for attr, default in {"scale": 1.0}.items():  # NOTE: a dict display's keys as names
        v = v * getattr(cfg, attr, default)
    return v


def _subscript_in_a_display(x):
    m = {"out": BIG_W["w"]}  # NOTE: "w" loaded right before BUILD_MAP, as a value's key
    return x * m["out"]


def test_only_a_returned_dicts_keys_are_not_names(dev):
    """The keys of a dict the step returns at once are not names; any other dict display's
    are (a fourth review: an iterated display's keys, and a subscript inside a display's
    value, had been skipped, and replayed stale)."""
    cfg = Cfg()
    _follows(dev, lk.compile(lambda x: _optional_settings(x, cfg)),
             lambda v: setattr(cfg, "scale", v))
    _follows(dev, lk.compile(_subscript_in_a_display), lambda v: BIG_W.__setitem__("w", v))
    ns = types.SimpleNamespace(scale=1.0)

    def one_entry(x):
        m = {"s": vars(ns)["scale"]}
        return x * m["s"]
    _follows(dev, lk.compile(one_entry), lambda v: setattr(ns, "scale", v))
