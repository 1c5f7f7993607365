"""GraphView headless: the figure's data, collapsing and expanding bricks, shape errors, the
layered layout."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B

pytest.importorskip("jupyter_bokeh", reason="the notebook extras are part of [dev]")
from labkit.notebook import GraphView, collapse, layout  # noqa: E402


def test_graphview_draws_collapses_and_explains():
    lk.bricks.set_seed(0)
    model = B.Sequence(B.Linear(4, 8), B.Tanh(), B.MLP([8, 6, 3]))
    x = lk.tensor(np.ones((5, 4), np.float32))
    loss = model(x).sum()
    loss.backward(retain_graph=True)
    view = GraphView(loss)
    kinds = view.node_source.data["kind"]
    assert "brick" in kinds and "output" in kinds and "input" in kinds
    before = len(kinds)
    mlp = next(i for i, (k, b) in enumerate(zip(kinds, view.node_source.data["brick"]))
               if k == "brick" and b.endswith("/mlp_2"))
    view.node_source.selected.indices = [mlp]  # what a click in the browser does
    assert "/sequence/mlp_2" in view.expanded and len(view.node_source.data["kind"]) > before
    assert "expanded" in view.details.value
    pid = next(n["id"] for n in view.full["nodes"] if n.get("name") == "/sequence/linear_0.W")
    view.expanded.add("/sequence/linear_0")
    view.redraw()
    text = view.select(pid)
    assert "mean" in text and "norm" in text and "gradient" in text and "<svg" in text
    w = model.params()["/sequence/linear_0.W"].numpy()
    assert f"{w.mean():.4g}" in text
    assert repr(view).startswith("GraphView(")
    hover = [t for t in view.figure.tools if type(t).__name__ == "HoverTool"][0]
    assert {name for name, _ in hover.tooltips} >= {"shape", "dtype", "device", "brick", "role"}


def test_graphview_of_a_shape_error():
    model = B.Sequence(B.Linear(4, 8), B.Tanh(), B.Linear(7, 2))
    with pytest.raises(lk.ShapeError) as info:
        model(lk.tensor(np.ones((3, 4), np.float32)))
    err = info.value
    assert err.brick == "/sequence/linear_2" and "GraphView(error)" in err.__notes__[0]
    view = GraphView(err)
    assert view.failed_brick == "/sequence/linear_2"
    assert len(view.graph.nodes) == 2  # linear and tanh: up to the failing op


def test_layout_is_layered_for_thousands_of_nodes():
    n = 2500
    g = {"nodes": [{"id": f"n{i}", "kind": "function", "op": "add"} for i in range(n)],
         "edges": [[f"n{i}", f"n{i + 1}"] for i in range(n - 1)]
         + [[f"n{i}", f"n{i + 7}"] for i in range(0, n - 7, 5)]}
    pos = layout(g)
    assert len(pos) == n
    assert all(pos[b][0] > pos[a][0] for a, b in g["edges"])  # every edge points forward
    c = collapse({"nodes": [{"id": "a", "kind": "function", "op": "x", "brick": "/m/l1/in"},
                            {"id": "b", "kind": "function", "op": "y", "brick": "/m/l1"},
                            {"id": "c", "kind": "function", "op": "z", "brick": "/m/l2"}],
                  "edges": [["a", "b"], ["b", "c"]]})
    assert [n["id"] for n in c["nodes"]] == ["brick:/m/l1", "brick:/m/l2"]
    assert c["edges"] == [["brick:/m/l1", "brick:/m/l2"]]
