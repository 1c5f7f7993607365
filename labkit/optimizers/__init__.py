"""Optimizers as composable step rules (Blocks' CompositeRule, PyTorch's formulas).

    opt = lk.optimizers.Adam(lr=1e-3).setup(model)
    loss.backward(); opt.update()

A rule turns the gradients into steps; rules chain (``chain(GradientClipping(1.0),
WeightDecay(1e-4), Momentum(0.1, 0.9))``) and each reads its hyper-parameters from the
parameter's group first (``setup(model, groups=[{"role": lk.roles.BIAS, "weight_decay": 0}])``).
``lr`` may be a number or a schedule (a callable of the step). ``state_dict()`` holds every
moment and counter, and each hyper-parameter set during the run (``opt.lr = ...`` from an
extension or a notebook cell), so a restored optimizer's next update is bitwise the same.

A schedule reads the optimizer's steps (``t``); Adam's bias correction reads the parameter's
own count of updates, as PyTorch's does: a parameter first updated late (a layer unfrozen
after 1,000 steps) starts its correction at 1, instead of steps of about 2.5 lr.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping

import numpy as np

from .. import roles as _roles
from ..autograd.trace import grad_cleared, host
from ..backend import asarray, get_array_module, zeros
from ..checkpoint import is_count, listed, shown_key
from ..checkpoint._common import ROOM
from ..errors import CheckpointError
from . import fused as _fused
from . import hyper as _hyper
from .hyper import quoted as _quoted

#: the key of a parameter's own count of updates in the options its rules are given, where
#: that is not the optimizer's ``t`` (Optimizer._group; Adam's bias correction reads it)
OWN_STEPS = "_own_steps"

# ---- schedules ----------------------------------------------------------------------------


class Schedule:
    def __call__(self, step: int) -> float:  # pragma: no cover - abstract
        raise NotImplementedError


class StepDecay(Schedule):
    """``lr * gamma ** (step // every)``."""

    def __init__(self, lr, every, gamma=0.1):
        self.lr, self.every, self.gamma = lr, every, gamma

    def __call__(self, step):
        return self.lr * self.gamma ** (step // self.every)


class Exponential(Schedule):
    def __init__(self, lr, gamma):
        self.lr, self.gamma = lr, gamma

    def __call__(self, step):
        return self.lr * self.gamma ** step


class Cosine(Schedule):
    """Cosine decay from ``lr`` to ``min_lr`` over ``total`` steps."""

    def __init__(self, lr, total, min_lr=0.0):
        self.lr, self.total, self.min_lr = lr, total, min_lr

    def __call__(self, step):
        t = min(step, self.total) / self.total
        return self.min_lr + (self.lr - self.min_lr) * 0.5 * (1 + math.cos(math.pi * t))


class WarmUp(Schedule):
    """Linear warm-up over ``steps``, then ``after`` (a number or a schedule of the step)."""

    def __init__(self, steps, after):
        self.steps, self.after = steps, after

    def __call__(self, step):
        base = self.after(step) if callable(self.after) else self.after
        return base * min(1.0, (step + 1) / self.steps)


def _value(v, step):
    return v(step) if callable(v) else v


# ---- rules --------------------------------------------------------------------------------


class Rule:
    """Transforms (param, grad-or-step) pairs; ``state`` keeps per-parameter arrays."""

    defaults: dict = {}
    #: each parameter's step depends on its own arrays only (can be fused per parameter)
    elementwise = True

    def __init__(self, *args, **hyper):
        names = list(self.defaults)
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__}: at most {len(names)} positional "
                            f"arguments ({', '.join(names)}), got {len(args)}")
        unknown = set(hyper) - set(names)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown hyper-parameter(s) "
                            f"{', '.join(sorted(unknown))}; expected {', '.join(names)}")
        self.hyper = {**self.defaults, **dict(zip(names, args)), **hyper}
        #: the values it was built with: a checkpoint holds the ones changed since
        #: (``Optimizer.state_dict``'s ``"hyper"``)
        self.built = dict(self.hyper)

    def h(self, name, group, step):
        v = _value(group.get(name, self.hyper[name]), step)
        # NOTE: a NumPy number as a Python one (weak, as a Python number is): np.float64(0.9)
        # as a momentum made a float32 parameter's state float64, which no longer loaded
        return v.item() if isinstance(v, np.generic) else v

    #: the state keys that hold sums or means of squares: never negative in a real run (NaN
    #: and infinity can be: a run that diverged), so a checkpoint with a negative value there
    #: is damaged or crafted, and refused on load
    nonnegative: tuple = ()

    def init_state(self, p):
        return {}

    def apply(self, ps, steps, states, groups, t):  # pragma: no cover - abstract
        raise NotImplementedError

    def setup(self, model, groups=None):
        return Optimizer([self]).setup(model, groups)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.hyper.items())})"


