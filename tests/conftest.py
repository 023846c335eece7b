from __future__ import annotations

from pathlib import Path

import pytest

from webhook.engine.policy import Policy
from webhook.loading.policies import builtin_policy

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
POLICIES = REPO / "policies"


@pytest.fixture(scope="session")
def policy() -> Policy:
    return builtin_policy()
