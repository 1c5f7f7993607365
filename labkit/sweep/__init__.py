"""labkit.sweep: hyperparameter sweeps on Dask distributed, each trial a run in the store,
resumable trial by trial.

::

    import labkit as lk
    space = {"lr": lk.sweep.loguniform(1e-4, 1e-1), "hidden": [64, 128, 256],
             "depth": lk.sweep.range(1, 8)}
    sw = lk.sweep.run(make_loop, space, trials=60, search="random",   # grid | random | sobol
                      metric="valid_accuracy", mode="max",
                      early_stopping=lk.sweep.ASHA(grace=2, reduction=3),   # or None
                      engine="local", workers=2)          # or "tcp://host:8786", a Client
    sw.best(); sw.table(); sw.show()                      # show(): the live view
    lk.sweep.resume(sw.id)                                # after a crash, a kill, a stop

Dask is imported only here (``pip install 'labkit[sweep]'``): ``import labkit`` does not.
The parts: ``space`` (spaces and search), ``sobol``, ``asha`` (decisions), ``trial`` (what a
worker runs), ``engine`` (the Dask client), ``driver`` (the one writer of the store), ``api``,
``view`` (``sw.show()``), ``trend`` (a quantity against a parameter, with its line and R²),
``cli`` (``labkit sweep``).
"""

from .api import Sweep, get, list, resume, run
from .asha import ASHA
from .space import SweepError, TrialError, choice, loguniform, range, uniform
from .trend import Trend, linear_fit, trend

__all__ = ["ASHA", "Sweep", "SweepError", "TrialError", "Trend", "choice", "get",
           "linear_fit", "list", "loguniform", "range", "resume", "run", "trend", "uniform"]
