"""GraphView headless: what the figure's data say (labels on nodes, shapes on edges, tooltip
rows, the failing op of a shape error, histograms with axes), one level per click, the layered
layout, and a 2,000-op graph."""

import re
import time

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F

pytest.importorskip("jupyter_bokeh", reason="the notebook extras are part of [dev]")
from labkit.notebook import GraphView, collapse, layout  # noqa: E402
from labkit.notebook._graph_data import failure, rows  # noqa: E402


@pytest.fixture
def view():
    lk.bricks.set_seed(0)
    model = B.Sequence(B.Flatten(), B.MLP([64, 32, 32, 10]), name="classifier")
    x = lk.tensor(np.random.default_rng(0).standard_normal((16, 1, 8, 8)).astype(np.float32))
    loss = F.softmax_cross_entropy(model(x), np.arange(16) % 10)
    loss.backward(retain_graph=True)
    return GraphView(loss)


def drawn(view):
    d = view.node_source.data
    return dict(zip(d["id"], d["label"]))


def click(view, label):
    """What a click in the browser sends (CLICK_JS): the node's id and a click count."""
    tap = next(t for t in view.figure.tools if type(t).__name__ == "TapTool")
    node_id = next(i for i, lab in drawn(view).items() if lab == label)
    tap.tags = [node_id, (tap.tags[1] if tap.tags else 0) + 1]


def test_nodes_are_labelled_and_edges_carry_shapes(view):
    labels = drawn(view)
    assert set(labels.values()) == {"input", "▸ mlp_1", "softmax_cross_entropy", "output"}
    texts = [r for r in view.figure.renderers if r.name == "node labels"]
    assert texts and texts[0].data_source is view.node_source and texts[0].glyph.text == "label"
    edges = sorted(view.shape_source.data["text"])
    assert edges == ["()", "(16, 10)", "(16, 64)"]  # input -> mlp_1 -> loss -> output
    # one label per distinct shape entering a node (here every edge's)
    assert len(view.shape_source.data["x"]) == len(view.edge_source.data["xs"])
    shapes = [r for r in view.figure.renderers if r.name == "edge shapes"]
    assert shapes and shapes[0].data_source is view.shape_source
    assert view.figure.sizing_mode == "stretch_width" and view.plot.layout.width == "100%"


def test_one_click_opens_one_level_and_collapse_folds_it_back(view):
    before = drawn(view)
    click(view, "▸ mlp_1")
    assert view.expanded == {"/classifier/mlp_1"}
    after = sorted(drawn(view).values())
    assert after == ["input", "output", "relu", "relu", "softmax_cross_entropy", "▸ linear_0",
                     "▸ linear_1", "▸ linear_2"]  # its children, each still collapsed
    assert "parameter" not in view.node_source.data["kind"]
    assert "(16, 32)" in view.shape_source.data["text"]
    # a second message about the node clicked (the browser's echo) opens nothing more
    tap = next(t for t in view.figure.tools if type(t).__name__ == "TapTool")
    tap.tags = ["brick:/classifier/mlp_1", tap.tags[1] + 1]
    assert view.expanded == {"/classifier/mlp_1"}
    click(view, "▸ linear_0")
    assert {"W", "b", "linear"} <= set(drawn(view).values())
    assert "▸ linear_1" in drawn(view).values()
    assert "(32, 64)" in view.shape_source.data["text"] and "(32,)" in \
        view.shape_source.data["text"]
    assert view.collapse_menu.options == ("", "/classifier/mlp_1",
                                          "/classifier/mlp_1/linear_0")
    view.collapse_menu.value = "/classifier/mlp_1"  # folds its children too
    assert view.expanded == set() and drawn(view) == before
    assert view.collapse_menu.value == "" or view.collapse_menu.options == ("",)


def test_tooltips_have_no_empty_rows(view):
    hover = next(t for t in view.figure.tools if type(t).__name__ == "HoverTool")
    assert hover.tooltips == "<div>@tip{safe}</div>"  # one field, built per node
    view.expand("/classifier/mlp_1")
    view.expand("/classifier/mlp_1/linear_0")
    for tip, kind in zip(view.node_source.data["tip"], view.node_source.data["kind"]):
        for row in tip.split("<br>"):
            assert re.sub(r"<[^>]+>", "", row).strip(), (kind, tip)
            m = re.match(r"<b>(\w+)</b> (.*)", row)
            assert m is None or m.group(2).strip(), (kind, tip)
    relu = next(n for n in view.current["nodes"] if n.get("op") == "relu")
    assert [k for k, _ in rows(relu)] == ["", "shape", "dtype", "brick"]  # no role, no device
    w = next(n for n in view.current["nodes"] if n.get("name", "") and
             n["name"].endswith("linear_0.W"))
    assert dict(rows(w))["role"] == "WEIGHT" and dict(rows(w))["shape"] == "(32, 64)"


