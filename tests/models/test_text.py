"""sample_text: greedy, the distribution it draws from, repeatability, its checks."""

import numpy as np
import pytest

from labkit.models import sample_text

Z = np.log(np.array([[0.2, 0.5, 0.3]]))


def fixed(ids, state):
    return Z, (state or 0) + 1


def test_greedy_and_state_threading():
    seen = []

    def step(ids, state):
        seen.append((int(ids[0]), state))
        return Z, (state or 0) + 1

    assert sample_text(step, "abc", "ca", length=3, temperature=0) == "cabbb"
    assert [s for _, s in seen] == [None, 1, 2, 3, 4] and [i for i, _ in seen] == [2, 0, 1, 1, 1]


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_draws_follow_softmax_of_logits_over_temperature(temperature):
    text = sample_text(fixed, "abc", "a", length=4000, temperature=temperature, seed=3)[1:]
    freq = np.array([text.count(c) for c in "abc"]) / len(text)
    p = np.exp(Z[0] / temperature)
    np.testing.assert_allclose(freq, p / p.sum(), atol=0.025)


def test_a_seed_repeats_and_another_differs():
    a = sample_text(fixed, "abc", "a", length=50, seed=1)
    assert a == sample_text(fixed, "abc", "a", length=50, seed=1)
    assert a != sample_text(fixed, "abc", "a", length=50, seed=2)


def test_checks():
    with pytest.raises(ValueError, match=r"not in it: \['z'\]"):
        sample_text(fixed, "abc", "az")
    with pytest.raises(ValueError, match="it is empty"):
        sample_text(fixed, "abc", "")
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        sample_text(fixed, "abc", "a", temperature=-1)
