"""Equality of JSON-shaped values that no depth can turn into a RecursionError."""

from __future__ import annotations

from typing import Any


def same_json(a: Any, b: Any) -> bool:
    """``a == b`` for dicts, lists and scalars, compared on an explicit stack.

    Python's own ``==`` recurses in C, and objects from the API server may nest 10,000
    levels deep; this walks them without recursing. Shared parts compare by identity at once.
    """
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif (
            isinstance(x, dict | list)
            or isinstance(y, dict | list)
            or type(x) is not type(y)
            or x != y
        ):
            return False
    return True
