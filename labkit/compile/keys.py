"""Argument signatures of a compiled step in words: why a call found no program."""

from __future__ import annotations


def describe_key(key) -> str:
    """One entry of an argument signature, in words."""
    kind = key[0]
    if kind == "T":
        return f"a tensor {key[2]}{key[1]}" + (" requiring grad" if key[4] else "")
    if kind == "A":
        return f"an array {key[2]}{key[1]}"
    if kind == "V":
        return f"the value {key[2] if len(key) > 3 else repr(key[2])}"
    if kind == "O":
        return f"a {key[1]} object"
    if kind == "P":
        return f"the parameter {key[1]!r}"
    if kind == "alias":
        pairs = [f"{a} and {k}" for k, a in enumerate(key[1]) if a != k]
        return (f"array arguments {', '.join(pairs)} the same array" if pairs
                else "no array passed twice")
    return f"a {kind} of {key[1]}"


def why_new_key(old, key) -> str:
    """Why the argument signature ``key`` has no program, ``old`` being the last one's."""
    if len(old) != len(key):
        a, b = next(((a, b) for a, b in zip(old, key) if a != b), (None, None))
        if a is not None and a[0] == b[0] == "dict":
            return (f"the arguments have another structure: keyword arguments (or dict "
                    f"keys) {a[1]} when traced, {b[1]} now")
        if a is not None and a[0] == b[0] and a[0] in ("tuple", "list"):
            return (f"the arguments have another structure: a {a[0]} of {a[1]} when "
                    f"traced, of {b[1]} now")
        return "the arguments have another structure"
    for a, b in zip(old, key):
        if a != b:
            if a[0] == b[0] == "alias":
                return f"{describe_key(a)} when traced, now {describe_key(b)}"
            if a[0] == b[0] == "grad":
                return (f"gradients were {'on' if a[1] else 'off (lk.no_grad())'} when "
                        f"traced, are {'on' if b[1] else 'off (lk.no_grad())'} now")
            if a[0] == b[0] == "O" and a[1] == b[1]:
                return (f"an argument is another {b[1]} object than the one traced (a "
                        "program reads the tensors of the objects it was traced with)")
            return f"an argument was {describe_key(a)}, is {describe_key(b)}"
    return "new arguments"
