"""Calls of the ASGI app in the test's own process, without a server or a socket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from webhook.server.transport import ASGIApp, Message


@dataclass
class Answer:
    status_code: int
    data: bytes
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def mimetype(self) -> str:
        return str(self.headers.get("content-type", "")).split(";", 1)[0].strip()

    def get_json(self) -> Any:
        return json.loads(self.data)

    def get_data(self, *, as_text: bool = False) -> Any:
        return self.data.decode() if as_text else self.data


class AppClient:
    """Sends one request at a time to ``app``, each on an event loop of its own; the body in
    one message, or in the pieces given."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def get(self, path: str, **options: Any) -> Answer:
        return self.open(path, method="GET", **options)

    def post(
        self,
        path: str,
        *,
        json: Any = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        pieces: list[bytes] | None = None,
        content_type: str | None = None,
    ) -> Answer:
        sent = dict(headers or {})
        if content_type is not None:
            sent["Content-Type"] = content_type
        if json is not None:
            data = _dumps(json)
            sent.setdefault("Content-Type", "application/json")
        return self.open(path, method="POST", data=data, headers=sent, pieces=pieces)

    def open(
        self,
        path: str,
        *,
        method: str = "GET",
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        pieces: list[bytes] | None = None,
    ) -> Answer:
        body = data or b""
        raw = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()
        ]
        if body and not any(k == b"content-length" for k, _ in raw):
            raw.append((b"content-length", str(len(body)).encode()))
        url = urlsplit(path)
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "https",
            "path": url.path,
            "raw_path": url.path.encode(),
            "query_string": url.query.encode(),
            "root_path": "",
            "headers": raw,
            "server": ("127.0.0.1", 8443),
            "client": ("127.0.0.1", 40000),
        }
        return asyncio.run(_call(self.app, scope, pieces or [body]))


async def _call(app: ASGIApp, scope: dict[str, Any], pieces: list[bytes]) -> Answer:
    incoming: list[Message] = [
        {"type": "http.request", "body": piece, "more_body": i < len(pieces) - 1}
        for i, piece in enumerate(pieces)
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        if incoming:
            return incoming.pop(0)
        await asyncio.sleep(3600)  # a client that sends nothing more
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    headers = {bytes(k).decode().lower(): bytes(v).decode() for k, v in start["headers"]}
    return Answer(start["status"], body, _Headers(headers))


class _Headers(dict[str, str]):
    """Header names in any case, as HTTP reads them."""

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc).encode()
