"""Large reviews answered in a process of their own, so that their CPU never holds the GIL of
the process that answers every other review.

Reading a review of a few MiB takes the JSON decoder tens to hundreds of milliseconds in one
call that holds the GIL; every other review in the same process waits that long, whatever
the number of threads. A child process (one per server process, a fresh interpreter that
shares no threads or locks with the server) reads, checks and answers large reviews;
the server process only passes the body and the policy in and the answer out.

A review in the child is read and checked exactly as in the server: the same parser, the same
admission core, the engine itself (a server made with another ``evaluate``, as tests do, uses
it only for reviews it answers itself).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection

from webhook.admission.core import Admission, Hook, answer
from webhook.admission.review import Request, loads, parse_review
from webhook.engine.decision import NamespaceLookup, NamespaceMeta
from webhook.engine.policy import Policy
from webhook.engine.scheduling import PriorityClassInfo, PriorityLookup
from webhook.errors import BadReview, OffloadFailed
from webhook.loading import gcpause


@dataclass(frozen=True)
class Answered:
    """What the child sends back: the request without its objects, and the answer."""

    request: Request
    admission: Admission


@dataclass(frozen=True)
class BadBody:
    """The review could not be read: ``error`` says why (an ``UnreadableRequest`` when its uid
    can be echoed)."""

    error: BadReview


@dataclass(frozen=True)
class NeedsNamespace:
    """The review is in a namespace the server did not send: look it up and ask again."""

    namespace: str


@dataclass(frozen=True)
class Failed:
    """The engine raised: the request, and the error in one line."""

    request: Request
    error: str


Outcome = Answered | BadBody | NeedsNamespace | Failed


@dataclass(frozen=True)
class _Known:
    """The one namespace the server has looked up for this review, and the PriorityClasses
    the policy names (plain values: picklable). A pod's own class needs no lookup here: the
    API server has resolved it into spec.priority."""

    namespace: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    priority_classes: Mapping[str, PriorityClassInfo | None] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        namespace: str | None,
        meta: NamespaceMeta,
        priority_classes: Mapping[str, PriorityClassInfo | None],
    ) -> _Known:
        return cls(namespace, dict(meta.annotations), dict(meta.labels), dict(priority_classes))


def run_task(hook: Hook, body: bytes, policy: Policy, known: _Known) -> Outcome:
    """Read and answer one review (runs in the child)."""
    # The review's objects are gone when _answer returns, before the collector is back on.
    with gcpause.paused():
        return _answer(hook, body, policy, known)


def _answer(hook: Hook, body: bytes, policy: Policy, known: _Known) -> Outcome:
    try:
        request = parse_review(loads(body))
    except BadReview as exc:
        return BadBody(exc)
    stripped = _stripped(request)

    def lookup(namespace: str) -> NamespaceMeta:
        if namespace != known.namespace:
            raise _Missing(namespace)
        return NamespaceMeta(annotations=known.annotations, labels=known.labels)

    try:
        admission = answer(
            hook, request, policy, lookup, priority_classes=known.priority_classes.get
        )
    except _Missing as missing:
        return NeedsNamespace(missing.namespace)
    except Exception as exc:  # noqa: BLE001 - the server logs it and answers 500
        return Failed(stripped, " ".join(f"{type(exc).__name__}: {exc}".split())[:500])
    return Answered(stripped, admission.without_decision())


class _Missing(Exception):
    def __init__(self, namespace: str) -> None:
        super().__init__(namespace)
        self.namespace = namespace


def _stripped(request: Request) -> Request:
    return replace(request, object=None, old_object=None)


class Offload:
    """The child process of one server process: started by ``start`` or on first use,
    killed and replaced when it fails to answer in time."""

    def __init__(self) -> None:
        self._child: _Child | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the child now, so that the first large review does not wait for it."""
        with self._lock:
            self._running()

    def stop(self) -> None:
        with self._lock:
            if self._child is not None:
                self._child.kill()
                self._child = None

    def run(
        self,
        hook: Hook,
        body: bytes,
        policy: Policy,
        namespaces: NamespaceLookup,
        priority_classes: PriorityLookup,
        timeout: float,
        namespace: str | None = None,
    ) -> Outcome:
        """The child's answer; raises ``ClusterStateUnknown`` (from the lookups) or
        ``OffloadFailed``. ``namespace``, the review's namespace as far as the server could
        tell without reading it, is looked up first so that the child reads it only once."""
        deadline = time.monotonic() + timeout
        named = {
            c.priority_class_name: priority_classes(c.priority_class_name)
            for c in policy.classes.values()
            if c.priority_class_name is not None
        }
        meta = NamespaceMeta() if namespace is None else namespaces(namespace)
        known = _Known.of(namespace, meta, named)
        outcome = self._call((hook, body, policy, known), deadline)
        if isinstance(outcome, NeedsNamespace):
            known = _Known.of(outcome.namespace, namespaces(outcome.namespace), named)
            outcome = self._call((hook, body, policy, known), deadline)
        return outcome

    def _call(self, task: tuple[Hook, bytes, Policy, _Known], deadline: float) -> Outcome:
        with self._lock:
            child = self._running()
            try:
                return child.ask(task, deadline)
            except OffloadFailed:
                # A child still starting is left to start: replacing it would start over,
                # and a burst of large reviews would keep one from ever being ready.
                if child.ready or not child.alive():
                    # Replaced at once: the next large review finds it started, or waits for
                    # it only as long as its own deadline allows.
                    child.kill()
                    self._child = _Child()
                raise

    def _running(self) -> _Child:
        if self._child is None or not self._child.alive():
            self._child = _Child()
        return self._child


class _Child:
    """A child Python process (``python -m webhook.offload``) answering tasks over a socket
    pair, one at a time. Started as a command, not by ``multiprocessing``: the child imports
    nothing of the server's main module, whatever started the server."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "webhook.server.offload", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        # Until the child says it is ready (its imports take a good part of a second on a
        # busy machine), a task sent would wait in the socket for as long, with no deadline.
        self.ready = False

    def alive(self) -> bool:
        return self.process.poll() is None

    def ask(self, task: tuple[Hook, bytes, Policy, _Known], deadline: float) -> Outcome:
        """The child's answer to ``task``, by ``deadline`` (monotonic clock) or never."""
        try:
            if not self.ready:
                self._wait_ready(deadline)
            self.conn.send(task)
            timeout = max(0.0, deadline - time.monotonic())
            if not self.conn.poll(timeout):
                raise OffloadFailed(f"no answer within {timeout:.1f} s")
            outcome: Outcome = self.conn.recv()
        except (OSError, EOFError) as exc:
            raise OffloadFailed(f"the process checking large reviews failed: {exc}") from None
        return outcome

    def _wait_ready(self, deadline: float) -> None:
        if not self.conn.poll(max(0.0, deadline - time.monotonic())):
            raise OffloadFailed("the process checking large reviews is still starting")
        if self.conn.recv() != READY:
            self.kill()
            raise OffloadFailed("the process checking large reviews did not start")
        self.ready = True

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=5)
        self.conn.close()


# What the child sends first, once it can take tasks.
READY = "ready"


def _serve(conn: Connection) -> None:
    """The child's loop: say it is ready, then answer each task until the server goes away."""
    try:
        conn.send(READY)
    except OSError:
        return
    while True:
        try:
            hook, body, policy, known = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(run_task(hook, body, policy, known))


if __name__ == "__main__":
    # Through the module's own name, so that what is sent back pickles as webhook.offload's.
    from webhook.server import offload

    offload._serve(Connection(int(sys.argv[1])))
