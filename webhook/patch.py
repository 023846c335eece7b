"""JSON Patch by diffing the original object against its mutated copy (never written by hand)."""

from __future__ import annotations

from typing import Any

import jsonpatch

from webhook.decision import Obj

Operation = dict[str, Any]


def make_patch(original: Obj, mutated: Obj) -> list[Operation]:
    """RFC 6902 operations turning ``original`` into ``mutated``; ``[]`` when they are equal.

    Paths are RFC 6901 pointers: ``together.ai/compute-class`` reads ``together.ai~1compute-class``.
    """
    if original == mutated:
        return []
    ops: list[Operation] = jsonpatch.make_patch(original, mutated).patch
    return ops


def apply_patch(original: Obj, ops: list[Operation]) -> Obj:
    """``original`` with ``ops`` applied, as a new object."""
    result: Obj = jsonpatch.apply_patch(original, ops, in_place=False)
    return result
