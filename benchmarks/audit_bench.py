"""Audit speed: `preemptguard audit` on a cluster of 10,000 pods served page by page.

The cluster is the fake API server of the unit tests (tests/cluster/fake_apiserver.py, plain
HTTP on loopback, 500 pods per page as kubectl asks), holding pods as the API server stores
them: the recorded sweep pod, placed by the webhook, one in a hundred not. Prints the time of
the whole command (start-up included) and of its two halves in-process (listing, judging).

With ``--real`` the same pods are created in a real control plane (the end-to-end harness's
1.37: etcd, kube-apiserver, ...; bound to their nodes through ``spec.nodeName``) and the
command audits that instead: the API server's own paging and encoding, over TLS.

Run: python benchmarks/audit_bench.py [--pods 10000] [--real]
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster.fake_apiserver import FakeApiServer
from webhook.admission.core import Subject, judge
from webhook.admission.lookups import no_namespaces
from webhook.cluster import audit as auditing
from webhook.kube.client import Cluster
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


def pods_for(count: int) -> list[dict[str, Any]]:
    """``count`` pods over the namespaces, bound to their nodes; one in a hundred unplaced."""
    placed, unplaced = stored_pod()
    made = []
    for i in range(count):
        late = i % 100 == 0
        obj = copy.deepcopy(unplaced if late else placed)
        meta = obj["metadata"]
        meta.pop("generateName", None)
        meta["name"], meta["namespace"] = f"sweep-{i:05d}", f"team-{i % NAMESPACES}"
        obj["spec"]["nodeName"] = "std-1" if late else "pre-1"
        made.append(obj)
    return made


def fill(fake: FakeApiServer, pods: int) -> None:
    fake.put({"kind": "Node", "metadata": {"name": "pre-1", "labels": {
        "together.ai/compute-class": "preemptible"}}, "spec": {}})  # fmt: skip
    fake.put({"kind": "Node", "metadata": {"name": "std-1"}, "spec": {}})
    for n in range(NAMESPACES):
        fake.put({"kind": "Namespace", "metadata": {"name": f"team-{n}"}})
    made = pods_for(pods)
    for obj in made:
        obj["metadata"]["uid"] = str(uuid.uuid4())
        obj["status"] = {"phase": "Running"}
    fake.load(made)


def command(kubeconfig: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    """``preemptguard audit -o json`` as users run it, and its wall time."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "audit", "-o", "json"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    return time.perf_counter() - t0, proc


def report(label: str, wall: float, proc: subprocess.CompletedProcess[str], extra: str) -> None:
    summary = json.loads(proc.stdout)["summary"]
    print(f"{label}: {wall:.2f} s wall (exit {proc.returncode}), {summary['pods']:,} pods, "
          f"{summary['withFindings']} with findings{extra}")  # fmt: skip
    for line in proc.stderr.splitlines():
        print(f"  stderr: {line}")


def fake_cluster(count: int) -> None:
    fake = FakeApiServer()
    started = time.perf_counter()
    fill(fake, count)
    print(f"fake API server: {count:,} pods in {NAMESPACES} namespaces "
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
        fake.reset_requests()
        wall, proc = command(kubeconfig)
        requests = f", {len(fake.requests)} API requests, all lists"
        report("preemptguard audit -o json", wall, proc, requests)
    fake.close()


def real_cluster(count: int) -> None:
    from harness import cluster
    from harness.binaries import MAIN
    from harness.controlplane import running_control_plane

    with running_control_plane(MAIN) as cp:
        kube = cp.client()
        cluster.create_node(kube, "pre-1", "preemptible", pods=count)
        cluster.create_node(kube, "std-1", "standard", pods=count)
        for n in range(NAMESPACES):
            cluster.create_namespace(kube, f"team-{n}")
        made = pods_for(count)
        started = time.perf_counter()

        def create(chunk: list[dict[str, Any]]) -> None:
            with cp.client() as client:
                for obj in chunk:
                    client.create(f"/api/v1/namespaces/{obj['metadata']['namespace']}/pods", obj)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, [made[i::8] for i in range(8)]))
        print(f"Kubernetes {MAIN.version}: {count:,} pods created in "
              f"{time.perf_counter() - started:.0f} s")  # fmt: skip
        for attempt in (1, 2):
            wall, proc = command(cp.kubeconfig)
            report(f"preemptguard audit -o json (run {attempt})", wall, proc, "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--real", action="store_true", help="a real control plane (slower)")
    args = parser.parse_args()
    if args.real:
        real_cluster(args.pods)
    else:
        fake_cluster(args.pods)


if __name__ == "__main__":
    main()
