"""GraphView's data, without Bokeh: the tape's graph reduced to ops (an intermediate tensor
becomes an edge labelled with its shape), bricks folded, laid out in layers, the short labels
and the tooltip rows. What the figure shows is tested on these dicts."""

from __future__ import annotations

import re

import numpy as np

from ..runs.html import esc

FAILED = "failed"  # the id and kind of the op a ShapeError stopped (it never reached the tape)


def fmt_shape(shape) -> str:
    """``(16, 32)``, ``(32,)``, ``()``."""
    return str(tuple(int(s) for s in shape))


def within(path: str | None, brick: str) -> bool:
    """Whether brick ``path`` is ``brick`` or inside it, segment by segment:
    ``/mlp/linear_10`` is not inside ``/mlp/linear_1``."""
    return path is not None and (path == brick or path.startswith(brick.rstrip("/") + "/"))


def brick_at(path: str | None, depth: int) -> str | None:
    """The ancestor of brick ``path`` at ``depth`` ("/a/b/c", 2 -> "/a/b")."""
    if not path:
        return None
    parts = path.split("/")[1:]
    if len(parts) <= depth:
        return path
    return "/" + "/".join(parts[:depth])


def ops_graph(full: dict) -> dict:
    """``Graph.to_dict()`` without its intermediate ``variable`` nodes: each becomes edges
    from the op that made it to the ops that read it, ``[a, b, "(16, 32)"]``. Inputs,
    parameters, outputs, ops (and a failed op) stay nodes; edges out of them carry their
    shape too."""
    by_id = {n["id"]: n for n in full["nodes"]}
    made_by: dict[str, str] = {}
    for a, b in full["edges"]:
        if by_id[b]["kind"] == "variable":
            made_by[b] = a
    edges, seen = [], set()
    for a, b in full["edges"]:
        na = by_id[a]
        if by_id[b]["kind"] == "variable":
            continue  # the op -> tensor half; the tensor -> op half carries it
        if na["kind"] == "variable":
            if a not in made_by:
                continue
            a = made_by[a]
        shape = na.get("shape", by_id[b].get("shape") if by_id[b]["kind"] == "output" else None)
        e = (a, b, fmt_shape(shape) if shape is not None else "")
        if e not in seen:
            seen.add(e)
            edges.append(list(e))
    return {"nodes": [dict(n) for n in full["nodes"] if n["kind"] != "variable"],
            "edges": edges}


def collapse(graph: dict, expanded=frozenset(), depth: int = 2) -> dict:
    """Merge the nodes of each brick at ``depth`` or below into one ``brick`` node, except the
    bricks in ``expanded``, whose direct children are then shown, each collapsed: expanding a
    brick opens exactly one level. Edges ``[a, b, label]`` keep their labels (the distinct
    ones, joined) when they are merged."""
    owner = {}
    for n in graph["nodes"]:
        b = n.get("brick")
        if b is None or n["kind"] in ("output", FAILED) or b.count("/") < depth:
            owner[n["id"]] = n["id"]  # a brick above ``depth`` is open: its children show
            continue
        d = depth
        group = brick_at(b, d)
        while group in expanded and group != b:
            d += 1
            group = brick_at(b, d)
        owner[n["id"]] = n["id"] if group in expanded else f"brick:{group}"
    nodes, seen = [], {}
    for n in graph["nodes"]:
        o = owner[n["id"]]
        if o == n["id"]:
            nodes.append(dict(n))
        elif o not in seen:
            seen[o] = {"id": o, "kind": "brick", "name": o[len("brick:"):], "brick":
                       o[len("brick:"):], "members": [], "ops": [], "parameters": 0}
            nodes.append(seen[o])
        if o != n["id"]:
            seen[o]["members"].append(n["id"])
            if n["kind"] == "function":
                seen[o]["ops"].append(n["op"])
            elif n["kind"] == "parameter":
                seen[o]["parameters"] += 1
    labels: dict[tuple, list] = {}
    for e in graph["edges"]:
        a, b = owner[e[0]], owner[e[1]]
        if a != b:
            got = labels.setdefault((a, b), [])
            if len(e) > 2 and e[2] and e[2] not in got:
                got.append(e[2])
    if all(len(e) == 2 for e in graph["edges"]):
        return {"nodes": nodes, "edges": [list(k) for k in sorted(labels)]}
    return {"nodes": nodes, "edges": [[a, b, _join(ls)] for (a, b), ls in sorted(labels.items())]}


def _join(labels: list[str]) -> str:
    if len(labels) <= 2:
        return ", ".join(labels)
    return f"{labels[0]}, {labels[1]}, +{len(labels) - 2}"


