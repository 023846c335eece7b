"""The ``DisruptionTarget`` condition written to a pod's status (``disruption.mark``): that one
condition added or replaced, the others kept, the same pod only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.cluster.conftest import T0, pod
from tests.cluster.fake_apiserver import FakeApiServer
from webhook.cluster import disruption
from webhook.kube.access import Access
from webhook.kube.client import Cluster, ClusterError

Obj = dict[str, Any]
READY = {"type": "Ready", "status": "True", "lastTransitionTime": "2030-03-17T17:46:40Z"}


def _stored(fake: FakeApiServer) -> Obj:
    found = fake.get("Pod", "job-x", "team")
    assert found is not None
    return found


def test_the_condition_is_added_beside_the_others_and_written_again_stays_one(
    fake: FakeApiServer, connect: Callable[[], Cluster]
) -> None:
    stored = fake.put(pod("job-x", node_name="pre-1"))
    fake.modify("Pod", "job-x", "team", status={"conditions": [READY]})
    cluster = connect()
    message = disruption.reclaim_message("pre-1", 300)
    uid = stored["metadata"]["uid"]
    disruption.mark(cluster, "team", "job-x", uid, message, T0)
    disruption.mark(cluster, "team", "job-x", uid, message, T0 + 5)
    conditions = _stored(fake)["status"]["conditions"]
    assert conditions == [
        READY,
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptibleNodeReclaimed",
            "message": "preemptible node pre-1 is being reclaimed by its provider: the pod is "
            "stopped and the node removed within 300 s",
            "lastTransitionTime": "2030-03-17T17:46:45Z",
        },
    ]
    assert disruption.marked(_stored(fake))
    assert _stored(fake)["status"]["phase"] == "Running"
    assert cluster.calls == {Access("", "pods/status", "patch")}


def test_a_pod_that_took_the_name_is_not_marked_in_its_place(
    fake: FakeApiServer, connect: Callable[[], Cluster]
) -> None:
    planned = fake.put(pod("job-x", node_name="pre-1"))
    fake.remove("Pod", "job-x", "team")
    fake.put(pod("job-x", node_name="std-1"))  # a StatefulSet's pod, made again
    with pytest.raises(ClusterError) as raised:
        disruption.mark(connect(), "team", "job-x", planned["metadata"]["uid"], "m", T0)
    assert raised.value.conflict
    assert not disruption.marked(_stored(fake))


def test_marked_reads_the_condition_whoever_wrote_it() -> None:
    evicted = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    assert disruption.marked({"status": {"conditions": [READY, evicted]}})
    assert not disruption.marked({"status": {"conditions": [{**evicted, "status": "False"}]}})
    assert not disruption.marked({"status": {"conditions": "not a list"}})
    assert not disruption.marked({})
