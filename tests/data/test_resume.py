"""Exact resume: stop anywhere, save the state as JSON, load it into a freshly built pipeline
(with another number of workers, or in another process) and get the same items, bitwise."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from .helpers import PIPELINES

ROOT = Path(__file__).resolve().parents[2]


def same(a: dict, b: dict) -> bool:
    if list(a) != list(b):
        return False
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if x.dtype == object:
            if not all(np.array_equal(p, q) and p.dtype == q.dtype for p, q in zip(x, y)):
                return False
        elif not np.array_equal(x, y, equal_nan=True):
            return False
    return True


def run_to(stream, epochs: int) -> list:
    out = []
    while stream.epoch < epochs:
        for item in stream:
            out.append(item)
    return out


def consume(stream, k: int) -> None:
    done = 0
    while done < k:
        for _ in stream:
            done += 1
            if done == k:
                break


_REFERENCE = {}


def reference(name):
    if name not in _REFERENCE:
        s = PIPELINES[name](workers=0)
        _REFERENCE[name] = run_to(s, 2)
        s.close()
    return _REFERENCE[name]


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_uninterrupted_sequence_is_the_same_for_any_worker_count(name):
    ref = reference(name)
    assert len(ref) > 4
    with PIPELINES[name](workers=2) as s:
        got = run_to(s, 2)
    assert len(got) == len(ref)
    assert all(same(a, b) for a, b in zip(ref, got))
    # and the two epochs differ (the shuffle and the random draws are per epoch)
    half = len(ref) // 2
    if name != "plain":
        assert not all(same(a, b) for a, b in zip(ref[:half], ref[half:]))


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("workers", [(0, 0), (0, 2), (2, 1), (1, 0)])
def test_resume_mid_epoch_with_workers(name, workers):
    ref = reference(name)
    n_epoch = len(ref) // 2
    # every cut point in process (epoch ends included); one mid-epoch cut per worker combination
    cuts = range(1, len(ref)) if workers == (0, 0) else [n_epoch // 2 + 1]
    for k in cuts:
        first = PIPELINES[name](workers=workers[0])
        consume(first, k)
        state = json.loads(json.dumps(first.state_dict()))
        first.close()
        second = PIPELINES[name](workers=workers[1])
        second.load_state_dict(state)
        rest = run_to(second, 2)
        second.close()
        assert len(rest) == len(ref) - k, (k, len(rest), len(ref))
        bad = [i for i, (a, b) in enumerate(zip(ref[k:], rest)) if not same(a, b)]
        assert not bad, f"cut at {k}: first difference at item {k + bad[0]}"


def test_state_taken_while_iterating_with_items_in_flight():
    """state_dict() between two items of a running loop, with workers busy ahead."""
    ref = reference("image")
    with PIPELINES["image"](workers=2) as s:
        it = iter(s)
        for _ in range(3):
            next(it)
        state = s.state_dict()
        assert state["position"] == 3
        tail = [x for x in it]
    with PIPELINES["image"](workers=0) as t:
        t.load_state_dict(state)
        again = list(t)
    assert len(tail) == len(again) == len(ref) // 2 - 3
    assert all(same(a, b) for a, b in zip(tail, again))
    assert all(same(a, b) for a, b in zip(ref[3:], again))


def test_resume_in_a_new_process(tmp_path):
    ref = reference("examples")
    with PIPELINES["examples"](workers=1) as s:
        consume(s, 4)
        (tmp_path / "state.json").write_text(json.dumps(s.state_dict()))
    script = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        from tests.data.helpers import PIPELINES
        if __name__ == "__main__":
            s = PIPELINES["examples"](workers=2)
            s.load_state_dict(json.load(open({str(tmp_path / 'state.json')!r})))
            out = {{}}
            while s.epoch < 2:
                for item in s:
                    for k, v in item.items():
                        out.setdefault(k, []).append(np.asarray(v))
            s.close()
            rest = {{k: np.concatenate(v) for k, v in out.items()}}
            np.savez({str(tmp_path / 'rest.npz')!r}, **rest)
    """)
    (tmp_path / "resume.py").write_text(script)
    subprocess.run([sys.executable, str(tmp_path / "resume.py")], check=True, cwd=ROOT,
                   env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    rest = np.load(tmp_path / "rest.npz")
    for key in ref[0]:
        want = np.concatenate([np.asarray(item[key]) for item in ref[4:]])
        assert np.array_equal(rest[key], want), key


def test_state_is_json_and_rejects_another_pipeline():
    from labkit.errors import DataError

    with PIPELINES["text"](workers=0) as s:
        consume(s, 2)
        state = s.state_dict()
    json.dumps(state)
    with PIPELINES["image"](workers=0) as other:
        with pytest.raises(DataError, match="state of a Padding"):
            other.load_state_dict(state)
    with PIPELINES["image"](seed=8) as other:
        st = other.state_dict()
    with PIPELINES["image"](seed=7) as mine:
        st["stages"][0]["scheme"]["batch_size"] = 5
        with pytest.raises(DataError, match="batch_size: saved 5, here 8"):
            mine.load_state_dict(st)


def test_restore_does_not_reread_the_epoch():
    """Loading a state far into an epoch reads only what comes next."""
    import numpy as np

    from labkit.data import DataStream, IndexableDataset

    class Counting(IndexableDataset):
        reads = 0

        def get_data(self, request, sources=None):
            Counting.reads += 1
            return super().get_data(request, sources)

    ds = Counting({"x": np.arange(100_000)})
    s = DataStream(ds, batch_size=10, shuffle=True, seed=1)
    s.load_state_dict({**s.state_dict(), "position": 9_990})
    assert len(list(s)) == 10
    assert Counting.reads == 10


# ---- damaged states: a clear error naming the key, or exactly the same items ----------------
def leaves(state, path=()):
    """(path, value) of every value in a nested state (dicts and lists)."""
    if isinstance(state, dict):
        for k, v in state.items():
            yield from leaves(v, (*path, k))
    elif isinstance(state, list) and state and isinstance(state[0], dict):
        for i, v in enumerate(state):
            yield from leaves(v, (*path, i))
    else:
        yield path, state


def replaced(state, path, value):
    """A deep copy of ``state`` with ``path`` set to ``value`` (or removed, for ``DELETE``)."""
    out = json.loads(json.dumps(state))
    node = out
    for p in path[:-1]:
        node = node[p]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


DELETE = object()
WRONG_TYPES = [None, True, False, 1.5, 7.0, float("nan"), "7", "", [], {}, [1, 2], {"a": 1}]
OUT_OF_RANGE = {"seed": [2 ** 64, 10 ** 30, -(2 ** 64)],
                "epoch": [-1, 2 ** 63, 10 ** 30],
                "position": [-1, 10 ** 6, 2 ** 64],
                "buffer": [-1, 2 ** 64], "skip": [-1, 10 ** 6, 2 ** 64]}


def following(stream, n=4):
    """The next ``n`` items, across epoch ends."""
    out = []
    for _ in range(3):
        for item in stream:
            out.append(item)
            if len(out) == n:
                return out
    return out


@pytest.mark.parametrize("name", ["image", "examples", "text", "ngrams", "sharded"])
def test_damaged_state_gives_a_clear_error_or_the_same_items(name):
    from labkit.errors import DataError

    with PIPELINES[name](workers=0) as s:
        consume(s, 3)
        state = s.state_dict()
    with PIPELINES[name](workers=0) as s:
        s.load_state_dict(state)
        want = following(s)
    tried, failures = 0, []
    for path, value in list(leaves(state)):
        variants = [DELETE, *WRONG_TYPES, *OUT_OF_RANGE.get(path[-1], [])]
        for bad in variants:
            if bad is not DELETE and type(bad) is type(value) and bad == value:
                continue
            tried += 1
            case = f"{'/'.join(map(str, path))} = {'(deleted)' if bad is DELETE else repr(bad)}"
            with PIPELINES[name](workers=0) as s:
                fresh = s.state_dict()
                try:
                    s.load_state_dict(replaced(state, path, bad))
                except DataError as e:
                    if s.state_dict() != fresh:
                        failures.append(f"{case}: a failed load changed the stream")
                    elif not any(str(k) in str(e) for k in path):
                        failures.append(f"{case}: the error names no key of {path}: {e}")
                    continue
                except Exception as e:  # noqa: BLE001 - a raw error is a failure of the case
                    failures.append(f"{case}: {type(e).__name__}: {e}")
                    continue
                try:
                    got = following(s)
                except DataError:
                    continue
                if len(got) != len(want) or not all(same(a, b) for a, b in zip(got, want)):
                    failures.append(f"{case}: loaded silently, and the items differ")
    assert tried > 50
    assert not failures, f"{len(failures)} of {tried} damaged states:\n" + "\n".join(failures[:20])
