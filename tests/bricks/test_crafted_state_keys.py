"""Keys of a state given to ``Brick.load_state_dict`` come from files: an error message shows a
plain name (``/sequence/linear_0.W``) as it is and quotes and escapes any other, so a key with
spaces, separators, line breaks or look-alike letters cannot pass for other keys; long keys and
long lists are cut; a key that is not a string is a CheckpointError, not a TypeError."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B

W, BIAS = "/sequence/linear_0.W", "/sequence/linear_0.b"


def model():
    lk.bricks.set_seed(3)
    return B.Sequence(B.Linear(4, 3), B.BatchNorm(3))


def refused(m, state, **kw) -> str:
    before = {k: v.copy() for k, v in m.state_dict().items()}
    with pytest.raises(lk.CheckpointError) as e:
        m.load_state_dict(state, **kw)
    for k, v in m.state_dict().items():  # nothing was loaded
        assert v.tobytes() == before[k].tobytes(), k
    return str(e.value)


def test_a_key_that_spoofs_a_list_of_keys_is_quoted():
    m = model()
    state = m.state_dict()
    del state[W]
    # NOTE: shown bare, this key read as two real keys: 'unexpected keys: /sequence/linear_0.W,
    # /sequence/linear_0.b'
    state[f"{W}, {BIAS}"] = np.zeros(1, np.float32)
    msg = refused(m, state)
    assert ("missing keys: /sequence/linear_0.W; unexpected keys: "
            "'/sequence/linear_0.W, /sequence/linear_0.b'") in msg, msg


@pytest.mark.parametrize("key, shown", [
    ("/a b", "'/a b'"),
    ("/a\n; missing keys: /x", "'/a\\n; missing keys: /x'"),
    ("/sequence/linear_0.\u0500", "'/sequence/linear_0.\\u0500'"),  # NOTE: a look-alike letter
    ("/a\u202eb", "'/a\\u202eb'"),  # NOTE: a right-to-left override
    ("'/q'", "\"'/q'\""),
    ("", "''"),
], ids=["space", "newline", "lookalike", "bidi", "quotes", "empty"])
def test_odd_keys_are_quoted_and_escaped(key, shown):
    m = model()
    state = {**m.state_dict(), key: np.zeros(1, np.float32)}
    msg = refused(m, state)
    assert msg.endswith(f"unexpected keys: {shown}"), msg
    assert "\n" not in msg and "\u202e" not in msg


def test_long_keys_and_long_lists_are_cut():
    m = model()
    state = {**m.state_dict(), "/" + "x" * 10_000: np.zeros(1)}
    msg = refused(m, state)
    assert "'/xxxx" in msg and "... (10003 characters)" in msg and len(msg) < 300, msg
    state = {f"/extra_{i:03d}.W": np.zeros(1) for i in range(500)}
    msg = refused(m, state)
    assert msg.count("/extra_") == 12 and "/extra_011.W, ... and 488 more" in msg, msg
    assert "missing keys: /sequence/batchnorm_1.beta, " in msg and len(msg) < 1000, msg


class Shifty:
    """A key whose str() poses as a real key."""

    def __str__(self):
        return W

    def __lt__(self, other):
        raise TypeError("'<' not supported")


@pytest.mark.parametrize("key, shown", [
    (1, "1 (int)"),
    (b"/sequence/linear_0.W", "b'/sequence/linear_0.W' (bytes)"),
    (("/a", 1), "('/a', 1) (tuple)"),
    (None, "None (NoneType)"),
], ids=["int", "bytes", "tuple", "none"])
def test_keys_that_are_not_strings(key, shown):
    m = model()
    msg = refused(m, {**m.state_dict(), key: np.zeros(1)})
    assert msg == (f"load_state_dict into /sequence: keys are parameter names (strings, as "
                   f"state_dict() gives them); got 1 other key: {shown}")
    refused(m, {**m.state_dict(), key: np.zeros(1)}, strict=False)


def test_a_key_posing_as_another_is_neither_sorted_nor_believed():
    m = model()
    state = m.state_dict()
    state[Shifty()] = state.pop(W)
    msg = refused(m, state)
    assert "got 1 other key: <" in msg or "Shifty object at" in msg, msg
    assert W not in msg.split("other key:")[1], msg


def test_a_str_subclass_key_is_its_plain_text():
    class Odd(str):
        def __str__(self):
            return "/elsewhere.W"

    m = model()
    state = m.state_dict()
    state[Odd(W)] = state.pop(W) + 1
    m.load_state_dict(state)
    assert (m.state_dict()[W] == state[W]).all()


def test_a_masked_array_is_not_loaded_without_its_mask():
    m = model()
    state = m.state_dict()
    state[BIAS] = np.ma.masked_array(state[BIAS], mask=[True, False, False])
    msg = refused(m, state)
    assert f"not arrays: {BIAS}: a masked array (its mask would be lost), model an array " \
           "float32(3,)" in msg, msg
