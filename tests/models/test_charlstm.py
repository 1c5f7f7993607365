"""The character LSTM: its validation bits per character, its sampler against its own
forward pass, the same on cpu and cl."""

import numpy as np

import labkit as lk
from labkit.models import charlstm

#: the stated target in bits per character on the held-out sonnets (measured 2.944; a
#: unigram model of the training text gives 4.50)
TARGET = 3.1


def test_trains_below_the_stated_bits_per_character_on_cpu():
    # about 12 s on 2 cores (early stopping keeps the best epoch)
    model, results = charlstm.train({"device": "cpu"})
    assert results["valid_bpc"] <= TARGET, results
    assert results["sample"].startswith("Shall I ") and len(results["sample"]) == 208


def test_shipped_weights_reach_the_target_and_repeat_their_sample():
    record = lk.models.info("charlstm-sonnets")
    model = lk.models.load("charlstm-sonnets")
    assert charlstm.valid_bpc(model) <= TARGET
    assert model.sample() == record["results"]["sample"]


def test_step_by_step_equals_the_whole_sequence():
    model = lk.models.load("charlstm-sonnets")
    text = "Shall I compare thee"
    ids = np.array([[model.vocab.index(c) for c in text]])
    with lk.no_grad():
        whole = model(ids).numpy()[0]
        state, steps = None, []
        for i in ids[0]:
            logits, state = model.step(np.array([i]), state)
            steps.append(logits.numpy()[0])
    np.testing.assert_allclose(np.array(steps), whole, rtol=1e-4, atol=1e-4)


def test_cl_agrees_with_cpu():
    cpu, cl = (lk.models.load("charlstm-sonnets", device=d) for d in ("cpu", "cl"))
    ids = np.array([[cpu.vocab.index(c) for c in "When I do count"]])
    with lk.no_grad():
        np.testing.assert_allclose(cl(ids).numpy(), cpu(ids).numpy(), atol=1e-4)
    assert cl.sample("Love ", 40, temperature=0) == cpu.sample("Love ", 40, temperature=0)


def test_training_script_runs_on_cl():
    loop = charlstm.make_loop({"device": "cl"})
    loop.run(max_iterations=2)
    _, loss = loop.log.series("loss")
    loop.close()
    assert len(loss) == 2 and np.isfinite(loss).all() and loss[0] > 3.5   # ln(60) = 4.09