def layout(graph: dict) -> dict[str, tuple[float, float]]:
    """Layered positions: (layer, place in the layer). The layer is the longest path from a
    source (Sugiyama's first step), except that a source sits just above the first node that
    reads it (a parameter next to its op, not at the top); the place orders a layer by the
    barycenter of the predecessors (one downward sweep). Linear in nodes plus edges, so
    thousands of nodes lay out in milliseconds."""
    ids = [n["id"] for n in graph["nodes"]]
    index = {i: k for k, i in enumerate(ids)}
    preds: list[list[int]] = [[] for _ in ids]
    succs: list[list[int]] = [[] for _ in ids]
    for e in graph["edges"]:
        preds[index[e[1]]].append(index[e[0]])
        succs[index[e[0]]].append(index[e[1]])
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
        done = set(order)
        order += [k for k in range(len(ids)) if k not in done]
    layer = [0] * len(ids)
    for k in order:
        for s in succs[k]:
            layer[s] = max(layer[s], layer[k] + 1)
    for k in order:
        if not preds[k] and succs[k]:
            layer[k] = max(0, min(layer[s] for s in succs[k]) - 1)
    layers: dict[int, list[int]] = {}
    for k in order:
        layers.setdefault(layer[k], []).append(k)
    ypos = [0.0] * len(ids)
    for lv in sorted(layers):
        ks = layers[lv]
        bary = []
        for j, k in enumerate(ks):
            ps = [p for p in preds[k] if preds[p]] or preds[k]  # through ops, not parameters
            bary.append(float(np.mean([ypos[p] for p in ps])) if ps else float(j))
        # ops in the order of their predecessors, then the sources, in their op's argument
        # order (x, W, b)
        def key(j, ks=ks, bary=bary):
            k = ks[j]
            if preds[k]:
                return (0, bary[j], 0, j)
            first = succs[k][0] if succs[k] else k
            return (1, float(first), preds[first].index(k) if succs[k] else 0, j)
        ranked = sorted(range(len(ks)), key=key)
        inner = [j for j in ranked if preds[ks[j]]]
        shift = (np.mean([bary[j] for j in inner]) - (len(inner) - 1) / 2 if inner
                 else -(len(ks) - 1) / 2)
        for slot, j in enumerate(ranked):
            ypos[ks[j]] = float(slot + shift)
    return {ids[k]: (float(layer[k]), float(ypos[k])) for k in range(len(ids))}


#: pixels between two slots of a layer (``layout``'s places) where labels leave room
SLOT_PX = 120
#: least pixels between the boxes of two nodes side by side
GAP_PX = 14


def spread(pos: dict, widths: dict) -> dict[str, float]:
    """Each node's x in pixels: its place in its layer (``layout``) times ``SLOT_PX``, then
    the nodes of a layer pushed apart, left to right, until ``GAP_PX`` separates their boxes
    (``widths``: each node's box in pixels; a long label, ``softmax_cross_entropy_grad``, is
    wider than a slot), the layer shifted back so that its mean stays where the places put
    it. Drawn one unit to a pixel, no two labels of a layer overlap, whatever the figure's
    width (a wider graph is dragged sideways)."""
    layers: dict = {}
    for i, (layer, place) in pos.items():
        layers.setdefault(layer, []).append((place, i))
    xs = {}
    for row in layers.values():
        row.sort()
        want = [place * SLOT_PX for place, _ in row]
        got = list(want)
        for k in range(1, len(row)):
            least = got[k - 1] + (widths[row[k - 1][1]] + widths[row[k][1]]) / 2 + GAP_PX
            got[k] = max(got[k], least)
        shift = (sum(want) - sum(got)) / len(row)
        for (_, i), x in zip(row, got):
            xs[i] = x + shift
    return xs


#: an edge label's width per character in pixels (10 px type), and its offset right of its
#: point (the glyph's ``x_offset``)
LABEL_CHAR_PX = 6.0
LABEL_OFFSET_PX = 4
#: heights tried for an edge's label, in layers above the node it enters: half way, then
#: nearer the edge's source, then nearer its target (a node's box is 24 px of a 66 px layer,
#: so these clear both)
LABEL_HEIGHTS = (0.5, 0.7, 0.3)


