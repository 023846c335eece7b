"""What a pod on the cluster network can do to the webhook before it sends a review, and with
reviews of its own: each attack runs in a process of its own until told to stop, and counts
what it did.

An attack is named by a spec, ``kind[:argument]``:

- ``hello:GROUP``: ClientHellos offering only GROUP (``hello.GROUPS``), one built once and
  replayed on new connections; each read up to the server's first answer, then closed (a
  handshake half done: the server's key exchange and signature paid, the client's not);
- ``handshake:GROUP``: whole handshakes by a real TLS client offering only GROUP, then closed;
- ``slowloris[:N]``: N connections sending a request's headers a byte at a time;
- ``slow-body[:N]``: N connections sending whole headers, then the body a byte at a time;
- ``idle[:N]``: N connections handshaken and silent, opened again whenever one is closed;
- ``large[:N]``: N connections each sending a 500 KiB review built to be slow, one after the
  other, reading each answer;
- ``churn``: connections opened and closed at once, without a byte.

``rate`` caps new connections (or requests) per second for the kinds that open them without
end; 0 is as fast as the attacker's threads go.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import random
import selectors
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from tests import adversarial
from tests.attacks import hello

Counts = dict[str, int]

HELD = {"slowloris": 500, "slow-body": 500, "idle": 1500, "large": 8}
KINDS = {"hello", "handshake", *HELD, "churn"}
# Threads opening connections for the attacks that open them without end: enough that the
# server's answers, however slow, do not set the pace.
OPENERS = 16
# How often a held connection sends its next byte (slowloris, slow-body) or checks whether
# the server closed it.
TRICKLE = 1.0


@dataclass(frozen=True)
class Attack:
    kind: str
    argument: str | None = None
    rate: float = 0.0

    @classmethod
    def parse(cls, spec: str, rate: float = 0.0) -> Attack:
        kind, _, argument = spec.partition(":")
        if kind not in KINDS:
            raise ValueError(f"unknown attack {kind!r}: one of {', '.join(sorted(KINDS))}")
        if kind in ("hello", "handshake") and argument not in hello.GROUPS:
            raise ValueError(f"{kind} needs a group: one of {', '.join(hello.GROUPS)}")
        if kind in HELD and argument and not argument.isdigit():
            raise ValueError(f"{kind}:N needs a number of connections, not {argument!r}")
        return cls(kind, argument or None, rate)

    @property
    def spec(self) -> str:
        return f"{self.kind}:{self.argument}" if self.argument else self.kind

    @property
    def held(self) -> int:
        """Connections kept open at once, for the kinds that hold them."""
        return int(self.argument) if self.argument else HELD[self.kind]


@dataclass(frozen=True)
class Target:
    host: str
    port: int


def run(attack: Attack, target: Target, seconds: float, seed: int) -> Counts:
    """Attack ``target`` for ``seconds``; what was done, counted (in the calling process)."""
    stop_at = time.monotonic() + seconds
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def count(what: str, n: int = 1) -> None:
        with lock:
            counts[what] += n

    if attack.kind in _LOOPS:
        _LOOPS[attack.kind](attack, target, seed, stop_at, count)
        return dict(counts)
    if attack.kind in HELD:
        workers, step = attack.held, _HOLDERS[attack.kind]
    else:
        workers, step = OPENERS, _handshake
    pace = _Pace(attack.rate)
    threads = [
        threading.Thread(
            target=_repeat,
            args=(step, attack, target, random.Random(seed * 100_003 + i), pace, count, stop_at),
            daemon=True,
        )
        for i in range(workers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, stop_at - time.monotonic()) + 15)
    return dict(counts)


Count = Callable[[str], None]
Step = Callable[[Attack, Target, random.Random, Count, float], None]


class _Pace:
    """At most ``rate`` steps a second over all threads (none: 0)."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self._next = time.monotonic()
        self._lock = threading.Lock()

    def wait(self) -> None:
        if not self.interval:
            return
        with self._lock:
            now = time.monotonic()
            at = self._next = max(self._next + self.interval, now)
        time.sleep(max(0.0, at - now))


def _repeat(
    step: Step,
    attack: Attack,
    target: Target,
    rng: random.Random,
    pace: _Pace,
    count: Count,
    stop_at: float,
) -> None:
    while time.monotonic() < stop_at:
        pace.wait()
        try:
            step(attack, target, rng, count, stop_at)
        except OSError as exc:
            count(f"error:{type(exc).__name__}")
            time.sleep(0.01)  # refused or reset: the server is closing, or out of sockets


# --- connections opened without end -------------------------------------------------------

# Connections a flood keeps waiting for their answer at once, when its rate is not capped.
OUTSTANDING = 64
# How long a flood's connection waits for the server's answer before it is given up.
ANSWER_WAIT = 10.0


def _hello_flood(attack: Attack, target: Target, seed: int, stop_at: float, count: Count) -> None:
    """Open-loop: a new connection every ``1 / rate`` seconds whatever the server does, each
    sending the same hello and closed at the server's first answer (or after ANSWER_WAIT);
    uncapped, ``OUTSTANDING`` waiting at any time."""
    group = attack.argument or "x25519"
    data = hello.client_hello(group, random.Random(seed))
    _open_loop(attack.rate, target, data, stop_at, count)


def _churn(attack: Attack, target: Target, seed: int, stop_at: float, count: Count) -> None:
    """Connections opened and closed at once, without a byte."""
    _open_loop(attack.rate, target, b"", stop_at, count)


