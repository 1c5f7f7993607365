import numpy as np
import pytest

import labkit as lk
from labkit.backend.random import Generator, philox4x32_10


def test_philox_known_answer():
    # Random123's known-answer vector for philox4x32-10 with a zero counter and key
    got = philox4x32_10(np.array([0], np.uint64), (0, 0))[0]
    assert [f"{w:08x}" for w in got] == ["6627e8d5", "e169c58d", "bc57ac4c", "9b00dbd8"]


def test_same_bits_on_every_device():
    draws = {}
    for dev in lk.devices():
        g = Generator(seed=2**40 + 7, device=dev)
        r = [g.bits((13,)), g.uniform((1001,)), g.uniform((9,), -3, 5), g.bernoulli((77,), 0.3),
             g.uniform((5, 7), dtype=np.float64), g.integers(0, 10, (50,))]
        draws[str(dev)] = [x if isinstance(x, np.ndarray) else x.get() for x in r]
        assert g.counter == Generator(seed=0).counter + sum(
            -(-n // p) for n, p in ((13, 4), (1001, 4), (9, 4), (77, 4), (35, 2), (100, 4)))
    ref = draws.pop("cpu")
    for name, got in draws.items():
        for x, y in zip(ref, got):
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name


def test_normal_agrees_across_devices_and_is_standard():
    ref = Generator(5).normal((200_001,))
    for dev in lk.devices()[1:]:
        got = Generator(5, dev).normal((200_001,)).get()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert abs(ref.mean()) < 0.01 and abs(ref.std() - 1) < 0.01
    z = Generator(5).normal((1001,), mean=3, std=0.5, dtype=np.float64)
    assert abs(z.mean() - 3) < 0.1 and z.dtype == np.float64


def test_uniform_distribution(dev):
    u = Generator(3, dev).uniform((1_000_000,))
    u = u if isinstance(u, np.ndarray) else u.get()
    assert u.min() >= 0 and u.max() < 1
    hist = np.bincount((u * 10).astype(int), minlength=10) / u.size
    assert np.all(np.abs(hist - 0.1) < 0.003)


def test_state_round_trip_continues_exactly(dev):
    g = Generator(11, dev)
    g.uniform((10,))
    state = g.state_dict()
    assert set(state) == {"seed", "counter"}
    a = g.uniform((100,))
    h = Generator(0, dev)
    h.load_state_dict(state)
    b = h.uniform((100,))
    a, b = (x if isinstance(x, np.ndarray) else x.get() for x in (a, b))
    assert a.tobytes() == b.tobytes()
    with pytest.raises(ValueError, match="must be an integer"):
        h.load_state_dict({"seed": 1})


def test_permutation_is_a_permutation():
    p = Generator(1).permutation(1000)
    assert sorted(p.tolist()) == list(range(1000))
    assert not np.array_equal(p, np.arange(1000))
    assert np.array_equal(p, Generator(1, "cl:0").permutation(1000))


@pytest.mark.parametrize("state", [
    {"seed": 1.0, "counter": 0}, {"seed": True, "counter": 0}, {"seed": "1", "counter": 0},
    {"seed": 1, "counter": -1}, {"seed": 1, "counter": float("inf")}, {"seed": 1 << 64,
                                                                       "counter": 0},
    {"seed": 1}, [], None, {"seed": 1, "counter": None},
])
def test_a_damaged_generator_state_is_refused_and_changes_nothing(state):
    g = lk.Generator(3, "cpu")
    g.uniform((2,))
    before = g.state_dict()
    with pytest.raises(lk.CheckpointError, match="Generator.load_state_dict"):
        g.load_state_dict(state)
    assert g.state_dict() == before


DRAWS = {
    "bits": lambda g, s: g.bits(s),
    "uniform32": lambda g, s: g.uniform(s, -2, 3),
    "uniform64": lambda g, s: g.uniform(s, dtype=np.float64),
    "normal32": lambda g, s: g.normal(s),
    "normal64": lambda g, s: g.normal(s, dtype=np.float64),
    "bernoulli": lambda g, s: g.bernoulli(s, 0.3),
    "integers": lambda g, s: g.integers(-5, 1000, s),
}


def _host(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


@pytest.mark.parametrize("kind", sorted(DRAWS))
@pytest.mark.parametrize("total,rest,splits", [(10, (3,), (3, 3, 4)), (7, (5, 2), (4, 3)),
                                              (5, (), (1, 2, 2)), (9, (1,), (0, 5, 4))])
def test_a_shard_draws_its_rows_of_the_global_draw_bit_for_bit(dev, kind, total, rest, splits):
    """Data-parallel ranks: the rows each one draws, put together, are the one-process draw,
    and every rank's counter ends where the one-process counter does (offsets inside a block
    included: 3 of 10 rows of 3 floats start at value 9, word 1 of block 2)."""
    draw = DRAWS[kind]
    g = Generator(11, dev)
    g.counter = 5
    whole = _host(draw(g, (total, *rest)))
    counter = g.counter
    after = _host(draw(g, (6,)))
    parts, offset = [], 0
    for rows in splits:
        h = Generator(11, dev)
        h.counter = 5
        h.shard = (offset, rows, total)
        parts.append(_host(draw(h, (rows, *rest))))
        assert h.counter == counter
        if rows != 6:  # a draw that is not batch-shaped: the one process's next draw
            assert _host(draw(h, (6,))).tobytes() == after.tobytes()
        offset += rows
    got = np.concatenate(parts)
    assert got.dtype == whole.dtype and got.tobytes() == whole.tobytes()


def test_shard_settings_are_checked_and_a_permutation_ignores_them():
    g = Generator(1)
    for bad in [(0, 3), (2, 3, 4), (-1, 1, 2), (0.0, 1, 2), [0, 1, 2], "0,1,2"]:
        with pytest.raises(ValueError, match="offset, rows, total"):
            g.shard = bad
    assert g.shard is None
    g.shard = (0, 4, 8)
    p = g.permutation(2)  # 2 * 2 keys would look like 4 batch rows
    h = Generator(1)
    assert np.array_equal(p, h.permutation(2)) and g.counter == h.counter
    g.shard = None
    assert g.shard is None
