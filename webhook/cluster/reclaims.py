"""Reclaims recognised, and what happened to each pod they displaced: no I/O, only the objects
the watches deliver and the time they arrive.

A **reclaim** of a preemptible node starts with the provider's ``TogetherPreempted`` Event on
the cordoned Node, or, without one, when the node is cordoned and a pod on it is being deleted
(or was seen going just before the cordon: ``CORDON_LAG_SECONDS``).
Only an Event written where events about Nodes are recorded (``default``) about the Node itself
(``v1``, no namespace, the node's current uid) is trusted: anyone may write Events in their own
namespace, and an Event's times are the writer's to choose, so its time is kept within the
node's cordon and the window (``bounded_start``). Every pod
on the node then is **displaced** (DaemonSet and mirror pods belong to the node and are left
out): its SIGTERM is when its deletion was seen (or, read after the fact, its
``deletionTimestamp`` minus ``deletionGracePeriodSeconds``), or the reclaim's start for a pod the
provider stops without deleting it. Its **outcome** is decided once:

- ``exited-in-time``: gone (or finished) within its grace period;
- ``grace-expired``: still running when its grace period ran out (decided when it is gone,
  or ``GRACE_SLACK`` after the deadline if it never goes);
- ``lost-with-node``: the node was removed while the pod was still inside its grace period.

A pod that finished its work after the reclaim began (phase ``Succeeded``) is also recorded as
**completed** during the reclaim. Every pod of the node that was there when the reclaim began
(or is being deleted) and has not finished is to be given the ``DisruptionTarget`` condition
(``Disruption``), once per reclaim, as soon as the reclaim is recognised.

Each reclaim and each outcome carries a key (the node's uid, whichever of the Event or the
cordon shows the reclaim first; the pod's uid) that the observer turns into idempotent writes,
so a restarted or newly elected observer that sees the same reclaim again, in whatever order,
does not count it twice. The provider removes a reclaimed node, so its uid names one reclaim.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from webhook.cluster import disruption, inventory
from webhook.cluster.inventory import PREEMPTIBLE, NodeFacts, OwnerRef
from webhook.engine.decision import Obj
from webhook.engine.policy import Policy
from webhook.engine.workloads import mapping_at
from webhook.kube.clock import parse_time

PREEMPTED_REASON = "TogetherPreempted"
# Where Events about Nodes (cluster-scoped) are recorded, as the kubelet and kubectl put them.
NODE_EVENT_NAMESPACE = "default"
WINDOW_SECONDS = 300
# A pod still there this long after its grace ran out is recorded without an exit time.
GRACE_SLACK = 30.0
# A TogetherPreempted Event older than this starts nothing (its node is long gone).
STALE_EVENT_SECONDS = WINDOW_SECONDS + 300
# The provider cordons and writes its Event together; the watches may deliver them in either
# order, so an Event on a node not cordoned yet waits this long for the cordon.
CORDON_WAIT_SECONDS = 60.0
# Event times are whole seconds, and a cordon is seen a moment after it happens: an Event may
# say it came this much before the cordon was seen.
CORDON_SLACK = 2.0
# The provider cordons a node, then deletes its pods; the watches of pods and of nodes may
# deliver the deletions first (each watch has a thread of its own), by a moment.
CORDON_LAG_SECONDS = 3.0
# How long an ignored Event's uid is remembered, so that it is reported once (the API server
# keeps Events an hour by default).
IGNORED_MEMORY_SECONDS = 3600.0
TERMINAL_PHASES = ("Succeeded", "Failed")


class Outcome(enum.StrEnum):
    EXITED_IN_TIME = "exited-in-time"
    GRACE_EXPIRED = "grace-expired"
    LOST_WITH_NODE = "lost-with-node"


class Trigger(enum.StrEnum):
    EVENT = "event"  # the TogetherPreempted Event
    CORDON = "cordon"  # a cordoned preemptible node whose pods are being deleted


@dataclass(frozen=True, kw_only=True)
class Reclaim:
    node: str
    key: str
    trigger: Trigger
    started: float


@dataclass(frozen=True, kw_only=True)
class Displaced:
    """A pod a reclaim displaced, as it was when its SIGTERM came."""

    uid: str
    namespace: str
    name: str
    node: str
    workload_class: str
    grace: int
    checkpoint: int | None
    sigterm: float
    # Whether ``sigterm`` is the pod's own deletion (else the reclaim's start, until it is).
    deleted: bool
    owner: OwnerRef | None
    reclaim: str
    # When the reclaim that displaced it began.
    began: float


@dataclass(frozen=True, kw_only=True)
class Record:
    """A displaced pod's outcome; ``seconds`` from SIGTERM to its exit (None: not seen to exit).
    ``standing``: decided while the pod was still there and not deleted, so a later reclaim of
    its node may judge it again (by its deletion). ``completed``: it succeeded (exit 0) after
    the reclaim began."""

    pod: Displaced
    outcome: Outcome
    seconds: float | None
    at: float
    standing: bool = False
    completed: bool = False

    def completed_message(self) -> str:
        p = self.pod
        after = f"{self.seconds:.0f} s after SIGTERM" if self.seconds is not None else "after"
        return (
            f"pod {p.name} ({p.workload_class}) on preemptible node {p.node} completed "
            f"successfully during the node's reclaim ({after}): its work was done before the "
            "node went, so it is not run again"
        )

    def message(self) -> str:
        p = self.pod
        checkpoint = (
            f"declared checkpoint {p.checkpoint} s"
            if p.checkpoint is not None
            else "no checkpoint declared"
        )
        who = f"pod {p.name} ({p.workload_class}) on preemptible node {p.node}"
        if self.outcome is Outcome.EXITED_IN_TIME:
            assert self.seconds is not None
            return (
                f"{who} exited {self.seconds:.0f} s after SIGTERM, checkpoint budget "
                f"{p.grace} s ({checkpoint})"
            )
        if self.outcome is Outcome.LOST_WITH_NODE:
            assert self.seconds is not None
            return (
                f"{who} was lost with the node {self.seconds:.0f} s after SIGTERM, still "
                f"inside its {p.grace} s grace period ({checkpoint})"
            )
        gone = (
            f"gone {self.seconds:.0f} s after SIGTERM"
            if self.seconds is not None
            else f"still there {self.at - p.sigterm:.0f} s after SIGTERM"
        )
        return (
            f"{who} was still running when its {p.grace} s grace period ran out ({gone}): "
            f"it was killed before it finished ({checkpoint})"
        )


@dataclass(frozen=True, kw_only=True)
class ReclaimSeen:
    """A reclaim recognised, with the pods it had displaced by then (more may follow)."""

    reclaim: Reclaim
    displaced: int


@dataclass(frozen=True, kw_only=True)
class Disruption:
    """A pod of a node being reclaimed, not finished when last seen: to be given the
    ``DisruptionTarget`` condition before it exits."""

    uid: str
    namespace: str
    name: str
    node: str
    reclaim: str


@dataclass(frozen=True, kw_only=True)
class EventIgnored:
    """A ``TogetherPreempted`` Event not trusted to start a reclaim, and why (told once)."""

    uid: str
    namespace: str
    name: str
    node: str
    why: str


Action = ReclaimSeen | Record | Disruption | EventIgnored
Classifier = Callable[[Obj], str]


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSeen:
    """A pod as one list or watch event showed it, read into what the tracker uses, so that the
    decoded object is dropped as it arrives: tens of thousands of objects held for hours among
    the watches' passing buffers fragment the C heap, and the process grows with nothing more
    held. ``node``: empty when not bound."""

    uid: str
    namespace: str
    name: str
    node: str
    created: float | None
    workload_class: str
    own_grace: int  # its spec's termination grace period
    checkpoint: int | None
    owner: OwnerRef | None
    the_nodes_own: bool  # a DaemonSet's or a mirror pod: it stays with the node
    phase: str
    marked: bool  # it carries ``DisruptionTarget``
    containers_finished: float | None
    deletion_deadline: float | None  # its ``deletionTimestamp``
    deletion_grace: int

    @classmethod
    def read(cls, obj: Obj, classify: Classifier) -> PodSeen:
        meta = inventory.meta_of(obj)
        return cls(
            uid=inventory.uid_of(obj),
            namespace=sys.intern(inventory.namespace_of(obj)),
            name=inventory.name_of(obj),
            node=sys.intern(inventory.node_name_of(obj) or ""),
            created=created_time(obj),
            workload_class=sys.intern(classify(obj)),
            own_grace=inventory.grace_seconds(obj),
            checkpoint=inventory.checkpoint_seconds(obj),
            owner=inventory.controller_ref(obj),
            the_nodes_own=inventory.is_daemonset_pod(obj) or inventory.is_mirror_pod(obj),
            phase=sys.intern(inventory.phase_of(obj)),
            marked=disruption.marked(obj),
            containers_finished=containers_finished(obj),
            deletion_deadline=parse_time(meta.get("deletionTimestamp")),
            deletion_grace=_deletion_grace(obj),
        )

    @property
    def done(self) -> bool:
        """Succeeded or Failed."""
        return self.phase in TERMINAL_PHASES

    def deletion_started(self, *, live: bool, now: float) -> float | None:
        """When its deletion (its SIGTERM) began: ``now`` when the change is seen live, else
        ``deletionTimestamp - deletionGracePeriodSeconds`` (whole seconds)."""
        if self.deletion_deadline is None:
            return None
        return now if live else self.deletion_deadline - self.deletion_grace


@dataclass(slots=True)
class TrackedPod:
    """A pod of a preemptible node the tracker follows: as last seen, and what its changes
    told."""

    last: PodSeen
    # When its SIGTERM came, if it has: seen live, or read from the object.
    deleting_since: float | None = None
    grace: int = 0
    # When it was seen to finish (Succeeded or Failed), if that was seen live.
    finished: float | None = None

    @property
    def node(self) -> str:
        return self.last.node


@dataclass(frozen=True)
class _Preempted:
    """A trusted ``TogetherPreempted`` Event: its uid, the node uid it names (may be empty),
    when it says it happened (never later than when it was seen) and when it was seen."""

    uid: str
    node_uid: str
    at: float
    seen: float


@dataclass
class Tracker:
    """The state of every preemptible node and its pods, fed by watch events in order."""

    policy: Policy
    classify: Classifier
    event_namespace: str = NODE_EVENT_NAMESPACE
    nodes: dict[str, NodeFacts] = field(default_factory=dict)
    pods: dict[str, TrackedPod] = field(default_factory=dict)
    reclaims: dict[str, Reclaim] = field(default_factory=dict)
    displaced: dict[str, Displaced] = field(default_factory=dict)
    # Pods judged, not judged again while they are there; ``standing`` holds those judged
    # without their deletion (node name by uid), judged again in a later reclaim of the node.
    decided: set[str] = field(default_factory=set)
    standing: dict[str, str] = field(default_factory=dict)
    # reclaim key -> pods it displaced so far
    tally: dict[str, int] = field(default_factory=dict)
    # node name -> the latest trusted TogetherPreempted Event naming it
    preempted: dict[str, _Preempted] = field(default_factory=dict)
    # node name -> when it was seen being cordoned (absent: not seen, e.g. listed cordoned)
    cordoned: dict[str, float] = field(default_factory=dict)
    # uid -> when, of the Events ignored (each is told once)
    ignored: dict[str, float] = field(default_factory=dict)
    # Pods of preemptible nodes that went before any reclaim of their node was known, and
    # when: a reclaim learnt of later (a watch that broke and was listed again, the Event
    # arriving after the deletions) still counts them.
    gone: dict[str, tuple[TrackedPod, float]] = field(default_factory=dict)
    # Pods already handed out as a ``Disruption`` by the open reclaim of their node.
    disrupted: set[str] = field(default_factory=set)

    # --- nodes ------------------------------------------------------------------------------

    def node(self, kind: str, obj: Obj, now: float, *, live: bool = True) -> list[Action]:
        """A node as a watch delivers it; ``live``: as it changed (not read again in a list, where
        a cordon may be long past)."""
        facts = inventory.node_facts(obj, self.policy)
        if kind == "DELETED":
            self.nodes.pop(facts.name, None)
            return self._node_gone(facts.name, now)
        before = self.nodes.get(facts.name)
        self.nodes[facts.name] = facts
        if not facts.unschedulable or (before is not None and before.uid != facts.uid):
            self.cordoned.pop(facts.name, None)
        elif before is not None and not before.unschedulable:
            if live:
                self.cordoned[facts.name] = now
            else:
                self.cordoned.pop(facts.name, None)
            if facts.name not in self.preempted:
                return self._open_by_earlier_deletions(facts, now)
        if facts.unschedulable and facts.name in self.preempted:
            return self._open_by_event(facts.name, now)
        return []

    def _open_by_earlier_deletions(self, facts: NodeFacts, now: float) -> list[Action]:
        """The cordon of a node whose pods were seen going just before it: the deletions'
        watch delivered first what the provider did after the cordon."""
        if facts.name in self.reclaims:
            return []
        recent = now - CORDON_LAG_SECONDS
        since = [v.deleting_since for v in self.pods.values()
                 if v.node == facts.name and v.deleting_since is not None
                 and v.deleting_since >= recent]  # fmt: skip
        since += [at for v, at in self.gone.values() if v.node == facts.name and at >= recent]
        if not since:
            return []
        reclaim = Reclaim(node=facts.name, key=facts.uid or facts.name,
                          trigger=Trigger.CORDON, started=min(since))  # fmt: skip
        return self._open(reclaim, now)

    def replace_nodes(self, objs: Iterable[Obj], now: float) -> list[Action]:
        """A fresh list of every node: those missing from it are gone."""
        listed = {inventory.name_of(o): o for o in objs}
        actions: list[Action] = []
        for name in [n for n in self.nodes if n not in listed]:
            del self.nodes[name]
            actions += self._node_gone(name, now)
        for obj in listed.values():
            actions += self.node("MODIFIED", obj, now, live=False)
        return actions

    def _node_gone(self, name: str, now: float) -> list[Action]:
        actions: list[Action] = []
        for uid in [u for u, d in self.displaced.items() if d.node == name]:
            pod = self.displaced[uid]
            elapsed = now - pod.sigterm
            if elapsed <= pod.grace:
                actions.append(self._decide(uid, Outcome.LOST_WITH_NODE, elapsed, now))
            else:
                actions.append(self._decide(uid, Outcome.GRACE_EXPIRED, None, now))
        self._close(name)
        self.preempted.pop(name, None)
        self.cordoned.pop(name, None)
        for uid in [u for u, p in self.pods.items() if p.node == name]:
            del self.pods[uid]
            self.decided.discard(uid)
            self.disrupted.discard(uid)
        for uid in [u for u, (p, _) in self.gone.items() if p.node == name]:
            del self.gone[uid]
        return actions

    def _close(self, name: str) -> None:
        """The reclaim of node ``name`` is over: what was judged without its deletion may be
        judged again by a later one."""
        reclaim = self.reclaims.pop(name, None)
        if reclaim is not None:
            self.tally.pop(reclaim.key, None)
        for uid in [u for u, n in self.standing.items() if n == name]:
            del self.standing[uid]
            self.decided.discard(uid)
        for uid in [u for u in self.disrupted if u not in self.pods or self.pods[u].node == name]:
            self.disrupted.discard(uid)

    # --- the provider's Event ---------------------------------------------------------------

    def preempted_event(self, obj: Obj, now: float) -> list[Action]:
        involved = mapping_at(obj, "involvedObject")
        if obj.get("reason") != PREEMPTED_REASON or involved.get("kind") != "Node":
            return []
        uid = inventory.uid_of(obj)
        if not uid or uid in self.ignored:
            return []
        name = str(involved.get("name") or "")
        why = untrusted(obj, self.event_namespace)
        at = event_time(obj)
        if why is None and at is not None and now - at > STALE_EVENT_SECONDS:
            why = f"it is {now - at:.0f} s old, past the {WINDOW_SECONDS} s reclaim window"
        if why is not None:
            return self._ignore(obj, name, why, now)
        seen = self.preempted.get(name)
        if seen is not None and seen.uid == uid:
            return []  # the same Event again (a relist, a count bump)
        at = min(at if at is not None else now, now)  # an Event from the future starts now
        node_uid = str(involved.get("uid") or "")
        self.preempted[name] = _Preempted(uid=uid, node_uid=node_uid, at=at, seen=now)
        return self._open_by_event(name, now)

    def _open_by_event(self, name: str, now: float) -> list[Action]:
        """Open the reclaim the node's trusted Event announces once the node is cordoned (the
        provider cordons it at once): until then the Event waits ``CORDON_WAIT_SECONDS``."""
        if name in self.reclaims:
            del self.preempted[name]
            return []  # already open (its cordon came first): one reclaim, one key
        event, node = self.preempted[name], self.nodes.get(name)
        if node is None or not node.unschedulable:
            return []
        del self.preempted[name]
        if now - event.seen > CORDON_WAIT_SECONDS:
            return []  # the node was cordoned long after the Event: not this reclaim
        why = None
        if node.compute_class != PREEMPTIBLE:
            why = f"node {name} is not preemptible"
        elif event.node_uid and event.node_uid != node.uid:
            why = f"it names node uid {event.node_uid}, but node {name} is {node.uid}"
        if why is not None:
            return [self._ignored(event.uid, self.event_namespace, "", name, why, now)]
        started = bounded_start(event.at, now, self.cordoned.get(name))
        reclaim = Reclaim(node=name, key=node.uid or name, trigger=Trigger.EVENT, started=started)
        return self._open(reclaim, now)

    def _ignore(self, obj: Obj, node: str, why: str, now: float) -> list[Action]:
        uid, meta = inventory.uid_of(obj), inventory.meta_of(obj)
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        return [self._ignored(uid, namespace, name, node, why, now)]

    def _ignored(
        self, uid: str, namespace: str, name: str, node: str, why: str, now: float
    ) -> EventIgnored:
        self.ignored[uid] = now
        return EventIgnored(uid=uid, namespace=namespace, name=name, node=node, why=why)

    # --- pods -------------------------------------------------------------------------------

    def read(self, obj: Obj | PodSeen) -> PodSeen:
        """``obj`` read into what the tracker uses (as it is, when it was read already)."""
        return obj if isinstance(obj, PodSeen) else PodSeen.read(obj, self.classify)

    def pod(self, kind: str, obj: Obj | PodSeen, now: float) -> list[Action]:
        """A pod as a watch delivers it (the object, or what ``read`` made of it)."""
        seen = self.read(obj)
        if not seen.uid:
            return []
        if kind == "DELETED":
            view = self.pods.get(seen.uid)
            if view is not None:
                view.last = seen
            return self._went(seen.uid, now)
        facts = self.nodes.get(seen.node)
        if facts is None or facts.compute_class != PREEMPTIBLE or seen.the_nodes_own:
            return []
        known = self.pods.get(seen.uid)
        if known is None:
            view = self.pods[seen.uid] = TrackedPod(seen)
        else:
            view = known
            if view.finished is None and seen.done and not view.last.done:
                view.finished = now
            view.last = seen
        if view.deleting_since is None:
            since = seen.deletion_started(live=known is not None, now=now)
            if since is not None:
                view.deleting_since, view.grace = since, seen.deletion_grace
        return self._consider(seen.uid, view, now)

    def replace_pods(self, objs: Iterable[Obj | PodSeen], now: float) -> list[Action]:
        """A fresh list of every pod: those missing from it are gone (since the last watch)."""
        listed = {seen.uid: seen for seen in map(self.read, objs)}
        actions: list[Action] = []
        for uid in [u for u in self.pods if u not in listed]:
            actions += self._went(uid, now)
        for uid in [u for u in self.displaced if u not in listed and u not in self.pods]:
            actions.append(self._exited(uid, now))
        for seen in listed.values():
            actions += self.pod("MODIFIED", seen, now)
        return actions

    def _went(self, uid: str, now: float) -> list[Action]:
        """The pod ``uid`` is gone (its facts as last seen in ``pods``, if it was tracked)."""
        view = self.pods.pop(uid, None)
        self.disrupted.discard(uid)
        if uid in self.displaced:
            return [self._exited(uid, now, view)]
        if view is not None and uid not in self.decided:
            self.gone[uid] = (view, now)
        self.decided.discard(uid)
        self.standing.pop(uid, None)
        return []

    def _consider(self, uid: str, view: TrackedPod, now: float) -> list[Action]:
        actions: list[Action] = []
        node = view.node
        facts = self.nodes[node]
        reclaim = self.reclaims.get(node)
        if reclaim is None and view.deleting_since is not None and facts.unschedulable:
            # Keyed as the provider's Event would key it: whichever is seen first, one key.
            reclaim = Reclaim(node=node, key=facts.uid or facts.name,
                              trigger=Trigger.CORDON, started=view.deleting_since)  # fmt: skip
            actions += self._open(reclaim, now)
        if reclaim is None:
            return actions
        actions += self._disruption(uid, view, reclaim)
        if uid in self.decided:
            return actions
        current = self.displaced.get(uid)
        if current is None:
            if not self._displaced_by(view, reclaim):
                return actions
            current = self.displaced[uid] = self._displace(uid, view, reclaim)
            self.tally[reclaim.key] = self.tally.get(reclaim.key, 0) + 1
        elif not current.deleted and view.deleting_since is not None:
            # The provider's Event came first; the pod's own deletion is its SIGTERM.
            self.displaced[uid] = current = replace(
                current, sigterm=view.deleting_since, deleted=True, grace=view.grace
            )
        if view.last.done:
            actions.append(self._exited(uid, now, view))
        return actions

    @staticmethod
    def _displaced_by(view: TrackedPod, reclaim: Reclaim) -> bool:
        """Being deleted, or there when the provider's reclaim began (it stops every pod)."""
        if view.deleting_since is not None:
            return True
        return reclaim.trigger is Trigger.EVENT and (view.last.created or 0) <= reclaim.started

    def _disruption(self, uid: str, view: TrackedPod, reclaim: Reclaim) -> list[Action]:
        """The pod to mark, once per reclaim: not finished, and being deleted or there when the
        reclaim began (whatever revealed it: every pod of the node is stopped)."""
        seen = view.last
        if uid in self.disrupted or seen.done:
            return []
        if view.deleting_since is None and (seen.created or 0) > reclaim.started:
            return []
        self.disrupted.add(uid)
        return [Disruption(uid=uid, namespace=seen.namespace, name=seen.name, node=seen.node,
                           reclaim=reclaim.key)]  # fmt: skip

    def _displace(
        self, uid: str, view: TrackedPod, reclaim: Reclaim, *, went: bool = False
    ) -> Displaced:
        if view.deleting_since is not None:
            sigterm, deleted, grace = view.deleting_since, True, view.grace
        else:
            sigterm, deleted, grace = reclaim.started, went, view.last.own_grace
        seen = view.last
        return Displaced(
            uid=uid,
            namespace=seen.namespace,
            name=seen.name,
            node=seen.node,
            workload_class=seen.workload_class,
            grace=grace,
            checkpoint=seen.checkpoint,
            sigterm=sigterm,
            deleted=deleted,
            owner=seen.owner,
            reclaim=reclaim.key,
            began=reclaim.started,
        )

    def _open(self, reclaim: Reclaim, now: float) -> list[Action]:
        self.reclaims[reclaim.node] = reclaim
        actions: list[Action] = []
        for uid, view in list(self.pods.items()):
            if view.node == reclaim.node:
                actions += self._consider(uid, view, now)
        late: list[Action] = []
        for uid, (view, at) in list(self.gone.items()):
            # Event times are whole seconds: a pod gone within that second counts too.
            if view.node != reclaim.node or at < reclaim.started - 1:
                continue
            del self.gone[uid]
            # It went while its node was being reclaimed: its SIGTERM was the reclaim's.
            self.displaced[uid] = self._displace(uid, view, reclaim, went=True)
            self.tally[reclaim.key] = self.tally.get(reclaim.key, 0) + 1
            late.append(self._exited(uid, at, view))
        seen = ReclaimSeen(reclaim=reclaim, displaced=self.tally.get(reclaim.key, 0))
        return [seen, *actions, *late]

    def displaced_so_far(self, seen: ReclaimSeen) -> int:
        """The pods the reclaim ``seen`` has displaced by now (more than when it was seen, once
        the pods that were being listed are known)."""
        return max(self.tally.get(seen.reclaim.key, 0), seen.displaced)

    # --- outcomes ---------------------------------------------------------------------------

    def _exited(self, uid: str, now: float, last: TrackedPod | None = None) -> Record:
        """The pod ``uid`` is gone or finished; ``last``: its facts as last seen, for whether
        it completed."""
        pod = self.displaced[uid]
        elapsed = max(now - pod.sigterm, 0.0)
        outcome = Outcome.EXITED_IN_TIME if round(elapsed) <= pod.grace else Outcome.GRACE_EXPIRED
        completed = last is not None and completed_since(last, pod.began)
        return self._decide(uid, outcome, elapsed, now, completed=completed)

    def _decide(
        self,
        uid: str,
        outcome: Outcome,
        seconds: float | None,
        now: float,
        *,
        standing: bool = False,
        completed: bool = False,
    ) -> Record:
        pod = self.displaced.pop(uid)
        if uid in self.pods:
            self.decided.add(uid)
            if standing:
                # Judged while still there and never deleted (the provider's Event came and
                # the pod did not go): only this reclaim is done with it; a later reclaim of
                # the node judges it again, by its deletion.
                self.standing[uid] = pod.node
        return Record(pod=pod, outcome=outcome, seconds=seconds, at=now, standing=standing,
                      completed=completed)  # fmt: skip

    def _standing(self, uid: str) -> bool:
        """Still there, not being deleted and not finished."""
        view = self.pods.get(uid)
        return view is not None and view.deleting_since is None and not view.last.done

    def tick(self, now: float) -> list[Action]:
        """Pods past their grace and then some, and reclaims with nothing left to watch."""
        actions: list[Action] = []
        for uid, pod in list(self.displaced.items()):
            if now - pod.sigterm > pod.grace + GRACE_SLACK:
                standing = self._standing(uid)
                actions.append(
                    self._decide(uid, Outcome.GRACE_EXPIRED, None, now, standing=standing)
                )
        for uid, (_, at) in list(self.gone.items()):
            if now - at > STALE_EVENT_SECONDS:
                del self.gone[uid]
        for name, event in list(self.preempted.items()):
            if now - event.seen > STALE_EVENT_SECONDS:
                del self.preempted[name]
        for uid, at in list(self.ignored.items()):
            if now - at > IGNORED_MEMORY_SECONDS:
                del self.ignored[uid]
        for name, reclaim in list(self.reclaims.items()):
            facts = self.nodes.get(name)
            busy = any(d.node == name for d in self.displaced.values())
            over = now - reclaim.started > WINDOW_SECONDS + GRACE_SLACK
            if not busy and (facts is None or not facts.unschedulable or over):
                self._close(name)
        return actions


