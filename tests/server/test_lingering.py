"""Connections closed on the server's side linger in the worker's poller until their client
closes too, and never more of them than ``MAX_LINGERING`` at once.

Driven on the worker itself, with socket pairs for connections: what is asserted is which
server-side sockets are still open, which a client cannot see from outside.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
from collections.abc import Iterator

import pytest
from gunicorn.config import Config
from gunicorn.workers import gthread

from webhook.server.gunicorn import MAX_LINGERING, WebhookWorker

Pair = tuple[gthread.TConn, socket.socket]


@pytest.fixture
def worker() -> Iterator[WebhookWorker]:
    worker = WebhookWorker(
        age=1,
        ppid=os.getpid(),
        sockets=[],
        app=None,
        timeout=30,
        cfg=Config(),
        log=logging.getLogger("test-lingering"),
    )
    # What init_process sets up in a running worker.
    worker.poller = selectors.DefaultSelector()
    yield worker
    worker.poller.close()
    worker.tmp.close()


@pytest.fixture
def pairs(worker: WebhookWorker) -> Iterator[list[Pair]]:
    made: list[Pair] = []
    yield made
    for conn, client in made:
        conn.close()
        client.close()


def connect(worker: WebhookWorker, pairs: list[Pair], count: int) -> list[Pair]:
    """``count`` connections as the worker holds them, each with its client's end."""
    for _ in range(count):
        server_end, client = socket.socketpair()
        pairs.append((gthread.TConn(worker.cfg, server_end, ("client", 0), None), client))
    return pairs[-count:]


def is_open(conn: gthread.TConn) -> bool:
    end: socket.socket = conn.sock
    return end.fileno() != -1


def run_poller(worker: WebhookWorker) -> None:
    for key, _ in worker.poller.select(timeout=1.0):
        key.data(key.fileobj)


def test_a_closed_connection_lingers_until_its_client_closes(
    worker: WebhookWorker, pairs: list[Pair]
) -> None:
    [(conn, client)] = connect(worker, pairs, 1)
    worker._linger(conn)
    # Half-closed: the client reads the end of the answers, the server's end is still open.
    assert client.recv(1) == b""
    assert is_open(conn)
    client.sendall(b"what the client still sends is drained")
    run_poller(worker)
    assert is_open(conn)
    client.close()
    run_poller(worker)
    assert not is_open(conn)


def test_past_the_limit_a_connection_is_closed_at_once(
    worker: WebhookWorker, pairs: list[Pair]
) -> None:
    """Clients that never close would otherwise keep every socket a worker closed on its
    side open for the linger time, however many connections that makes."""
    lingering = connect(worker, pairs, MAX_LINGERING)
    for conn, _ in lingering:
        worker._linger(conn)
    [(extra, client)] = connect(worker, pairs, 1)
    worker._linger(extra)
    assert all(is_open(conn) for conn, _ in lingering)
    assert not is_open(extra)
    assert client.recv(1) == b""
    # A lingering connection that ends makes room for the next.
    lingering[0][1].close()
    run_poller(worker)
    assert not is_open(lingering[0][0])
    [(after, _)] = connect(worker, pairs, 1)
    worker._linger(after)
    assert is_open(after)
