"""What a traced call changed outside its ops' results, checked when it ends: the ``.data``
and ``.grad`` of the tensors it read that it replaced, recorded in the trace's ``writes`` (a
replay writes them when it ends, but a ``.data`` the step set last where a ``SetData`` node
sets it: compile/hooks.py), and raw in-place changes a replay could not repeat (refused)."""

from __future__ import annotations

from ..errors import CompileError
from .hooks import SetData


def refuse_changed_made(t, fn_name: str) -> None:
    """Refuse an array a labkit op made that raw code then changed in place (``p.grad.data
    *= 0.5``, a hook's ``g.data *= 0.5``, ``logits.data[mask] = 0``): a replay runs the op and
    not the change, so it trained on the unchanged array (manual gradient clipping dropped
    from the third call on). Arrays changed by host steps that say so (``mutates=``), and
    what shares their memory, are not checked."""
    from .passes import root_id as root
    from .trace import checksum

    changed = {root(t.values[old]) for n in t.nodes for old, _ in n.versions
               if old in t.values}
    changed |= {root(v) for v in t.values.values() if id(v) in t.mutated}
    made_by = {o: n for n in t.nodes for o in n.outs}
    for s, total in t.sums.items():
        arr = t.values.get(s)
        if (s in t.sources or arr is None or root(arr) in changed
                or checksum(arr) == total):
            continue
        n = made_by.get(s)
        at = f" (made by {n.name} at {n.where})" if n is not None else ""
        raise CompileError(
            f"lk.compile: {fn_name} changed an array of shape {tuple(arr.shape)} that a labkit "
            f"op made{at} in place outside labkit ops (p.grad.data *= 0.5, x.data[...] = ..., a "
            "hook changing g.data); a replay would not repeat that change. Use labkit ops "
            "(a hook returning g * 0.5, F.clip, F.where), or wrap the raw code in "
            "lk.compile.host(fn, *arrays, effect=True, mutates=(...))")


def record_writes(t, fn_name: str) -> None:
    """Record in ``t.writes`` each replaced ``.data`` and ``.grad`` of the tensors the call
    read (``t.live``) and the ``.grad`` of its tensor arguments; refuse what a replay could
    not repeat."""
    sets = [n for n in t.nodes if isinstance(n.fn, SetData)]
    for n in sets:
        src = t.sources.get(n.ins[0])
        if src is not None and n.fn.arg is None and t.live[id(n.fn.tensor)][2] is not src.value:
            # NOTE: a tensor the step set to an array from outside is not where a replay reads
            # that array (its data when the call begins is another)
            src.tensors = [x for x in src.tensors if x is not n.fn.tensor]
    # NOTE: nor is a tensor the step set to an argument's array (P.data = x.data) that
    # argument's alias, to be checked at each call (every call was traced again)
    t.arg_alias = [(k, x) for k, x in t.arg_alias
                   if not any(n.fn.tensor is x and t.sources.get(n.ins[0]) is not None
                              and t.sources[n.ins[0]].kind == "arg" for n in sets)]
    last = {id(n.fn.tensor): n for n in sets if n.fn.arg is None}
    index = _index(t)
    # NOTE: compile/hooks.py Watch: gradients at the call's start, tensors made during it
    before, made = getattr(t, "grad_before", {}), getattr(t, "created", ())
    for tensor, grad0, arr0 in t.live.values():
        if id(tensor) in made:
            continue  # NOTE: a temporary the step made (from a NumPy array): nothing to keep
        grad0 = before.get(id(tensor), grad0)
        n = last.get(id(tensor))
        if n is not None and tensor.data is not arr0 and t.values.get(n.ins[0]) is tensor.data:
            # NOTE: set where the step set it, last: nothing to write when the replay ends
            _refuse_replaced_then_changed(t, fn_name, tensor, n.ins[0], index)
        elif tensor.data is not arr0:
            s = t.ids.get(id(tensor.data))
            if s is None or s in t.sources:
                what = "None" if tensor.data is None else "an array no labkit op made"
                raise CompileError(
                    f"lk.compile: {fn_name} replaced the data of a tensor of shape "
                    f"{_shape(arr0)} with {what} (.data = ... or an "
                    "in-place NumPy update); a replay could not repeat it. Update "
                    "parameters with an optimizer, or wrap raw array code in "
                    "lk.compile.host(fn, *arrays)")
            _refuse_replaced_then_changed(t, fn_name, tensor, s, index)
            t.writes.append((tensor, "data", s))
        g = tensor.grad
        if g is None:
            if grad0 is not None and id(tensor) not in t.cleared:  # NOTE: else just below
                t.writes.append((tensor, "grad", None))
        elif g is not grad0:
            s = t.ids.get(id(g.data))
            if s is None:
                raise CompileError(
                    f"lk.compile: {fn_name} set the .grad of a tensor of shape "
                    f"{_shape(arr0)} to an array no labkit op made")
            t.writes.append((tensor, "grad", s))
    written = {id(x) for x, kind, _ in t.writes if kind == "grad"}
    for key, tensor in t.cleared.items():
        # NOTE: set to None by the step (zero_grad), and None at its end: None after a replay
        # too, whatever it was when traced (a program traced while it was None already)
        if key not in written and tensor.grad is None:
            t.writes.append((tensor, "grad", None))
    for k, tensor in t.arg_tensors.items():
        if not any(x.kind == "arg" and x.value is tensor.data for x in t.sources.values()) \
                and not any(
                isinstance(n.fn, SetData) and n.fn.arg == k
                and t.values.get(n.ins[0]) is tensor.data for n in t.nodes):
            # NOTE: an argument's .data replaced where the assignment was not seen (in a host
            # function): a replay left it as given, silently
            raise CompileError(
                f"lk.compile: {fn_name} replaced the data of its tensor argument {k} (now "
                f"{_shape(tensor.data)}) in a way a replay cannot repeat; set it with a labkit "
                "op's result in the step itself (x.data = F.clip(x, -1, 1).data), or return the "
                "new tensor from the step")
        g = tensor.grad
        if g is not None and id(g.data) in t.ids and t.ids[id(g.data)] not in t.sources:
            t.writes.append((k, "arg_grad", t.ids[id(g.data)]))


