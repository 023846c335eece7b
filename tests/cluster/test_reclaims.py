"""Recognising reclaims, the pods to mark ``DisruptionTarget`` and each displaced pod's outcome
(``reclaims.Tracker``), from the objects the watches deliver, at the times they arrive: no API
server, no real clock."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.cluster.conftest import T0, node, pod
from tests.cluster.fake_apiserver import stamp
from webhook.cluster.reclaims import (
    GRACE_SLACK,
    Action,
    Disruption,
    EventIgnored,
    Outcome,
    ReclaimSeen,
    Record,
    Tracker,
    Trigger,
)
from webhook.engine.policy import Policy

Obj = dict[str, Any]


def _approx(expected: float) -> Any:
    """``pytest.approx``, typed as Any: compared inside a tuple with a ``float | None``."""
    return pytest.approx(expected)


def _node(name: str = "pre-1", cls: str = "preemptible", cordoned: bool = False) -> Obj:
    obj = node(name, cls, **({"unschedulable": True} if cordoned else {}))
    obj["metadata"]["uid"] = f"uid-{name}"
    return obj


def _pod(name: str, grace: int, **kwargs: Any) -> Obj:
    obj = pod(name, node_name=kwargs.pop("node_name", "pre-1"), grace=grace, **kwargs)
    obj["metadata"]["uid"] = f"uid-{name}"
    obj["metadata"]["creationTimestamp"] = stamp(T0 - 3600)
    return obj


def _deleting(obj: Obj, at: float, grace: int | None = None) -> Obj:
    obj = copy.deepcopy(obj)
    grace = obj["spec"]["terminationGracePeriodSeconds"] if grace is None else grace
    obj["metadata"]["deletionTimestamp"] = stamp(at + grace)
    obj["metadata"]["deletionGracePeriodSeconds"] = grace
    return obj


def _event(node_name: str = "pre-1", at: float = T0, uid: str = "uid-event-1") -> Obj:
    return {
        "metadata": {"name": f"{node_name}.1", "namespace": "default", "uid": uid},
        "involvedObject": {"kind": "Node", "name": node_name},
        "reason": "TogetherPreempted",
        "firstTimestamp": stamp(at),
    }


@pytest.fixture
def tracker(policy: Policy) -> Tracker:
    return Tracker(policy=policy, classify=lambda p: p["metadata"]["annotations"].get(
        "together.ai/workload", "unclassified"))  # fmt: skip


def _records(actions: list[Any]) -> list[Record]:
    return [a for a in actions if isinstance(a, Record)]


def _reported(actions: list[Action]) -> list[Action]:
    """The actions but the pods to mark."""
    return [a for a in actions if not isinstance(a, Disruption)]


def _marked(actions: list[Action]) -> list[str]:
    """The names of the pods to mark, in order."""
    return [a.name for a in actions if isinstance(a, Disruption)]


def test_a_reclaim_as_the_provider_does_it_gives_each_pod_its_outcome(tracker: Tracker) -> None:
    sweep = _pod("sweep", 240, workload="interruptible",
                 annotations={"together.ai/checkpoint-seconds": "210"}, owner=("batch/v1", "Job", "sweep"))  # fmt: skip
    slow = _pod("slow", 5, workload="flexible")
    stuck = _pod("stuck", 60, workload="interruptible")
    tracker.node("ADDED", _node(), T0 - 10)
    for p in (sweep, slow, stuck):
        assert tracker.pod("ADDED", p, T0 - 10) == []
    # T+0: cordon, the Event, SIGTERM (the deletions, seen a moment later).
    assert tracker.node("MODIFIED", _node(cordoned=True), T0) == []
    actions = tracker.preempted_event(_event(), T0)
    (seen,) = _reported(actions)
    assert isinstance(seen, ReclaimSeen)
    assert (seen.reclaim.key, seen.displaced, seen.reclaim.trigger) == (
        "uid-pre-1", 3, Trigger.EVENT)  # fmt: skip
    assert sorted(_marked(actions)) == ["slow", "stuck", "sweep"]  # once, before their exit
    for p in (sweep, slow, stuck):
        assert tracker.pod("MODIFIED", _deleting(p, T0 + 0.2), T0 + 0.2) == []
    (exited,) = _records(tracker.pod("DELETED", sweep, T0 + 41.2))
    assert (exited.outcome, exited.seconds) == (Outcome.EXITED_IN_TIME, _approx(41.0))
    assert exited.pod.owner is not None
    assert exited.pod.owner.kind == "Job"
    assert exited.message() == (
        "pod sweep (interruptible) on preemptible node pre-1 exited 41 s after SIGTERM, "
        "checkpoint budget 240 s (declared checkpoint 210 s)"
    )
    (late,) = _records(tracker.pod("DELETED", slow, T0 + 8.2))
    assert (late.outcome, late.seconds) == (Outcome.GRACE_EXPIRED, _approx(8.0))
    assert (
        "was still running when its 5 s grace period ran out (gone 8 s after SIGTERM)"
        in late.message()
    )
    (lost,) = _records(tracker.node("DELETED", _node(cordoned=True), T0 + 50.2))
    assert (lost.outcome, lost.seconds) == (Outcome.LOST_WITH_NODE, _approx(50.0))
    assert (
        "was lost with the node 50 s after SIGTERM, still inside its 60 s grace period"
        in lost.message()
    )
    assert not tracker.displaced
    assert not tracker.reclaims
    # The pod GC removing what was on the node records nothing more.
    assert tracker.pod("DELETED", stuck, T0 + 60) == []


def test_a_cordoned_node_whose_pods_are_deleted_is_a_reclaim_without_the_event(
    tracker: Tracker,
) -> None:
    job = _pod("job", 30, workload="interruptible")
    tracker.node("ADDED", _node(), T0 - 10)
    tracker.pod("ADDED", job, T0 - 10)
    tracker.node("MODIFIED", _node(cordoned=True), T0)
    seen, *rest = tracker.pod("MODIFIED", _deleting(job, T0 + 1), T0 + 1)
    assert isinstance(seen, ReclaimSeen)
    assert (seen.reclaim.trigger, seen.reclaim.key, seen.displaced) == (
        Trigger.CORDON, "uid-pre-1", 1)  # fmt: skip
    assert _marked(rest) == ["job"]
    assert _reported(rest) == []
    # The Event arriving later is the same reclaim, under the same key: nothing new.
    assert tracker.preempted_event(_event(at=T0), T0 + 2) == []
    (done,) = _records(tracker.pod("DELETED", job, T0 + 11))
    assert (done.outcome, done.seconds) == (Outcome.EXITED_IN_TIME, _approx(10.0))


def test_deleting_pods_on_a_node_that_is_not_cordoned_is_no_reclaim(tracker: Tracker) -> None:
    job = _pod("job", 30, workload="interruptible")
    tracker.node("ADDED", _node(), T0)
    tracker.pod("ADDED", job, T0)
    assert tracker.pod("MODIFIED", _deleting(job, T0 + 1), T0 + 1) == []
    assert tracker.pod("DELETED", job, T0 + 2) == []


def test_standard_nodes_daemonset_pods_and_late_pods_are_not_displaced(tracker: Tracker) -> None:
    tracker.node("ADDED", _node("std-1", "standard", cordoned=True), T0)
    (ignored,) = tracker.preempted_event(_event("std-1", uid="uid-event-std"), T0)
    assert isinstance(ignored, EventIgnored)
    assert ignored.why == "node std-1 is not preemptible"
    assert not tracker.reclaims
    tracker.node("ADDED", _node(cordoned=True), T0)
    tracker.pod("ADDED", _pod("agent", 30, owner=("apps/v1", "DaemonSet", "agent")), T0)
    late = _pod("late", 30)
    late["metadata"]["creationTimestamp"] = stamp(T0 + 5)
    (seen,) = tracker.preempted_event(_event(), T0)
    assert isinstance(seen, ReclaimSeen)
    assert seen.displaced == 0
    assert tracker.pod("ADDED", late, T0 + 5) == []
    assert not tracker.displaced


def test_a_pod_that_finishes_counts_as_exited(tracker: Tracker) -> None:
    job = _pod("job", 30, workload="interruptible")
    tracker.node("ADDED", _node(cordoned=True), T0)
    tracker.pod("ADDED", job, T0)
    tracker.preempted_event(_event(), T0)
    finished = copy.deepcopy(job)
    finished["status"]["phase"] = "Succeeded"
    (done,) = _records(tracker.pod("MODIFIED", finished, T0 + 12))
    assert (done.outcome, done.seconds) == (Outcome.EXITED_IN_TIME, _approx(12.0))
    assert tracker.pod("DELETED", finished, T0 + 20) == []


def test_a_pod_that_never_goes_is_recorded_after_its_grace_and_the_slack(tracker: Tracker) -> None:
    job = _pod("job", 30)
    tracker.node("ADDED", _node(cordoned=True), T0)
    tracker.pod("ADDED", job, T0)
    tracker.preempted_event(_event(), T0)
    tracker.pod("MODIFIED", _deleting(job, T0), T0)
    assert tracker.tick(T0 + 30 + GRACE_SLACK - 1) == []
    (expired,) = _records(tracker.tick(T0 + 30 + GRACE_SLACK + 1))
    assert (expired.outcome, expired.seconds) == (Outcome.GRACE_EXPIRED, None)
    assert "still there 61 s after SIGTERM" in expired.message()
    assert tracker.pod("DELETED", job, T0 + 100) == []


def test_a_restarted_tracker_rebuilds_the_reclaim_from_what_it_lists(policy: Policy) -> None:
    """Same key for the reclaim (the Event's uid), SIGTERM read from the deletion."""
    job = _pod("job", 60, workload="interruptible")
    first = Tracker(policy=policy, classify=lambda p: "interruptible")
    first.node("ADDED", _node(), T0 - 5)
    first.pod("ADDED", job, T0 - 5)
    first.node("MODIFIED", _node(cordoned=True), T0)
    (seen,) = _reported(first.preempted_event(_event(), T0))
    first.pod("MODIFIED", _deleting(job, T0), T0)
    # A new process lists nodes, Events, then pods, 20 s later.
    second = Tracker(policy=policy, classify=lambda p: "interruptible")
    second.replace_nodes([_node(cordoned=True)], T0 + 20)
    (again,) = second.preempted_event(_event(), T0 + 20)
    assert isinstance(again, ReclaimSeen)
    assert isinstance(seen, ReclaimSeen)
    assert again.reclaim.key == seen.reclaim.key
    second.replace_pods([_deleting(job, T0)], T0 + 20)
    assert second.displaced["uid-job"].sigterm == pytest.approx(T0)
    (done,) = _records(second.replace_pods([], T0 + 25))  # gone while nobody watched
    assert (done.outcome, done.seconds) == (Outcome.EXITED_IN_TIME, _approx(25.0))


def test_a_stale_event_starts_nothing(tracker: Tracker) -> None:
    tracker.node("ADDED", _node(cordoned=True), T0)
    (ignored,) = tracker.preempted_event(_event(at=T0 - 3600), T0)
    assert isinstance(ignored, EventIgnored)
    assert ignored.why == "it is 3600 s old, past the 300 s reclaim window"
    assert tracker.preempted_event(_event(at=T0 - 3600), T0 + 1) == []  # told once
    assert tracker.preempted_event({"reason": "Other"}, T0) == []
    assert not tracker.reclaims


def test_a_pod_gone_before_the_reclaim_was_known_still_counts(tracker: Tracker) -> None:
    """A watch broke: the pods are listed again before the Events, and one has gone."""
    job = _pod("job", 30, workload="interruptible")
    done = _pod("done", 30, workload="interruptible")
    tracker.node("ADDED", _node(), T0 - 10)
    tracker.pod("ADDED", job, T0 - 10)
    tracker.pod("ADDED", done, T0 - 10)
    assert tracker.pod("DELETED", done, T0 - 5) == []  # finished before the reclaim
    tracker.node("MODIFIED", _node(cordoned=True), T0)
    seen, *records = tracker.preempted_event(_event(at=T0), T0 + 3)
    assert isinstance(seen, ReclaimSeen)
    assert seen.displaced == 1  # job, not done
    assert (_reported(records), _marked(records)) == ([], ["job"])
    tracker2 = Tracker(policy=tracker.policy, classify=tracker.classify)
    tracker2.node("ADDED", _node(), T0 - 10)
    tracker2.pod("ADDED", job, T0 - 10)
    tracker2.node("MODIFIED", _node(cordoned=True), T0)
    assert tracker2.replace_pods([], T0 + 4) == []  # gone, and no reclaim known yet
    seen, gone = tracker2.preempted_event(_event(at=T0), T0 + 4)
    assert isinstance(seen, ReclaimSeen)
    assert seen.displaced == 1
    assert isinstance(gone, Record)
    assert (gone.outcome, gone.seconds) == (Outcome.EXITED_IN_TIME, _approx(4.0))


def test_deletions_seen_just_before_the_cordon_are_the_reclaim_it_reveals(
    tracker: Tracker,
) -> None:
    """The provider cordons, then deletes; the pods' watch may deliver the deletions first."""
    job, gone = _pod("job", 30, workload="interruptible"), _pod("gone", 0, workload="flexible")
    tracker.node("ADDED", _node(), T0 - 10)
    tracker.pod("ADDED", job, T0 - 10)
    tracker.pod("ADDED", gone, T0 - 10)
    assert tracker.pod("DELETED", gone, T0 + 0.5) == []  # its deletion was never seen
    assert tracker.pod("MODIFIED", _deleting(job, T0 + 1), T0 + 1) == []
    actions = tracker.node("MODIFIED", _node(cordoned=True), T0 + 1.5)
    assert _marked(actions) == ["job"]
    seen, record = _reported(actions)
    assert isinstance(seen, ReclaimSeen)
    assert isinstance(record, Record)
    assert (seen.reclaim.trigger, seen.reclaim.key, seen.reclaim.started) == (
        Trigger.CORDON, "uid-pre-1", T0 + 0.5)  # fmt: skip
    assert (record.pod.name, record.outcome) == ("gone", Outcome.EXITED_IN_TIME)
    (done,) = _records(tracker.pod("DELETED", job, T0 + 11))
    assert (done.outcome, done.seconds) == (Outcome.EXITED_IN_TIME, _approx(10.0))


def test_a_cordon_long_after_a_deletion_is_no_reclaim(tracker: Tracker) -> None:
    job = _pod("job", 30, workload="interruptible")
    tracker.node("ADDED", _node(), T0 - 10)
    tracker.pod("ADDED", job, T0 - 10)
    assert tracker.pod("MODIFIED", _deleting(job, T0), T0) == []
    assert tracker.node("MODIFIED", _node(cordoned=True), T0 + 4) == []
    assert not tracker.reclaims


# --- whose Event is trusted, and how far -------------------------------------------------------


def _forged(**changes: Any) -> Obj:
    """The provider's Event as someone else could write it: ``changes`` to its metadata and
    involvedObject."""
    event = _event(uid="uid-forged")
    event["metadata"].update(changes.pop("metadata", {}))
    event["involvedObject"].update(changes.pop("involved", {}))
    return event


FORGED = {
    # A tenant's service account may create Events in its own namespace only.
    "tenant namespace": _forged(
        metadata={"namespace": "tenant"},
        involved={"apiVersion": "example.com/v1", "namespace": "tenant"},
    ),
    "kind of a CRD": _forged(involved={"apiVersion": "example.com/v1"}),
    "namespaced": _forged(involved={"namespace": "tenant"}),
    "another node's uid": _forged(involved={"uid": "uid-of-a-removed-pre-1"}),
}


@pytest.mark.parametrize("event", FORGED.values(), ids=FORGED.keys())
def test_an_event_not_written_as_the_provider_writes_it_starts_nothing(
    tracker: Tracker, event: Obj
) -> None:
    job = _pod("job", 30, workload="interruptible")
    tracker.node("ADDED", _node(), T0 - 10)
    tracker.pod("ADDED", job, T0 - 10)
    tracker.node("MODIFIED", _node(cordoned=True), T0)  # cordoned, e.g. for maintenance
    (ignored,) = tracker.preempted_event(event, T0)
    assert isinstance(ignored, EventIgnored)
    assert ignored.uid == "uid-forged"
    assert tracker.preempted_event(event, T0 + 1) == []  # told once
    assert not tracker.reclaims
    assert tracker.tick(T0 + 30 + GRACE_SLACK + 1) == []
    # The real reclaim that follows judges the pod.
    seen, *rest = tracker.pod("MODIFIED", _deleting(job, T0 + 100), T0 + 100)
    assert isinstance(seen, ReclaimSeen)
    assert (seen.displaced, _reported(rest)) == (1, [])
    (done,) = _records(tracker.pod("DELETED", job, T0 + 110))
    assert (done.outcome, done.seconds) == (Outcome.EXITED_IN_TIME, _approx(10.0))


def test_the_event_namespace_is_the_platforms_to_choose(policy: Policy) -> None:
    tracker = Tracker(policy=policy, classify=lambda p: "interruptible",
                      event_namespace="provider-events")  # fmt: skip
    tracker.node("ADDED", _node(cordoned=True), T0)
    (ignored,) = tracker.preempted_event(_event(), T0)
    assert isinstance(ignored, EventIgnored)
    assert "written in namespace default, not provider-events" in ignored.why
    theirs = _event(uid="uid-event-2")
    theirs["metadata"]["namespace"] = "provider-events"
    (seen,) = tracker.preempted_event(theirs, T0)
    assert isinstance(seen, ReclaimSeen)


def test_the_provider_event_names_the_node_as_the_drill_writes_it(tracker: Tracker) -> None:
    tracker.node("ADDED", _node(cordoned=True), T0)
    event = _event()
    event["involvedObject"] = {"apiVersion": "v1", "kind": "Node", "name": "pre-1",
                               "uid": "uid-pre-1"}  # fmt: skip
    event["source"] = {"component": "preemptguard-drill"}
    (seen,) = tracker.preempted_event(event, T0)
    assert isinstance(seen, ReclaimSeen)
    assert seen.reclaim.trigger is Trigger.EVENT


def test_an_event_on_a_node_not_cordoned_waits_for_its_cordon(tracker: Tracker) -> None:
    job = _pod("job", 30, workload="interruptible")
    tracker.node("ADDED", _node(), T0 - 10)
    tracker.pod("ADDED", job, T0 - 10)
    # The Event's watch delivers it before the node's: it waits for the cordon.
    assert tracker.preempted_event(_event(at=T0), T0 + 0.2) == []
    assert not tracker.reclaims
    (seen,) = _reported(tracker.node("MODIFIED", _node(cordoned=True), T0 + 0.5))
    assert isinstance(seen, ReclaimSeen)
    assert (seen.displaced, seen.reclaim.started) == (1, T0)
    # A node cordoned long after an Event is not the reclaim it announced.
    tracker.node("ADDED", _node("pre-2"), T0)
    assert tracker.preempted_event(_event("pre-2", at=T0, uid="uid-event-2"), T0) == []
    assert tracker.node("MODIFIED", _node("pre-2", cordoned=True), T0 + 3600) == []
    assert "pre-2" not in tracker.reclaims


@pytest.mark.parametrize(
    ("claimed", "listed", "started"),
    [
        (T0 - 500, False, T0 - 2),  # before the cordon seen at T0 (whole-second slack)
        (T0 - 500, True, T0 + 10 - 300),  # the cordon not seen: at most the window ago
        (T0 + 3600, False, T0 + 10),  # from the future: now
        (T0 + 1, False, T0 + 1),  # between the cordon and now: as the Event says
    ],
)
def test_an_events_own_time_is_kept_within_what_was_seen(
    tracker: Tracker, claimed: float, listed: bool, started: float
) -> None:
    job = _pod("job", 30, workload="interruptible")
    job["metadata"]["creationTimestamp"] = stamp(T0 - 100)
    if listed:
        tracker.replace_nodes([_node(cordoned=True)], T0)
    else:
        tracker.node("ADDED", _node(), T0 - 200)
        tracker.node("MODIFIED", _node(cordoned=True), T0)
    tracker.pod("ADDED", job, T0)
    (seen,) = _reported(tracker.preempted_event(_event(at=claimed), T0 + 10))
    assert isinstance(seen, ReclaimSeen)
    assert seen.reclaim.started == started
    if not listed:
        # A pod there before the cordon is displaced, however early the Event claimed to be.
        assert seen.displaced == 1


def test_a_restart_that_lists_the_event_before_the_pods_keeps_the_reclaims_key(
    policy: Policy,
) -> None:
    """The first observer saw the cordon first; the one restarted sees the Event first."""
    job = _pod("job", 60, workload="interruptible")
    first = Tracker(policy=policy, classify=lambda p: "interruptible")
    first.node("ADDED", _node(), T0 - 5)
    first.pod("ADDED", job, T0 - 5)
    first.node("MODIFIED", _node(cordoned=True), T0)
    seen, *_ = first.pod("MODIFIED", _deleting(job, T0), T0)
    assert isinstance(seen, ReclaimSeen)
    assert first.preempted_event(_event(at=T0), T0 + 1) == []
    second = Tracker(policy=policy, classify=lambda p: "interruptible")
    second.replace_nodes([_node(cordoned=True)], T0 + 20)
    (again,) = second.preempted_event(_event(at=T0), T0 + 20)
    assert isinstance(again, ReclaimSeen)
    assert again.reclaim.trigger is Trigger.EVENT
    assert again.reclaim.key == seen.reclaim.key == "uid-pre-1"
    assert again.displaced == 0  # its pods are not listed yet
    second.replace_pods([_deleting(job, T0)], T0 + 20)
    assert second.displaced_so_far(again) == 1  # counted when it is reported


def test_a_pod_judged_without_its_deletion_is_judged_again_by_a_later_reclaim(
    tracker: Tracker,
) -> None:
    job = _pod("job", 30, workload="interruptible")
    tracker.node("ADDED", _node(), T0 - 10)
    tracker.pod("ADDED", job, T0 - 10)
    tracker.node("MODIFIED", _node(cordoned=True), T0)
    (seen,) = _reported(tracker.preempted_event(_event(at=T0), T0))
    assert isinstance(seen, ReclaimSeen)
    # Neither deleted nor gone: recorded once its grace and the slack are past.
    (still,) = _records(tracker.tick(T0 + 30 + GRACE_SLACK + 1))
    assert (still.outcome, still.standing) == (Outcome.GRACE_EXPIRED, True)
    assert tracker.pod("MODIFIED", job, T0 + 70) == []  # judged, for this reclaim
    tracker.node("MODIFIED", _node(), T0 + 80)  # uncordoned: that reclaim is over
    assert tracker.tick(T0 + 81) == []
    assert not tracker.reclaims
    # The node is reclaimed for real: the pod is deleted and judged by its deletion.
    tracker.node("MODIFIED", _node(cordoned=True), T0 + 100)
    seen, *rest = tracker.pod("MODIFIED", _deleting(job, T0 + 100), T0 + 100)
    assert isinstance(seen, ReclaimSeen)
    assert (seen.displaced, _reported(rest), _marked(rest)) == (1, [], ["job"])  # a new reclaim
    (done,) = _records(tracker.pod("DELETED", job, T0 + 112))
    assert (done.outcome, done.seconds, done.standing) == (
        Outcome.EXITED_IN_TIME, _approx(12.0), False)  # fmt: skip


# --- the pods to mark, and those that completed -----------------------------------------------


def _finished(obj: Obj, phase: str, at: float | None = None) -> Obj:
    """``obj`` finished (``phase``), its container saying when when ``at`` is given."""
    obj = copy.deepcopy(obj)
    obj["status"]["phase"] = phase
    if at is not None:
        code = 0 if phase == "Succeeded" else 143
        obj["status"]["containerStatuses"] = [
            {"name": "main", "state": {"terminated": {"exitCode": code, "finishedAt": stamp(at)}}}
        ]
    return obj


def test_the_pods_to_mark_are_the_unfinished_ones_of_the_reclaimed_node_each_once(
    tracker: Tracker,
) -> None:
    tracker.node("ADDED", _node(), T0 - 10)
    tracker.node("ADDED", _node("pre-2"), T0 - 10)
    running = _pod("running", 30)
    done = _finished(_pod("done", 30), "Succeeded", T0 - 100)
    failed = _finished(_pod("failed", 30), "Failed", T0 - 100)
    agent = _pod("agent", 30, owner=("apps/v1", "DaemonSet", "agent"))
    other = _pod("other", 30, node_name="pre-2")
    for p in (running, done, failed, agent, other):
        tracker.pod("ADDED", p, T0 - 10)
    tracker.node("MODIFIED", _node(cordoned=True), T0)
    actions = tracker.preempted_event(_event(), T0)
    (mark,) = [a for a in actions if isinstance(a, Disruption)]
    assert (mark.uid, mark.namespace, mark.node, mark.reclaim) == (
        "uid-running", "team", "pre-1", "uid-pre-1")  # fmt: skip
    # Seen again, deleted, listed again: still the one mark of this reclaim.
    assert _marked(tracker.pod("MODIFIED", running, T0 + 1)) == []
    assert _marked(tracker.pod("MODIFIED", _deleting(running, T0 + 2), T0 + 2)) == []
    assert _marked(tracker.replace_pods([running, done, failed, agent, other], T0 + 3)) == []
    # A pod bound to the cordoned node after the reclaim began is not the reclaim's.
    late = _pod("late", 30)
    late["metadata"]["creationTimestamp"] = stamp(T0 + 5)
    assert _marked(tracker.pod("ADDED", late, T0 + 5)) == []


def test_a_pod_deleted_on_a_cordoned_node_marks_every_unfinished_pod_of_it(
    tracker: Tracker,
) -> None:
    """Without the provider's Event: the first deletion reveals the reclaim."""
    tracker.node("ADDED", _node(), T0 - 10)
    first, second = _pod("first", 30), _pod("second", 30)
    tracker.pod("ADDED", first, T0 - 10)
    tracker.pod("ADDED", second, T0 - 10)
    tracker.node("MODIFIED", _node(cordoned=True), T0)
    actions = tracker.pod("MODIFIED", _deleting(first, T0 + 1), T0 + 1)
    assert sorted(_marked(actions)) == ["first", "second"]


def test_a_pod_that_succeeds_during_the_reclaim_completed_and_others_did_not(
    tracker: Tracker,
) -> None:
    tracker.node("ADDED", _node(), T0 - 10)
    pods = {n: _pod(n, 30, workload="interruptible") for n in ("live", "listed", "failed")}
    before = _finished(_pod("before", 30), "Succeeded", T0 - 100)
    for p in (*pods.values(), before):
        tracker.pod("ADDED", p, T0 - 10)
    tracker.node("MODIFIED", _node(cordoned=True), T0)
    (early,) = _records(tracker.preempted_event(_event(), T0))
    assert (early.pod.name, early.completed) == ("before", False)  # done before the reclaim
    # Seen to succeed, with no container statuses to say when: it was seen to.
    (live,) = _records(tracker.pod("MODIFIED", _finished(pods["live"], "Succeeded"), T0 + 12))
    assert (live.outcome, live.completed) == (Outcome.EXITED_IN_TIME, True)
    assert live.completed_message() == (
        "pod live (interruptible) on preemptible node pre-1 completed successfully during the "
        "node's reclaim (12 s after SIGTERM): its work was done before the node went, so it is "
        "not run again"
    )
    # Read after the fact (a relist): its container says when it finished.
    (listed,) = _records(
        tracker.pod("MODIFIED", _finished(pods["listed"], "Succeeded", T0 + 3), T0 + 20)
    )
    assert listed.completed
    (failed,) = _records(
        tracker.pod("MODIFIED", _finished(pods["failed"], "Failed", T0 + 4), T0 + 20)
    )
    assert not failed.completed
