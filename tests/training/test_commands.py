"""Commands through the run store (``lk.runs.send``): the loop takes pause, resume, stop and
checkpoint between batches from its listener thread, acknowledges each when it has acted, and
refuses or expires what it cannot act on."""

import threading
import time

import pytest

import labkit as lk
from labkit import training as T
from labkit.training import commands

from .helpers import make_loop

#: seconds to wait for an acknowledgement (about 0.1 s; send returns as soon as it comes)
WAIT = 60.0


def wait_for(cond, timeout=30.0):
    t = time.monotonic()
    while not cond():
        assert time.monotonic() - t < timeout, "timed out"
        time.sleep(0.01)


@pytest.fixture
def training():
    """A loop training on a thread, long enough to be talked to; stopped afterwards."""
    loop = T.build(make_loop, {"epochs": 100_000})
    loop.ensure_run()
    loop.start()
    wait_for(lambda: lk.runs.listening(lk.runs.get(loop.run_id)))
    yield loop
    if loop.running:
        loop.stop()
        loop.resume()
    loop.wait()


def test_pause_checkpoint_resume_stop_are_acknowledged_when_done(training):
    loop = training
    rec = lk.runs.send(loop.run_id, "pause", wait=WAIT)
    assert rec["result"] == f"paused at iteration {rec['iteration']}" and loop.paused
    assert lk.runs.get(loop.run_id)["status"] == "paused"
    it = loop.status["iteration"]
    assert rec["iteration"] == it
    assert lk.runs.send(loop.run_id, "pause", wait=WAIT)["result"] == "already paused"
    rec = lk.runs.send(loop.run_id, "checkpoint", wait=WAIT)
    assert rec["result"] == f"checkpoint ckpt-{it:08d} written"
    assert loop.last_checkpoint.name == f"ckpt-{it:08d}" and loop.status["iteration"] == it
    assert lk.runs.send(loop.run_id, "resume", wait=WAIT)["result"] == "resumed"
    wait_for(lambda: loop.status["iteration"] > it + 3)
    assert lk.runs.send(loop.run_id, "resume", wait=WAIT)["result"] == \
        "not paused: nothing to resume"
    rec = lk.runs.send(loop.run_id, "stop", wait=WAIT)
    assert rec["result"] == "stopping after this batch"
    loop.wait()
    assert loop.stop_reason == "stopped by a command"
    assert lk.runs.get(loop.run_id)["status"] == "finished"
    assert not lk.runs.listening(lk.runs.get(loop.run_id))
    assert not [t for t in threading.enumerate() if t.name.startswith("labkit-commands")]


def test_a_run_no_loop_trains_refuses_commands():
    loop = T.build(make_loop, {"epochs": 1})
    rid = loop.ensure_run()
    for status in ("created", "finished"):
        with pytest.raises(lk.runs.RunStoreError, match="not training now") as e:
            lk.runs.send(rid, "stop")
        assert e.value.reason == "not_training" and f"status {status}" in str(e.value)
        loop.run()
    with pytest.raises(lk.runs.RunStoreError) as e:
        lk.runs.store().add_command(rid, "reboot")
    assert e.value.reason == "invalid" and "must be one of" in str(e.value)
    assert lk.runs.store().pending_commands(rid) == []


def test_commands_from_before_run_are_expired_unread():
    """A command left in the store (sent just as a run ended) must not act on the next run()."""
    loop = T.build(make_loop, {"epochs": 2})
    rid = loop.ensure_run()
    stale = lk.runs.store().add_command(rid, "stop")
    loop.run(max_iterations=5)
    assert loop.stop_reason is None and loop.status["iteration"] == 5
    rec = lk.runs.store().command(stale)
    assert rec["acked"] is not None and rec["result"].startswith("expired")


def test_a_pause_the_loop_never_reached_is_answered_when_training_ends():
    store = lk.runs.store()
    loop = T.build(make_loop, {"epochs": 1})
    rid = loop.ensure_run()

    class Control:  # a loop that never gets to act on it
        paused = False
        undone = False

        def pause(self):
            pass

        def unpause(self):
            self.undone = True

    control = Control()
    listener = commands.Listener(store, rid, control, lambda: 7)
    cid = store.add_command(rid, "pause")
    wait_for(lambda: listener._waiting["pause"] == [cid])
    listener.close("training finished")
    rec = store.command(cid)
    assert rec["result"] == "not done: training finished" and rec["iteration"] == 7
    assert control.undone  # the pause it took is undone: it must not act on the next run()


@pytest.mark.parametrize("then", ["resume", "stop"])
def test_a_pause_overtaken_by_a_resume_or_stop_is_answered_at_once(then):
    """Pause then resume (or stop) within one read of the commands: the loop never paused,
    and the pause stayed unanswered until training ended (a page polling it waited)."""
    store = lk.runs.store()
    loop = T.build(make_loop, {"epochs": 1})
    rid = loop.ensure_run()

    class Control:  # a loop that has not reached its next batch yet
        paused = False

        def pause(self):
            self.paused = True

        def unpause(self):
            self.paused = False

        def stop(self, why):
            self.why = why

    listener = commands.Listener(store, rid, Control(), lambda: 7)
    try:
        with listener._lock:  # NOTE: both in the store before the pause is taken
            first = store.add_command(rid, "pause")
            second = store.add_command(rid, then)
        wait_for(lambda: store.command(second)["acked"] is not None)
        rec = store.command(first)
        assert rec["acked"] is not None and rec["iteration"] == 7
        assert rec["result"] == ("overtaken by a resume (the loop went on at once)"
                                 if then == "resume" else "cancelled: the run stops")
        assert store.command(second)["result"] == ("resumed: the pause was overtaken"
                                                   if then == "resume" else
                                                   "stopping after this batch")
        assert listener._waiting["pause"] == []
    finally:
        listener.close("test over")


