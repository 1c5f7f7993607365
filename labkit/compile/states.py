"""What a compiled step's trace took of the tensors it read that live between calls (its
parameters): shapes, dtypes, devices, requires_grad and which of them shared one array; a
program (compile/program.py) and a first trace waiting for its second (compile/__init__.py)
check them at each call."""

from __future__ import annotations


class _States(list):
    """:func:`tensor_states`' entries, with ``groups``: for each tensor the index of the first
    one on its array when traced, and ``distinct``: how many arrays they were on."""

    groups: tuple = ()
    distinct = 0


def tensor_states(pairs) -> list:
    """What a trace took of each of the tensors it read, for :func:`states_failure`: its
    shape, dtype, requires_grad, array type and device, from ``(tensor, the array the trace
    read)`` pairs (not its data when the call ended: a step growing a buffer replayed with the
    next call's shape), and which of them were on one array (a program traced with two
    parameters on two arrays computed something else than the eager step once they were one,
    ``B.data = A.data``, and a step that made them one was refused at its second call)."""
    out, first, groups = _States(), {}, []
    for i, (x, a) in enumerate(pairs):
        out.append((x, a.shape, a.dtype, x.requires_grad, type(a), getattr(a, "rt", None)))
        groups.append(first.setdefault(id(a), i))
    out.groups, out.distinct = tuple(groups), len(first)
    return out


def states_failure(states):
    """How a tensor of ``tensor_states`` differs now (frozen, unfrozen, of another shape,
    dtype or device, on an array it did not share or no longer on one it shared),
    described; or None when none does."""
    ids = []
    for tensor, shape, dtype, rg, kind, rt in states:
        d = tensor.data
        if d.shape != shape or d.dtype != dtype:
            return f"a tensor the step reads changed from {dtype}{shape} to {d.dtype}{d.shape}"
        if tensor.requires_grad != rg:
            return (f"a tensor of shape {shape} the step reads has requires_grad="
                    f"{tensor.requires_grad}, {rg} when traced (a parameter frozen or unfrozen)")
        if type(d) is not kind or getattr(d, "rt", None) is not rt:
            return (f"a tensor of shape {shape} the step reads is on another device than when "
                    "traced")
        ids.append(id(d))
    # NOTE: the common case, each on an array of its own then and now, in one set
    if states.distinct == len(ids) and len(set(ids)) == len(ids):
        return None
    first: dict = {}
    for i, k in enumerate(ids):
        now = first.setdefault(k, i)
        group = states.groups[i]
        if now != group:
            other = states[now if now != i else group][0]
            return (f"tensors of shapes {states[i][1]} and {tuple(other.shape)} the step reads "
                    + ("share one array now, two when traced" if now != i else
                       "were on one array when traced, two now"))
    return None


def live_states(t) -> list:
    """:func:`tensor_states` of the tensors the trace ``t`` read that live on between calls:
    not those made in the step (``p.detach()``: a new one at each call), nor one per slot (two
    on one array must stay one, two on two must not become one)."""
    made = getattr(t, "created", ())
    return tensor_states((x, a) for x, _, a in t.live.values() if id(x) not in made)