def _open_loop(rate: float, target: Target, data: bytes, stop_at: float, count: Count) -> None:
    interval = 1.0 / rate if rate > 0 else 0.0
    waiting: dict[socket.socket, float] = {}
    with selectors.DefaultSelector() as selector:
        due = time.monotonic()
        while (now := time.monotonic()) < stop_at:
            while (due <= now if interval else len(waiting) < OUTSTANDING) and len(waiting) < 4096:
                conn = _connect(target, count)
                if conn is not None:
                    waiting[conn] = now + ANSWER_WAIT
                    selector.register(conn, selectors.EVENT_WRITE)
                due += interval
            wait = max(0.0, min(due - now, 0.05)) if interval else 0.05
            for key, events in selector.select(wait):
                ready = key.fileobj
                assert isinstance(ready, socket.socket)
                if events & selectors.EVENT_WRITE:
                    if not data:
                        count("opened")
                        _forget(ready, selector, waiting)
                        continue
                    with contextlib.suppress(OSError):
                        ready.send(data)
                    selector.modify(ready, selectors.EVENT_READ)
                    continue
                try:
                    answer = ready.recv(65536)
                except OSError:
                    answer = b""
                count("accepted" if hello.accepted(answer) else "refused")
                _forget(ready, selector, waiting)
            for conn in [c for c, until in waiting.items() if until < now]:
                count("unanswered")
                _forget(conn, selector, waiting)
        for conn in list(waiting):
            _forget(conn, selector, waiting)


def _connect(target: Target, count: Count) -> socket.socket | None:
    conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    conn.setblocking(False)
    error = conn.connect_ex((target.host, target.port))
    if error not in (0, errno.EINPROGRESS):
        count(f"error:{errno.errorcode.get(error, error)}")
        conn.close()
        return None
    return conn


def _forget(
    conn: socket.socket, selector: selectors.BaseSelector, waiting: dict[socket.socket, float]
) -> None:
    selector.unregister(conn)
    del waiting[conn]
    conn.close()


_CONTEXTS: dict[str, ssl.SSLContext] = {}


def _handshake(attack: Attack, target: Target, _: random.Random, count: Count, __: float) -> None:
    group = attack.argument or "x25519"
    if group not in _CONTEXTS:
        _CONTEXTS[group] = hello.restricted_client(group)
    done = hello.full_handshake(target.host, target.port, _CONTEXTS[group], timeout=ANSWER_WAIT)
    count("completed" if done else "refused")


_LOOPS: dict[str, Callable[[Attack, Target, int, float, Count], None]] = {
    "hello": _hello_flood,
    "churn": _churn,
}


# --- connections held ----------------------------------------------------------------------


def _attacker_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


_ATTACKER = _attacker_context()


def _tls(target: Target) -> ssl.SSLSocket:
    raw = socket.create_connection((target.host, target.port), timeout=10)
    try:
        return _ATTACKER.wrap_socket(raw, server_hostname="localhost")
    except BaseException:
        raw.close()
        raise


def _closed(conn: ssl.SSLSocket) -> bool:
    """Whether the server has closed ``conn`` (or sent something on it), without waiting."""
    conn.setblocking(False)
    try:
        conn.recv(1)
    except (BlockingIOError, ssl.SSLWantReadError):
        return False
    except OSError:
        return True
    finally:
        conn.settimeout(10)
    return True


def _hold(
    conn: ssl.SSLSocket,
    trickle: bytes,
    count: Count,
    stop_at: float,
) -> None:
    """Send ``trickle`` a byte every ``TRICKLE`` seconds until the server closes ``conn`` or
    the attack ends."""
    with contextlib.closing(conn):
        for byte in trickle:
            if time.monotonic() >= stop_at:
                return
            time.sleep(TRICKLE)
            if _closed(conn):
                count("closed-by-server")
                return
            conn.sendall(bytes([byte]))
        while time.monotonic() < stop_at:
            time.sleep(TRICKLE)
            if _closed(conn):
                count("closed-by-server")
                return


_REQUEST_HEAD = b"POST /mutate?timeout=3s HTTP/1.1\r\nHost: preemptguard\r\n"
_FOREVER = b"X" * 100_000


def _slowloris(_: Attack, target: Target, rng: random.Random, count: Count, stop_at: float) -> None:
    conn = _tls(target)
    count("opened")
    conn.sendall(_REQUEST_HEAD)
    _hold(conn, b"X-Slow: " + _FOREVER, count, stop_at)


def _slow_body(_: Attack, target: Target, rng: random.Random, count: Count, stop_at: float) -> None:
    conn = _tls(target)
    count("opened")
    conn.sendall(
        _REQUEST_HEAD + b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    )
    _hold(conn, b'"a":"' + _FOREVER, count, stop_at)


def _idle(_: Attack, target: Target, rng: random.Random, count: Count, stop_at: float) -> None:
    conn = _tls(target)
    count("opened")
    _hold(conn, b"", count, stop_at)


_LARGE: list[bytes] = []


def _large(_: Attack, target: Target, rng: random.Random, count: Count, stop_at: float) -> None:
    if not _LARGE:
        pod = adversarial.deep_and_dense(500 * 1024)
        _LARGE.append(adversarial.encode(adversarial.review_of(pod)))
    conn = http.client.HTTPSConnection(target.host, target.port, context=_ATTACKER, timeout=30)
    count("opened")
    with contextlib.closing(conn):
        while time.monotonic() < stop_at:
            conn.request(
                "POST", "/mutate?timeout=3s", _LARGE[0], {"Content-Type": "application/json"}
            )
            answer = conn.getresponse()
            answer.read()
            count(f"answered:{answer.status}")


_HOLDERS: dict[str, Step] = {
    "slowloris": _slowloris,
    "slow-body": _slow_body,
    "idle": _idle,
    "large": _large,
}
