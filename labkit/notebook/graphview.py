"""GraphView: a layered drawing of a computational graph, top to bottom, bricks collapsed and
expandable one level per click. The graph's reduction, layout, labels and tooltip rows are in
``_graph_data``; this module draws them with Bokeh and handles the clicks."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..runs.html import esc
from . import _bokeh
from . import _graph_data as gd
from ._graph_data import FAILED, collapse, layout

__all__ = ["GraphView", "collapse", "layout"]

KIND_COLOR = {"input": "#2ca02c", "function": "#1f77b4", "brick": "#7b52ab",
              "output": "#455a64", FAILED: "#d62728"}
#: a fused kernel of a compiled program (lk.compile's graph): its group and, opened, its ops
KERNEL_COLOR = "#00838f"
KERNEL_GROUP = "/compiled/fused"
ROLE_COLOR = {"WEIGHT": "#c85a00", "FILTER": "#c85a00", "BIAS": "#b5367f",
              "PARAMETER": "#8c564b"}
FAILED_LINE = "#d62728"  # outline of the nodes of the brick where a ShapeError happened
NEUTRAL = "#8a8a8a"  # text on the transparent background before the theme's colours arrive
LAYER_PX = 66  # vertical room per layer: a node, an edge and its shape label
MAX_NODES = 150  # drawn at first (the default depth is lowered until they fit)
MAX_HEIGHT = 960  # taller graphs scroll (drag) inside the figure; the title says how many
THEME_JS = (Path(__file__).with_name("graphview_theme.js")).read_text()
CLICK_JS = """
const i = cb_obj.indices[0];
if (i === undefined) return;
const ids = source.data instanceof Map ? source.data.get("id") : source.data.id;
clicks.tags = [ids[i], (clicks.tags[1] || 0) + 1];
cb_obj.indices = [];
"""


#: keeps the x axis at one unit to a pixel (``_graph_data.spread`` lays nodes out in pixels,
#: their boxes and labels are drawn in pixels), as wide as the figure: centred on the graph
#: (its extent in pixels is the range's ``tags``), or from its left edge where the graph is
#: wider, which is then dragged sideways (the title says so). Run after the changes of a
#: redraw have all arrived (a range set from Python in the same message comes after it)
FIT_JS = """
const fit = () => {
  const w = fig.inner_width;
  if (!(w > 0) || x_range.tags.length < 2) return;
  const [lo, hi] = x_range.tags;
  // NOTE: a graph narrower than the figure is centred; a wider one starts at its left edge
  const start = hi - lo <= w ? (lo + hi - w) / 2 : lo;
  if (x_range.start !== start || x_range.end !== start + w)
    x_range.setv({start, end: start + w, reset_start: start, reset_end: start + w});
  const base = fig.title.text.split(SIDEWAYS)[0];
  const text = base + (hi - lo > w ? SIDEWAYS : "");
  if (fig.title.text !== text) fig.title.text = text;
};
setTimeout(fit, 0);
"""
#: what FIT_JS adds to the title of a graph wider than its figure
SIDEWAYS = " · drag sideways for more"


def node_width(text: str) -> int:
    """A node's box in pixels, for its label in 12 px bold type."""
    return 7 * len(text) + 18


