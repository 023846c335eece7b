"""How a running pod's class is read for the reclaim observer and ``drill``."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import pod
from webhook.cluster.inventory import UNCLASSIFIED, pod_class
from webhook.engine.decision import NamespaceMeta, Obj
from webhook.engine.evaluation import PLACEMENT_ANNOTATION
from webhook.engine.policy import Policy
from webhook.loading.policies import builtin_policy

POLICY = builtin_policy()


def no_namespace(name: str) -> NamespaceMeta:
    return NamespaceMeta()


def recorded(name: str, record: str, **options: object) -> Obj:
    """A running pod whose placement record says ``record``."""
    found = pod(name, node_name="pre-1", **options)  # type: ignore[arg-type]
    found["metadata"]["annotations"][PLACEMENT_ANNOTATION] = record
    return found


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        # As admitted: the record and the policy agree.
        (pod("sweep", workload="interruptible", placed=True, policy=POLICY), "interruptible"),
        (pod("web", workload="serving", placed=True, policy=POLICY), "serving"),
        # No record: the class the policy gives now, or none.
        (pod("eval", workload="flexible"), "flexible"),
        (pod("plain"), UNCLASSIFIED),
        # The record stands where the policy gives nothing now (the class was taken off the
        # pod, or the policy's rules changed since it was placed)...
        (recorded("was-serving", "serving"), "serving"),
        (recorded("was-sweep", "interruptible"), "interruptible"),
        # ...and where the policy now gives a class as critical or less.
        (recorded("both-standard", "coordinator", workload="serving"), "coordinator"),
        (recorded("looser-now", "serving", workload="interruptible"), "serving"),
        # A record the policy does not know is no class.
        (recorded("unknown", "gold", workload="flexible"), "flexible"),
        (recorded("unknown-alone", "gold"), UNCLASSIFIED),
    ],
    ids=lambda v: v["metadata"]["name"] if isinstance(v, dict) else v,
)
def test_a_running_pod_is_reported_as_its_record_or_the_policy_says(
    obj: Obj, expected: str
) -> None:
    assert pod_class(obj, POLICY, no_namespace) == expected


def test_a_record_rewritten_after_admission_cannot_make_a_pod_less_critical() -> None:
    """Pod annotations can be changed after creation; the webhook does not see it. A serving
    pod whose record now says interruptible is still reported as serving (critical)."""
    rewritten = recorded("web", "interruptible", workload="serving")
    assert pod_class(rewritten, POLICY, no_namespace) == "serving"


def test_every_shipped_class_reads_back_from_its_own_record() -> None:
    policy: Policy = POLICY
    for name in policy.classes:
        assert pod_class(recorded(f"p-{name}", name), policy, no_namespace) == name
