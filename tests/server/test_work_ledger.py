"""The ledger of the work a server process has in hand, and the reviews it turns away.

A review answered in a thread is taken on only if it and the reviews in hand can all be
checked before its deadline, which runs from when the request arrived; reviews of more than
``MEDIUM_BODY_BYTES`` take only a share of the CPU. How long answers take under a flood is
in tests/server/test_slow_review_flood.py (outcomes) and benchmarks/slow_review_bench.py.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
import time
from typing import Any

import pytest

from tests import adversarial
from tests.server.asgi import AppClient
from tests.server.helpers import fixture
from webhook.admission.core import Hook
from webhook.admission.lookups import offline_priority_classes as offline
from webhook.engine import evaluate
from webhook.engine.decision import Context, Decision, NamespaceMeta, Obj
from webhook.engine.policy import Policy
from webhook.loading.policies import builtin_policy
from webhook.server import logs
from webhook.server import reviewer as reviewer_module
from webhook.server.gate import (
    MEDIUM_BODY_BYTES,
    MEDIUM_SHARE,
    Deadline,
    LargeReviewGate,
    Refusal,
    Work,
    WorkLedger,
    thread_seconds,
)
from webhook.server.metrics import Metrics
from webhook.server.offload import Offload
from webhook.server.reviewer import Head, Reply, Reviewer
from webhook.server.transport import LoopLag, Transport

POLICY = builtin_policy()
ORDINARY = 4 * 1024
MEDIUM = 480 * 1024


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cpu() -> Clock:
    """The CPU time of the thread that takes reviews on, and leaves with them."""
    return Clock()


def due_in(clock: Clock, seconds: float) -> Deadline:
    return Deadline(clock() + seconds)


def admitted(outcome: Work | Refusal) -> Work:
    assert isinstance(outcome, Work), outcome
    return outcome


def test_a_review_that_fits_before_its_deadline_is_taken_on_until_it_leaves(
    clock: Clock,
) -> None:
    ledger = WorkLedger(clock=clock)
    work = admitted(ledger.enter(ORDINARY, due_in(clock, 2.55)))
    assert not work.medium
    assert ledger.in_hand() == pytest.approx(thread_seconds(ORDINARY))
    ledger.leave(work)
    assert ledger.in_hand() == 0


def test_a_review_whose_time_is_up_is_refused_as_late(clock: Clock) -> None:
    ledger = WorkLedger(clock=clock)
    assert ledger.enter(ORDINARY, due_in(clock, -0.1)) is Refusal.LATE
    # Not even its own cost fits in the time left.
    assert ledger.enter(ORDINARY, due_in(clock, thread_seconds(ORDINARY) / 2)) is Refusal.LATE
    assert ledger.in_hand() == 0


def test_a_review_that_would_finish_late_behind_the_work_in_hand_is_refused(
    clock: Clock,
) -> None:
    ledger = WorkLedger(clock=clock)
    in_hand = [admitted(ledger.enter(ORDINARY, due_in(clock, 10))) for _ in range(10)]
    left = 5 * thread_seconds(ORDINARY)  # room for it alone, not behind the ten in hand
    assert ledger.enter(ORDINARY, due_in(clock, left)) is Refusal.BUSY
    for work in in_hand:
        ledger.leave(work)
    admitted(ledger.enter(ORDINARY, due_in(clock, left)))


def test_medium_reviews_take_only_their_share_of_the_time(clock: Clock) -> None:
    ledger = WorkLedger(clock=clock)
    deadline = due_in(clock, 2.55)
    fit = int(MEDIUM_SHARE * 2.55 / thread_seconds(MEDIUM))
    medium = [admitted(ledger.enter(MEDIUM, deadline)) for _ in range(fit)]
    assert all(work.medium for work in medium)
    assert ledger.enter(MEDIUM, deadline) is Refusal.MEDIUM
    # The rest of the time is left to smaller reviews.
    for size in (ORDINARY, MEDIUM_BODY_BYTES):
        assert not admitted(ledger.enter(size, deadline)).medium


def test_answered_medium_reviews_are_charged_the_cpu_time_they_took(
    clock: Clock, cpu: Clock
) -> None:
    ledger = WorkLedger(clock=clock, cpu_clock=cpu)
    cost = thread_seconds(MEDIUM)
    fit = int(MEDIUM_SHARE * 2.55 / cost)
    for _ in range(fit):
        work = admitted(ledger.enter(MEDIUM, due_in(clock, 2.55)))
        cpu.now += cost  # as long as expected
        ledger.leave(work)
    assert ledger.in_hand() == 0
    # Answered, and yet their share of the time is spent until it is due.
    assert ledger.enter(MEDIUM, due_in(clock, 2.55)) is Refusal.MEDIUM
    clock.now += cost / MEDIUM_SHARE
    work = admitted(ledger.enter(MEDIUM, due_in(clock, 2.55)))
    assert ledger.enter(MEDIUM, due_in(clock, 2.55)) is Refusal.MEDIUM
    # One that took a tenth of what was expected is charged that: room for another.
    cpu.now += cost / 10
    ledger.leave(work)
    admitted(ledger.enter(MEDIUM, due_in(clock, 2.55)))


def test_medium_reviews_one_after_another_within_their_share_are_all_taken_on(
    clock: Clock, cpu: Clock
) -> None:
    ledger = WorkLedger(clock=clock, cpu_clock=cpu)
    for _ in range(1000):
        work = admitted(ledger.enter(MEDIUM, due_in(clock, 2.55)))
        cpu.now += 0.04  # as long as the slowest ones of this size take here
        clock.now += 0.04 / MEDIUM_SHARE
        ledger.leave(work)


def test_a_medium_review_is_refused_rather_than_make_one_in_hand_late(
    clock: Clock, cpu: Clock
) -> None:
    ledger = WorkLedger(clock=clock, cpu_clock=cpu)
    cost = thread_seconds(MEDIUM)
    soon = due_in(clock, 2 * cost / MEDIUM_SHARE - 0.01)  # room for itself, not for two
    first = admitted(ledger.enter(MEDIUM, soon))
    assert ledger.enter(MEDIUM, due_in(clock, 10)) is Refusal.MEDIUM
    ledger.leave(first)
    admitted(ledger.enter(MEDIUM, due_in(clock, 10)))


def test_ordinary_reviews_do_not_spend_the_share_of_medium_ones(clock: Clock) -> None:
    ledger = WorkLedger(clock=clock)
    for _ in range(100):
        ledger.leave(admitted(ledger.enter(ORDINARY, due_in(clock, 2.55))))
    fit = int(MEDIUM_SHARE * 2.55 / thread_seconds(MEDIUM))
    for _ in range(fit):
        admitted(ledger.enter(MEDIUM, due_in(clock, 2.55)))


# --- The reviewer: the ledger on every review answered in the worker process ---


@pytest.fixture(autouse=True)
def quiet_logs() -> None:
    logs.configure("error", io.StringIO())


def reviewer(
    ledger: WorkLedger, metrics: Metrics | None = None, engine: Any = evaluate
) -> Reviewer:
    return Reviewer(
        lambda: POLICY,
        lambda namespace: NamespaceMeta(),
        offline(),
        engine,
        metrics or Metrics(),
        gate=LargeReviewGate(),
        offloaded=Offload(),
        ledger=ledger,
    )


def head(body: bytes, *, arrived: float | None = None, timeout: str = "3s") -> Head:
    return Head(
        hook=Hook.MUTATE,
        path="/mutate",
        timeout=timeout,
        mimetype="application/json",
        encoding="",
        length=len(body),
        arrived=time.monotonic() if arrived is None else arrived,
    )


def answer(checker: Reviewer, body: bytes, **options: Any) -> Reply:
    return asyncio.run(checker.review(head(body, **options), body))


def ordinary_review(uid: str) -> bytes:
    """A pod create as the API server sends it, which the policy lets through."""
    review = copy.deepcopy(fixture("create-pod-sweep-mutate"))
    review["request"]["uid"] = uid
    return json.dumps(review).encode()


def test_a_request_whose_deadline_passed_while_it_waited_is_refused_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(body: bytes) -> object:
        raise AssertionError("the review was parsed")

    monkeypatch.setattr(reviewer_module, "loads", never)
    metrics = Metrics()
    # Arrived 3 s ago with a 3 s timeout: waited behind other work all that time.
    reply = answer(
        reviewer(WorkLedger(), metrics), ordinary_review("late-1"), arrived=time.monotonic() - 3
    )
    assert reply.status == 200
    doc = json.loads(reply.body)
    assert doc["apiVersion"] == "admission.k8s.io/v1"
    response = doc["response"]
    assert (response["uid"], response["allowed"], response["status"]["code"]) == (
        "late-1",
        False,
        429,
    )
    message = response["status"]["message"]
    assert "waited behind others" in message
    assert message.endswith("retry")
    busy = {"hook": "mutate", "outcome": "busy", "workload_class": "none"}
    assert metrics.registry.get_sample_value("preemptguard_admissions_total", busy) == 1


def test_a_request_that_arrived_just_now_is_checked() -> None:
    reply = answer(reviewer(WorkLedger()), ordinary_review("fresh-1"))
    response = json.loads(reply.body)["response"]
    assert (response["uid"], response["allowed"]) == ("fresh-1", True)


def test_a_review_leaves_the_ledger_however_it_ends() -> None:
    class BrokenMetrics(Metrics):
        def count_admission(self, hook: str, outcome: str, wclass: str, seconds: float) -> None:
            raise RuntimeError("metrics bug")

    def broken(obj: Obj, policy: Policy, ctx: Context) -> Decision:
        raise RuntimeError("engine bug")

    ledger = WorkLedger()
    medium = adversarial.encode(adversarial.review_of(adversarial.too_many_terms(200 * 1024)))
    for body in (ordinary_review("broken-1"), medium):
        reply = answer(reviewer(ledger, BrokenMetrics()), body)
        assert (reply.status, reply.body) == (500, b"internal error; see the preemptguard log\n")
        assert ledger.in_hand() == 0
        reply = answer(reviewer(ledger, engine=broken), body)
        assert reply.status == 500
        assert ledger.in_hand() == 0


def test_a_call_arrives_as_long_before_it_is_run_as_the_event_loop_lags() -> None:
    """Work ready for the event loop waits in one queue: a call found there has waited about
    as long as the heartbeat last did, and its deadline counts that wait."""
    heard: list[Head] = []

    class Listening(Reviewer):
        def refusal(self, call: Head) -> Reply | None:
            heard.append(call)
            return Reply(400, b"", "text/plain")

    lag = LoopLag()
    lag.seconds = 1.5
    app = Transport(
        Listening(lambda: POLICY, lambda n: NamespaceMeta(), None, evaluate, Metrics()),
        _no_app,
        lag=lag,
    )
    before = time.monotonic()
    AppClient(app).post("/validate", json={})
    assert before - 1.5 <= heard[0].arrived <= time.monotonic() - 1.5


async def _no_app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("not a hook")


def test_the_heartbeat_measures_how_late_the_loop_runs_what_is_ready() -> None:
    seen: list[float] = []

    async def busy_loop() -> None:
        lag = LoopLag(seen.append)
        lag.start()
        await asyncio.sleep(0.12)
        time.sleep(0.3)  # the loop held, as by a review checked on it
        await asyncio.sleep(0.12)

    asyncio.run(busy_loop())
    assert max(seen) >= 0.2
    assert min(seen) < 0.05
