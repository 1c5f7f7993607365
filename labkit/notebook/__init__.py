"""labkit.notebook: widgets for JupyterLab (ipywidgets; plots are Bokeh via jupyter_bokeh).

::

    loop.start()                          # train on a background thread: the notebook stays live
    lk.notebook.Dashboard(loop)           # or loop.show(); or Dashboard(run_id) for a stored run
    lk.notebook.GraphView(loss)           # the computational graph, bricks collapsed
    lk.notebook.CheckpointBrowser(loop)   # runs and checkpoints: Restore, Fork, Delete

BokehJS is loaded inline (offline-safe) once per kernel. Every widget has a plain-text repr for
terminals and nbconvert.
"""

from ._bokeh import setup
from .checkpoints import CheckpointBrowser
from .dashboard import Dashboard
from .graphview import GraphView, collapse, layout

__all__ = ["CheckpointBrowser", "Dashboard", "GraphView", "collapse", "layout", "setup"]
