"""A random generator's counter near the end of its 2**64 blocks (only an edited or damaged
state puts it there): it loads, and the draw that would pass the end raises a CheckpointError
that says so, before it draws or moves the counter; it never wraps to numbers already drawn."""

import numpy as np
import pytest

from labkit.backend.random import Generator
from labkit.errors import CheckpointError

END = 2 ** 64


@pytest.mark.parametrize("draw,blocks", [
    (lambda g: g.uniform((8,)), 2), (lambda g: g.bits((5,)), 2), (lambda g: g.normal((3,)), 2),
    (lambda g: g.uniform((3,), dtype=np.float64), 2), (lambda g: g.integers(0, 9, (3,)), 2),
    (lambda g: g.bernoulli((8,), 0.5), 2), (lambda g: g.permutation(3), 2),
])
def test_a_draw_past_the_last_block_is_refused_and_moves_nothing(draw, blocks):
    g = Generator(seed=7)
    g.load_state_dict({"seed": 7, "counter": END - blocks + 1})
    with pytest.raises(CheckpointError, match=rf"Generator\(seed=7, counter={END - blocks + 1}"
                                              r".*would pass the last of its 2\*\*64 blocks "
                                              r"\(1 left\).*damaged or edited state"):
        draw(g)
    assert g.state_dict() == {"seed": 7, "counter": END - blocks + 1}


def test_draws_up_to_the_last_block_are_the_blocks_numbers_and_the_end_state_reloads():
    g = Generator(seed=3)
    g.load_state_dict({"seed": 3, "counter": END - 2})
    last = g.bits((8,))
    assert g.counter == END
    from labkit.backend.random import philox4x32_10

    words = philox4x32_10(np.array([END - 2, END - 1], dtype=np.uint64), g._key).reshape(-1)
    assert np.array_equal(last, words)
    # NOTE: not the numbers of blocks 0 and 1, which a wrapped counter would give again
    assert not np.array_equal(last, Generator(seed=3).bits((8,)))
    h = Generator()
    h.load_state_dict(g.state_dict())  # every block drawn: a state state_dict() writes
    assert h.bits((0,)).shape == (0,)
    with pytest.raises(CheckpointError, match=r"\(0 left\)"):
        h.bits((1,))


@pytest.mark.parametrize("counter", [END + 1, 2 ** 70, -1])
def test_a_counter_beyond_the_end_is_refused_on_load(counter):
    g = Generator(seed=1)
    with pytest.raises(CheckpointError, match=r"'counter' must be an integer in \[0, 2\*\*64\]"):
        g.load_state_dict({"seed": 1, "counter": counter})
    assert g.state_dict() == {"seed": 1, "counter": 0}


def test_a_sharded_draw_counts_the_whole_batch_against_the_end():
    """A data-parallel rank draws its rows, but the counter moves as the whole batch's draw: the
    end is checked against that, so no rank wraps while another refuses."""
    g = Generator(seed=2)
    g.load_state_dict({"seed": 2, "counter": END - 3})
    g.shard = (0, 4, 16)  # 16 rows in all: 4 blocks of float32 uniforms
    with pytest.raises(CheckpointError, match=r"drawing 4 blocks"):
        g.uniform((4,))
    assert g.counter == END - 3
