"""Leader election on a Lease: one holder at a time, take-over only after the Lease went
unrenewed for its duration (by the candidate's own clock), a clean hand-over at shutdown."""

from __future__ import annotations

from collections.abc import Callable

from tests.cluster.conftest import FakeClock
from tests.cluster.fake_apiserver import FakeApiServer
from webhook.cluster.client import Cluster
from webhook.cluster.lease import LeaderElector, LeaseSettings

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
