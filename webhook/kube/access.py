"""The RBAC permission each API call needs, as the API server's authorizer derives it.

``Cluster`` records every call it makes as one (``Cluster.calls``), so that the tests can check
the shipped roles against what the code really does (``webhook.cluster.access``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs


@dataclass(frozen=True, order=True)
class Access:
    """One RBAC permission: a verb on a resource of an API group ("" is the core group), or
    on a non-resource URL (``resource`` is then the path, such as ``/apis``)."""

    group: str
    resource: str
    verb: str

    @property
    def non_resource(self) -> bool:
        return self.resource.startswith("/")

    def __str__(self) -> str:
        if self.non_resource:
            return f"{self.verb} {self.resource}"
        group = self.group or "core"
        return f"{self.verb} {self.resource}.{group}"


def access_of(method: str, path: str, query: str | Mapping[str, list[str]] = "") -> Access:
    """The permission a request needs, as the API server's RBAC authorizer derives it.

    ``path`` is ``/api/v1/...`` or ``/apis/GROUP/VERSION/...``; a subresource
    (``pods/status``) is named ``resource/subresource``.
    """
    params = parse_qs(query) if isinstance(query, str) else query
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if _discovery(parts):
        if method.upper() != "GET":
            raise ValueError(f"no RBAC verb for {method} on {path}")
        return Access("", "/" + "/".join(parts), "get")
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"not a resource path: {path}")
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]  # namespaced: /namespaces/NS/RESOURCE[/NAME[/SUB]]
    if not rest:
        raise ValueError(f"not a resource path: {path}")
    resource = rest[0]
    named = len(rest) >= 2
    if len(rest) >= 3:
        resource = f"{resource}/{rest[2]}"
    return Access(group, resource, _verb(method.upper(), named, params))


def _discovery(parts: list[str]) -> bool:
    """``/api``, ``/api/v1``, ``/apis``, ``/apis/GROUP`` and ``/apis/GROUP/VERSION``: what the
    API serves, authorized as non-resource URLs."""
    if parts[:1] == ["apis"]:
        return len(parts) <= 3
    return parts[:1] == ["api"] and len(parts) <= 2


def _verb(method: str, named: bool, params: Mapping[str, list[str]]) -> str:
    if method == "GET":
        if params.get("watch", [""])[0] in ("true", "1"):
            return "watch"
        return "get" if named else "list"
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch"}
    if method in verbs:
        return verbs[method]
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    raise ValueError(f"no RBAC verb for {method}")
