"""labkit.training: the main loop, its extensions, exact resume.

::

    import labkit as lk
    from labkit.training import (MainLoop, FinishAfter, DataStreamMonitoring, Checkpoint,
                                 ProgressBar, Printing)

    loop = MainLoop(model, optimizer, train_stream, loss_fn, extensions=[
        DataStreamMonitoring(valid_stream), Checkpoint(keep_best="valid_loss"),
        FinishAfter(epochs=10), Printing(), ProgressBar()])
    loop.run()                     # Ctrl-C: finish the batch, checkpoint, stop
    loop.log.series("valid_loss")  # the log, also in the run store (lk.runs)
    lk.resume(loop.run_id)         # continue a run from its newest valid checkpoint

``check_resume(make_loop, at_iteration=k)`` trains once straight through and once stopped at
iteration ``k`` and resumed from a checkpoint, and reports the first difference (there should
be none).

The parts: ``loop`` (MainLoop), ``events`` (Extension, triggers, dispatch), ``log`` (the log
and its read cursors), ``control`` (pause, stop, Ctrl-C), ``recorder`` (the run store),
``resume`` (build, resume, check_resume), ``extensions`` (the ones that ship).
"""

from ..errors import NonFiniteError, TrainingError
from .events import EVENTS, UNITS, Extension
from .extensions import (
    Checkpoint,
    DataStreamMonitoring,
    EarlyStopping,
    FinishAfter,
    LearningRateSchedule,
    NaNGuard,
    Printing,
    ProgressBar,
    Timing,
    TrainingDataMonitoring,
)
from .log import Cursor, Log
from .loop import MainLoop
from .resume import ResumeCheck, build, check_resume, load_factory, resume

__all__ = ["EVENTS", "UNITS", "Checkpoint", "Cursor", "DataStreamMonitoring", "EarlyStopping",
           "Extension", "FinishAfter", "LearningRateSchedule", "Log", "MainLoop", "NaNGuard",
           "NonFiniteError", "Printing", "ProgressBar", "ResumeCheck", "Timing",
           "TrainingDataMonitoring", "TrainingError", "build", "check_resume", "load_factory",
           "resume"]