def _zeros_like(a):
    return zeros(a.shape, a.dtype, a)


class SGD(Rule):
    defaults = {"lr": 0.01}

    def apply(self, ps, steps, states, groups, t):
        return [g * self.h("lr", gr, t) for g, gr in zip(steps, groups)]


class Momentum(Rule):
    """v = mu v + g; step = lr v (PyTorch's SGD with momentum)."""

    defaults = {"lr": 0.01, "momentum": 0.9}

    def init_state(self, p):
        return {"v": _zeros_like(p.data)}

    def apply(self, ps, steps, states, groups, t):
        out = []
        for g, s, gr in zip(steps, states, groups):
            s["v"] = s["v"] * self.h("momentum", gr, t) + g
            out.append(s["v"] * self.h("lr", gr, t))
        return out


class Nesterov(Momentum):
    """v = mu v + g; step = lr (g + mu v)."""

    def apply(self, ps, steps, states, groups, t):
        out = []
        for g, s, gr in zip(steps, states, groups):
            mu = self.h("momentum", gr, t)
            s["v"] = s["v"] * mu + g
            out.append((g + s["v"] * mu) * self.h("lr", gr, t))
        return out


class AdaGrad(Rule):
    defaults = {"lr": 0.01, "eps": 1e-10}
    nonnegative = ("sum_sq",)

    def init_state(self, p):
        return {"sum_sq": _zeros_like(p.data)}

    def apply(self, ps, steps, states, groups, t):
        out = []
        for g, s, gr in zip(steps, states, groups):
            xp = get_array_module(g)
            s["sum_sq"] = s["sum_sq"] + g * g
            out.append(g * self.h("lr", gr, t) / (xp.sqrt(s["sum_sq"]) + self.h("eps", gr, t)))
        return out


class RMSProp(Rule):
    defaults = {"lr": 0.01, "alpha": 0.99, "eps": 1e-8}
    nonnegative = ("sq",)

    def init_state(self, p):
        return {"sq": _zeros_like(p.data)}

    def apply(self, ps, steps, states, groups, t):
        out = []
        for g, s, gr in zip(steps, states, groups):
            xp = get_array_module(g)
            a = self.h("alpha", gr, t)
            s["sq"] = s["sq"] * a + g * g * (1 - a)
            out.append(g * self.h("lr", gr, t) / (xp.sqrt(s["sq"]) + self.h("eps", gr, t)))
        return out


class Adam(Rule):
    defaults = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    nonnegative = ("v",)

    def init_state(self, p):
        return {"m": _zeros_like(p.data), "v": _zeros_like(p.data)}

    def apply(self, ps, steps, states, groups, t):
        out = []
        for g, s, gr in zip(steps, states, groups):
            k = gr.get(OWN_STEPS, t) + 1  # NOTE: this parameter's updates (Optimizer._group)
            xp = get_array_module(g)
            b1, b2 = self.h("beta1", gr, t), self.h("beta2", gr, t)
            s["m"] = s["m"] * b1 + g * (1 - b1)
            s["v"] = s["v"] * b2 + g * g * (1 - b2)
            mhat = s["m"] / (1 - b1 ** k)
            vhat = s["v"] / (1 - b2 ** k)
            out.append(mhat * self.h("lr", gr, t) / (xp.sqrt(vhat) + self.h("eps", gr, t)))
        return out