def test_a_parameter_shows_value_and_gradient_histograms_with_axes(view):
    assert view.hist_box.layout.display == "none"  # nothing selected yet
    pid = next(n["id"] for n in view.full["nodes"] if n.get("name") ==
               "/classifier/mlp_1/linear_0.W")
    text = view.select(pid)
    assert "mean" in text and "norm" in text and "gradient" in text
    assert view.hist_box.layout.display == ""
    value, grad = view.histograms
    for fig, what in ((value, "value"), (grad, "gradient")):
        assert fig.xaxis[0].axis_label == what and fig.yaxis[0].axis_label == "count"
        assert fig.xaxis[0].visible and fig.yaxis[0].visible and fig.xaxis[0].ticker
    w = view.tensors[pid]
    vs, gs = view.hist_sources
    assert sum(vs.data["top"]) == w.size and sum(gs.data["top"]) == w.size
    assert min(vs.data["left"]) == pytest.approx(float(w.numpy().min()))
    assert max(gs.data["right"]) == pytest.approx(float(w.grad.numpy().max()))
    assert "of W" in value.title.text
    click(view, "▸ mlp_1")  # a brick's click hides them again
    assert view.hist_box.layout.display == "none"


def test_a_shape_error_marks_the_failing_op_with_expected_and_actual():
    broken = B.Sequence(B.Linear(64, 32), B.Tanh(), B.Linear(31, 10), name="broken")
    with pytest.raises(lk.ShapeError) as info:
        broken(lk.tensor(np.ones((4, 64), np.float32)))
    view = GraphView(info.value)
    d = view.node_source.data
    k = d["kind"].index("failed")
    assert d["label"][k] == "✗ linear" and d["color"][k] == "#d62728"
    assert d["brick"][k] == "/broken/linear_2"
    assert sum(c == "#d62728" for c in d["color"]) == 1  # only the failing op is red
    note = view.failed_source.data["text"][0]
    assert "expected: W expects 31 (W.shape=(10, 31))" in note
    assert "got: x has 32 features (x.shape=(4, 32))" in note
    assert (view.failed_source.data["x"], view.failed_source.data["y"]) == ([d["x"][k]],
                                                                            [d["y"][k]])
    assert "W expects 31" in view.details.value and "x has 32" in view.details.value
    assert "failed in /broken/linear_2" in view.figure.title.text
    into = [t for t, y in zip(view.shape_source.data["text"], view.shape_source.data["y"])
            if y == d["y"][k] + 0.5]
    assert into == ["(4, 32)"]  # the tensor the failing op was given
    assert failure(ValueError("no op here")) == {"op": "ValueError", "expected": "",
                                                 "actual": "no op here",
                                                 "message": "no op here"}


def test_a_failure_inside_a_collapsed_brick_opens_its_bricks():
    model = B.Sequence(B.MLP([4, 8]), B.MLP([7, 2]), name="m")
    with pytest.raises(lk.ShapeError) as info:
        model(lk.tensor(np.ones((3, 4), np.float32)))
    assert info.value.brick == "/m/mlp_1/linear_0"
    view = GraphView(info.value)
    assert view.expanded == {"/m/mlp_1"}
    assert "✗ linear" in drawn(view).values()


def test_a_2000_op_graph_starts_collapsed_and_redraws_fast():
    model = B.Sequence(*[B.Sequence(B.Linear(4, 4), B.Tanh()) for _ in range(1000)])
    y = model(lk.tensor(np.ones((2, 4), np.float32))).sum()
    t = time.perf_counter()
    view = GraphView(y)
    built = time.perf_counter() - t
    assert len(view.graph.nodes) == 2001
    assert view.depth == 1 and len(view.node_source.data["id"]) == 4  # input, ▸ sequence, sum, out
    t = time.perf_counter()
    view.expand("/sequence")
    opened = time.perf_counter() - t
    assert len(view.node_source.data["id"]) == 1000 + 3  # one level: 1,000 collapsed bricks
    t = time.perf_counter()
    view.collapse("/sequence")
    folded = time.perf_counter() - t
    print(f"\n2,001-op graph: built {built * 1e3:.0f} ms, 1,000 bricks opened "
          f"{opened * 1e3:.0f} ms, folded {folded * 1e3:.0f} ms")


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
    # a parameter sits just above the op that reads it, not in the top layer
    p = layout({"nodes": [{"id": i} for i in "xabW"],
                "edges": [["x", "a"], ["a", "b"], ["W", "b"]]})
    assert p["W"][0] == p["a"][0] == 1 and p["b"][0] == 2


