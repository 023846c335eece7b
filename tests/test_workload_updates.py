"""Workload UPDATEs through the admission app, on the recorded serving Deployment that the
policy refuses: controllers and the garbage collector must still be able to scale it and to
remove its finalizers, while a changed template is judged again."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.conftest import REPO
from tests.server.asgi import AppClient
from webhook.loading.policies import builtin_policy
from webhook.server.app import create_app

RECORDED = (
    REPO / "tests" / "fixtures" / "admission-reviews" / "create-deployment-serve-validate.json"
)


def update_review(change: str) -> dict[str, Any]:
    review: dict[str, Any] = json.loads(RECORDED.read_text())
    request = review["request"]
    old = request["object"]
    new = copy.deepcopy(old)
    if change == "replicas":
        new["spec"]["replicas"] = 0
    elif change == "finalizer-removed-while-deleting":
        old["metadata"]["deletionTimestamp"] = "2026-12-03T07:00:00Z"
        old["metadata"]["finalizers"] = ["foregroundDeletion"]
        new["metadata"]["deletionTimestamp"] = "2026-12-03T07:00:00Z"
    elif change == "template":
        new["spec"]["template"]["metadata"]["labels"]["release"] = "2"
    request.update(operation="UPDATE", object=new, oldObject=old)
    return review


def answer(review: dict[str, Any]) -> dict[str, Any]:
    client = AppClient(create_app(builtin_policy))
    reply = client.post("/validate", json=review)
    assert reply.status_code == 200
    response: dict[str, Any] = reply.get_json()["response"]
    return response


def test_the_recorded_deployment_is_refused_on_create() -> None:
    response = answer(json.loads(RECORDED.read_text()))
    assert response["allowed"] is False
    assert "class serving must run on standard nodes" in response["status"]["message"]


@pytest.mark.parametrize("change", ["replicas", "finalizer-removed-while-deleting"])
def test_updates_that_keep_the_template_pass(change: str) -> None:
    response = answer(update_review(change))
    assert response == {"uid": response["uid"], "allowed": True}


def test_an_update_that_changes_the_template_is_judged_again() -> None:
    response = answer(update_review("template"))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
