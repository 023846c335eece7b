"""The webhook's HTTP face: the ASGI app the server (granian) runs.

``POST /mutate`` and ``POST /validate`` are read here and handed to the ``Reviewer``; this
module knows HTTP and ASGI, and of the application only the reviewer's five calls. Every
other request goes to the Flask app (health, readiness, errors).

Reading is bounded: a body that is declared too large is refused before a byte of it is read,
and one that has not arrived by its deadline (the API server sends a review whole, at once) is
answered 408 and its connection closed. The server closes connections whose headers do not
arrive in time and those left idle; this module does the rest.

A worker that stops answers what it has in hand first (``InFlight``): the server stops its
event loop when asked to stop, and a call still running then would never finish, nor would
the Flask thread that sends its last chunk through that loop (the process would wait for it
at exit until killed).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from webhook.admission.core import Hook
from webhook.server.logs import get_logger
from webhook.server.reviewer import Head, Reply, Reviewer, Unread

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = get_logger("webhook.server.transport")

ROUTES = {"/mutate": Hook.MUTATE, "/validate": Hook.VALIDATE}


@dataclass(frozen=True)
class Lifespan:
    """Called in each worker process once it serves, and as it stops."""

    started: Callable[[], None]
    stopping: Callable[[], None]


class LoopLag:
    """How long what is ready waits for the event loop: a heartbeat every ``INTERVAL``, and
    how much later than due it ran.

    A request reaches this app when the server puts it on the loop's queue; what waits ahead
    of it there is invisible to it, but not to the heartbeat, which waits in the same queue.
    A call's arrival is taken as that much earlier than it is first run, so that its deadline
    counts the wait (see ``Transport``).
    """

    INTERVAL = 0.05

    def __init__(self, report: Callable[[float], None] = lambda seconds: None) -> None:
        self.seconds = 0.0
        self._report = report
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Beat on the running loop until it stops."""
        self._task = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.INTERVAL
            await asyncio.sleep(self.INTERVAL)
            self.seconds = max(0.0, loop.time() - due)
            self._report(self.seconds)


