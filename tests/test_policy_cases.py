"""Every test case kept beside the shipped policies, run through the same runner as `preemptguard test`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, cast

import jsonpatch
import pytest

from tests.conftest import POLICIES
from webhook.admission.core import judge
from webhook.cli.policy_tests import Case, load_cases, policy_dirs, run_case
from webhook.engine.policy import Policy
from webhook.loading.policies import load_policy

CASES = [
    pytest.param(policy_dir, case, id=f"{policy_dir.name}/{case.name}")
    for policy_dir in policy_dirs(POLICIES)
    for case in load_cases(policy_dir)
]


def test_every_policy_ships_cases() -> None:
    shipped = [p.name for p in policy_dirs(POLICIES)]
    assert shipped == ["aks-spot", "default", "eks-spot", "gke-spot", "karpenter-spot", "packing"]
    assert all(load_cases(POLICIES / name) for name in shipped)
    assert len(CASES) >= 30


@pytest.mark.parametrize(("policy_dir", "case"), CASES)
def test_policy_case(policy_dir: Path, case: Case) -> None:
    result = run_case(case, load_policy(policy_dir))
    assert result.failures == []


@pytest.mark.parametrize(
    ("expect", "failure"),
    [
        pytest.param({"class": "serving"}, "class: expected 'serving'", id="wrong-class"),
        pytest.param({"allowed": False}, "allowed: expected False", id="wrong-verdict"),
        pytest.param(
            {"warnings": ["no such text"]}, "warnings: none contains", id="missing-warning"
        ),
        pytest.param({"unchanged": True}, "expected no change", id="unexpected-patch"),
        pytest.param(
            {"patched": {"kind": "Pod"}}, "differs from spec.expect.patched", id="wrong-object"
        ),
        pytest.param(
            {"codes": ["too-many-terms"]}, "codes: 'too-many-terms' not found", id="missing-code"
        ),
    ],
)
def test_runner_reports_a_wrong_expectation(
    policy: Policy, expect: dict[str, Any], failure: str
) -> None:
    cases = (cast(Case, c.values[1]) for c in CASES)
    case = next(c for c in cases if c.name.startswith("interruptible-pod"))
    result = run_case(dataclasses.replace(case, expect=expect), policy)
    assert not result.passed
    assert any(failure in f for f in result.failures), result.failures


@pytest.mark.parametrize(("policy_dir", "case"), CASES)
def test_the_patch_makes_what_a_full_diff_makes(policy_dir: Path, case: Case) -> None:
    """The engine's patch descends only where the mutated copy differs by identity (fast);
    a full structural diff of the two objects (jsonpatch) must lead to the same object."""
    judged = judge(
        case.subject, load_policy(policy_dir), case.lookup, priority_classes=case.priority_classes
    )
    original, mutated = case.subject.obj, judged.decision.mutated
    full = jsonpatch.make_patch(original, mutated).patch
    assert jsonpatch.apply_patch(original, judged.patch) == jsonpatch.apply_patch(original, full)
    # A patch exactly when something changed: none for an object left as written.
    assert bool(judged.patch) == (original != mutated)
