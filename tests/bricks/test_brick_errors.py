"""An error inside a brick: the note and graph it carries (on Python 3.10 too), and the brick
GraphView marks as failed."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit.errors import LabkitError


class Block(B.Brick):
    """tanh, then a linear map whose weight expects ``k`` features."""

    def __init__(self, k, name=None):
        super().__init__(name)
        self.W = B.Parameter(np.ones((2, k), np.float32), role=lk.roles.WEIGHT)
        self.built = True

    def forward(self, x):
        return F.linear(F.tanh(x), self.W)


class TwoBlocks(B.Brick):
    """Children named so that one name is a prefix of the other: block_10 and block_1 run
    fine, then block_1 fails on its second call (as a recurrent cell fails at some step), so
    the graph holds ops of both."""

    def __init__(self):
        super().__init__("m")
        self.add_child(Block(3), "block_10")
        self.add_child(Block(3), "block_1")

    def forward(self, x):
        return self.block_1(F.concat([self.block_10(x), self.block_1(x)], axis=1))


class Py310Error(LabkitError):
    """An error as on Python 3.10, where BaseException has no add_note."""

    @property
    def add_note(self):
        raise AttributeError("add_note")


def test_add_note_falls_back_to_notes_without_add_note():
    from labkit.bricks.base import add_note

    e = Py310Error("boom")
    assert not hasattr(e, "add_note")
    add_note(e, "first")
    add_note(e, "second")
    assert e.__notes__ == ["first", "second"]
    native = LabkitError("boom")
    add_note(native, "third")
    assert native.__notes__ == ["third"]


def test_brick_error_without_add_note_still_carries_note_graph_and_brick():
    class Failing(B.Brick):
        def forward(self, x):
            y = F.tanh(x)
            raise Py310Error("inner failure")
            return y

    seq = B.Sequence(B.Tanh(), Failing())
    with pytest.raises(Py310Error) as info:  # was: AttributeError from e.add_note on 3.10
        seq(lk.tensor(np.ones((2, 3), np.float32), requires_grad=True))
    e = info.value
    assert e.brick == "/sequence/failing_1"
    # the graph up to the failing brick's inputs: the Tanh brick's op
    assert [(n.name, n.brick) for n in e.graph.nodes] == [("tanh", "/sequence/tanh_0")]
    assert len(e.__notes__) == 1 and "(in brick /sequence/failing_1;" in e.__notes__[0]


def test_a_shape_error_names_the_innermost_brick():
    with pytest.raises(lk.ShapeError) as info:
        TwoBlocks()(lk.tensor(np.ones((4, 3), np.float32)))
    e = info.value
    assert e.brick == "/m/block_1"
    assert str(e).startswith("linear: x has 4 features but W expects 3")
    assert "(in brick /m/block_1;" in e.__notes__[0]


def test_graphview_marks_the_failed_brick_by_path_segments():
    pytest.importorskip("jupyter_bokeh", reason="the notebook extras are part of [dev]")
    from labkit.notebook import GraphView

    with pytest.raises(lk.ShapeError) as info:
        TwoBlocks()(lk.tensor(np.ones((4, 3), np.float32)))
    view = GraphView(info.value, depth=5)  # deep enough that no brick is collapsed
    marked = {b for b, line in zip(view.node_source.data["brick"],
                                   view.node_source.data["line"]) if line == "#d62728"}
    unmarked = {b for b, line in zip(view.node_source.data["brick"],
                                     view.node_source.data["line"]) if line != "#d62728"}
    assert "/m/block_1" in marked  # its first call's ops and its W
    assert "/m/block_10" in unmarked and "/m/block_10" not in marked  # was marked: a prefix