def untrusted(event: Obj, namespace: str) -> str | None:
    """Why a ``TogetherPreempted`` Event cannot be the provider's (None: it can be): Events
    about a Node are written in ``namespace`` (``default``), which tenants cannot write to,
    and name the core Node, which has no namespace."""
    written_in = inventory.namespace_of(event)
    if written_in != namespace:
        return (
            f"it was written in namespace {written_in or '(none)'}, not {namespace} "
            "where events about Nodes are recorded"
        )
    involved = mapping_at(event, "involvedObject")
    api_version = str(involved.get("apiVersion") or "")
    if api_version not in ("", "v1"):
        return f"it is about a {api_version} Node, not a v1 (core) Node"
    involved_namespace = str(involved.get("namespace") or "")
    if involved_namespace not in ("", NODE_EVENT_NAMESPACE, namespace):
        return f"it names namespace {involved_namespace}, and Nodes have none"
    if not involved.get("name"):
        return "it names no node"
    return None


def bounded_start(claimed: float, now: float, cordoned: float | None) -> float:
    """When a reclaim an Event announces began: the Event's own time, which its writer chose,
    kept within what was seen: not after now, not before the node's cordon (when it was seen),
    not longer ago than the window (the provider removes the node by then)."""
    floor = now - WINDOW_SECONDS
    if cordoned is not None:
        floor = max(floor, cordoned - CORDON_SLACK)
    return min(max(claimed, floor), now)


