"""The ledger of the work a server process has in hand, and the reviews it turns away.

A review answered in a thread is taken on only if it and the reviews in hand can all be
checked before its deadline, which runs from when the request arrived; reviews of more than
``MEDIUM_BODY_BYTES`` take only a share of the CPU. How long answers take under a flood is
in tests/server/test_slow_review_flood.py (outcomes) and benchmarks/slow_review_bench.py.
"""

from __future__ import annotations

import copy
import io
import json
import time
from typing import Any

import pytest

from tests import adversarial
from tests.server.helpers import fixture
from webhook.admission.hooks import Hook
from webhook.admission.namespaces import NamespaceMeta
from webhook.admission.priorities import offline
from webhook.engine import evaluate
from webhook.engine.decision import Context, Decision, Obj
from webhook.engine.policy import Policy
from webhook.loading.policies import builtin_policy
from webhook.server import gunicorn, logs
from webhook.server import handler as handler_module
from webhook.server.app import MAX_BODY_BYTES, hook_request
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
from webhook.server.handler import HookRequest, ReviewHandler
from webhook.server.metrics import Metrics
from webhook.server.offload import Offload

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


# --- The handler: the ledger on every review answered in a thread ---


@pytest.fixture(autouse=True)
def quiet_logs() -> None:
    logs.configure("error", io.StringIO())


def review_handler(
    ledger: WorkLedger, metrics: Metrics | None = None, engine: Any = evaluate
) -> ReviewHandler:
    return ReviewHandler(
        lambda: POLICY,
        lambda namespace: NamespaceMeta(),
        offline(),
        engine,
        metrics or Metrics(),
        MAX_BODY_BYTES,
        LargeReviewGate(),
        Offload(),
        ledger,
    )


def call(body: bytes, *, arrived: float | None = None, timeout: str = "3s") -> HookRequest:
    return HookRequest(
        path="/validate",
        timeout=timeout,
        mimetype="application/json",
        content_length=len(body),
        body=io.BytesIO(body),
        arrived=arrived,
    )


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

    monkeypatch.setattr(handler_module, "loads", never)
    metrics = Metrics()
    handler = review_handler(WorkLedger(), metrics)
    # Arrived 3 s ago with a 3 s timeout: waited in the queue for a thread all that time.
    late = call(ordinary_review("late-1"), arrived=time.monotonic() - 3)
    reply = handler.handle(Hook.MUTATE, late)
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
    handler = review_handler(WorkLedger())
    fresh = call(ordinary_review("fresh-1"), arrived=time.monotonic())
    response = json.loads(handler.handle(Hook.MUTATE, fresh).body)["response"]
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
        with pytest.raises(RuntimeError, match="metrics bug"):
            review_handler(ledger, BrokenMetrics()).handle(Hook.VALIDATE, call(body))
        assert ledger.in_hand() == 0
        reply = review_handler(ledger, engine=broken).handle(Hook.VALIDATE, call(body))
        assert reply.status == 500
        assert ledger.in_hand() == 0


def test_the_arrival_stamp_reaches_the_review_call() -> None:
    seen: list[float | None] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        environ["wsgi.input"] = io.BytesIO()
        seen.append(hook_request(environ).arrived)
        return []

    wrapped = gunicorn.stamped_with_arrival(app)
    wrapped({}, None)  # not served by WebhookWorker: no stamp, the handler takes now
    gunicorn._serving.arrived = 12.5  # as WebhookWorker sets it for the request it serves
    try:
        wrapped({}, None)
    finally:
        gunicorn._serving.arrived = None
    assert seen == [None, 12.5]