class GraphView(_bokeh.WidgetRepr):
    """``GraphView(loss)`` (or a ``lk.Graph``, or a ``ShapeError`` carrying ``.graph``): the
    graph from inputs and parameters (top) to the output (bottom). Each node is labelled (op,
    brick, parameter name); each edge with the shape of the tensor it carries. Bricks below
    ``depth`` (default: 2, or 1 where 2 would draw over ``MAX_NODES``) start collapsed
    (``▸``): a click expands one level; the *collapse* menu folds a brick back. A click on
    another node shows its details, and for a tensor the histograms of its value and
    gradient. For a shape error the failing op is drawn in red with what it expected and
    what it got.

    Examples
    --------
    >>> import numpy as np, labkit as lk, labkit.bricks as B
    >>> loss = B.MLP([4, 8, 2])(lk.tensor(np.ones((3, 4), np.float32))).sum()
    >>> view = GraphView(loss)
    >>> view.expand("/mlp/linear_0"); print(view)
    GraphView(4 ops, 4 parameters; drawn as 1 brick, 3 function, 1 input, 1 output, 2 parameter)
    """

    plots = True

    def __init__(self, target, depth: int | None = None, width: int | None = None,
                 height: int | None = None, title: str | None = None):
        from ..graph import Graph

        _bokeh.require()
        import ipywidgets as w

        self.failure = None
        failed = None
        if isinstance(target, BaseException):
            error, failed = target, getattr(target, "brick", None)
            target = getattr(target, "graph", None)
            if target is None:
                raise ValueError("GraphView: this error carries no graph")
            self.failure = gd.failure(error)
        self.graph = target if isinstance(target, Graph) else Graph(target)
        self.title = title or getattr(self.graph, "title", None) or "computational graph"
        self.failed_brick = failed
        self.full = self.graph.to_dict()
        self.tensors = {f"v{k}": v for k, v in enumerate(self.graph.variables)}
        outs = {f"v{k}" for k, v in enumerate(self.graph.variables)
                if any(v is o for o in self.graph.outputs)}
        by_id = {n["id"]: n for n in self.full["nodes"]}
        if self.failure is None:
            for i in outs:
                if by_id[i]["kind"] == "variable":
                    by_id[i]["kind"] = "output"
        else:  # the outputs are what the failing op was given
            self.full["nodes"].append({"id": FAILED, "kind": FAILED, "brick": None,
                                       "in_brick": failed, **self.failure})
            self.full["edges"] += [[i, FAILED] for i in sorted(outs)]
        self.made = {a: b for a, b in self.full["edges"] if a.startswith("f")}  # op -> output
        self.ops = gd.ops_graph(self.full)
        if depth is None:  # bricks two levels down, or one where that draws too many nodes
            depth = 2
            while depth > 1 and len(collapse(self.ops, frozenset(), depth)["nodes"]) > MAX_NODES:
                depth -= 1
        self.depth = depth
        # NOTE: a failure inside a collapsed brick would hide where it is: its bricks start open
        self.expanded: set[str] = set()
        b = failed
        while b and b.count("/") > depth:
            b = b.rsplit("/", 1)[0]
            self.expanded.add(b)
        self.width, self.height = width, height
        self.hint = w.HTML("click a <b>▸ brick</b> to expand it one level, another node for "
                           "its details; hover for more")
        self.collapse_menu = w.Dropdown(description="collapse", options=[""],
                                        layout=w.Layout(width="300px"))
        self.collapse_menu.observe(self._on_collapse_menu, "value")
        self.details = w.HTML(layout=w.Layout(flex="1 1 280px", min_width="240px"))
        self._build_figure()
        self.redraw()  # before the widget exists: one serialization, not one per change
        self.plot = _bokeh.model(self.figure)
        self.plot.layout.width = "100%"
        self._build_histograms()
        if self.failure is not None:
            self.details.value = self._failure_html()
        self.widget = w.VBox([w.HBox([self.hint, self.collapse_menu]), self.plot,
                              w.HBox([self.details, self.hist_box])],
                             layout=w.Layout(width="100%"))
        self.widget.add_class("labkit-graphview")

    # -- drawing
    def _data(self):
        g = collapse(self.ops, frozenset(self.expanded), self.depth)
        pos = layout(g)
        texts = {n["id"]: gd.label(n) for n in g["nodes"]}
        widths = {i: node_width(t) for i, t in texts.items()}
        xs = gd.spread(pos, widths)
        cols = {k: [] for k in ("id", "x", "y", "label", "w", "kind", "color", "line",
                                "line_width", "brick", "op", "shape", "role", "tip")}
        for n in g["nodes"]:
            layer, _ = pos[n["id"]]
            kind = n["kind"]
            role = gd.role_name(n)
            brick = n.get("brick") or n.get("in_brick")
            failed = kind == FAILED or (self.failed_brick is not None and brick is not None
                                        and (gd.within(brick, self.failed_brick)
                                             or kind == "brick"
                                             and gd.within(self.failed_brick, brick)))
            text = texts[n["id"]]
            cols["id"].append(n["id"])
            cols["x"].append(xs[n["id"]])
            cols["y"].append(-layer)
            cols["label"].append(text)
            cols["w"].append(widths[n["id"]])
            cols["kind"].append(kind)
            kernel = kind in ("brick", "function") and (brick or "").startswith(KERNEL_GROUP)
            cols["color"].append(ROLE_COLOR.get(role, "#8c564b") if kind == "parameter"
                                 else KERNEL_COLOR if kernel
                                 else KIND_COLOR.get(kind, "#1f77b4"))
            cols["line"].append(FAILED_LINE if failed else "#333333")
            cols["line_width"].append(3 if failed else 1)
            cols["brick"].append(brick or "")
            cols["op"].append(n.get("op") or n.get("name") or "")
            shape = n.get("shape", n.get("shapes"))
            cols["shape"].append("" if shape is None else gd.fmt_shape(shape)
                                 if not shape or not isinstance(shape[0], list)
                                 else ", ".join(gd.fmt_shape(s) for s in shape))
            cols["role"].append(role or "")
            cols["tip"].append(gd.tip_html(n))
        index = {i: k for k, i in enumerate(cols["id"])}
        edges = {"xs": [], "ys": []}
        into: dict = {}  # node -> the labels of the edges entering it
        for a, b, text in g["edges"]:
            xa, ya = cols["x"][index[a]], cols["y"][index[a]]
            xb, yb = cols["x"][index[b]], cols["y"][index[b]]
            edges["xs"].append([xa, xb])
            edges["ys"].append([ya, yb])
            if text:
                into.setdefault(b, []).append((text, (xa, ya, xb, yb)))
        cands = []
        for labels in into.values():
            distinct = list(dict.fromkeys(text for text, _ in labels))
            if len(distinct) <= 3:  # NOTE: one label per shape entering a node
                cands += [next(lb for lb in labels if lb[0] == text) for text in distinct]
            else:  # many: one label over the node, not a pile of them
                _, _, xb, yb = labels[0][1]
                cands.append((gd._join(distinct), (xb, yb + gd.LABEL_HEIGHTS[0])))
        shapes = gd.place_labels(cands)
        self.current = g
        return cols, edges, shapes

    def _build_figure(self):
        from bokeh.models import ColumnDataSource, CustomJS, HoverTool, Range1d, TapTool
        from bokeh.plotting import figure

        self.node_source = ColumnDataSource({})
        self.edge_source = ColumnDataSource({"xs": [], "ys": []})
        self.shape_source = ColumnDataSource({"x": [], "y": [], "text": []})
        self.failed_source = ColumnDataSource({"x": [], "y": [], "text": []})
        title = self.title
        if self.failure is not None:
            title += f" — {self.failure['op']} failed in {self.failed_brick or '?'}"
        size = (dict(width=self.width) if self.width else dict(sizing_mode="stretch_width"))
        fig = figure(height=self.height or 300, title=title, name="labkit-graphview",
                     tools="pan,wheel_zoom,box_zoom,reset,save", toolbar_location="above",
                     x_range=Range1d(-1, 1), y_range=Range1d(-1, 1), **size)
        fig.toolbar.logo = None
        fig.toolbar.active_scroll = None  # the page scrolls; zoom is a tool to pick
        fig.axis.visible = False
        fig.grid.visible = False
        fig.outline_line_color = None
        fig.background_fill_alpha = 0
        fig.border_fill_alpha = 0
        fig.title.text_color = NEUTRAL
        fig.min_border_left = fig.min_border_right = 10
        fig.multi_line("xs", "ys", source=self.edge_source, color="#888888", alpha=0.7,
                       line_width=1.2)
        shapes = fig.text("x", "y", text="text", source=self.shape_source,
                          x_offset=gd.LABEL_OFFSET_PX, text_font_size="10px",
                          text_baseline="middle", text_color=NEUTRAL, name="edge shapes")
        r = fig.rect("x", "y", width="w", height=24, width_units="screen",
                     height_units="screen", source=self.node_source, fill_color="color",
                     line_color="line", line_width="line_width", name="nodes")
        fig.text("x", "y", text="label", source=self.node_source, text_color="white",
                 text_font_size="12px", text_align="center", text_baseline="middle",
                 text_font_style="bold", name="node labels")
        fig.text("x", "y", text="text", source=self.failed_source, y_offset=18,
                 text_color=FAILED_LINE, text_font_size="12px", text_align="center",
                 text_baseline="top", text_font_style="bold", name="failure")
        fig.add_tools(HoverTool(renderers=[r], tooltips="<div>@tip{safe}</div>"))
        tap = TapTool(renderers=[r])
        fig.add_tools(tap)
        # NOTE: a click is sent as the node's id, not the selection's index: the browser sent
        # the index again after the redraw had replaced the data, which then picked the child
        # at that index (one click opened two levels)
        self.node_source.selected.js_on_change("indices", CustomJS(
            args={"source": self.node_source, "clicks": tap}, code=CLICK_JS))
        tap.on_change("tags", self._on_click)
        # NOTE: "document_ready" never fires in a jupyter_bokeh view; inner_width is set when
        # a view is first laid out, and data arrive on every redraw
        theme = CustomJS(args={"plots": [fig], "texts": [shapes.glyph]}, code=THEME_JS)
        fig.js_on_change("inner_width", theme)
        self.node_source.js_on_change("data", theme)
        fit = CustomJS(args={"fig": fig, "x_range": fig.x_range, "SIDEWAYS": SIDEWAYS},
                       code=FIT_JS)
        for model, attr in ((fig, "inner_width"), (self.node_source, "data"),
                            (fig.x_range, "tags")):
            model.js_on_change(attr, fit)
        self.figure = fig

    def _build_histograms(self):
        import ipywidgets as w
        from bokeh.layouts import row
        from bokeh.models import ColumnDataSource, CustomJS
        from bokeh.plotting import figure

        self.histograms, self.hist_sources = [], []
        for what, color in (("value", "#1f77b4"), ("gradient", "#c85a00")):
            src = ColumnDataSource({"left": [], "right": [], "top": []})
            fig = figure(width=300, height=200, title=what, x_axis_label=what,
                         y_axis_label="count", tools="", toolbar_location=None,
                         name=f"histogram {what}")
            fig.quad(left="left", right="right", top="top", bottom=0, source=src,
                     fill_color=color, line_color=color, fill_alpha=0.8)
            fig.background_fill_alpha = fig.border_fill_alpha = 0
            fig.outline_line_color = None
            fig.title.text_color = NEUTRAL
            for a in fig.axis:
                a.axis_label_text_color = a.major_label_text_color = NEUTRAL
            fig.grid.grid_line_alpha = 0.3
            self.histograms.append(fig)
            self.hist_sources.append(src)
        pair = row(*self.histograms)
        theme = CustomJS(args={"plots": self.histograms, "texts": []}, code=THEME_JS)
        for fig, src in zip(self.histograms, self.hist_sources):
            fig.js_on_change("inner_width", theme)
            src.js_on_change("data", theme)
        self.hist_plot = _bokeh.model(pair)
        self.hist_box = w.Box([self.hist_plot], layout=w.Layout(display="none"))

    def redraw(self):
        """Draw the graph again (after ``expanded`` changed)."""
        nodes, edges, shapes = self._data()
        k = nodes["kind"].index(FAILED) if FAILED in nodes["kind"] else None
        failed = ({"x": [], "y": [], "text": []} if k is None else
                  {"x": [nodes["x"][k]], "y": [nodes["y"][k]],
                   "text": [f"expected: {self.failure['expected'] or '?'}\n"
                            f"got: {self.failure['actual']}"]})
        layers = 1 - min(nodes["y"], default=0) + (0.9 if k is not None else 0)
        height = self.height or int(min(max(LAYER_PX * layers + 80, 260), MAX_HEIGHT))
        span = (height - 80) / LAYER_PX  # layers that fit: a taller graph is dragged
        # NOTE: pixels (FIT_JS makes the axis one unit to a pixel once the figure is shown)
        lo = min((x - w / 2 for x, w in zip(nodes["x"], nodes["w"])), default=-100) - 20
        hi = max((x + w / 2 for x, w in zip(nodes["x"], nodes["w"])), default=100) + 20
        # NOTE: only what changed is set: until the browser shows the widget, each change
        # re-serializes the whole figure (_bokeh.model), ~0.15 s each
        if self.node_source.selected.indices:
            self.node_source.selected.indices = []
        for src, data in ((self.node_source, nodes), (self.edge_source, edges),
                          (self.shape_source, shapes), (self.failed_source, failed)):
            if dict(src.data) != data:
                src.data = data
        _set(self.figure, height=height)
        # NOTE: a graph taller than the figure says so (it is dragged, not scrolled)
        more = int(np.ceil(layers - span - 0.05))
        base = self.figure.title.text.split(SIDEWAYS)[0].split(" · drag for")[0]
        _set(self.figure.title, text=base + (f" · drag for {more} more layers" if more > 0
                                             else ""))
        _set(self.figure.y_range, start=0.6 - span, end=0.6, reset_start=0.6 - span,
             reset_end=0.6)
        _set(self.figure.x_range, start=lo, end=hi, reset_start=lo, reset_end=hi, tags=[lo, hi])
        self.collapse_menu.options = ["", *sorted(self.expanded)]

    # -- interaction
    def _on_click(self, attr, old, new):
        if new and any(n["id"] == new[0] for n in self.current["nodes"]):
            self.select(new[0])

    def expand(self, brick: str) -> None:
        """Show ``brick``'s direct children (each of them collapsed)."""
        self.expanded.add(brick)
        self.redraw()

    def collapse(self, brick: str) -> None:
        """Fold ``brick`` (and every brick inside it) back into one node."""
        self.expanded = {e for e in self.expanded if not gd.within(e, brick)}
        self.redraw()

    def _on_collapse_menu(self, change):
        if change["new"]:
            self.collapse(change["new"])
            self.details.value = f"<b>{esc(change['new'])}</b>: collapsed"

    def select(self, node_id: str) -> str:
        """Show ``node_id``'s details (a brick node: expand it one level). Returns the
        details' HTML."""
        node = next((n for n in (*self.current["nodes"], *self.full["nodes"])
                     if n["id"] == node_id), None)
        if node is None:
            raise KeyError(f"GraphView.select: no node {node_id!r}")
        self.hist_box.layout.display = "none"
        if node["kind"] == "brick":
            self.expand(node["brick"])
            self.details.value = (f"<b>{esc(node['brick'])}</b>: expanded "
                                  f"({len(node['members'])} nodes; fold it back with "
                                  f"<i>collapse</i>)")
            return self.details.value
        if node["kind"] == FAILED:
            self.details.value = self._failure_html()
            return self.details.value
        parts = [gd.tip_html(node)]
        t = self.tensors.get(self.made.get(node_id, node_id))
        if t is not None:
            parts.append(_stats_html("value", _stats(t.data)))
            if t.grad is not None:
                parts.append(_stats_html("gradient", _stats(t.grad.data)))
            self._show_histograms(t, gd.label(node))
        self.details.value = "<br>".join(parts)
        return self.details.value

    def _show_histograms(self, t, name):
        for fig, src, arr, what in zip(self.histograms, self.hist_sources,
                                       (t.data, None if t.grad is None else t.grad.data),
                                       ("value", "gradient")):
            counts, edges = _histogram(arr)
            src.data = {"left": list(edges[:-1]), "right": list(edges[1:]),
                        "top": list(counts)}
            fig.title.text = (f"{what} of {name}" if arr is not None else
                              f"{what} of {name}: none (no backward yet)")
        self.hist_box.layout.display = ""

    def _failure_html(self) -> str:
        f = self.failure
        where = esc(self.failed_brick or "?")
        return (f"<b style='color:{FAILED_LINE}'>✗ {esc(f['op'])} failed</b> in "
                f"{where}<br><b>expected</b>: {esc(f['expected'] or '?')}<br>"
                f"<b>got</b>: {esc(f['actual'])}<br><small>"
                f"{esc(f['message'], 2000)}</small>")

    # -- display
    def __repr__(self):
        kinds = {}
        for n in self.current["nodes"]:
            kinds[n["kind"]] = kinds.get(n["kind"], 0) + 1
        shown = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
        return (f"GraphView({len(self.graph.nodes)} ops, {len(self.graph.parameters)} "
                f"parameters; drawn as {shown})")