def _deletion_grace(obj: Obj) -> int:
    value = inventory.meta_of(obj).get("deletionGracePeriodSeconds")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return inventory.grace_seconds(obj)


def completed_since(pod: TrackedPod, began: float) -> bool:
    """Whether ``pod`` succeeded after ``began``: by when its containers say they finished,
    else when it was seen to finish. Times are whole seconds."""
    if pod.last.phase != "Succeeded":
        return False
    finished = pod.last.containers_finished
    if finished is None:
        finished = pod.finished
    return finished is not None and finished >= began - 1


def containers_finished(pod: Obj) -> float | None:
    """When the last of the pod's containers finished, when every one says it has."""
    statuses = mapping_at(pod, "status").get("containerStatuses")
    times: list[float] = []
    for status in statuses if isinstance(statuses, list) else []:
        finished = parse_time(mapping_at(status, "state", "terminated").get("finishedAt"))
        if finished is None:
            return None
        times.append(finished)
    return max(times, default=None)


def created_time(obj: Obj) -> float | None:
    return parse_time(inventory.meta_of(obj).get("creationTimestamp"))


def event_time(obj: Obj) -> float | None:
    """When an Event says it happened (first occurrence)."""
    for key in ("firstTimestamp", "eventTime", "lastTimestamp"):
        found = parse_time(obj.get(key))
        if found is not None:
            return found
    return created_time(obj)
