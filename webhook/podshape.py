"""The types of the pod fields the engine reads and writes, checked before it touches them.

The API server refuses these shapes before any webhook sees them, but manifests given to the
CLI may hold them (an unquoted annotation value, ``tolerations:`` written as a mapping). The
engine refuses them with the field to fix instead of reading past them or replacing what the
user wrote.
"""

from __future__ import annotations

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
    return _check(template, POD_TEMPLATE, ".".join(prefix))


# Runs on every admission: the field path is a string built only for fields that are present,
# and a failed check is explained only once it has failed.
def _check(value: Any, shape: Any, path: str) -> str | None:
    if value is None:
        return None
    if shape is str or shape is int:
        return None if _is(value, shape) else _mismatch(value, shape, path)
    if isinstance(shape, list):
        if not isinstance(value, list):
            return _mismatch(value, list, path)
        for i, item in enumerate(value):
            problem = _check(item, shape[0], f"{path}[{i}]")
            if problem:
                return problem
        return None
    if not isinstance(value, dict):
        return _mismatch(value, dict, path)
    if shape == STRINGS:
        for key, item in value.items():
            if not isinstance(item, str):
                return _mismatch(item, str, _join(path, str(key)))
        return None
    for key, inner in shape.items():
        child = value.get(key)
        if child is not None:
            problem = _check(child, inner, _join(path, key))
            if problem:
                return problem
    return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _is(value: Any, expected: type) -> bool:
    return isinstance(value, expected) and not isinstance(value, bool)


def _mismatch(value: Any, expected: type, path: str) -> str:
    hint = ": quote it" if expected is str and isinstance(value, int | float | bool) else ""
    return (
        f"{path} must be {_NAMES[expected]}, not {describe(value)}{hint}; "
        "the API server refuses it too"
    )


def describe(value: Any) -> str:
    """A YAML value's type as a user reads it: ``a mapping``, ``the number 120``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    for kind, name in _NAMES.items():
        if isinstance(value, kind):
            return name
    return f"a {type(value).__name__}"
