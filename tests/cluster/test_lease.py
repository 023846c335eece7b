"""Leader election on a Lease: one holder at a time, take-over only after the Lease went
unrenewed for its duration (by the candidate's own clock), a clean hand-over at shutdown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from tests.cluster.conftest import FakeClock
from tests.cluster.fake_apiserver import FakeApiServer
from webhook.kube.client import Cluster, ClusterError
from webhook.kube.lease import WARN_EVERY_SECONDS, LeaderElector, LeaseSettings

SETTINGS = LeaseSettings(namespace="preemptguard-system")


def test_one_candidate_leads_and_the_other_takes_over_only_after_the_lease_expires(
    fake: FakeApiServer, connect: Callable[[], Cluster], clock: FakeClock
) -> None:
    a = LeaderElector(connect(), SETTINGS, "a", clock)
    b = LeaderElector(connect(), SETTINGS, "b", clock)
    assert a.step() is True
    assert b.step() is False
    lease = fake.get("Lease", "preemptguard-observer", "preemptguard-system")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseTransitions"] == 0
    # a renews; b keeps seeing a fresh record and stays a follower.
    for _ in range(10):
        clock.sleep(2)
        assert a.step() is True
        assert b.step() is False
    # a goes silent: b waits a whole duration from when it last saw the record change.
    clock.sleep(14)
    assert b.step() is False
    clock.sleep(2)
    assert b.step() is True
    lease = fake.get("Lease", "preemptguard-observer", "preemptguard-system")
    assert lease is not None
    assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseTransitions"]) == ("b", 1)
    # a comes back: b's renewals keep it out.
    assert a.step() is False


def test_two_candidates_racing_for_a_free_lease_never_both_win(
    fake: FakeApiServer, connect: Callable[[], Cluster], clock: FakeClock
) -> None:
    a = LeaderElector(connect(), SETTINGS, "a", clock)
    b = LeaderElector(connect(), SETTINGS, "b", clock)
    assert a.step() is True
    a.release()
    # Both see the released (empty) Lease; the second write is refused (stale resourceVersion).
    lease = fake.get("Lease", "preemptguard-observer", "preemptguard-system")
    assert lease is not None
    assert lease["spec"].get("holderIdentity") is None
    a_view = a.cluster.get(a._path)
    assert b.step() is True
    a_view["spec"]["holderIdentity"] = "a"
    results = []
    try:
        a.cluster.update(a._path, a_view)
        results.append("a")
    except Exception:  # noqa: BLE001
        results.append("refused")
    assert results == ["refused"]
    assert a.step() is False


def test_a_leader_that_cannot_reach_the_api_server_steps_down_after_the_renew_deadline(
    fake: FakeApiServer, connect: Callable[[], Cluster], clock: FakeClock
) -> None:
    a = LeaderElector(connect(), SETTINGS, "a", clock)
    assert a.step() is True
    fake.close()
    clock.sleep(5)
    assert a.step() is True  # inside the renew deadline
    clock.sleep(6)
    assert a.step() is False


class _Refusing:
    """A client of the fake API server whose Lease calls are refused with ``status`` until
    ``granted``, as an API server refuses a service account without the Role."""

    def __init__(self, cluster: Cluster, status: int) -> None:
        self.cluster, self.status, self.granted, self.calls = cluster, status, False, 0

    def _call(self, method: str, *args: Any) -> Any:
        self.calls += 1
        if not self.granted:
            raise ClusterError(f"{method} refused", status=self.status)
        return getattr(self.cluster, method)(*args)

    def get(self, where: str) -> Any:
        return self._call("get", where)

    def create(self, where: str, obj: Any) -> Any:
        return self._call("create", where, obj)

    def update(self, where: str, obj: Any) -> Any:
        return self._call("update", where, obj)


@pytest.mark.parametrize(
    ("status", "why"),
    [
        (403, "forbidden: this replica's service account needs get, create and update on "
              "leases.coordination.k8s.io in namespace preemptguard-system (the Lease "
              "preemptguard-observer)"),
        (401, "the API server did not accept this replica's credentials"),
        (404, "not found: namespace preemptguard-system does not exist"),
    ],
)  # fmt: skip
def test_a_lease_it_may_not_use_is_warned_about_at_a_bounded_rate_and_tried_again(
    connect: Callable[[], Cluster], clock: FakeClock, status: int, why: str
) -> None:
    refusing = _Refusing(connect(), status)
    a = LeaderElector(cast(Cluster, refusing), SETTINGS, "a", clock)
    with capture_logs() as logged:
        for _ in range(40):  # 80 s of steps, every 2 s
            assert a.step() is False
            clock.sleep(SETTINGS.retry)
        warnings = [e for e in logged if e["event"] == "lease_unusable"]
        assert refusing.calls >= 40  # tried at every step (404: the get, then the create)
        assert len(warnings) == 2  # at once, then a minute later
        assert warnings[0]["log_level"] == "warning"
        assert warnings[0]["lease"] == "preemptguard-system/preemptguard-observer"
        assert warnings[0]["status"] == status
        assert why in warnings[0]["why"]
        # The permission is granted: it leads at the next step, and says the Lease is usable.
        refusing.granted = True
        assert a.step() is True
    assert [e["event"] for e in logged][-1] == "lease_usable"


def test_the_warnings_start_again_when_the_lease_is_refused_again(
    connect: Callable[[], Cluster], clock: FakeClock
) -> None:
    refusing = _Refusing(connect(), 403)
    a = LeaderElector(cast(Cluster, refusing), SETTINGS, "a", clock)
    with capture_logs() as logged:
        a.step()
        refusing.granted = True
        clock.sleep(2)
        assert a.step() is True
        refusing.granted = False
        clock.sleep(2)
        assert a.step() is True  # inside the renew deadline
    events = [e["event"] for e in logged]
    assert events == ["lease_unusable", "lease_usable", "lease_unusable"]
    assert WARN_EVERY_SECONDS > 4  # the third is a new failure, not a repeat
