"""A thin JSON client for the API server, and the kubeconfig files that point at it.

Plain REST rather than the typed client, so that tests see exactly what the API server stored
and returned, admission warnings included.
"""

from __future__ import annotations

import json
import re
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

JSON = "application/json"
# One JSON token after optional white space: a bracket, a comma or colon, a string, or a scalar.
_TOKEN = re.compile(
    r'\s*(?:([\[\]{}:,])|("(?:[^"\\]|\\.)*")|(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null))'
)


class KubeError(Exception):
    """A non-2xx answer from the API server, with its Status object."""

    def __init__(
        self,
        method: str,
        path: str,
        status: int,
        body: dict[str, Any] | str,
        warnings: list[str] | None = None,
    ) -> None:
        self.status = status
        self.body = body
        # Admission warnings come with refusals too (what the webhook noticed on the way).
        self.warnings = warnings or []
        self.message = str(body.get("message", "")) if isinstance(body, dict) else body
        self.reason = str(body.get("reason", "")) if isinstance(body, dict) else ""
        super().__init__(f"{method} {path}: HTTP {status}: {self.message}")


@dataclass
class Response:
    status: int
    body: dict[str, Any]
    warnings: list[str]


def loads(text: str) -> Any:
    """JSON of any depth: Python's decoder gives up some 1,000 levels down, and the API
    server returns objects nested 10,000 levels (``metadata.managedFields``) as it stored them."""
    try:
        return json.loads(text)
    except RecursionError:
        return _loads_iteratively(text)


def _loads_iteratively(text: str) -> Any:
    """``json.loads`` without recursion, for what it gives up on (valid JSON only)."""
    # Open containers, each with the key its next value goes under (objects only).
    stack: list[tuple[list[Any] | dict[str, Any], list[str]]] = []
    pos, end = 0, len(text.rstrip())
    while pos < end:
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"not JSON at character {pos}")
        pos = match.end()
        punct, string, scalar = match.groups()
        if punct in ("[", "{"):
            stack.append(([] if punct == "[" else {}, []))
            continue
        if punct in (":", ","):
            continue
        value = stack.pop()[0] if punct in ("]", "}") else json.loads(string or scalar)
        if not stack:
            if pos < end:
                raise ValueError(f"extra data at character {pos}")
            return value
        container, key = stack[-1]
        if isinstance(container, list):
            container.append(value)
        elif key:
            container[key.pop()] = value
        elif isinstance(value, str):
            key.append(value)  # an object's key: its value comes next
        else:
            raise ValueError(f"an object key that is not a string, before character {pos}")
    raise ValueError("incomplete JSON")


def parse_warnings(header: str | None) -> list[str]:
    """The texts of ``Warning: 299 - "text"`` headers, comma-joined when repeated."""
    if not header:
        return []
    out, i = [], 0
    while (start := header.find('"', i)) != -1:
        j, buf = start + 1, []
        while j < len(header) and header[j] != '"':
            if header[j] == "\\" and j + 1 < len(header):
                j += 1
            buf.append(header[j])
            j += 1
        out.append("".join(buf))
        i = j + 1
    return out


class Kube:
    """Plain dicts in and out over one keep-alive session (not thread-safe: one per thread)."""

    def __init__(self, server: str, token: str, ca_file: Path) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.ca_file = ca_file
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.verify = str(ca_file)
        # Environment CA bundles and proxies are for the outside world, never for this loopback
        # cluster; requests would otherwise let REQUESTS_CA_BUNDLE override `verify`.
        self.session.trust_env = False

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Kube:
        """A client for the current context of a kubeconfig written by ``write_kubeconfig``."""
        config = yaml.safe_load(path.read_text())
        cluster = config["clusters"][0]["cluster"]
        token = config["users"][0]["user"]["token"]
        return cls(cluster["server"], token, Path(cluster["certificate-authority"]))

    def with_token(self, token: str) -> Kube:
        """A client of the same cluster authenticated by ``token``."""
        return Kube(self.server, token, self.ca_file)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Kube:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        data: bytes | None = None,
        params: dict[str, str] | None = None,
        content_type: str = JSON,
        timeout: float = 30,
    ) -> Response:
        """One request; ``body`` is sent as JSON, ``data`` as the bytes given."""
        has_body = body is not None or data is not None
        resp = self.session.request(
            method,
            self.server + path,
            json=body,
            data=data,
            params=params,
            headers={"Content-Type": content_type} if has_body else {},
            timeout=timeout,
        )
        try:
            payload: Any = loads(resp.text)
        except ValueError:
            payload = resp.text
        warnings = parse_warnings(resp.headers.get("Warning"))
        if resp.status_code >= 400:
            raise KubeError(method, path, resp.status_code, payload, warnings)
        return Response(resp.status_code, payload if isinstance(payload, dict) else {}, warnings)

    def get(self, path: str, **params: str) -> dict[str, Any]:
        return self.call("GET", path, params=params or None).body

    def create(self, path: str, obj: dict[str, Any], *, dry_run: bool = False) -> Response:
        return self.call("POST", path, obj, params={"dryRun": "All"} if dry_run else None)

    def apply(self, path: str, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply (create or update), as ``kubectl apply --server-side`` does.

        One field manager for everything the tests apply, so that applying an object again
        also removes the fields the previous version set and this one does not.
        """
        params = {"fieldManager": "preemptguard-e2e", "force": "true"}
        if dry_run:
            params["dryRun"] = "All"
        return self.call(
            "PATCH", path, obj, params=params, content_type="application/apply-patch+yaml"
        ).body

    def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.call("PATCH", path, patch, content_type="application/merge-patch+json").body

    def delete(self, path: str, *, grace_seconds: int | None = 0) -> None:
        """Delete, ignoring errors (a missing object); grace 0 unless told otherwise."""
        body = None if grace_seconds is None else {"gracePeriodSeconds": grace_seconds}
        with suppress(KubeError):
            self.call("DELETE", path, body)

    def exists(self, path: str) -> bool:
        try:
            self.call("GET", path)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True


def write_kubeconfig(path: Path, server: str, ca_file: Path, token: str, user: str) -> Path:
    """A kubeconfig for ``server`` authenticating with ``token``, readable by its owner only."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
        "current-context": "e2e",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path
