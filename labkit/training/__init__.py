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

``check_resume(make_loop, at_batch=k)`` trains once straight through and once stopped at batch
``k`` and resumed from a checkpoint, and reports the first difference (there should be none).
"""

from .extensions import (
    Checkpoint,
    DataStreamMonitoring,
    EarlyStopping,
    FinishAfter,
    LearningRateSchedule,
    NaNGuard,
    NonFiniteError,
    Printing,
    ProgressBar,
    Timing,
    TrainingDataMonitoring,
)
from .loop import (
    EVENTS,
    Extension,
    Log,
    MainLoop,
    ResumeCheck,
    TrainingError,
    build,
    check_resume,
    load_factory,
    resume,
)

__all__ = ["EVENTS", "Checkpoint", "DataStreamMonitoring", "EarlyStopping", "Extension",
           "FinishAfter", "LearningRateSchedule", "Log", "MainLoop", "NaNGuard",
           "NonFiniteError", "Printing", "ProgressBar", "ResumeCheck", "Timing",
           "TrainingDataMonitoring", "TrainingError", "build", "check_resume", "load_factory",
           "resume"]