class AdamW(Adam):
    """Adam with decoupled weight decay: step += lr * weight_decay * p (on every parameter of
    the group; set weight_decay=0 in a BIAS group to spare biases)."""

    defaults = {**Adam.defaults, "weight_decay": 0.01}

    def apply(self, ps, steps, states, groups, t):
        out = super().apply(ps, steps, states, groups, t)
        return [s + p.data * (self.h("lr", gr, t) * self.h("weight_decay", gr, t))
                for s, p, gr in zip(out, ps, groups)]


class GradientClipping(Rule):
    """Scale all gradients together so that their global L2 norm is at most ``max_norm``."""

    defaults = {"max_norm": 1.0}
    elementwise = False  # the norm is over every gradient

    def apply(self, ps, steps, states, groups, t):
        total = math.sqrt(sum(float((g * g).sum()) for g in steps))
        # NOTE: read as every rule reads its hyper-parameters (a group's value, a schedule's
        # at this step); one norm over every parameter takes one limit
        limits = {self.h("max_norm", gr, t) for gr in groups} or {self.h("max_norm", {}, t)}
        if len(limits) > 1:
            raise ValueError(f"GradientClipping: the parameters' groups give max_norm "
                             f"{sorted(limits)}; the norm is over every gradient together, "
                             "so give one max_norm (not per group)")
        limit = limits.pop()
        self.last_norm = total
        if total <= limit or total == 0:
            return steps
        scale = limit / total
        return [g * scale for g in steps]


class WeightDecay(Rule):
    """g += weight_decay * p, only for parameters with ``role`` (WEIGHT by default: biases
    and other parameters are spared)."""

    defaults = {"weight_decay": 1e-4}

    def __init__(self, weight_decay=1e-4, role=_roles.WEIGHT):
        super().__init__(weight_decay=weight_decay)
        self.role = role

    def apply(self, ps, steps, states, groups, t):
        return [g + p.data * self.h("weight_decay", gr, t)
                if _roles.has_role(p, self.role) else g
                for g, p, gr in zip(steps, ps, groups)]


#: the rules whose ``apply`` is elementwise arithmetic on the arrays it is given (a subclass
#: that overrides ``apply`` is not assumed to be): they may run on pieces of a parameter
_PIECEWISE = {r.apply for r in (SGD, Momentum, Nesterov, AdaGrad, RMSProp, Adam, AdamW,
                                WeightDecay)}
_fused.SCALE_ONLY.add(SGD.apply)
_fused.PLAIN_H.add(Rule.h)


# ---- the optimizer ------------------------------------------------------------------------


