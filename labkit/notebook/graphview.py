"""GraphView: a layered drawing of a computational graph, bricks collapsed and expandable."""

from __future__ import annotations

import html

import numpy as np

from . import _bokeh

KIND_MARKER = {"parameter": "square", "input": "triangle", "function": "circle",
               "variable": "dot", "brick": "hex", "output": "diamond"}
KIND_COLOR = {"input": "#2ca02c", "function": "#1f77b4", "variable": "#aaaaaa",
              "brick": "#9467bd", "output": "#d62728"}
ROLE_COLOR = {"WEIGHT": "#ff7f0e", "FILTER": "#ff7f0e", "BIAS": "#e377c2",
              "PARAMETER": "#8c564b"}


def _within(path: str | None, brick: str) -> bool:
    """Whether brick ``path`` is ``brick`` or inside it, segment by segment:
    ``/mlp/linear_10`` is not inside ``/mlp/linear_1``."""
    return path is not None and (path == brick or path.startswith(brick.rstrip("/") + "/"))


def _brick_at(path: str | None, depth: int) -> str | None:
    """The ancestor of brick ``path`` at ``depth`` ("/a/b/c", 2 -> "/a/b")."""
    if not path:
        return None
    parts = path.split("/")[1:]
    if len(parts) <= depth:
        return path
    return "/" + "/".join(parts[:depth])


def collapse(graph: dict, expanded=frozenset(), depth: int = 2) -> dict:
    """Merge the nodes of each brick below ``depth`` into one ``brick`` node, except the
    bricks in ``expanded`` (whose children are then collapsed one level deeper)."""
    owner = {}
    for n in graph["nodes"]:
        b = n.get("brick")
        if b is None or n["kind"] == "output":
            owner[n["id"]] = n["id"]
            continue
        d = depth
        group = _brick_at(b, d)
        while group in expanded and group != b:
            d += 1
            group = _brick_at(b, d)
        owner[n["id"]] = n["id"] if group in expanded else f"brick:{group}"
    nodes, seen = [], {}
    for n in graph["nodes"]:
        o = owner[n["id"]]
        if o == n["id"]:
            nodes.append(dict(n))
        elif o not in seen:
            seen[o] = {"id": o, "kind": "brick", "name": o[len("brick:"):], "brick":
                       o[len("brick:"):], "members": [], "ops": []}
            nodes.append(seen[o])
        if o != n["id"]:
            seen[o]["members"].append(n["id"])
            if n["kind"] == "function":
                seen[o]["ops"].append(n["op"])
    edges = sorted({(owner[a], owner[b]) for a, b in graph["edges"] if owner[a] != owner[b]})
    return {"nodes": nodes, "edges": [list(e) for e in edges]}


def layout(graph: dict) -> dict[str, tuple[float, float]]:
    """Layered positions: x = longest path from a source (Sugiyama's first step), y = order
    in the layer by the barycenter of the predecessors (one downward sweep). Linear in nodes
    plus edges, so thousands of nodes lay out in milliseconds."""
    ids = [n["id"] for n in graph["nodes"]]
    index = {i: k for k, i in enumerate(ids)}
    preds: list[list[int]] = [[] for _ in ids]
    succs: list[list[int]] = [[] for _ in ids]
    for a, b in graph["edges"]:
        preds[index[b]].append(index[a])
        succs[index[a]].append(index[b])
    indeg = [len(p) for p in preds]
    order, frontier = [], [k for k, d in enumerate(indeg) if d == 0]
    while frontier:
        k = frontier.pop()
        order.append(k)
        for s in succs[k]:
            indeg[s] -= 1
            if indeg[s] == 0:
                frontier.append(s)
    if len(order) < len(ids):  # a cycle cannot come from a tape; keep the rest in input order
        order += [k for k in range(len(ids)) if k not in set(order)]
    layer = [0] * len(ids)
    for k in order:
        for s in succs[k]:
            layer[s] = max(layer[s], layer[k] + 1)
    layers: dict[int, list[int]] = {}
    for k in order:
        layers.setdefault(layer[k], []).append(k)
    ypos = [0.0] * len(ids)
    for lv in sorted(layers):
        ks = layers[lv]
        bary = [(np.mean([ypos[p] for p in preds[k]]) if preds[k] else j) for j, k in
                enumerate(ks)]
        ks = [k for _, k in sorted(zip(bary, ks), key=lambda t: t[0])]
        mid = (len(ks) - 1) / 2
        for j, k in enumerate(ks):
            ypos[k] = j - mid
    return {ids[k]: (float(layer[k]), float(ypos[k])) for k in range(len(ids))}


