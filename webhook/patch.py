"""JSON Patch by diffing the original object against its mutated copy (never written by hand)."""

from __future__ import annotations

from typing import Any

import jsonpatch
from jsonpointer import JsonPointer

from webhook.decision import Obj

Operation = dict[str, Any]


def make_patch(original: Obj, mutated: Obj) -> list[Operation]:
    """RFC 6902 operations turning ``original`` into ``mutated``; ``[]`` when they are equal.

    Paths are RFC 6901 pointers: ``together.ai/compute-class`` reads ``together.ai~1compute-class``.
    Equal subtrees are skipped before the diff: a pod's managedFields alone can outweigh the
    rest of it, and comparing shared subtrees for equality costs next to nothing.
    """
    return _diff(original, mutated, [])


def _diff(before: Any, after: Any, parts: list[str]) -> list[Operation]:
    if before == after:
        return []
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return _library_diff(before, after, parts)
    ops = [
        op for key in before if key in after for op in _diff(before[key], after[key], [*parts, key])
    ]
    removed = {k: v for k, v in before.items() if k not in after}
    added = {k: v for k, v in after.items() if k not in before}
    return ops + _library_diff(removed, added, parts) if removed or added else ops


def _library_diff(before: Any, after: Any, parts: list[str]) -> list[Operation]:
    prefix = JsonPointer.from_parts(parts).path
    ops: list[Operation] = jsonpatch.make_patch(before, after).patch
    return [_prefixed(op, prefix) for op in ops] if prefix else ops


def _prefixed(op: Operation, prefix: str) -> Operation:
    out = dict(op, path=prefix + op["path"])
    if "from" in op:
        out["from"] = prefix + op["from"]
    return out


def apply_patch(original: Obj, ops: list[Operation]) -> Obj:
    """``original`` with ``ops`` applied, as a new object."""
    result: Obj = jsonpatch.apply_patch(original, ops, in_place=False)
    return result
