"""The types of the pod fields the engine reads and writes, checked before it touches them.

The API server refuses these shapes before any webhook sees them, but manifests given to the
CLI may hold them (an unquoted annotation value, ``tolerations:`` written as a mapping). The
engine refuses them with the field to fix instead of reading past them or replacing what the
user wrote.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from webhook.decision import Obj

# A shape is a type, a dict of field -> shape (a mapping, fields not named are not checked),
# a one-item list [shape] (a list of such items), or STRINGS (a mapping of strings to strings).
STRINGS = "strings"
_EXPRESSION = {"key": str, "operator": str, "values": [str]}
_TERM = {"matchExpressions": [_EXPRESSION], "matchFields": [_EXPRESSION]}
_NODE_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [_TERM]},
    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": int, "preference": _TERM}],
}
POD_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": STRINGS, "annotations": STRINGS},
    "spec": {
        "nodeSelector": STRINGS,
        "tolerations": [{"key": str, "operator": str, "value": str, "effect": str}],
        "terminationGracePeriodSeconds": int,
        "affinity": {"nodeAffinity": _NODE_AFFINITY},
    },
}

_NAMES = {dict: "a mapping", list: "a list", str: "a string", int: "a whole number"}


def shape_problem(template: Obj, prefix: tuple[str, ...] = ()) -> str | None:
    """The first field of a pod (or pod template) whose type the API server would refuse."""
    return next(_problems(template, POD_TEMPLATE, list(prefix)), None)


def _problems(value: Any, shape: Any, path: list[str]) -> Iterator[str]:
    if value is None:
        return
    if shape == STRINGS:
        yield from _mismatch(value, dict, path)
        if isinstance(value, dict):
            for key, item in value.items():
                yield from _mismatch(item, str, [*path, str(key)])
    elif isinstance(shape, dict):
        yield from _mismatch(value, dict, path)
        if isinstance(value, dict):
            for key, inner in shape.items():
                yield from _problems(value.get(key), inner, [*path, key])
    elif isinstance(shape, list):
        yield from _mismatch(value, list, path)
        if isinstance(value, list):
            for i, item in enumerate(value):
                yield from _problems(item, shape[0], [*path[:-1], f"{path[-1]}[{i}]"])
    else:
        yield from _mismatch(value, shape, path)


def _mismatch(value: Any, expected: type, path: list[str]) -> Iterator[str]:
    if isinstance(value, expected) and not isinstance(value, bool):
        return
    field = ".".join(path)
    hint = ": quote it" if expected is str and isinstance(value, int | float | bool) else ""
    yield (
        f"{field} must be {_NAMES[expected]}, not {_describe(value)}{hint}; "
        "the API server refuses it too"
    )


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    for kind, name in _NAMES.items():
        if isinstance(value, kind):
            return name
    return f"a {type(value).__name__}"