def test_long_labels_of_a_layer_are_spread_apart_in_pixels():
    """Nodes are laid out in pixels (one unit to a pixel once shown): a layer's neighbours
    keep GAP_PX between their boxes whatever their labels' lengths, and the layer's mean
    stays where the layout put it."""
    from labkit.notebook._graph_data import GAP_PX, SLOT_PX, spread

    pos = {"a": (0.0, -1.0), "b": (0.0, 0.0), "c": (0.0, 1.0), "d": (1.0, 0.0)}
    widths = {"a": 300, "b": 200, "c": 40, "d": 60}
    xs = spread(pos, widths)
    row = sorted("abc", key=xs.get)
    assert row == ["a", "b", "c"]
    for u, v in zip(row, row[1:]):
        assert xs[v] - xs[u] >= (widths[u] + widths[v]) / 2 + GAP_PX - 1e-9
    assert abs(sum(xs[k] for k in "abc")) < 1e-9  # the mean of places -1, 0, 1
    assert xs["d"] == 0.0  # alone in its layer: where its place puts it
    short = spread(pos, dict.fromkeys("abcd", 20))
    assert [short[k] for k in "abc"] == [-SLOT_PX, 0.0, SLOT_PX]  # room enough: not moved

    # a program whose labels are long: boxes of one layer do not overlap, and the figure's
    # x range covers every box
    x = lk.tensor(np.ones((4, 3), np.float32), requires_grad=True)
    loss = (F.softmax_cross_entropy(x, np.array([0, 1, 2, 0])) + F.log_softmax(x).sum()
            + (F.tanh(x) * F.sigmoid(x)).sum())
    view = GraphView(loss)
    d = view.node_source.data
    layers: dict = {}
    for k in range(len(d["x"])):
        layers.setdefault(d["y"][k], []).append((d["x"][k], d["w"][k]))
    assert max(len(b) for b in layers.values()) >= 3
    for boxes in layers.values():
        boxes.sort()
        for (xa, wa), (xb, wb) in zip(boxes, boxes[1:]):
            assert xb - wb / 2 - (xa + wa / 2) >= GAP_PX - 1e-9
    r = view.figure.x_range
    assert r.start <= min(x - w / 2 for x, w in zip(d["x"], d["w"]))
    assert r.end >= max(x + w / 2 for x, w in zip(d["x"], d["w"]))
    assert r.tags == [r.start, r.end]


def test_edge_labels_do_not_overlap_and_move_along_their_edges():
    """Two edges entering neighbouring points: the second label moves up its own edge (not
    across), and one with no free height is left out; a fixed label keeps its place."""
    from labkit.notebook._graph_data import (
        LABEL_CHAR_PX,
        LABEL_HEIGHTS,
        LABEL_OFFSET_PX,
        place_labels,
    )

    # edges from (0, 0) and (40, 0) down to (0, -1) and (30, -1): at half height their
    # labels' points are 35 px apart, each label 60 px wide
    got = place_labels([("(32, 256)", (0.0, 0.0, 0.0, -1.0)),
                        ("(256, 32)", (40.0, 0.0, 30.0, -1.0))])
    assert got["text"] == ["(32, 256)", "(256, 32)"]
    assert got["y"] == [-1 + LABEL_HEIGHTS[0], -1 + LABEL_HEIGHTS[1]]
    assert got["x"][1] == 30.0 + 10.0 * LABEL_HEIGHTS[1]  # on its own edge
    # four labels at one point: three heights, the fourth is left out
    same = place_labels([(f"({k}, 64)", (0.0, 0.0, 0.0, -1.0)) for k in range(4)])
    assert len(same["text"]) == 3 and sorted(same["y"]) == sorted(-1 + h for h in LABEL_HEIGHTS)
    fixed = place_labels([("(1,)", (0.0, 0.0, 0.0, -1.0)), ("a, b, c, d", (5.0, -0.5))])
    assert (fixed["x"][0], fixed["y"][0], fixed["text"][0]) == (5.0, -0.5, "a, b, c, d")

    # a GraphView's labels: none overlaps another at its height
    x = lk.tensor(np.ones((4, 3), np.float32), requires_grad=True)
    W = lk.tensor(np.ones((3, 5), np.float32), requires_grad=True)
    loss = (F.tanh(x @ W) * F.sigmoid(x @ W)).sum() + F.softmax_cross_entropy(
        x @ W, np.array([0, 1, 2, 0]))
    d = GraphView(loss).shape_source.data
    rows: dict = {}
    for xs, y, text in zip(d["x"], d["y"], d["text"]):
        rows.setdefault(round(y, 6), []).append(
            (xs + LABEL_OFFSET_PX, xs + LABEL_OFFSET_PX + LABEL_CHAR_PX * len(text)))
    for boxes in rows.values():
        boxes.sort()
        for (_, right), (left, _) in zip(boxes, boxes[1:]):
            assert left >= right
