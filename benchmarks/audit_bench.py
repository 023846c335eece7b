"""Audit speed: `preemptguard audit` on a cluster of 10,000 pods served page by page.

The cluster is the fake API server of the unit tests (tests/cluster/fake_apiserver.py, plain
HTTP on loopback, 500 pods per page as kubectl asks), holding pods as the API server stores
them: the recorded sweep pod, placed by the webhook, one in a hundred not. Prints the time of
the whole command (start-up included) and of its two halves in-process (listing, judging).

Run: python benchmarks/audit_bench.py [--pods 10000]
Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster.fake_apiserver import FakeApiServer
from webhook.admission.core import Subject, judge
from webhook.admission.namespaces import no_namespaces
from webhook.cluster import audit as auditing
from webhook.cluster.client import Cluster
from webhook.loading.policies import builtin_policy

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "admission-reviews" / "create-pod-sweep-mutate.json"
NAMESPACES = 20


def stored_pod() -> tuple[dict[str, Any], dict[str, Any]]:
    """The recorded sweep pod as admitted (placed) and as created with the webhook down."""
    raw: dict[str, Any] = json.loads(FIXTURE.read_text())["request"]["object"]
    policy = builtin_policy()
    placed = judge(Subject(obj=raw, namespace="team"), policy, no_namespaces).decision.mutated
    return copy.deepcopy(placed), raw


def fill(fake: FakeApiServer, pods: int) -> None:
    fake.put({"kind": "Node", "metadata": {"name": "pre-1", "labels": {
        "together.ai/compute-class": "preemptible"}}, "spec": {}})  # fmt: skip
    fake.put({"kind": "Node", "metadata": {"name": "std-1"}, "spec": {}})
    for n in range(NAMESPACES):
        fake.put({"kind": "Namespace", "metadata": {"name": f"team-{n}"}})
    placed, unplaced = stored_pod()
    made = []
    for i in range(pods):
        late = i % 100 == 0
        obj = copy.deepcopy(unplaced if late else placed)
        meta = obj["metadata"]
        meta.pop("generateName", None)
        meta["name"], meta["namespace"] = f"sweep-{i:05d}", f"team-{i % NAMESPACES}"
        meta["uid"] = str(uuid.uuid4())
        obj["spec"]["nodeName"] = "std-1" if late else "pre-1"
        obj["status"] = {"phase": "Running"}
        made.append(obj)
    fake.load(made)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=10_000)
    args = parser.parse_args()
    fake = FakeApiServer()
    started = time.perf_counter()
    fill(fake, args.pods)
    print(f"fake API server: {args.pods:,} pods in {NAMESPACES} namespaces "
          f"(set up in {time.perf_counter() - started:.1f} s)")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = fake.kubeconfig(Path(tmp) / "kubeconfig")
        # In-process: the two halves.
        policy = builtin_policy()
        cluster = Cluster.connect(str(kubeconfig))
        t0 = time.perf_counter()
        snapshot = auditing.read_cluster(cluster, auditing.Scope())
        t1 = time.perf_counter()
        result = auditing.audit(snapshot, policy)
        t2 = time.perf_counter()
        cluster.close()
        pods = len(snapshot.pods)
        print(f"list  {pods:,} pods in {snapshot.pages} pages: {t1 - t0:.2f} s "
              f"({pods / (t1 - t0):,.0f} pods/s)")  # fmt: skip
        print(f"judge {pods:,} pods: {t2 - t1:.2f} s ({pods / (t2 - t1):,.0f} pods/s), "
              f"{len(result.findings)} with findings")  # fmt: skip
        # The command as users run it.
        fake.reset_requests()
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "webhook", "audit", "-o", "json"],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        summary = json.loads(proc.stdout)["summary"]
        print(f"preemptguard audit -o json: {wall:.2f} s wall (exit {proc.returncode}), "
              f"{summary['pods']:,} pods, {summary['withFindings']} with findings, "
              f"{len(fake.requests)} API requests, all lists")  # fmt: skip
        for line in proc.stderr.splitlines():
            print(f"  stderr: {line}")
    fake.close()


if __name__ == "__main__":
    main()
