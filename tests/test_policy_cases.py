"""Every test case kept beside the shipped policies, run through the same runner as `preemptguard test`."""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import POLICIES
from webhook.cli.policy_tests import load_cases, policy_dirs, run_case
from webhook.loading.policies import load_policy

CASES = [
    pytest.param(policy_dir, case, id=f"{policy_dir.name}/{case.name}")
    for policy_dir in policy_dirs(POLICIES)
    for case in load_cases(policy_dir)
]


def test_every_policy_ships_cases() -> None:
    assert [p.name for p in policy_dirs(POLICIES)] == ["default", "packing"]
    assert len(CASES) >= 30


@pytest.mark.parametrize(("policy_dir", "case"), CASES)
def test_policy_case(policy_dir, case) -> None:
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
def test_runner_reports_a_wrong_expectation(policy, expect, failure) -> None:
    case = next(c for c in CASES if c.values[1].name.startswith("interruptible-pod")).values[1]
    result = run_case(dataclasses.replace(case, expect=expect), policy)
    assert not result.passed
    assert any(failure in f for f in result.failures), result.failures
