"""A pass: the pieces of a stack written in place (on the CPU).

A compiled LSTM step stacks its 32 time steps' gate gradients, and its hidden states, for
the weights' gradients (one product each, compile/gather.py): ``np.stack`` copied each piece
again, 2 MB at 32 x 32 x 512, about 250 us of the CPU step's 8 ms, where hand-written
backpropagation through time writes each step's gradient into its place of one array. Here
a stack whose result is the program's own (not a result, not read by a host function, not
changed in place) gets an array made once with the program, and each piece whose op can
write its result into a given array (``forward_into(j, out, *ins)``: the LSTM cell's h and
its gradient's gates, ``WRITERS``) writes it into its place there, where the place is laid
out as a fresh array would be (``ALIGN``); its readers read that place, a view. The stack
node then copies only the other pieces. The same numbers, bit for bit: the pieces' values
are computed as before, only where they are stored changes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..functions import array as fa
from ..functions import recurrent as rec
from . import passes
from .trace import Node

#: the ops whose ``forward_into`` writes an output into a given array: exact types (a
#: subclass may compute otherwise) -> that output's index
WRITERS = {rec.LSTM: 1, rec.LSTMGrad: 1}
#: a piece's place must be laid out as a fresh array would be for the ops that read it to
#: take the same paths (the same bits): its rows contiguous, and its start and its other
#: strides multiples of this many bytes, the alignment malloc gives a fresh NumPy array (a
#: batch-1 hidden state in a place along the last axis, read with a stride, took another
#: NumPy loop for ``h @ U``: the last bits changed)
ALIGN = 16


def _fits(place, piece) -> bool:
    """Whether ``place`` may hold ``piece`` for its readers (see ``ALIGN``)."""
    if place.shape != piece.shape or place.dtype != piece.dtype or place.ndim == 0:
        return False
    st = place.strides
    return (st[-1] == place.itemsize and place.ctypes.data % ALIGN == 0
            and all(x % ALIGN == 0 for x in st[:-1]))


class _FillStack:
    """The stack's array, with the pieces no op wrote in place copied into their places."""

    def __init__(self, out, places):
        self.out, self.places = out, places

    def __call__(self, *pieces):
        for place, piece in zip(self.places, pieces):
            self.out[place] = piece
        return self.out


def stacks_in_place(nodes, values, viewed) -> tuple[list, int]:
    """The nodes with each such stack's pieces written in place (see the module's doc), and
    how many pieces were. ``viewed``: the slots a result may be or be a view of (program
    ``_viewed``): none of those is stored in a kept array."""
    made_by = {s: (i, j) for i, n in enumerate(nodes) for j, s in enumerate(n.outs)}
    changed = {passes.root_id(values[s]) for s in passes.changed_in_place(nodes)
               if s in values}
    kept = {passes.root_id(values[s]) for s in viewed if s in values}
    into: dict = {}      # node index -> (output index, the view it writes)
    replace: dict = {}   # stack node index -> the node that fills its array
    for k, st in enumerate(nodes):
        if (st.kind != "op" or type(st.fn) is not fa.Stack or st.attr_in or st.attr_out
                or st.effect or st.versions or len(set(st.ins)) != len(st.ins)):
            continue
        o = st.outs[0]
        res = values.get(o)
        if (type(res) is not np.ndarray or o in viewed
                or passes.root_id(res) in kept | changed):
            continue
        out = np.empty_like(res)
        lead = (slice(None),) * st.fn.axis
        rest, places = [], []
        for p, s in enumerate(st.ins):
            v, where = values.get(s), made_by.get(s)
            node = nodes[where[0]] if where is not None else None
            place = out[lead + (p,)]
            if (node is not None and where[0] < k and where[0] not in into
                    and node.kind == "op" and WRITERS.get(type(node.fn)) == where[1]
                    and not node.attr_in and not node.versions
                    and type(v) is np.ndarray and v.base is None and s not in viewed
                    and id(v) not in kept | changed and _fits(place, v)):
                into[where[0]] = (where[1], place)
            else:
                rest.append(s)
                places.append(lead + (p,))
        if len(rest) == len(st.ins):
            continue  # NOTE: no piece written in place: the stack as it was
        # NOTE: the stack's signature kept (a gathered product's stack stays marked so)
        replace[k] = Node("host", _FillStack(out, places), rest, [o], "stack (in place)",
                          st.where, st.sig, idx=st.idx)
    if not replace:
        return nodes, 0
    result = []
    for i, n in enumerate(nodes):
        if i in replace:
            n = replace[i]
        elif i in into:
            n = dataclasses.replace(n, into=into[i])
        result.append(n)
    return result, len(into)
