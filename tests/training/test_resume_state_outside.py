"""Exact resume of what lives outside the saved arrays: a learning rate that an epoch-unit
schedule sets (resumed mid-epoch, the rest of the epoch trained at the optimizer's initial rate),
a ``once`` extension of the user's (it fired again after a resume, though the base class says
its state remembers that it fired), and ``check_resume`` itself (a value only the resumed run
logged was never compared)."""

import pytest

from labkit import training as T
from labkit.errors import CheckpointError

from .helpers import make_loop


def _scheduled(dev, unit="epochs"):
    def make():
        loop = make_loop({"device": str(dev)})
        loop.add(T.LearningRateSchedule(lambda e: 0.01 * 0.5 ** e, unit=unit))
        return loop
    return make


@pytest.mark.parametrize("at", [13, 17, 24, 35])  # NOTE: 12 batches an epoch
def test_an_epoch_schedule_resumes_mid_epoch_exactly(dev, at):
    r = T.check_resume(_scheduled(dev), at_iteration=at)
    assert r.identical, r


def test_an_iteration_schedule_resumes_exactly():
    r = T.check_resume(_scheduled("cpu", "iterations"), at_iteration=13)
    assert r.identical, r


def test_the_rate_is_the_schedules_as_soon_as_the_resumed_run_trains(tmp_path):
    a = _scheduled("cpu")()
    a.run(max_iterations=13)
    path = a.save_checkpoint(tmp_path)
    b = _scheduled("cpu")()
    b.load_checkpoint(path)
    b.run(max_iterations=1)  # NOTE: counted from where it resumed
    assert b.log[-1]["iteration"] == 14 and b.log[-1]["lr"] == 0.005


class _Once(T.Extension):
    """Fires once, at the first even iteration; its class keeps the base state_dict."""

    once, every, unit = True, 2, "iterations"

    def __init__(self):
        super().__init__()
        self.at = []

    def __call__(self, loop):
        self.at.append(loop.status["iteration"])
        loop.log.report(once_fired=1)


def _once(loop):
    return next(e for e in loop.extensions if isinstance(e, _Once))


def _with_once():
    loop = make_loop()
    loop.add(_Once())
    return loop


def test_a_once_extension_of_the_users_does_not_fire_again_after_a_resume(tmp_path):
    a = _with_once()
    a.run(max_iterations=5)
    path = a.save_checkpoint(tmp_path)
    b = _with_once()
    b.load_checkpoint(path)
    b.run(max_iterations=10)
    assert _once(a).at == [2] and _once(b).at == []
    assert T.check_resume(_with_once, at_iteration=5).identical
    # NOTE: saved before it fired, it fires after the resume, once
    c = _with_once()
    c.run(max_iterations=1)
    path = c.save_checkpoint(tmp_path / "early")
    d = _with_once()
    d.load_checkpoint(path)
    d.run(max_iterations=10)
    assert _once(d).at == [2]


def test_a_damaged_fired_flag_is_refused_naming_it(tmp_path):
    a = _with_once()
    a.run(max_iterations=3)
    state = a.state_dict()
    state["extensions"]["_Once"]["fired"] = "yes"
    b = _with_once()
    with pytest.raises(CheckpointError, match="extension _Once: .*'fired' must be true"):
        b.load_state_dict(state)
    assert _once(b).fired is False


def test_check_resume_names_a_value_only_the_resumed_run_logged():
    class Late(T.Extension):
        every, unit = 1, "iterations"

        def __call__(self, loop):
            if loop.status["iteration"] > 20 and getattr(loop, "_resumed_here", False):
                loop.log.report(extra=1.0)

        def on_resumption(self, loop):
            loop._resumed_here = True

    def make():
        loop = make_loop()
        loop.add(Late())
        return loop

    r = T.check_resume(make, at_iteration=13)
    assert not r.identical and "'extra': uninterrupted None, resumed 1.0" in repr(r), r


@pytest.mark.parametrize("edit", ["shape", "dtype", "missing", "unknown"])
def test_best_params_that_do_not_fit_the_model_are_refused_at_load(edit):
    # NOTE: it loaded, trained to the end, then failed in after_training naming neither the
    # checkpoint nor the extension (and the run was marked failed)
    import numpy as np

    a = make_loop({"early_stopping": True})
    a.run(max_iterations=13)
    state = a.state_dict()
    best = state["extensions"]["EarlyStopping"]["best_params"]
    key = sorted(best)[0]
    if edit == "shape":
        best[key] = np.zeros((64,) + best[key].shape[1:], best[key].dtype)
    elif edit == "dtype":
        best[key] = best[key].astype(np.float64)
    elif edit == "missing":
        del best[key]
    else:
        best["/elsewhere.W"] = best[key]
    b = make_loop({"early_stopping": True})
    before = {k: v.copy() for k, v in b.model.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"extension EarlyStopping: .*'best_params'.*"
                                              r"(another model|damaged)"):
        b.load_state_dict(state)
    assert b.status["iteration"] == 0
    assert all(np.array_equal(v, b.model.state_dict()[k]) for k, v in before.items())