def _set(model, **props):
    changed = {k: v for k, v in props.items() if getattr(model, k) != v}
    if changed:
        model.update(**changed)


def _values(arr) -> np.ndarray:
    return np.asarray(arr if isinstance(arr, np.ndarray) else arr.get(), dtype=np.float64)


def _stats(arr) -> dict:
    a = _values(arr)
    finite = a[np.isfinite(a)]
    m = float(np.abs(finite).max()) if finite.size else 0.0
    m = m if m > 1e300 else 1.0  # NOTE: a sum of values near the float limit overflows
    return {"mean": float((finite / m).mean()) * m if finite.size else float("nan"),
            "std": float((finite / m).std()) * m if finite.size else float("nan"),
            "min": float(finite.min()) if finite.size else float("nan"),
            "max": float(finite.max()) if finite.size else float("nan"),
            "norm": _norm(finite), "size": int(a.size),
            "non_finite": int(a.size - finite.size)}


def _histogram(arr, bins=30):
    """Counts and bin edges of the finite values (none: empty)."""
    if arr is None:
        return np.zeros(0), np.zeros(1)
    a = _values(arr).ravel()
    a = a[np.isfinite(a)]
    if not a.size:
        return np.zeros(0), np.zeros(1)
    lo, hi = float(a.min()), float(a.max())
    # NOTE: values near the float limits binned in units of the largest (+-1e308 made the range
    # infinite, denormals made bins too narrow for NumPy: a ValueError when a node was clicked)
    scale = max(abs(lo), abs(hi))
    scale = scale if scale and not 1e-300 < scale < 1e300 else 1.0
    a, lo, hi = a / scale, lo / scale, hi / scale
    if lo == hi:  # one value: a bar of visible width around it
        w = 1e-3 if scale != 1.0 else 0.5
        lo, hi = lo - w * (abs(lo) or 1), hi + w * (abs(hi) or 1)
    counts, edges = np.histogram(a, bins=bins, range=(lo, hi))
    return counts.astype(float), edges * scale


def _norm(a) -> float:
    """The 2-norm without overflow (1e308 squared is inf)."""
    m = float(np.abs(a).max()) if a.size else 0.0
    return m * float(np.sqrt(((a / m) ** 2).sum())) if m else 0.0


def _stats_html(what, s) -> str:
    bad = f", <b>{s['non_finite']} non-finite</b>" if s["non_finite"] else ""
    return (f"<i>{what}</i>: mean {s['mean']:.4g}, std {s['std']:.4g}, min {s['min']:.4g}, "
            f"max {s['max']:.4g}, norm {s['norm']:.4g}{bad}")
