"""labkit: a Jupyter-centric research environment for deep learning.

The public API, as explicit re-exports::

    import labkit as lk
    import labkit.functions as F
    import labkit.bricks as B

    lk.devices()              # [Device('cpu'), Device('cl:0'), ...]
    dev = lk.device("cl")     # "cpu" | "cl" | "cl:N"; default from LABKIT_DEVICE
    x = lk.tensor(array, device=dev, requires_grad=True)
    lk.grad([y], [x], create_graph=True); lk.autograd.hvp(f, [x], [v])
    model = B.MLP([784, 256, 10]).to(dev); lk.Graph(loss).filter(role=lk.roles.WEIGHT)
    opt = lk.optimizers.Adam(lr=1e-3).setup(model)
    step = lk.compile(train_step)   # traced once, replayed without Python per op
"""

from . import (
    autograd,
    bricks,
    checkpoint,
    compile,
    config,
    data,
    models,
    optimizers,
    regularizers,
    roles,
    runs,
    training,
)
from .autograd import Function, Tensor, enable_grad, grad, no_grad, tensor
from .backend import (
    Device,
    asarray,
    best_device,
    default_device,
    device,
    devices,
    get_array_module,
)
from .backend.random import Generator
from .compile import scan
from .errors import (
    BrickError,
    CheckpointError,
    CompileError,
    ConfigError,
    DataError,
    DeviceError,
    DeviceMismatchError,
    DTypeError,
    IndexingError,
    KernelBuildError,
    LabkitError,
    RunStoreError,
    ShapeError,
    TrainingError,
    WorkerError,
)
from .graph import Graph
from .training import resume

__version__ = "0.1.0"


def _dashboard(loop, **kwargs):
    import importlib

    return importlib.import_module(".notebook", __name__).Dashboard(loop, **kwargs)


# NOTE: the package root wires the layers: loop.show() is a notebook Dashboard, and the
# training layer never imports the notebook layer above it
training.loop.set_viewer(_dashboard)


def __getattr__(name):
    # NOTE: the widgets import ipywidgets and bokeh: only when first used (lk.notebook....)
    if name == "notebook":
        import importlib

        return importlib.import_module(".notebook", __name__)
    # NOTE: lk.dist loads on first use too (its modules import mpi4py only when MPI is used)
    if name == "dist":
        import importlib

        return importlib.import_module(".dist", __name__)
    # NOTE: lk.sweep loads on first use (it imports Dask only when a sweep runs)
    if name == "sweep":
        import importlib

        return importlib.import_module(".sweep", __name__)
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")


def _jupyter_labextension_paths():
    # for `jupyter labextension develop --overwrite .`: link the built frontend into JupyterLab
    return [{"src": "labextension", "dest": "labkit-runs"}]


__all__ = [
    "BrickError", "CheckpointError", "CompileError", "ConfigError", "DataError", "Device",
    "DeviceError",
    "DeviceMismatchError", "DTypeError", "Function", "Generator", "Graph", "IndexingError",
    "KernelBuildError",
    "LabkitError", "RunStoreError", "ShapeError", "Tensor", "TrainingError", "WorkerError",
    "__version__", "asarray", "autograd", "best_device", "bricks", "checkpoint", "compile",
    "config",
    "data", "default_device", "device", "devices", "enable_grad", "get_array_module", "grad",
    "models", "no_grad", "notebook", "optimizers", "regularizers", "resume", "roles", "runs",
    "scan", "tensor", "training",
]
