"""What a traced call changed outside its ops' results: the ``.data`` and ``.grad`` of the
tensors it read that it replaced, checked and recorded in the trace's ``writes`` (a replay
writes them back when it ends)."""

from __future__ import annotations

from ..errors import CompileError


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
    for tensor, grad0, arr0 in t.live.values():
        if tensor.data is not arr0:
            s = t.ids.get(id(tensor.data))
            if s is None or s in t.sources:
                raise CompileError(
                    f"lk.compile: {fn_name} replaced the data of a tensor of shape "
                    f"{tensor.shape} with an array no labkit op made (.data = ... or an "
                    "in-place NumPy update); a replay could not repeat it. Update "
                    "parameters with an optimizer, or wrap raw array code in "
                    "lk.compile.host(fn, *arrays)")
            _refuse_replaced_then_changed(t, fn_name, tensor, s)
            t.writes.append((tensor, "data", s))
        g = tensor.grad
        if g is None:
            if grad0 is not None:
                t.writes.append((tensor, "grad", None))
        elif g is not grad0:
            s = t.ids.get(id(g.data))
            if s is None:
                raise CompileError(
                    f"lk.compile: {fn_name} set the .grad of a tensor of shape "
                    f"{tensor.shape} to an array no labkit op made")
            t.writes.append((tensor, "grad", s))
    written = {id(x) for x, kind, _ in t.writes if kind == "grad"}
    for key, tensor in t.cleared.items():
        # NOTE: set to None by the step (zero_grad), and None at its end: None after a replay
        # too, whatever it was when traced (a program traced while it was None already)
        if key not in written and tensor.grad is None:
            t.writes.append((tensor, "grad", None))
    for k, tensor in t.arg_tensors.items():
        g = tensor.grad
        if g is not None and id(g.data) in t.ids and t.ids[id(g.data)] not in t.sources:
            t.writes.append((k, "arg_grad", t.ids[id(g.data)]))


def _refuse_replaced_then_changed(t, fn_name, tensor, s) -> None:
    """A tensor's data replaced by an op's result that a host step then changed in place
    (``w.data = (w * 0.9).data`` before ``opt.update()``) is refused: the host step reads the
    tensor's ``.data`` when it runs, and a replay writes replaced data back only when it ends,
    so it would update the old array, and the write would then drop the update. Replaced
    after the update, the data is written back as traced."""
    older = {new: old for n in t.nodes for old, new in n.versions}
    chain = {s}
    while s in older:
        s = older[s]
        chain.add(s)
    for n in t.nodes:
        if any(old in chain for old, _ in n.versions):
            raise CompileError(
                f"lk.compile: {fn_name} replaced the data of a tensor of shape {tensor.shape} "
                f"with an op's result (.data = ...), which {n.name} at {n.where} then changed "
                "in place; a replay would change the old data instead. Replace the data after "
                "the update (that is replayed), or change the parameters with the optimizer (a "
                "rule such as weight_decay, or constraints=)")