class InFlight:
    """The HTTP calls under way, and a wait until none is."""

    # The longest a stopping worker waits for them: more than a probe or a review takes.
    DRAIN_SECONDS = 10.0

    def __init__(self) -> None:
        self.calls = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def run(self, call: Awaitable[None]) -> None:
        self.calls += 1
        self._idle.clear()
        try:
            await call
        finally:
            self.calls -= 1
            if not self.calls:
                self._idle.set()

    async def drained(self, timeout: float = DRAIN_SECONDS) -> bool:
        """Whether every call finished within ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True


class Transport:
    """The ASGI app: hooks to ``reviewer``, everything else to ``fallback``."""

    def __init__(
        self,
        reviewer: Reviewer,
        fallback: ASGIApp,
        lifespan: Lifespan | None = None,
        lag: LoopLag | None = None,
        intake: Intake | None = None,
    ) -> None:
        self.reviewer, self.fallback, self.lifespan = reviewer, fallback, lifespan
        self.lag = lag or LoopLag()
        self.intake = intake or Intake()
        self.in_flight = InFlight()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.in_flight.run(self._http(scope, receive, send))
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        hook = ROUTES.get(scope["path"])
        if hook is None:
            await self.fallback(scope, receive, send)
        elif scope["method"] != "POST":
            await _send(send, _METHOD_NOT_ALLOWED)
        else:
            await self._review(hook, scope, receive, send)

    async def _review(self, hook: Hook, scope: Scope, receive: Receive, send: Send) -> None:
        head = _head(hook, scope, time.monotonic() - self.lag.seconds)
        reply = self.reviewer.refusal(head)
        if reply is None:
            limit = self.reviewer.max_body_bytes
            body = await self.intake.read(receive, limit, head.length, self._until(head))
            if isinstance(body, Unread):
                reply = self.reviewer.unread(head, body)
            else:
                reply = await self.reviewer.review(head, body)
        await _send(send, reply)
        self.reviewer.finished(head, reply)

    def _until(self, head: Head) -> float:
        """How long the body may take, in seconds from now."""
        return self.reviewer.read_deadline(head) - time.monotonic()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.lag.start()
                if self.lifespan is not None:
                    self.lifespan.started()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if not await self.in_flight.drained():
                    log.warning("stopping_with_calls_in_flight", calls=self.in_flight.calls)
                if self.lifespan is not None:
                    self.lifespan.stopping()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _head(hook: Hook, scope: Scope, arrived: float) -> Head:
    headers: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        # A header sent twice is joined as HTTP joins it: a length sent twice is then no number.
        lowered = bytes(name).lower()
        headers[lowered] = headers[lowered] + b"," + value if lowered in headers else bytes(value)
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    length = headers.get(b"content-length")
    return Head(
        hook=hook,
        path=scope["path"],
        timeout=timeout_parameter(query) if query else None,
        mimetype=_latin1(headers.get(b"content-type", b"")).split(";", 1)[0].strip().lower(),
        encoding=_latin1(headers.get(b"content-encoding", b"")).strip().lower(),
        length=int(length)
        if length is not None and length.isdigit() and length.isascii()
        else None,
        arrived=arrived,
    )


def timeout_parameter(query: str) -> str | None:
    """The ``timeout`` parameter of a query, as the query parser reads it; what the API server
    sends (``timeout=3s``, alone) without it, which costs more than the rest of the head."""
    plain = _PLAIN_TIMEOUT.fullmatch(query)
    if plain is not None:
        return plain.group(1)
    return dict(parse_qsl(query)).get("timeout")


_PLAIN_TIMEOUT = re.compile(r"timeout=([0-9]{1,6}s)")


def _latin1(value: bytes) -> str:
    return value.decode("latin-1")


# The bytes a worker holds for bodies still coming in. The API server sends a review whole
# (3 MiB at most) within milliseconds; past this, the bodies that have been coming in longest
# are given up (503) to make room, so that clients sending large bodies slowly cannot make a
# worker hold more memory than this.
INTAKE_BUDGET = 32 * 1024 * 1024
# A body that arrives in more pieces than this is not read on: each costs the event loop a
# few microseconds, and a client could send a body of megabytes a byte at a time. The API
# server's largest review comes in a few hundred.
MAX_PIECES = 4096


class Intake:
    """Reads bodies, holding at most ``budget`` bytes for those still coming in."""

    def __init__(self, budget: int = INTAKE_BUDGET, max_pieces: int = MAX_PIECES) -> None:
        self.budget, self.max_pieces = budget, max_pieces
        self.held = 0
        # Oldest first: the order bodies started coming in.
        self._coming: dict[_Coming, None] = {}

    async def read(
        self, receive: Receive, limit: int, length: int | None, seconds: float
    ) -> bytes | Unread:
        """The request's body, read for at most ``seconds``: or why it was not read whole."""
        if length is not None and length > limit:
            return Unread.TOO_LARGE
        try:
            async with asyncio.timeout(max(0.0, seconds)):
                return await self._read(receive, limit, length)
        except TimeoutError:
            return Unread.LATE

    async def _read(self, receive: Receive, limit: int, length: int | None) -> bytes | Unread:
        message = await receive()
        if message["type"] != "http.request":
            return Unread.GONE
        first = bytes(message.get("body", b""))
        if not message.get("more_body", False):
            # Whole in one piece, as a review from the API server most often is.
            return _checked(first, limit, length)
        coming = _Coming()
        self._coming[coming] = None
        try:
            return await self._rest(coming, bytearray(first), receive, limit, length)
        finally:
            del self._coming[coming]
            self.held -= coming.held

    async def _rest(
        self, coming: _Coming, body: bytearray, receive: Receive, limit: int, length: int | None
    ) -> bytes | Unread:
        self._hold(coming, len(body))
        for _ in range(self.max_pieces):
            if len(body) > limit:
                return Unread.TOO_LARGE
            message = await coming.next(receive)
            if message is None:
                return Unread.BUSY
            if message["type"] != "http.request":
                return Unread.GONE
            piece = message.get("body", b"")
            body += piece
            self._hold(coming, len(piece))
            if not message.get("more_body", False):
                return _checked(bytes(body), limit, length)
        return Unread.PIECES

    def _hold(self, coming: _Coming, size: int) -> None:
        coming.held += size
        self.held += size
        for oldest in self._coming:
            if self.held <= self.budget:
                break
            if not oldest.given_up.is_set():
                oldest.given_up.set()
                self.held -= oldest.held
                oldest.held = 0


class _Coming:
    """One body still coming in: what it holds, and whether it was given up to make room."""

    def __init__(self) -> None:
        self.held = 0
        self.given_up = asyncio.Event()

    async def next(self, receive: Receive) -> Message | None:
        """The next message, or None once this body is given up."""
        if self.given_up.is_set():
            return None
        incoming = asyncio.ensure_future(receive())
        given_up = asyncio.ensure_future(self.given_up.wait())
        try:
            await asyncio.wait({incoming, given_up}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Whatever ended the wait (the deadline too): the server's read of the body is
            # cancelled with it, or it would hold the connection open for as long as the
            # client sends nothing.
            given_up.cancel()
            if not incoming.done():
                incoming.cancel()
        return incoming.result() if incoming.done() and not incoming.cancelled() else None


def _checked(body: bytes, limit: int, length: int | None) -> bytes | Unread:
    if len(body) > limit:
        return Unread.TOO_LARGE
    if length is not None and len(body) < length:
        return Unread.GONE
    return body


_METHOD_NOT_ALLOWED = Reply(405, b"405 Method Not Allowed\n", "text/plain; charset=utf-8")


async def _send(send: Send, reply: Reply) -> None:
    headers = [
        (b"content-type", reply.content_type.encode()),
        (b"content-length", str(len(reply.body)).encode()),
    ]
    if reply.status == 405:
        headers.append((b"allow", b"POST"))
    if reply.close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})
