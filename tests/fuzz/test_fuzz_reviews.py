"""Seeded fuzzing of the admission app: mutated reviews in, the oracle's rules out.

A few thousand cases with fixed seeds run here; ``benchmarks/fuzz.py`` runs as many as
wanted. A failure names its seed and case: ``python benchmarks/fuzz.py --seed S --case N
--show`` makes it again.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fuzz import known
from tests.fuzz.corpus import review_for
from tests.fuzz.mutators import (
    CLASSES,
    OBJECT_MUTATORS,
    REVIEW_MUTATORS,
    manifest_case,
    review_case,
)
from tests.fuzz.oracle import Reply, ReviewOracle
from tests.fuzz.runner import Report, ReviewRunner, describe

pytestmark = pytest.mark.slow

# (seed, cases): 3,000 reviews, each with its follow-ups.
CAMPAIGN = ((20261203, 1500), (7, 1500))
REPRODUCERS = Path(__file__).with_name("reproducers")


@pytest.fixture(scope="module")
def runner() -> Iterator[ReviewRunner]:
    with ReviewRunner() as r:
        yield r


@pytest.fixture(scope="module")
def campaign(runner: ReviewRunner) -> Report:
    report = Report()
    for seed, cases in CAMPAIGN:
        report.add(runner.run(seed, range(cases)))
    return report


def test_no_failures(campaign: Report) -> None:
    unknown = [f for f in campaign.found if known.match(f) is None]
    print(describe(campaign))
    set_aside = len(campaign.found) - len(unknown)
    print(f"{set_aside} failures of known bugs set aside (see tests/fuzz/known.py)")
    assert not unknown, "\n".join(str(f) for f in unknown[:50])


def test_every_outcome_is_reached(campaign: Report) -> None:
    """The mutations reach every kind of answer, not only the parser's refusals."""
    for outcome in ("bad-request", "allowed", "patched", "refused", "warned"):
        assert campaign.outcomes[outcome] >= 20, (outcome, campaign.outcomes)
    assert campaign.outcomes["patched"] >= campaign.cases // 30, campaign.outcomes


def test_every_mutation_is_applied(campaign: Report) -> None:
    names = {
        "wrong-type",
        "remove",
        "null",
        "deep",
        "huge-list",
        "huge-string",
        "annotation",
        "checkpoint",
        "big-number",
        "surrogate",
        "placement",
        "grace",
        "kind",
        "operation",
        "user",
        "subresource",
        "dryrun",
        "old",
        "envelope",
        "uid",
        "namespace",
        "duplicate",
        "body",
        "content-type",
        "class",
        "operator-labels",
    }
    assert len(OBJECT_MUTATORS) + len(REVIEW_MUTATORS) == 21
    missing = {n for n in names if campaign.mutations[n] < 10}
    assert not missing, campaign.mutations


def test_cases_are_made_again_alike() -> None:
    for index in (0, 17, 999):
        first, again = review_case(5, index), review_case(5, index)
        assert (first.body, first.hook, first.mutations) == (
            again.body,
            again.hook,
            again.mutations,
        )
    assert review_case(5, 1).body != review_case(6, 1).body
    # Alone or after others, in any order: no case leaves anything behind for the next.
    forward = [review_case(3, i).body for i in range(150)]
    assert [review_case(3, i).body for i in reversed(range(150))] == forward[::-1]
    cli_forward = [manifest_case(3, i).files for i in range(60)]
    assert [manifest_case(3, i).files for i in reversed(range(60))] == cli_forward[::-1]


# --- reproducers of what the fuzzer found ---------------------------------------------------


def _reproducers() -> list[Any]:
    reasons = known.reproducer_reasons()
    params = []
    for path in sorted(REPRODUCERS.glob("*--*.json")):
        if not path.name.startswith(("mutate--", "validate--")):
            continue
        marks = []
        if path.name in reasons:
            marks.append(pytest.mark.xfail(strict=True, reason=reasons[path.name]))
        params.append(pytest.param(path, marks=marks, id=path.stem))
    return params


@pytest.mark.parametrize("path", _reproducers())
def test_reproducer(runner: ReviewRunner, path: Path) -> None:
    """``<hook>--<what>.json``: a review body that once broke a rule, sent to its hook."""
    hook = path.name.split("--")[0]
    verdict = runner.judge(hook, path.read_bytes(), "application/json", warn_mode=False)
    assert not verdict.failures, [str(f) for f in verdict.failures]


def test_every_known_bug_has_its_reproducers() -> None:
    for name in known.reproducer_reasons():
        assert (REPRODUCERS / name).is_file(), name


# --- the oracle itself: it must catch what it is there to catch ------------------------------

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "api", "namespace": "team-a", "annotations": {}},
    "spec": {"containers": [{"name": "c", "image": "i"}]},
}


