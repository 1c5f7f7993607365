"""labkit.notebook: the live cockpit and widgets for JupyterLab.

::

    loop.start()                          # train on a background thread: the notebook stays live
    lk.notebook.Dashboard(loop)           # or loop.show(); or Dashboard(run_id) for a stored run
    lk.notebook.GraphView(loss)           # the computational graph, bricks collapsed
    lk.notebook.CheckpointBrowser(loop)   # runs and checkpoints: Restore, Fork, Delete

The Dashboard is drawn by labkit's JupyterLab extension from the run store (through the
server's REST API, not the kernel), and carries a static copy for other viewers. GraphView and
the CheckpointBrowser are ipywidgets (GraphView's plots are Bokeh, loaded inline: offline-safe).
Everything has a plain-text repr for terminals and nbconvert.
"""

from ._bokeh import setup
from .checkpoints import CheckpointBrowser
from .dashboard import MIME_TYPE, Dashboard, Snapshot
from .graphview import GraphView, collapse, layout

__all__ = ["MIME_TYPE", "CheckpointBrowser", "Dashboard", "GraphView", "Snapshot", "collapse",
           "layout", "setup"]