class Optimizer:
    """Rules applied in order to the gradients; the last one gives the step ``p -= step``.

    On an OpenCL device the update of each parameter is one kernel when every rule is
    elementwise arithmetic; on the CPU a large parameter is updated in cache-sized pieces
    when every rule is a built-in elementwise one (``fused``; the same numbers as the unfused
    ops: set ``opt.fused = False`` to compare), except plain SGD's, one BLAS axpy where
    NumPy's own BLAS is reachable, which rounds ``p - lr * g`` once (backend/blas.py)."""

    #: one kernel per parameter on OpenCL devices, cache-sized pieces on the CPU
    #: (optimizers/fused.py)
    fused = True

    def __init__(self, rules, constraints=()):
        self.rules = list(rules)
        self.constraints = list(constraints)
        self.params: dict = {}
        self.groups: list = []
        self.states: list = []
        self.counts: list = []
        self.t = 0

    def setup(self, model, groups=None):
        """``model``: a Brick, or a dict {name: Parameter}. ``groups``: dicts with a selector
        (``role=`` or ``name=`` glob) and options overriding the rules' hyper-parameters."""
        self.params = dict(model.params() if hasattr(model, "params") else model)
        selectors = list(groups or [])
        self.groups = []
        for name, p in self.params.items():
            opts = {}
            for g in selectors:
                g = dict(g)
                role, pat = g.pop("role", None), g.pop("name", None)
                if (role is None or _roles.has_role(p, role)) and (
                        pat is None or fnmatch.fnmatch(name, pat)):
                    opts.update(g)
            self.groups.append(opts)
        self.states = [[r.init_state(p) for p in self.params.values()] for r in self.rules]
        #: each parameter's updates so far (Adam's bias correction; ``t`` is the optimizer's)
        # NOTE: 0, not t, on a second setup: its states start again from zeros (a new
        # parameter's Adam correction at step t was about 2.5 lr, as PyTorch's is not)
        self.counts = [0] * len(self.params)
        return self

    def _group(self, i):
        """Parameter ``i``'s options for the rules: its group's, and its own count of updates
        where that is not the optimizer's ``t`` (it had no gradient at some steps)."""
        c = self.counts[i]
        return self.groups[i] if c == self.t else {**self.groups[i], OWN_STEPS: c}

    def zero_grad(self):
        for p in self.params.values():
            p.grad = None
            grad_cleared(p)  # NOTE: a compiled step's replay clears it too

    def update(self):
        """One step from the current ``.grad`` of every parameter (None: left unchanged)."""
        if not self.params:
            raise RuntimeError("update: call setup(model) first")
        plist = list(self.params.values())
        self._follow_devices(plist)
        idx = [i for i, p in enumerate(plist) if p.grad is not None]
        grads = [plist[i].grad.data for i in idx]
        # NOTE: inside lk.compile's trace the update is one host step that each replay runs
        # again with that call's gradients, this optimizer's state and step count then
        changed = [p.data for p in plist] + [v for st in self.states for s in st
                                             for v in s.values()]
        def update(*gs):
            self._apply(idx, gs)
        update.lk_optimizer = (self, idx)  # NOTE: compile/sgd.py fuses SGD into the products
        host(update, *grads, effect=True, mutates=changed, name="optimizer.update")

    def _follow_devices(self, plist) -> None:
        """Move each parameter's state to its device where the model moved after ``setup``
        (``model.to("cl")``: Adam's moments stayed on the CPU, and the update raised a device
        mismatch naming an internal add)."""
        devs = [None if isinstance(p.data, np.ndarray) else p.data.device for p in plist]
        if devs == getattr(self, "_devices", None):
            return
        for st in self.states:
            for dev, s in zip(devs, st):
                for k, v in s.items():
                    if (None if isinstance(v, np.ndarray) else getattr(v, "device", None)) \
                            != dev and hasattr(v, "shape"):
                        s[k] = asarray(v, device=dev or "cpu")
        self._devices = devs

    def _apply(self, idx, grads, done=None):
        """The update of the parameters at ``idx`` from the arrays ``grads``, in place; those
        ``done`` maps to True (a compiled step updated them with their gradient's kernel:
        compile/sgd.py) are counted but not updated again."""
        plist = list(self.params.values())
        updated = list(idx)
        if done:
            kept = [(i, g) for i, g in zip(idx, grads) if not done.get(i)]
            done.clear()
            idx, grads = [i for i, _ in kept], [g for _, g in kept]
        if self.fused and grads:
            # NOTE: one kernel per parameter on an OpenCL device, cache-sized pieces or a
            # BLAS axpy on the CPU (optimizers/fused.py); what it did not take is left
            idx, grads = _fused.apply(self, plist, idx, grads, _PIECEWISE)
        ps = [plist[i] for i in idx]
        steps = list(grads)
        groups = [self._group(i) for i in idx]
        for r, st in zip(self.rules, self.states):
            steps = r.apply(ps, steps, [st[i] for i in idx], groups, self.t)
        for p, s in zip(ps, steps):
            p.data -= s
        for c in self.constraints:
            c(self.params)
        for i in updated:
            self.counts[i] += 1
        self.t += 1

    def _lr_rule(self):
        """The rule whose learning rate ``lr`` reads and sets: the last one that has one
        (in ``chain(Adam(), GradientClipping())``, Adam)."""
        return next((r for r in reversed(self.rules) if "lr" in r.hyper), None)

    @property
    def lr(self):
        """The learning rate in effect at this step (a schedule's value), of the last rule
        that has one; None when no rule has a learning rate."""
        rule = self._lr_rule()
        return None if rule is None else _value(rule.hyper["lr"], self.t)

    @lr.setter
    def lr(self, value):
        rule = self._lr_rule()
        if rule is None:
            raise TypeError(f"{self!r} has no rule with a learning rate")
        rule.hyper["lr"] = value

    def state_dict(self) -> dict:
        """``{"t": steps taken, "state": {param name: {rule_i.key: ndarray}}}``, and
        ``"steps": {param name: its updates}`` for the parameters updated fewer times than
        ``t`` (none: no such key)."""
        names = list(self.params)
        out = {}
        for ri, st in enumerate(self.states):
            for name, s in zip(names, st):
                for k, v in s.items():
                    out.setdefault(name, {})[f"{ri}.{k}"] = np.array(
                        v if isinstance(v, np.ndarray) else v.get())
        own = {n: c for n, c in zip(names, self.counts) if c != self.t}
        hyper = _hyper.changed(self.rules)
        return {"t": self.t, "state": out, **({"steps": own} if own else {}),
                **({"hyper": hyper} if hyper else {})}

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict()``'s form: ``t`` a non-negative int, and for each parameter
        with state, each rule's array with exactly that state's shape and dtype (nothing is
        cast or broadcast). Nothing is loaded unless everything fits; ``CheckpointError``
        names each key that does not, with what was expected and what was found."""
        where = "Optimizer.load_state_dict"
        if not isinstance(state, Mapping):
            raise CheckpointError(f"{where}: expected a dict with 't' and 'state' "
                                  f"(state_dict()'s form), got {type(state).__name__}")
        problems = []
        extra = sorted(map(shown_key, set(state) - {"t", "state", "steps", "hyper"}))
        if extra:
            problems.append(f"unexpected keys {listed(extra)} (expected 't', 'state', "
                            "'steps' and 'hyper')")
        t = state.get("t")
        if not is_count(t) or t >= ROOM:
            problems.append(f"'t' (the steps taken) must be an integer in [0, 2**62) (no "
                            f"run takes more), got {t!r:.60} ({type(t).__name__})")
        counts = self._own_steps(state.get("steps", {}), t, problems)
        hypers = _hyper.loaded(self.rules, state.get("hyper", {}), problems)
        saved = state.get("state")
        if not isinstance(saved, Mapping):
            raise CheckpointError(f"{where}: " + "; ".join(problems + [
                f"'state' must be a dict of parameter name -> {{rule.key: array}}, got "
                f"{type(saved).__name__}"]))
        names = list(self.params)
        want = {}  # (param name, "rule.key") -> the current array (its shape and dtype)
        for ri, st in enumerate(self.states):
            for name, s in zip(names, st):
                for k, v in s.items():
                    want[name, f"{ri}.{k}"] = v
        with_state = {n for n, _ in want}
        missing = sorted(with_state - set(saved))
        if missing:
            problems.append(f"no state for {listed(list(map(shown_key, missing)))}")
        unknown = sorted(map(shown_key, set(saved) - with_state))
        if unknown:
            problems.append(f"state for parameters this optimizer has no state for: "
                            f"{listed(unknown)}")
        arrays = {}
        # NOTE: this optimizer's own names (a key from the file that equals one may be any
        # object that says so)
        for name in sorted(n for n in with_state if n in saved):
            entry, at = saved[name], f"state[{name!r}]"
            if not isinstance(entry, Mapping):
                problems.append(f"{at} must be a dict of rule.key -> array, got "
                                f"{type(entry).__name__}")
                continue
            keys = {k for n, k in want if n == name}
            for k in sorted(keys - set(entry)):
                problems.append(f"{at} has no {k!r}")
            for k in sorted(map(_quoted, set(entry) - keys))[:12]:
                problems.append(f"{at} has an unexpected {k} (this optimizer's "
                                f"keys: {', '.join(sorted(keys))})")
            for k in sorted(k for k in keys if k in entry):
                cur, v = want[name, k], entry[k]
                arr = v if isinstance(v, np.ndarray) else None
                if arr is None:
                    problems.append(f"{at}[{k!r}] must be an array, got "
                                    f"{type(v).__name__}")
                elif arr.shape != tuple(cur.shape) or arr.dtype != cur.dtype:
                    problems.append(f"{at}[{k!r}] is {arr.dtype}{arr.shape}, the "
                                    f"parameter's state is {cur.dtype}{tuple(cur.shape)}")
                elif self._negative(k, arr):
                    rule = self.rules[int(k.split(".")[0])]
                    problems.append(
                        f"{at}[{k!r}] has {int((arr < 0).sum())} negative values "
                        f"(the least {float(arr.min()):.6g}): {type(rule).__name__}'s "
                        f"{k.split('.', 1)[1]!r} holds squares and is never negative, so "
                        "this state is damaged or was edited; load another checkpoint, or "
                        "leave the optimizer's state as it is")
                else:
                    arrays[name, k] = arr
        if problems:
            raise CheckpointError(f"{where}: " + "; ".join(problems))
        self.t = int(t)
        self.counts = [counts.get(n, self.t) for n in names]
        for rule, name, value in hypers:
            rule.hyper[name] = value
        for ri, st in enumerate(self.states):
            for name, s in zip(names, st):
                for k in list(s):
                    # NOTE: on its parameter's device (the model may have moved since setup)
                    p = self.params[name].data
                    dev = "cpu" if isinstance(p, np.ndarray) else p.device
                    s[k] = asarray(arrays[name, f"{ri}.{k}"].copy(), device=dev)

    def _own_steps(self, steps, t, problems) -> dict:
        """``state_dict()``'s ``"steps"`` checked: this optimizer's parameter names, each
        with a count of updates in [0, t]; what does not fit is added to ``problems``."""
        if not isinstance(steps, Mapping):
            problems.append(f"'steps' must be a dict of parameter name -> its updates, got "
                            f"{type(steps).__name__}")
            return {}
        unknown = sorted(map(shown_key, set(steps) - set(self.params)))
        if unknown:
            problems.append(f"'steps' names parameters this optimizer does not have: "
                            f"{listed(unknown)}")
        out = {}
        for name in sorted(n for n in self.params if n in steps):
            c = steps[name]
            if not is_count(c) or (is_count(t) and c > t):
                problems.append(f"steps[{name!r}] (its updates) must be an int in [0, t], "
                                f"got {c!r:.60} ({type(c).__name__}) with t {t!r:.30}")
            else:
                out[name] = int(c)
        return out

    def _negative(self, key, arr) -> bool:
        """Whether ``arr``, saved under ``key`` ("rule.key"), is a rule's sum of squares
        (``Rule.nonnegative``) with a negative value (NaN is not: a diverged run has it)."""
        ri, _, k = key.partition(".")
        return (ri.isdigit() and int(ri) < len(self.rules)
                and k in type(self.rules[int(ri)]).nonnegative
                and arr.dtype.kind == "f" and bool((arr < 0).any()))

    def __repr__(self):
        return f"Optimizer({self.rules}, t={self.t})"


def chain(*rules, constraints=()):
    """An optimizer applying ``rules`` in order (the last gives the step)."""
    return Optimizer(rules, constraints)


class MaxNorm:
    """A constraint applied after each update: rows (axis 1 on) of parameters with ``role``
    rescaled to an L2 norm of at most ``limit``."""

    def __init__(self, limit, role=_roles.WEIGHT):
        self.limit, self.role = limit, role

    def __call__(self, params):
        for p in params.values():
            if _roles.has_role(p, self.role) and p.ndim >= 2:
                xp = get_array_module(p.data)
                axes = tuple(range(1, p.ndim))
                norms = xp.sqrt((p.data * p.data).sum(axis=axes, keepdims=True))
                scale = xp.minimum(1.0, self.limit / (norms + 1e-12))
                p.data *= scale.astype(p.dtype)


__all__ = ["AdaGrad", "Adam", "AdamW", "Cosine", "Exponential", "GradientClipping", "MaxNorm",
           "Momentum", "Nesterov", "Optimizer", "RMSProp", "Rule", "SGD", "Schedule",
           "StepDecay", "WarmUp", "WeightDecay", "chain"]