def place_labels(cands: list) -> dict:
    """Where to write the edges' labels (tensor shapes) so that no two overlap: each of
    ``cands`` is ``(text, (x, y))``, a label with a place of its own, or ``(text, (xa, ya,
    xb, yb))``, a label on the edge from (xa, ya) down to (xb, yb), in pixels across and
    layers down. An edge's label goes half a layer above the node it enters, or where that is
    taken, higher or lower along its edge; where every height is taken it is left out (the
    nodes' tooltips still give every shape). Labels of fixed places first, then by height
    and from the left. Returns ``{"x", "y", "text"}`` columns."""
    taken: dict = {}  # height -> [(left, right)] in pixels
    out: dict = {"x": [], "y": [], "text": []}

    def free(x, y, width):
        left = x + LABEL_OFFSET_PX
        return all(left + width + 2 <= a or b + 2 <= left for a, b in taken.get(round(y, 6), ()))

    def order(c):
        geo = c[1]
        return (len(geo) == 4, geo[-1] + (LABEL_HEIGHTS[0] if len(geo) == 4 else 0), geo[-2])
    for text, geo in sorted(cands, key=order):
        width = LABEL_CHAR_PX * len(text)
        if len(geo) == 2:
            spots = [geo]
        else:
            xa, ya, xb, yb = geo
            span = max(ya - yb, 1e-9)
            spots = [(xb + (xa - xb) * h / span, yb + h) for h in LABEL_HEIGHTS]
        for x, y in spots:
            if len(geo) == 2 or free(x, y, width):
                taken.setdefault(round(y, 6), []).append(
                    (x + LABEL_OFFSET_PX, x + LABEL_OFFSET_PX + width))
                out["x"].append(x)
                out["y"].append(y)
                out["text"].append(text)
                break
    return out


def label(n: dict) -> str:
    """The short text drawn on a node: the op, the brick's own name, ``W``, ``input``."""
    kind = n["kind"]
    if kind == "function":
        return n["op"]
    if kind == FAILED:
        return f"✗ {n['op']}"
    if kind == "brick":
        return f"▸ {n['brick'].rsplit('/', 1)[-1]}"
    name = n.get("name")
    if kind == "parameter" and name:
        return name.rsplit(".", 1)[-1]
    if name:
        return name.rsplit("/", 1)[-1]
    return kind


def role_name(n: dict) -> str | None:
    return (n.get("role") or "").strip("<>").split(".")[-1] or None


def rows(n: dict) -> list[tuple[str, str]]:
    """The tooltip's rows of node ``n``: only the fields that have a value for it."""
    kind = n["kind"]
    out = [("", f"{kind} {n.get('op') or n.get('name') or ''}".strip())]
    if kind == "brick":
        ops = sorted(set(n.get("ops", [])))
        out.append(("ops", f"{len(n.get('ops', []))}: " + ", ".join(ops[:6])
                    + (", ..." if len(ops) > 6 else "")))
        if n.get("parameters"):
            out.append(("parameters", str(n["parameters"])))
        out.append(("", "click to expand"))
        return out
    shape = n.get("shape")
    shapes = n.get("shapes")
    if shape is not None:
        out.append(("shape", fmt_shape(shape)))
    elif shapes:
        out.append(("shape", ", ".join(fmt_shape(s) for s in shapes)))
    for k in ("dtype", "device", "brick"):
        if n.get(k):
            out.append((k, str(n[k])))
    if n.get("in_brick"):
        out.append(("brick", n["in_brick"]))
    if role_name(n):
        out.append(("role", role_name(n)))
    for k in ("expected", "actual"):
        if n.get(k):
            out.append((k, n[k]))
    return [(k, v) for k, v in out if v]


def tip_html(n: dict) -> str:
    return "<br>".join((f"<b>{esc(k)}</b> " if k else "") + esc(v)
                       for k, v in rows(n))


_SHAPES = re.compile(r"\b(\w+)\.shape=(\([^)]*\))")


def failure(error: BaseException) -> dict:
    """What a ShapeError says, taken apart: ``op`` (every labkit message starts with it),
    ``expected`` and ``actual`` (the two sides of its "... but ..."), each with the shapes
    the message names for its operand, and the whole ``message``."""
    msg = str(error).split("\n")[0]
    op, sep, rest = msg.partition(": ")
    if not sep or not re.fullmatch(r"[\w.]+", op):
        op, rest = type(error).__name__, msg
    statement = rest.split("; ")[0]
    shapes = dict(_SHAPES.findall(rest))
    actual, but, expected = statement.partition(" but ")
    if not but:
        actual, expected = statement, ""

    def with_shape(text):
        name = text.split(" ", 1)[0]
        return f"{text} ({name}.shape={shapes[name]})" if name in shapes else text
    return {"op": op, "expected": with_shape(expected) if expected else "",
            "actual": with_shape(actual), "message": msg}
