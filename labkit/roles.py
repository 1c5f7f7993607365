"""Roles: a small hierarchy of singletons attached to variables (Blocks' roles).

``PARAMETER > WEIGHT > FILTER`` and ``PARAMETER > BIAS``. A brick's results carry ``OUTPUT``;
a tensor given to a brick with no role yet (the model's data, a function's result between two
bricks) is marked ``INPUT``; ``COST`` and ``AUXILIARY`` are yours to set (``loss.role =
lk.roles.COST``). A tensor has one role: a brick's output given to the next brick stays its
``OUTPUT``. ``has_role(v, WEIGHT)`` is true for filters too.
"""

from __future__ import annotations


class Role:
    __slots__ = ("name", "parent")

    def __init__(self, name: str, parent: Role | None = None):
        self.name = name
        self.parent = parent

    def is_a(self, other: Role) -> bool:
        r = self
        while r is not None:
            if r is other:
                return True
            r = r.parent
        return False

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self):  # singletons survive copying by name
        return (_by_name, (self.name,))


VARIABLE = Role("VARIABLE")
PARAMETER = Role("PARAMETER", VARIABLE)
WEIGHT = Role("WEIGHT", PARAMETER)
FILTER = Role("FILTER", WEIGHT)
BIAS = Role("BIAS", PARAMETER)
INPUT = Role("INPUT", VARIABLE)
OUTPUT = Role("OUTPUT", VARIABLE)
COST = Role("COST", VARIABLE)
AUXILIARY = Role("AUXILIARY", VARIABLE)

ALL = {r.name: r for r in (VARIABLE, PARAMETER, WEIGHT, FILTER, BIAS, INPUT, OUTPUT, COST,
                           AUXILIARY)}


def _by_name(name: str) -> Role:
    return ALL[name]


def has_role(var, role: Role) -> bool:
    r = getattr(var, "role", None)
    return r is not None and r.is_a(role)
