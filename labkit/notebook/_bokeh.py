"""Bokeh inside ipywidgets, offline: BokehJS is loaded inline, once per kernel session."""

from __future__ import annotations

_loaded = {"done": False}


def require():
    """Import the notebook extras, or say how to install them."""
    try:
        import bokeh  # noqa: F401
        import ipywidgets  # noqa: F401
        import jupyter_bokeh  # noqa: F401
    except ImportError as e:
        from ..errors import LabkitError

        raise LabkitError(f"labkit.notebook needs ipywidgets, bokeh and jupyter_bokeh ({e}); "
                          "pip install 'labkit[notebook]'") from None


def setup(force: bool = False) -> None:
    """Load BokehJS into the page from the installed bokeh package (no network: the default
    CDN resources leave plots blank offline). Done once per kernel; widgets call it."""
    require()
    if _loaded["done"] and not force:
        return
    from bokeh.io import output_notebook
    from bokeh.resources import INLINE

    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with ipywidgets
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        output_notebook(resources=INLINE, hide_banner=True)
    _loaded["done"] = True


def model(fig):
    """A ``jupyter_bokeh.BokehModel`` widget showing ``fig``."""
    from jupyter_bokeh import BokehModel

    setup()
    return BokehModel(fig)
