"""JSON Patch by diffing the original object against its mutated copy (never written by hand).

The engine's copy shares every part it did not write with the original, so the diff descends
only where the two differ by identity: its cost follows the size of what changed, not of the
object, and its depth that of the changes. It runs on an explicit stack, so no object's depth
can exhaust Python's recursion limit.
"""

from __future__ import annotations

from typing import Any

from jsonpointer import JsonPointer

from webhook.engine.decision import Obj

PatchOp = dict[str, Any]


def make_patch(original: Obj, mutated: Obj) -> list[PatchOp]:
    """RFC 6902 operations turning ``original`` into ``mutated``; ``[]`` when they are equal.

    Paths are RFC 6901 pointers: ``together.ai/compute-class`` reads ``together.ai~1compute-class``.
    """
    ops: list[PatchOp] = []
    # Each entry carries the pointer of its place, built once as the diff descends.
    stack: Pending = [(original, mutated, "")]
    while stack:
        before, after, path = stack.pop()
        if before is after:
            continue
        if isinstance(before, dict) and isinstance(after, dict):
            pending = _dict_ops(before, after, path, ops)
        elif isinstance(before, list) and isinstance(after, list):
            pending = _list_ops(before, after, path, ops)
        else:
            if before != after or type(before) is not type(after):
                ops.append({"op": "replace", "path": path, "value": after})
            continue
        # Reversed, so that children come off the stack in document order.
        stack.extend(reversed(pending))
    return ops


Pending = list[tuple[Any, Any, str]]


def _dict_ops(
    before: dict[str, Any], after: dict[str, Any], path: str, ops: list[PatchOp]
) -> Pending:
    pending: Pending = []
    for key, old in before.items():
        if key not in after:
            ops.append({"op": "remove", "path": f"{path}/{_escaped(key)}"})
        elif after[key] is not old:
            pending.append((old, after[key], f"{path}/{_escaped(key)}"))
    for key, new in after.items():
        if key not in before:
            ops.append({"op": "add", "path": f"{path}/{_escaped(key)}", "value": new})
    return pending


def _list_ops(before: list[Any], after: list[Any], path: str, ops: list[PatchOp]) -> Pending:
    ahead = _inserted_ahead(before, after)
    if ahead:
        ops += [{"op": "add", "path": f"{path}/{i}", "value": after[i]} for i in range(ahead)]
        return []
    pending: Pending = []
    shared = min(len(before), len(after))
    for i in range(shared):
        if after[i] is not before[i]:
            pending.append((before[i], after[i], f"{path}/{i}"))
    # Removed from the end backwards, so that each index is still valid when applied.
    for i in range(len(before) - 1, shared - 1, -1):
        ops.append({"op": "remove", "path": f"{path}/{i}"})
    for i in range(shared, len(after)):
        ops.append({"op": "add", "path": f"{path}/{i}", "value": after[i]})
    return pending


def _inserted_ahead(before: list[Any], after: list[Any]) -> int:
    """How many items ``after`` puts ahead of every item of ``before``, which it keeps in
    order (by identity, as the copy shares them); 0 when it does not."""
    extra = len(after) - len(before)
    if extra <= 0 or not before:
        return 0
    return extra if all(a is b for a, b in zip(after[extra:], before, strict=True)) else 0


def pointer(parts: tuple[str | int, ...]) -> str:
    """RFC 6901: ``~`` is written ``~0`` and ``/`` is written ``~1`` in each part."""
    return "".join(f"/{_escaped(part)}" for part in parts)


def _escaped(part: object) -> str:
    # Keys read from YAML may be numbers or booleans; a pointer spells them as text.
    text = part if isinstance(part, str) else str(part)
    if "~" in text or "/" in text:
        return text.replace("~", "~0").replace("/", "~1")
    return text


def apply_patch(original: Obj, ops: list[PatchOp]) -> Obj:
    """``original`` with ``ops`` (add, remove, replace) applied, as a new object sharing the
    parts the operations do not touch; ``original`` is left as it was."""
    root: Any = original
    for op in ops:
        root = _apply_one(root, op)
    if not isinstance(root, dict):
        raise TypeError("the patch replaces the object with something that is not an object")
    return root


def _apply_one(root: Any, op: PatchOp) -> Any:
    kind = op.get("op")
    if kind not in ("add", "remove", "replace"):
        raise ValueError(f"unsupported patch operation {kind!r}")
    parts = JsonPointer(op["path"]).parts
    if not parts:
        if kind == "remove":
            raise ValueError("cannot remove the whole object")
        return op["value"]
    root = _copy(root)
    parent = root
    for part in parts[:-1]:
        key = _index(parent, part)
        parent[key] = _copy(parent[key])
        parent = parent[key]
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if kind == "add":
            parent.insert(index, op["value"])
        elif kind == "remove":
            del parent[index]
        else:
            parent[index] = op["value"]
    elif kind == "remove":
        del parent[last]
    else:
        if kind == "replace" and last not in parent:
            raise ValueError(f"cannot replace {op['path']}: it does not exist")
        parent[last] = op["value"]
    return root


def _copy(node: Any) -> Any:
    if isinstance(node, dict):
        return dict(node)
    if isinstance(node, list):
        return list(node)
    raise ValueError("a patch path goes through a value that is not an object or a list")


def _index(parent: Any, part: str) -> Any:
    return int(part) if isinstance(parent, list) else part
