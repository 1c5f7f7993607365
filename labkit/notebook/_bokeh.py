"""Bokeh inside ipywidgets, offline: BokehJS is loaded inline (guarded) before each plot
widget, and the widgets lose no change made before the browser shows them."""

from __future__ import annotations


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


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with ipywidgets
        return False
    return get_ipython() is not None


def loader_js() -> str:
    """BokehJS from the installed bokeh package, run only if the page lacks it."""
    import bokeh
    from bokeh.resources import INLINE

    body = "\n".join(INLINE.js_raw)
    # NOTE: the bundle sets ``this.Bokeh``; JupyterLab runs output JavaScript with another
    # ``this``, so it is called on ``window``
    return (f"if (typeof window.Bokeh === 'undefined' || window.Bokeh.version !== "
            f"'{bokeh.__version__}') {{ (function() {{\n{body}\n}}).call(window); }}")


def setup() -> None:
    """Make sure the page has BokehJS, from the installed bokeh package (no network: the
    default CDN resources leave plots blank offline).

    NOTE: the kernel cannot know whether *this page* has BokehJS (a reload, or a second
    browser tab, starts without it while the kernel lives on), so every labkit plot widget is
    preceded by a guarded loader that does nothing when BokehJS is already there."""
    require()
    if not _in_kernel():
        return
    from IPython.display import display

    display({"application/javascript": loader_js()}, raw=True)


class WidgetRepr:
    """The display protocol of labkit's widgets: the ipywidget in ``self.widget``, with this
    object's ``repr`` as the plain-text form (terminals, nbconvert). ``plots = True`` first
    makes sure the page has BokehJS."""

    plots = False

    def _repr_mimebundle_(self, **kwargs):
        if self.plots:
            setup()  # BokehJS into this page first, if it is not there
        bundle = self.widget._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict):
            bundle["text/plain"] = repr(self)
        return bundle


_model_class = None


def model(fig, lock=None):
    """A ``jupyter_bokeh.BokehModel`` widget showing ``fig``, that loses no change made before
    the browser shows it, and shows none twice. ``lock``: held while it touches the figure's
    data (the lock of whoever streams into it from another thread).

    NOTE: BokehJS's view of the widget draws the document serialized when the widget was
    created, and changes reach it as messages that only a view already shown receives (seen:
    points streamed right after a figure was built never appeared; and a stretch of a curve
    drawn twice, when a view drew the refreshed state and then applied a patch it already
    held, or a patch that had waited for the view to draw). So (1) until the frontend reports
    a view (``_view_count``), changes are not sent as patches but re-serialized into the
    widget's state, which a view draws from when it appears; (2) each time a view appears,
    every data source is sent again whole, which replaces whatever the views hold with the
    kernel's data; after that, changes go as patches."""
    global _model_class
    if _model_class is None:
        import contextlib

        from bokeh.models import ColumnDataSource
        from jupyter_bokeh import BokehModel

        class Model(BokehModel):
            def __init__(self, fig, lock=None, **kwargs):
                self._data_lock = lock or contextlib.nullcontext()
                super().__init__(fig, **kwargs)
                self.observe(self._on_views, names="_view_count")

            def _document_patched(self, event):
                if self._view_count:
                    super()._document_patched(event)
                elif event.setter is not self:
                    self.render_bundle = self._model_to_traits(self._model)

            def _on_views(self, change):
                if (change["new"] or 0) <= (change["old"] or 0):
                    return
                with self._data_lock:
                    for src in self._model.select(type=ColumnDataSource):
                        src.data = {k: list(v) for k, v in src.data.items()}

        _model_class = Model
    return _model_class(fig, lock, _view_count=0)
