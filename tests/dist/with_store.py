"""A DataParallelLoop with the usual extensions and the run store: rank 0 records the run and
its checkpoints (pruned to the newest two); the others record nothing."""

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import training as T
from labkit.data import DataStream, IndexableDataset

comm = lk.dist.world()
rng = np.random.default_rng(0)
data = IndexableDataset({"x": rng.standard_normal((256, 20)).astype(np.float32),
                         "y": rng.integers(0, 3, 256)})
model = B.MLP([20, 16, 3])
opt = lk.optimizers.Adam(lr=1e-2).setup(model)
stream = DataStream(data, batch_size=32, shuffle=True)


def loss_fn(model, batch):
    logits = model(lk.tensor(batch["x"]))
    return {"loss": F.softmax_cross_entropy(logits, batch["y"]),
            "accuracy": F.accuracy(logits, batch["y"])}


loop = lk.dist.DataParallelLoop(model, opt, stream, loss_fn, name="dp-ext", extensions=[
    T.TrainingDataMonitoring(), T.Checkpoint(keep_last=2), T.FinishAfter(epochs=4)])
loop.run()
if comm.rank == 0:  # only rank 0 has the run in the store
    print(lk.runs.get(loop.run_id)["status"],
          [c["iteration"] for c in lk.runs.checkpoints(loop.run_id)])