def _shape(a):
    return tuple(a.shape) if hasattr(a, "shape") else a


def _refuse_replaced_then_changed(t, fn_name, tensor, s, index) -> None:
    """A tensor's data replaced by an op's result that a host step then changed in place
    (``w.data = (w * 0.9).data`` before ``opt.update()``) replays where the replay sets the
    data where the step did (a ``SetData`` node, before the host step), and is refused where
    it does not (the assignment was not seen: the host step would update the old array, and
    the write when the replay ends would drop the update). ``index``: ``_index(t)``."""
    older, changer, sets = index
    chain = [s]
    while chain[-1] in older:
        chain.append(older[chain[-1]])
    # NOTE: set where the step set it (a SetData node): the host step changes the new array
    set_at = min((n.idx for n in sets.get(id(tensor), ()) if n.ins[0] in chain), default=None)
    first = min((changer[x] for x in chain if x in changer), key=lambda n: n.idx, default=None)
    if first is not None and (set_at is None or first.idx < set_at):
        raise CompileError(
            f"lk.compile: {fn_name} replaced the data of a tensor of shape "
            f"{_shape(tensor.data)} with an op's result (.data = ...), which {first.name} at "
            f"{first.where} then changed in place; a replay would change the old data "
            "instead. Set it in the step itself with a labkit op's result (w.data = (w * "
            "0.9).data, not inside lk.compile.host), or change the parameters with the "
            "optimizer (a rule such as weight_decay, or constraints=)")


def _index(t) -> tuple:
    """(newer version -> older, slot -> the first node changing it in place, id(tensor) ->
    its SetData nodes), once for all the tensors of ``record_writes``."""
    older, changer, sets = {}, {}, {}
    for n in t.nodes:
        for old, new in n.versions:
            older[new] = old
            changer.setdefault(old, n)
        if isinstance(n.fn, SetData) and n.fn.arg is None:
            sets.setdefault(id(n.fn.tensor), []).append(n)
    return older, changer, sets


def refuse_changed_consts(t, fn_name: str) -> None:
    """After ``compare``: refuse a constant of the trace (an array the step made with the same
    values at both calls, not with a labkit op) that a node then changed in place (a
    parameter's ``.data`` set to it before the optimizer's update): its traced value is the
    changed one, and a replay would start each call from it."""
    from .trace import checksum

    changed = _index(t)[1]
    for s, src in t.sources.items():
        n = changed.get(s)
        if src.kind == "const" and n is not None and checksum(src.value) != t.sums.get(s):
            raise CompileError(
                f"lk.compile: {fn_name} made an array of shape {tuple(src.value.shape)} "
                f"outside labkit ops (the same values at each call) that {n.name} at "
                f"{n.where} then changed in place; a replay would start from the changed "
                "values. Make it with a labkit op (lk.tensor(a) * 1.0), or pass it in as an "
                "argument")
