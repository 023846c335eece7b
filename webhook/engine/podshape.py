"""The types of the pod fields the engine reads and writes, checked before it touches them.

The API server refuses these shapes before any webhook sees them, but manifests given to the
CLI may hold them (an unquoted annotation value, ``tolerations:`` written as a mapping). The
engine refuses them with the field to fix instead of reading past them or replacing what the
user wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from webhook.engine.decision import Obj
from webhook.engine.findings import Code, Finding, finding
from webhook.engine.unread import held

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


def shape_problem(template: Obj, prefix: str = "") -> Finding | None:
    """The first field of a pod (or pod template) whose type the API server would refuse.

    The finding's path is the template's; its message names the field from ``prefix``, where
    the template is in the object the user wrote.
    """
    if _VALID(template):
        return None
    failure = _check(template, POD_TEMPLATE)
    if failure is None:
        return None
    parts, expected, value = failure
    path = _path(list(reversed(parts)))
    shown = f"{prefix}.{path}" if prefix and path else prefix or path
    return finding(Code.WRONG_TYPE, _mismatch(value, expected, shown), path)


Validator = Callable[[Any], bool]


def _validator(shape: Any) -> Validator:
    """A function telling whether a value has ``shape``: the check every review runs.

    It is written out from the shape as one function of nested tests, as ``dataclasses``
    writes ``__init__``: a function per field would cost a call for every field of every
    review, more than the tests themselves.
    """
    lines = ["def valid(v0):", "    if v0 is None:", "        return True"]
    _emit(shape, 0, lines, "    ")
    lines.append("    return True")
    namespace: dict[str, Any] = {"_STRINGS": _STRING_VALUES, "_ITEMS": _STRING_ITEMS}
    exec("\n".join(lines), namespace)  # the source is made above from the shape alone
    valid: Validator = namespace["valid"]
    return valid


def _emit(shape: Any, depth: int, lines: list[str], indent: str) -> None:
    """Lines that return False when ``v{depth}`` (not None) does not have ``shape``."""
    v = f"v{depth}"
    if shape is str or shape is int:
        lines.append(f"{indent}if type({v}) is not {shape.__name__}:")
    elif shape is STRINGS:
        values = f"set(map(type, {v}.values()))"
        lines.append(f"{indent}if type({v}) is not dict or not {values} <= _STRINGS:")
    elif isinstance(shape, list) and shape[0] is str:
        lines.append(f"{indent}if type({v}) is not list or not set(map(type, {v})) <= _ITEMS:")
    elif isinstance(shape, list):
        lines += [f"{indent}if type({v}) is not list:", f"{indent}    return False"]
        item = f"v{depth + 1}"
        lines += [f"{indent}for {item} in {v}:", f"{indent}    if {item} is not None:"]
        _emit(shape[0], depth + 1, lines, indent + "        ")
        return
    else:
        lines += [f"{indent}if type({v}) is not dict:", f"{indent}    return False"]
        child = f"v{depth + 1}"
        for key, inner in shape.items():
            lines += [f"{indent}{child} = {v}.get({key!r})", f"{indent}if {child} is not None:"]
            _emit(inner, depth + 1, lines, indent + "    ")
        return
    lines.append(f"{indent}    return False")


# (path from the bad value up to the checked one, the type expected, the bad value)
_Failure = tuple[list[str | int], type, Any]
_STRING_ITEMS = frozenset({str, type(None)})
_STRING_VALUES = frozenset({str})


# Runs on every admission, over every expression and toleration of a pod however many it has:
# nothing is formatted until a check fails, and lists of strings are checked in bulk.
def _check(value: Any, shape: Any) -> _Failure | None:
    if value is None:
        return None
    if shape is str or shape is int:
        return None if _is(value, shape) else ([], shape, value)
    if isinstance(shape, list):
        return _check_list(value, shape[0])
    if not isinstance(value, dict):
        return ([], dict, value)
    if shape is STRINGS:
        if set(map(type, value.values())) <= _STRING_VALUES:
            return None
        key, item = next((k, v) for k, v in value.items() if not isinstance(v, str))
        return ([str(key)], str, item)
    for key, inner in shape.items():
        child = value.get(key)
        if child is not None:
            failure = _check(child, inner)
            if failure is not None:
                failure[0].append(key)
                return failure
    return None


def _check_list(value: Any, item_shape: Any) -> _Failure | None:
    if not isinstance(value, list):
        return ([], list, value)
    if item_shape is str and set(map(type, value)) <= _STRING_ITEMS:
        return None
    for i, item in enumerate(value):
        failure = _check(item, item_shape)
        if failure is not None:
            failure[0].append(i)
            return failure
    return None


def _path(parts: list[str | int]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _is(value: Any, expected: type) -> bool:
    return isinstance(value, expected) and not isinstance(value, bool)


def _mismatch(value: Any, expected: type, path: str) -> str:
    hint = ": quote it" if expected is str and isinstance(value, int | float | bool) else ""
    return (
        f"{path} must be {_NAMES[expected]}, not {describe(value)}{hint}; "
        "the API server refuses it too"
    )


_JSON_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}


def describe(value: Any, *, json: bool = False) -> str:
    """A value's type as a user reads it: ``a mapping``, ``the number 120``, ``null``; with
    ``json``, as JSON names it: ``a JSON array``. A value the decoder could not keep is named
    for what the request held there."""
    unread = held(value)
    if unread is not None:
        return unread
    if json:
        return f"a JSON {_JSON_NAMES.get(type(value), 'number')}"
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


# Answers for every review; only an invalid template is walked again, for the message.
_VALID = _validator(POD_TEMPLATE)