def _stats(arr) -> dict:
    a = np.asarray(arr if isinstance(arr, np.ndarray) else arr.get(), dtype=np.float64)
    finite = a[np.isfinite(a)]
    return {"mean": float(finite.mean()) if finite.size else float("nan"),
            "std": float(finite.std()) if finite.size else float("nan"),
            "min": float(finite.min()) if finite.size else float("nan"),
            "max": float(finite.max()) if finite.size else float("nan"),
            "norm": float(np.sqrt((finite ** 2).sum())), "size": int(a.size),
            "non_finite": int(a.size - finite.size)}


class GraphView(_bokeh.WidgetRepr):
    """``GraphView(loss)`` (or a ``lk.Graph``, or an error carrying ``.graph``): the graph as
    layers from inputs and parameters to the output. Parameters are squares coloured by role,
    inputs triangles, ops circles, collapsed bricks hexagons. Hover shows op, shapes, dtype,
    device, brick and role; a click shows the value's and gradient's statistics and a
    histogram, or expands a collapsed brick (click it again in the list to collapse)."""

    plots = True

    def __init__(self, target, depth: int = 2, width: int = 640, height: int = 420):
        from ..graph import Graph

        _bokeh.require()
        import ipywidgets as w

        failed = None
        if isinstance(target, BaseException):
            failed = getattr(target, "brick", None)
            target = getattr(target, "graph", None)
            if target is None:
                raise ValueError("GraphView: this error carries no graph")
        self.graph = target if isinstance(target, Graph) else Graph(target)
        self.failed_brick = failed
        self.full = self.graph.to_dict()
        self.tensors = {}
        for k, v in enumerate(self.graph.variables):
            self.tensors[f"v{k}"] = v
        outs = {f"v{k}" for k, v in enumerate(self.graph.variables)
                if any(v is o for o in self.graph.outputs)}
        for n in self.full["nodes"]:
            if n["id"] in outs:
                n["kind"] = "output"
        self.depth = depth
        self.expanded: set[str] = set()
        self.width, self.height = width, height
        self.details = w.HTML(layout=w.Layout(width="320px"))
        self.expanded_list = w.SelectMultiple(description="expanded", options=[],
                                              layout=w.Layout(width="320px", height="90px"))
        self.expanded_list.observe(self._on_unexpand, "value")
        self._build_figure()
        self.widget = w.HBox([self.plot, w.VBox([self.details, self.expanded_list])])
        self.widget.add_class("labkit-graphview")

    # -- drawing
    def _data(self):
        g = collapse(self.full, frozenset(self.expanded), self.depth)
        pos = layout(g)
        xs, ys, rows = [], [], {k: [] for k in ("id", "label", "kind", "marker", "color", "op",
                                                "shape", "dtype", "device", "brick", "role",
                                                "line")}
        for n in g["nodes"]:
            x, y = pos[n["id"]]
            xs.append(x)
            ys.append(y)
            kind = n["kind"]
            role = (n.get("role") or "").strip("<>").split(".")[-1] or None
            color = ROLE_COLOR.get(role, KIND_COLOR.get(kind, "#1f77b4")) \
                if kind == "parameter" else KIND_COLOR.get(kind, "#1f77b4")
            failed = self.failed_brick is not None and _within(n.get("brick"),
                                                               self.failed_brick)
            rows["id"].append(n["id"])
            rows["kind"].append(kind)
            rows["marker"].append(KIND_MARKER.get(kind, "circle"))
            rows["color"].append(color)
            rows["line"].append("#d62728" if failed else "#333333")
            rows["op"].append(n.get("op") or (", ".join(sorted(set(n.get("ops", []))))[:60]
                                              if kind == "brick" else n.get("name") or ""))
            rows["label"].append(n.get("op") or (n.get("name") or "").split("/")[-1])
            shape = n.get("shape", n.get("shapes"))
            rows["shape"].append(str(tuple(shape)) if shape and not isinstance(shape[0], list)
                                 else ", ".join(str(tuple(s)) for s in (shape or [])))
            rows["dtype"].append(n.get("dtype") or "")
            rows["device"].append(n.get("device") or "")
            rows["brick"].append(n.get("brick") or "")
            rows["role"].append(role or "")
        index = {i: k for k, i in enumerate(rows["id"])}
        exs = [[xs[index[a]], xs[index[b]]] for a, b in g["edges"]]
        eys = [[ys[index[a]], ys[index[b]]] for a, b in g["edges"]]
        self.current = g
        return dict(rows, x=xs, y=ys), {"xs": exs, "ys": eys}

    def _build_figure(self):
        from bokeh.models import ColumnDataSource, HoverTool, TapTool
        from bokeh.plotting import figure

        nodes, edges = self._data()
        self.node_source = ColumnDataSource(nodes)
        self.edge_source = ColumnDataSource(edges)
        fig = figure(width=self.width, height=self.height, title="computational graph",
                     tools="pan,wheel_zoom,box_zoom,reset,save", toolbar_location="above")
        fig.toolbar.logo = None
        fig.axis.visible = False
        fig.grid.visible = False
        fig.multi_line("xs", "ys", source=self.edge_source, color="#999999", alpha=0.6)
        r = fig.scatter("x", "y", source=self.node_source, marker="marker", color="color",
                        line_color="line", size=14, name="nodes")
        fig.add_tools(HoverTool(renderers=[r], tooltips=[
            ("", "@kind @op"), ("shape", "@shape"), ("dtype", "@dtype"), ("device", "@device"),
            ("brick", "@brick"), ("role", "@role")]))
        fig.add_tools(TapTool(renderers=[r]))
        self.node_source.selected.on_change("indices", self._on_select)
        self.figure = fig
        self.plot = _bokeh.model(fig)

    def redraw(self):
        nodes, edges = self._data()
        self.node_source.selected.indices = []
        self.node_source.data = nodes
        self.edge_source.data = edges
        self.expanded_list.options = sorted(self.expanded)

    # -- interaction
    def _on_select(self, attr, old, new):
        if new:
            self.select(self.node_source.data["id"][new[0]])

    def select(self, node_id: str) -> str:
        """Show ``node_id``'s details (a brick node: expand it). Returns the details' HTML."""
        node = next((n for n in (*self.current["nodes"], *self.full["nodes"])
                     if n["id"] == node_id), None)
        if node is None:
            raise KeyError(f"GraphView.select: no node {node_id!r}")
        if node["kind"] == "brick":
            self.expanded.add(node["brick"])
            self.details.value = (f"<b>{html.escape(node['brick'])}</b>: expanded "
                                  f"({len(node['members'])} nodes)")
            self.redraw()
            return self.details.value
        label = node.get("op") or node.get("name") or ""
        parts = [f"<b>{html.escape(node['kind'])} {html.escape(label)}</b>"]
        for k in ("brick", "role", "dtype", "device"):
            if node.get(k):
                parts.append(f"{k}: {html.escape(str(node[k]))}")
        t = self.tensors.get(node_id)
        if t is not None:
            parts.append(f"shape: {tuple(t.shape)}")
            parts.append(_stats_html("value", _stats(t.data)))
            parts.append(_histogram_html(t.data))
            if t.grad is not None:
                parts.append(_stats_html("gradient", _stats(t.grad.data)))
        self.details.value = "<br>".join(parts)
        return self.details.value

    def _on_unexpand(self, change):
        for b in change["new"]:
            self.expanded.discard(b)
            self.expanded = {e for e in self.expanded if not e.startswith(b + "/")}
        if change["new"]:
            self.redraw()

    # -- display
    def __repr__(self):
        kinds = {}
        for n in self.current["nodes"]:
            kinds[n["kind"]] = kinds.get(n["kind"], 0) + 1
        shown = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
        return (f"GraphView({len(self.graph.nodes)} ops, {len(self.graph.parameters)} "
                f"parameters; drawn as {shown})")


def _stats_html(what, s) -> str:
    bad = f", <b>{s['non_finite']} non-finite</b>" if s["non_finite"] else ""
    return (f"<i>{what}</i>: mean {s['mean']:.4g}, std {s['std']:.4g}, min {s['min']:.4g}, "
            f"max {s['max']:.4g}, norm {s['norm']:.4g}{bad}")


def _histogram_html(arr, bins=20) -> str:
    """A tiny inline SVG histogram (no extra plot model per click)."""
    a = np.asarray(arr if isinstance(arr, np.ndarray) else arr.get(), dtype=np.float64).ravel()
    a = a[np.isfinite(a)]
    if not a.size:
        return ""
    counts, _ = np.histogram(a, bins=bins)
    top = counts.max() or 1
    bars = "".join(f"<rect x='{i * 8}' y='{40 - 40 * c / top:.1f}' width='7' "
                   f"height='{40 * c / top:.1f}' fill='#1f77b4'/>" for i, c in enumerate(counts))
    return f"<svg class='labkit-histogram' width='{bins * 8}' height='40'>{bars}</svg>"