def _body(**changes: Any) -> bytes:
    pod = json.loads(json.dumps(POD))
    pod["metadata"]["annotations"].update(changes.pop("annotations", {}))
    pod["spec"].update(changes.pop("spec", {}))
    return json.dumps(review_for(pod, uid="u-1", **changes)).encode()


def _answer(allowed: bool = True, **response: Any) -> Reply:
    doc = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "u-1", "allowed": allowed, **response},
    }
    return Reply(200, "application/json", json.dumps(doc).encode(), 0.001)


def _patch(ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {"patch": base64.b64encode(json.dumps(ops).encode()).decode(), "patchType": "JSONPatch"}


def _checks(answers: list[Reply], body: bytes, hook: str = "mutate") -> list[str]:
    replies = iter(answers)
    verdict = ReviewOracle(lambda h, b, c: next(replies)).judge(hook, body)
    return [f.check for f in verdict.failures]


def test_oracle_wants_400_for_what_is_not_a_review() -> None:
    assert _checks([_answer()], b'{"kind": "AdmissionReview"}') == ["expected-400"]
    text = Reply(400, "text/plain", b"not a review\n", 0.001)
    assert _checks([text], b"[]") == []
    two_lines = Reply(400, "text/plain", b"not\na review\n", 0.001)
    assert _checks([two_lines], b"[]") == ["400-not-one-line"]


def test_oracle_refuses_errors_and_slowness() -> None:
    assert _checks([Reply(500, "text/plain", b"boom\n", 0.001)], _body()) == ["http-500"]
    late = Reply(200, "application/json", _answer().data, 3.5)
    assert _checks([late, late], _body()) == ["slow"]
    assert _checks([late, _answer()], _body()) == []  # slow once: measured again
    assert _checks([_answer(warnings=["w" * 1025])], _body()) == ["long-message"]
    assert _checks([_answer(False)], _body()) == ["refusal-without-message"]


def test_oracle_applies_the_patch_and_sends_it_again() -> None:
    add = [{"op": "add", "path": "/metadata/annotations/x", "value": "y"}]
    # Applies; the patched pod gets no patch again and is allowed by /validate.
    assert _checks([_answer(**_patch(add)), _answer(), _answer()], _body()) == []
    # Patches again: not idempotent.
    again = [_answer(**_patch(add)), _answer(**_patch(add)), _answer()]
    assert _checks(again, _body()) == ["not-idempotent"]
    # /validate refuses what /mutate made.
    refused = _answer(False, status={"message": "no"})
    assert _checks([_answer(**_patch(add)), _answer(), refused], _body()) == [
        "validate-refuses-patched"
    ]
    broken = [{"op": "replace", "path": "/spec/nope/x", "value": 1}]
    assert _checks([_answer(**_patch(broken))], _body()) == ["patch-does-not-apply"]


@pytest.mark.parametrize("workload", sorted(set(CLASSES) - {"interruptible", "flexible"}))
def test_oracle_keeps_standard_pods_off_preemptible_nodes(workload: str) -> None:
    asks = _body(
        annotations={"together.ai/workload": workload},
        spec={"nodeSelector": {"together.ai/compute-class": "preemptible"}},
    )
    assert _checks([_answer()], asks, "validate") == ["standard-pod-on-preemptible"]
    # Refused: nothing to check.
    assert _checks([_answer(False, status={"message": "no"})], asks, "validate") == []
    # In an excluded namespace, or a DaemonSet pod sent by the DaemonSet controller: left alone.
    excluded = json.loads(asks)
    excluded["request"]["namespace"] = "kube-system"
    assert _checks([_answer()], json.dumps(excluded).encode(), "validate") == []
    daemon = json.loads(asks)
    daemon["request"]["userInfo"]["username"] = (
        "system:serviceaccount:kube-system:daemon-set-controller"
    )
    daemon["request"]["object"]["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "1", "controller": True}
    ]
    assert _checks([_answer()], json.dumps(daemon).encode(), "validate") == []
    # The same claim from anyone else proves nothing.
    daemon["request"]["userInfo"]["username"] = "alice"
    assert _checks([_answer()], json.dumps(daemon).encode(), "validate") == [
        "standard-pod-on-preemptible"
    ]


def test_oracle_reads_node_affinity_as_the_scheduler_does() -> None:
    def terms(*exprs: dict[str, Any]) -> dict[str, Any]:
        required = {"nodeSelectorTerms": [{"matchExpressions": [e]} for e in exprs]}
        return {
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
            }
        }

    key = "together.ai/compute-class"
    serving = {"together.ai/workload": "serving"}
    off = terms({"key": key, "operator": "NotIn", "values": ["preemptible"]})
    assert _checks([_answer()], _body(annotations=serving, spec=off), "validate") == []
    either = terms(
        {"key": key, "operator": "NotIn", "values": ["preemptible"]},
        {"key": key, "operator": "Exists"},
    )
    assert _checks([_answer()], _body(annotations=serving, spec=either), "validate") == [
        "standard-pod-on-preemptible"
    ]
