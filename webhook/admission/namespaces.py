"""What the engine reads of a namespace, and where it comes from.

The server looks namespaces up in the cluster (``webhook.server.namespaces``); the CLI takes
them from the Namespace objects in its input (``from_objects``). Either way the admission core
asks for one only when the engine needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from webhook.engine.decision import Obj
from webhook.engine.workloads import mapping_at, string_map

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class NamespaceMeta:
    """What the engine reads of the request's namespace."""

    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)


# Looks a namespace up by name; raises webhook.errors.NamespaceUnknown when it cannot.
NamespaceLookup = Callable[[str], NamespaceMeta]


def no_namespaces(namespace: str) -> NamespaceMeta:
    """The lookup when no cluster is configured: no namespace has annotations or labels."""
    return NamespaceMeta()


def from_objects(objects: Iterable[Obj]) -> NamespaceLookup:
    """A lookup over the Namespace objects among ``objects`` (others are ignored)."""
    known: dict[str, NamespaceMeta] = {}
    for obj in objects:
        meta = mapping_at(obj, "metadata")
        if obj.get("kind") == "Namespace" and isinstance(meta.get("name"), str):
            known[meta["name"]] = NamespaceMeta(
                annotations=string_map(meta.get("annotations")),
                labels=string_map(meta.get("labels")),
            )
    return lambda namespace: known.get(namespace, NamespaceMeta())
