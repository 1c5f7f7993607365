"""Data-parallel training on MPI ranks against one process on the same global batches.

Each test starts an MPI job (tests/dist/worker.py) in its own process group with a hard timeout
and kills the group afterwards (tests/dist/mpirun.py); the single-process reference runs here.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py")

import labkit as lk  # noqa: E402
from labkit.data import DataStream, ShuffledScheme  # noqa: E402

from . import mpirun, worker  # noqa: E402

STEPS = 20


def reference(kind: str, steps: int = STEPS, buffers: list | None = None):
    """One process, a plain MainLoop, the same global batches: params and indices per step
    (and the model's buffers after each step into ``buffers``)."""
    from labkit.functions import noise

    for g in noise.default_generators().values():  # a fresh process's dropout stream
        g.load_state_dict({"seed": 0, "counter": 0})
    model = worker.build(kind, seed=1)
    opt = lk.optimizers.Momentum(lr=0.1, momentum=0.9).setup(model)
    stream = DataStream(worker.dataset(), batch_size=worker.BATCH, shuffle=True, seed=3)
    indices, params = [], []

    def loss_fn(model, batch):
        indices.append(np.array(batch["index"]))
        return lk.functions.softmax_cross_entropy(model(lk.tensor(batch["x"])), batch["y"])

    loop = lk.training.MainLoop(model, opt, stream, loss_fn, store=False)
    loop.add(lambda loop: params.append({k: p.numpy().copy() for k, p in opt.params.items()}),
             event="after_batch")
    if buffers is not None:
        loop.add(lambda loop: buffers.append({k: np.array(v) for k, v in
                                              model.state_dict().items()
                                              if k in model.buffers()}), event="after_batch")
    loop.run(max_iterations=steps)
    return indices, params, [r["loss"] for r in loop.log.rows]


def global_order(first: int, last: int):
    """The global batches of iterations first+1..last, as the scheme defines them."""
    s = ShuffledScheme(worker.N_EXAMPLES, worker.BATCH, seed=3)
    per_epoch = s.num_requests(0)
    return [s.request(i // per_epoch, i % per_epoch) for i in range(first, last)]


def load(out, n):
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(n)]


def check_against_reference(ranks, ref_params, ref_loss, steps=STEPS, rtol=1e-6):
    for r in ranks[1:]:  # bitwise equal on every rank, after every step
        np.testing.assert_array_equal(r["crc"], ranks[0]["crc"])
    assert len(ranks[0]["crc"]) == steps
    for k, want in ref_params[-1].items():
        got = ranks[0][f"param:{k}"]
        scale = np.abs(want).max()
        assert np.abs(got - want).max() <= rtol * scale, k
    # the recorded loss is the global batch's, as one process records it
    np.testing.assert_allclose(ranks[0]["loss"], ref_loss[-steps:], rtol=rtol)


@pytest.mark.parametrize("n,extra", [(2, []), (4, []), (2, ["--progress-thread"])],
                         ids=["2", "4", "2-progress-thread"])
def test_ranks_agree_bitwise_and_match_one_process(tmp_path, n, extra):
    job = mpirun.run(n, [tmp_path, "--steps", STEPS, "--bucket-mb", 0.0002, *extra],
                     timeout=60)
    assert job.rc == 0, job
    ranks = load(tmp_path, n)
    ref_idx, ref_params, ref_loss = reference("mlp")
    check_against_reference(ranks, ref_params, ref_loss)
    for step in range(STEPS):  # the shards, in rank order, are the global batch
        got = np.concatenate([r["indices"][step] for r in ranks])
        np.testing.assert_array_equal(got, ref_idx[step])


def test_on_opencl_devices_through_host_memory(tmp_path):
    job = mpirun.run(2, [tmp_path, "--steps", 5, "--device", "cl", "--bucket-mb", 0.0002],
                     timeout=60)
    assert job.rc == 0, job
    _, ref_params, ref_loss = reference("mlp", steps=5)
    # the device's GEMM rounds differently from NumPy's: a looser bound than on cpu
    check_against_reference(load(tmp_path, 2), ref_params, ref_loss, steps=5, rtol=1e-5)


def test_shared_and_unused_parameters(tmp_path):
    job = mpirun.run(2, [tmp_path, "--model", "tied", "--steps", 8, "--bucket-mb", 0.0002],
                     timeout=60)
    assert job.rc == 0, job
    ranks = load(tmp_path, 2)
    _, ref_params, ref_loss = reference("tied", steps=8)
    check_against_reference(ranks, ref_params, ref_loss, steps=8)
    # no gradient ever reached the spare parameter: like one process, it never moved
    np.testing.assert_array_equal(ranks[1]["param:/tied.spare"], np.full(5, 0.5, np.float32))


@pytest.mark.parametrize("n", [2, 3])
def test_dropout_masks_each_example_as_one_process_would(tmp_path, n):
    """Each rank draws its rows of the global batch's masks (a Dropout brick's generator and
    F.dropout's default one; 16 rows on 3 ranks split 6/5/5, so shards start inside Philox
    blocks). Every rank is built with another seed: the generators come from rank 0."""
    job = mpirun.run(n, [tmp_path, "--model", "dropout", "--steps", 8, "--bucket-mb", 0.0002],
                     timeout=60)
    assert job.rc == 0, job
    _, ref_params, ref_loss = reference("dropout", steps=8)
    check_against_reference(load(tmp_path, n), ref_params, ref_loss, steps=8)


def test_batchnorm_statistics_are_averaged_over_ranks(tmp_path):
    """Running statistics: the same on every rank after each batch; after the first batch
    (all ranks start from the same parameters) the running mean is the global batch's, as in
    one process; the running variance is the mean of the shards' variances."""
    job = mpirun.run(2, [tmp_path, "--model", "bn", "--steps", 6, "--bucket-mb", 0.0002],
                     timeout=60)
    assert job.rc == 0, job
    ranks = load(tmp_path, 2)
    names = [k for k in ranks[0] if k.startswith("buffer:")]
    assert {k.rpartition(".")[2] for k in names} == {"running_mean", "running_var"}
    for k in names:
        np.testing.assert_array_equal(ranks[0][k], ranks[1][k])
    ref_buffers = []
    reference("bn", steps=1, buffers=ref_buffers)
    mean = next(k for k in ref_buffers[0] if k.endswith("running_mean"))
    np.testing.assert_allclose(ranks[0]["buffer1:" + mean], ref_buffers[0][mean], rtol=1e-6,
                               atol=1e-7)
    var = mean.replace("running_mean", "running_var")
    assert not np.array_equal(ranks[0]["buffer1:" + var], ranks[0]["buffer:" + var])


@pytest.mark.parametrize("n,device,extra", [(2, "cpu", []), (3, "cpu", []), (2, "cl", []),
                                            (2, "cpu", ["--compile"])],
                         ids=["2", "3", "2-cl", "2-compiled"])
def test_sync_batchnorm_trains_like_one_process(tmp_path, n, device, extra):
    """SyncBatchNorm normalizes each shard with the global batch's statistics (sums over the
    ranks, and their gradients summed back): parameters, losses and running statistics follow
    one process's plain BatchNorm on the same global batches (3 ranks: shards of 6, 5 and 5),
    where per-shard statistics drift away from it."""
    steps = 8
    job = mpirun.run(n, [tmp_path, "--model", "syncbn", "--steps", steps, "--device", device,
                         "--bucket-mb", 0.0002, *extra], timeout=90)
    assert job.rc == 0, job
    ranks = load(tmp_path, n)
    ref_buffers = []
    _, ref_params, ref_loss = reference("bn", steps=steps, buffers=ref_buffers)
    for r in ranks[1:]:
        np.testing.assert_array_equal(r["crc"], ranks[0]["crc"])
    for k, want in ref_params[-1].items():
        # NOTE: the bias before a BatchNorm gets no gradient (the mean is taken out): it stays
        # at rounding noise, so it is compared on the scale of 0.01
        scale = max(np.abs(want).max(), 1e-2)
        assert np.abs(ranks[0][f"param:{k}"] - want).max() <= 2e-5 * scale, k
    np.testing.assert_allclose(ranks[0]["loss"], ref_loss[-steps:], rtol=2e-5)
    for k, want in ref_buffers[-1].items():
        np.testing.assert_allclose(ranks[0]["buffer:" + k], want, rtol=2e-5, atol=1e-6)
    if extra:
        assert int(ranks[0]["replays"]) == steps - 2  # two traced calls, then replays
    elif n == 2 and device == "cpu":  # per-shard statistics: visibly not one process's
        plain = tmp_path / "plain"
        plain.mkdir()
        job = mpirun.run(2, [plain, "--model", "bn", "--steps", steps, "--bucket-mb",
                             0.0002], timeout=60)
        assert job.rc == 0, job
        got = load(plain, 2)[0]
        assert max(np.abs(got[f"param:{k}"] - want).max() / np.abs(want).max()
                   for k, want in ref_params[-1].items()) > 1e-3


def test_batchnorm_statistics_stay_averaged_on_opencl_and_after_a_resume(tmp_path):
    """The buffers are looked up at every batch (loading a checkpoint replaces the arrays) and
    written back on their device."""
    job = mpirun.run(2, [tmp_path, "--model", "bn", "--steps", 4, "--device", "cl",
                         "--bucket-mb", 0.0002], timeout=60)
    assert job.rc == 0, job
    ranks = load(tmp_path, 2)
    for k in (k for k in ranks[0] if k.startswith("buffer:")):
        np.testing.assert_array_equal(ranks[0][k], ranks[1][k])
    first = tmp_path / "first"
    first.mkdir()
    job = mpirun.run(2, [first, "--model", "bn", "--steps", 3, "--ckpt-every", 3,
                         "--bucket-mb", 0.0002], timeout=60)
    assert job.rc == 0, job
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    job = mpirun.run(2, [resumed, "--model", "bn", "--steps", 6, "--bucket-mb", 0.0002,
                         "--resume", first / "ckpt" / "ckpt-00000003"], timeout=60)
    assert job.rc == 0, job
    ranks = load(resumed, 2)
    names = [k for k in ranks[0] if k.startswith("buffer:")]
    assert names
    for k in names:
        np.testing.assert_array_equal(ranks[0][k], ranks[1][k])


@pytest.mark.parametrize("model", ["mlp", "dropout"])
def test_a_compiled_step_trains_data_parallel(tmp_path, model):
    """MainLoop(compile=True) on 2 ranks: the all-reduce is a host call of the compiled step,
    so every replay averages that step's gradients (dropout draws its shard's fresh masks)."""
    job = mpirun.run(2, [tmp_path, "--model", model, "--steps", 10, "--bucket-mb", 0.0002,
                         "--compile"], timeout=60)
    assert job.rc == 0, job
    ranks = load(tmp_path, 2)
    assert int(ranks[0]["replays"]) == 8  # two traced calls, then replays
    _, ref_params, ref_loss = reference(model, steps=10)
    check_against_reference(ranks, ref_params, ref_loss, steps=10)


def test_mismatched_models_fail_naming_the_parameter(tmp_path):
    job = mpirun.run(2, [tmp_path, "--model", "mismatch"], timeout=30)
    assert job.rc != 0
    assert "the ranks' models differ" in job.err, job
    assert "'/tied/head.W'" in job.err and "rank 1" in job.err, job
    assert not job.left


def test_an_exception_on_one_rank_ends_every_rank(tmp_path):
    job = mpirun.run(2, [tmp_path, "--fail-rank", 1, "--fail-at", 3], timeout=60)
    assert job.rc != 0, job
    assert "fails on purpose" in job.err
    assert not job.left, "a rank outlived the job"
    assert not (tmp_path / "rank0.npz").exists()


@pytest.mark.parametrize("before,after", [(2, 1), (4, 2)])
def test_killed_job_resumes_on_another_number_of_ranks(tmp_path, before, after):
    job = mpirun.run(before, [tmp_path, "--steps", STEPS, "--ckpt-every", 5, "--die-at", 8],
                     timeout=60)
    assert job.rc != 0 and not job.left, job
    assert not (tmp_path / "rank0.npz").exists()
    ckpt = tmp_path / "ckpt" / "ckpt-00000005"
    assert ckpt.is_dir()
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    job = mpirun.run(after if after > 1 else None,
                     [resumed, "--steps", STEPS, "--resume", ckpt], timeout=60)
    assert job.rc == 0, job
    ranks = load(resumed, after)
    assert int(ranks[0]["first"]) == 5
    for k, want in enumerate(global_order(5, STEPS)):  # the same global sample order
        got = np.concatenate([r["indices"][k] for r in ranks])
        np.testing.assert_array_equal(got, want)
    _, ref_params, ref_loss = reference("mlp")
    check_against_reference(ranks, ref_params, ref_loss, steps=STEPS - 5)


def test_stall_inspector_names_the_rank_that_has_not_arrived():
    err = mpirun.run_until(2, mpirun.WORKER.with_name("stall.py"), [], "not arrived",
                           env={"LABKIT_DIST_STALL": "0.5"})
    assert "rank 0/2 has waited" in err and "in barrier" in err, err
    assert "not arrived: rank 1 (at collective 1: barrier)" in err, err


def test_a_rank_stuck_outside_the_collectives_ends_the_job_past_the_timeout():
    """Rank 1 waits for a message that never comes (no labkit collective sees it): past
    LABKIT_DIST_TIMEOUT rank 0's wait ends the job with a DistError naming it. Before, the
    stall report came every LABKIT_DIST_STALL seconds, forever."""
    job = mpirun.run(2, [], timeout=60, script=mpirun.WORKER.with_name("stall.py"),
                     env={"LABKIT_DIST_STALL": "0.3", "LABKIT_DIST_TIMEOUT": "1"})
    assert job.rc != 0 and not job.left, job
    assert re.search(r"DistError: rank 0/2 has waited \d+ s in barrier \(collective 2 of this "
                     r"rank\), past LABKIT_DIST_TIMEOUT \(1 s\); not arrived: rank 1 \(at "
                     r"collective 1: barrier\): it is stuck outside the job's collectives",
                     job.err), job


def test_labkit_launch_ends_every_rank_when_one_fails(tmp_path):
    cli = tmp_path / "cli.py"
    cli.write_text("import sys\nfrom labkit.cli import main\nsys.exit(main())\n")
    job = mpirun.run(None, ["launch", "-n", 2, mpirun.WORKER, tmp_path, "--fail-rank", 0,
                            "--fail-at", 2], timeout=60, script=cli)
    assert job.rc != 0, job
    assert "rank 0 fails on purpose at iteration 2" in job.err
    assert not job.left


def test_extensions_checkpoints_and_the_run_store(tmp_path):
    home = tmp_path / "home"
    job = mpirun.run(2, [], timeout=60, script=mpirun.WORKER.with_name("with_store.py"),
                     env={"LABKIT_HOME": str(home)})
    assert job.rc == 0, job
    assert job.out.split("\n")[0] == "finished [24, 32]", job  # 8 batches an epoch, 4 epochs
    assert len(list((home / "runs").iterdir())) == 1  # one run: rank 0's


def test_ctrl_c_on_one_rank_stops_every_rank_after_the_same_batch(tmp_path):
    job = mpirun.run(2, [tmp_path, "--steps", STEPS, "--sigint-rank", 1, "--sigint-at", 5],
                     timeout=60)
    assert job.rc == 0, job
    ranks = load(tmp_path, 2)
    # proposed after batch 5, agreed after batch 6: both ranks stop there, checkpointed
    assert [len(r["crc"]) for r in ranks] == [6, 6]
    assert str(ranks[0]["last_ckpt"]).endswith("ckpt-00000006")
    np.testing.assert_array_equal(ranks[0]["crc"], ranks[1]["crc"])


def test_a_stop_from_another_thread_on_rank_0_stops_every_rank(tmp_path):
    job = mpirun.run(2, [tmp_path, "--steps", STEPS, "--stop-thread-at", 3], timeout=60)
    assert job.rc == 0, job
    ranks = load(tmp_path, 2)
    assert [len(r["crc"]) for r in ranks] == [4, 4]
    assert str(ranks[0]["stopped"]) == "asked from another thread"
    assert str(ranks[1]["stopped"]) == "stopped (asked on another rank)"


def test_a_pause_on_rank_0_pauses_every_rank_and_a_checkpoint_is_written_meanwhile(tmp_path):
    job = mpirun.run(2, [tmp_path, "--steps", 8, "--pause-at", 3], timeout=60)
    assert job.rc == 0, job
    ranks = load(tmp_path, 2)
    assert [r["paused"].tolist() for r in ranks] == [[4], [4]]  # agreed after batch 4
    assert [len(r["crc"]) for r in ranks] == [8, 8]
    np.testing.assert_array_equal(ranks[0]["crc"], ranks[1]["crc"])
    written = [str(r["last_ckpt"]) for r in ranks]
    assert written[0] == written[1] and written[0].endswith("ckpt-00000004"), written
    assert Path(written[0]).is_dir()