def test_commands_during_the_last_events_do_not_act_on_the_next_run():
    loop = T.build(make_loop, {"epochs": 1})
    rid = loop.ensure_run()
    sent = []

    def late(loop):  # a command arrives while after_training runs (a slow extension)
        sent.append(lk.runs.send(rid, "pause", wait=1.0))
        sent.append(lk.runs.send(rid, "checkpoint", wait=1.0))
    loop.add(late, event="after_training")
    loop.run()
    assert [r["result"] for r in sent] == [None, None]  # nobody took them then
    n = len(lk.runs.checkpoints(rid))
    loop.run(max_iterations=3)  # neither pauses nor checkpoints
    assert not loop.paused and len(lk.runs.checkpoints(rid)) == n
    for r in sent:  # and they are answered: expired
        assert lk.runs.store().command(r["id"])["result"].startswith("expired")


def test_a_listener_that_cannot_start_fails_the_run_cleanly(monkeypatch):
    def broken(*args, **kwargs):
        raise lk.runs.RunStoreError("the run store stayed locked")  # reason "failed"
    monkeypatch.setattr(commands, "Listener", broken)
    loop = T.build(make_loop, {"epochs": 1})
    rid = loop.ensure_run()
    with pytest.raises(lk.runs.RunStoreError, match="stayed locked"):
        loop.run()
    rec = lk.runs.get(rid)
    assert rec["status"] == "failed" and not rec["progress"]["training"]
    assert not lk.runs.listening(rec) and not loop._training


def test_a_deleted_run_stops_the_listener_not_the_loop(training):
    loop = training
    lk.runs.delete(loop.run_id, force=True)
    loop.wait()  # the loop stops at its next write, without an error
    assert loop.recorder.deleted


@pytest.mark.parametrize("command", ["pause", "checkpoint"])
def test_a_command_being_answered_is_not_taken_again(command):
    """The loop answers a pause (or a checkpoint) while the listener's thread polls: a poll
    that read the command as pending just before the answer was written took it again (a
    pause answered "already paused"; a second checkpoint asked for). The answer's write is
    made to poll in the middle, deterministically."""
    store = lk.runs.store()
    loop = T.build(make_loop, {"epochs": 1})
    rid = loop.ensure_run()

    class Control:
        paused = False
        checkpoints = 0

        def pause(self):
            self.paused = True

        def unpause(self):
            self.paused = False

        def request_checkpoint(self):
            self.checkpoints += 1

        def take_checkpoint_request(self):
            pass

    control = Control()
    listener = commands.Listener(store, rid, control, lambda: 3)
    try:
        listener._closed.set()  # NOTE: this test polls; the thread only waits to end
        listener._thread.join()
        cid = store.add_command(rid, command)
        assert listener.poll() == 1 and listener._waiting[command] == [cid]
        real = store.ack_command
        polled = []

        def ack_with_a_poll_first(i, result, iteration=None):
            if not polled:  # NOTE: the other thread's poll, just before the first write
                polled.append(None)
                polled[0] = listener.poll()
            real(i, result, iteration)
        store.ack_command = ack_with_a_poll_first
        try:
            listener.acknowledge(command, "paused" if command == "pause" else "written", 3)
        finally:
            store.ack_command = real
        assert polled == [0]
        rec = store.command(cid)
        assert rec["result"] == ("paused" if command == "pause" else "written")
        assert control.checkpoints == (1 if command == "checkpoint" else 0)
        assert listener.poll() == 0 and not listener._answered  # forgotten once written
    finally:
        listener.close()


def test_a_paused_run_s_record_holds_the_pause_s_iteration_and_every_metric_up_to_it(
        training):
    """What the cockpit reads while a run is paused is the pause: its iteration (a write
    queued before the pause, with older progress, landed after the status and the cockpit
    said iteration 411, then 415, while the run stayed paused) and the losses up to it."""
    loop = training
    rec = lk.runs.send(loop.run_id, "pause", wait=WAIT)
    it = rec["iteration"]
    run = lk.runs.get(loop.run_id)
    assert run["status"] == "paused" and run["progress"]["iteration"] == it
    assert lk.runs.metrics(loop.run_id, ["loss"])["loss"]["iteration"][-1] == it
    lk.runs.send(loop.run_id, "resume", wait=WAIT)


def test_a_status_lands_after_the_writes_queued_before_it(tmp_path):
    """The recorder's writer thread, held up, still holds a progress write when the status
    is written: the status's progress is the one the store keeps."""
    from labkit.training.recorder import Recorder

    r = Recorder()
    run_id = r.ensure_run("order", {}, None)
    r.mirror(lambda: {"iteration": 0}, force=True, wait=True)  # the writer thread exists
    held = threading.Event()
    r._writer.submit(held.wait, 60)
    r.mirror(lambda: {"iteration": 1}, force=True)  # queued behind the held write
    t = threading.Thread(target=r.set_status, args=("paused", {"iteration": 5}))
    t.start()
    t.join(0.5)  # the status is written by now, or waits for the queue (either holds below)
    held.set()
    t.join(60)
    r.close()
    run = lk.runs.get(run_id)
    assert run["status"] == "paused" and run["progress"] == {"iteration": 5}
