"""A stopping worker answers what it has in hand before its event loop stops for good.

The server runs the loop until it is told to stop, then once more for the lifespan's
shutdown, and the process then waits at exit for every thread. A Flask call still running
sends its last chunk through the loop from its thread: were the shutdown not to wait for it,
that send would never complete and the worker would never exit. These tests run the app on a
loop as the server does: serve until a call is under way, then the shutdown on the same loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

from a2wsgi import WSGIMiddleware
from flask import Flask, Response

from webhook import engine
from webhook.engine.decision import NamespaceMeta
from webhook.loading.policies import builtin_policy
from webhook.server.metrics import Metrics
from webhook.server.reviewer import Reviewer
from webhook.server.transport import InFlight, Lifespan, Message, Transport

POLICY = builtin_policy()


def _reviewer() -> Reviewer:
    return Reviewer(lambda: POLICY, lambda name: NamespaceMeta(), None, engine.evaluate, Metrics())


def _streaming_app(release: threading.Event) -> Any:
    """A Flask app whose one route sends a chunk, then its last one once ``release`` is set."""
    flask: Any = Flask("streaming")

    def chunks() -> Iterator[bytes]:
        yield b"first"
        release.wait(10)
        yield b"last"

    flask.add_url_rule("/stream", "stream", lambda: Response(chunks()))
    return WSGIMiddleware(flask, workers=1)


def _get(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "http_version": "1.1",
        "method": "GET",
        "scheme": "https",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "server": ("127.0.0.1", 8443),
        "client": ("127.0.0.1", 50000),
    }


async def _request() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _shutdown_message() -> Message:
    return {"type": "lifespan.shutdown"}


async def _ignored(message: Message) -> None:
    return None


def test_the_shutdown_waits_for_a_flask_call_still_sending() -> None:
    release = threading.Event()
    calls_when_stopping: list[int] = []
    app = Transport(
        _reviewer(),
        _streaming_app(release),
        Lifespan(
            started=lambda: None, stopping=lambda: calls_when_stopping.append(app.in_flight.calls)
        ),
    )
    loop = asyncio.new_event_loop()
    first = loop.create_future()
    bodies: list[bytes] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            bodies.append(message["body"])
            if not first.done():
                first.set_result(None)

    call = loop.create_task(app(_get("/stream"), _request, send))
    try:
        # Serving, until the stop signal: the call has sent its first chunk (or failed).
        loop.run_until_complete(asyncio.wait([first, call], return_when=asyncio.FIRST_COMPLETED))
        assert not call.done(), call.exception()
        assert app.in_flight.calls == 1
        timer = threading.Timer(0.2, release.set)
        timer.start()
        loop.run_until_complete(app({"type": "lifespan"}, _shutdown_message, _ignored))
        timer.join()
        assert call.done()
        assert b"last" in bodies
        assert calls_when_stopping == [0]  # the worker's parts stopped after the call
    finally:
        release.set()
        if not call.done():
            loop.run_until_complete(asyncio.wait_for(call, 10))
        loop.close()


def test_the_wait_for_calls_in_flight_is_bounded() -> None:
    async def run() -> tuple[bool, int]:
        in_flight = InFlight()
        never = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(in_flight.run(never))
        await asyncio.sleep(0)
        drained = await in_flight.drained(timeout=0.05)
        calls = in_flight.calls
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return drained, calls

    assert asyncio.run(run()) == (False, 1)


def test_the_count_of_calls_in_flight_falls_back_when_a_call_fails() -> None:
    async def failing() -> None:
        raise RuntimeError("the app failed")

    async def run() -> tuple[bool, int]:
        in_flight = InFlight()
        await asyncio.gather(in_flight.run(failing()), return_exceptions=True)
        return await in_flight.drained(timeout=0.05), in_flight.calls

    assert asyncio.run(run()) == (True, 0)
