"""`preemptguard audit` and `preemptguard capacity` on a large cluster, beside `kubectl get pods
-A -o json`: wall time and peak RSS of each, run as users run them (subprocesses).

A real control plane (the end-to-end harness's 1.37: etcd, kube-apiserver, ...) is filled with
``--nodes`` fake GPU nodes (8 GPUs each, one in four preemptible) and ``--pods`` pods bound
through ``spec.nodeName`` (no scheduler involved), created by concurrent requests: the recorded
sweep pod as the webhook places it, interruptible on preemptible nodes and serving on standard
ones, the first four on each node asking 2 GPUs; one pod in a hundred waits unbound (for a
scheduler no one runs), interruptible, asking one GPU. Without a kubelet no pod has started, so
no GPU-hours accrue: what is measured is listing and classifying.

kubectl is looked for in the control-plane cache (``~/.cache/preemptguard``, or
``PREEMPTGUARD_CACHE``), or given with ``--kubectl``; without one its row says so.

Run: python benchmarks/scale_bench.py [--nodes 5000] [--pods 150000]
Prints a table; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.audit_bench import stored_pod
from harness import cluster
from harness.binaries import MAIN
from harness.controlplane import ControlPlane, running_control_plane
from harness.kube import Kube
from webhook.admission.core import Subject, judge
from webhook.admission.lookups import no_namespaces
from webhook.loading.policies import builtin_policy

REPO = Path(__file__).resolve().parents[1]
PRIORITY_CLASSES = REPO / "webhook" / "data" / "priorityclasses.yaml"
NAMESPACES = 20
GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8
GPU_PODS_PER_NODE = 4
THREADS = 16
PENDING_EVERY = 100

Obj = dict[str, Any]


def node_names(count: int) -> list[tuple[str, str]]:
    """(name, class): one in four preemptible."""
    return [
        (f"pre-{i:05d}", cluster.PREEMPTIBLE) if i % 4 == 0 else (f"std-{i:05d}", cluster.STANDARD)
        for i in range(count)
    ]


def templates() -> dict[str, Obj]:
    """The recorded sweep pod as placed for each class used."""
    _, raw = stored_pod()
    policy = builtin_policy()
    made = {}
    for wclass in ("interruptible", "serving"):
        obj = copy.deepcopy(raw)
        obj["metadata"].setdefault("annotations", {})["together.ai/workload"] = wclass
        if wclass == "serving":
            obj["spec"].pop("nodeSelector", None)
            obj["spec"].pop("affinity", None)
        placed = judge(Subject(obj=obj, namespace="team"), policy, no_namespaces)
        made[wclass] = placed.decision.mutated
    return made


def pods_for(count: int, nodes: list[tuple[str, str]]) -> Iterable[Obj]:
    shapes = templates()
    per_node = max(count // len(nodes), 1)
    for i in range(count):
        pending = i % PENDING_EVERY == PENDING_EVERY - 1
        name, node_class = nodes[(i // per_node) % len(nodes)]
        wclass = "interruptible" if pending or node_class == cluster.PREEMPTIBLE else "serving"
        obj = copy.deepcopy(shapes[wclass])
        meta = obj["metadata"]
        meta.pop("generateName", None)
        meta["name"], meta["namespace"] = f"p-{i:06d}", f"team-{i % NAMESPACES}"
        gpus = 1 if pending else 2 if i % per_node < GPU_PODS_PER_NODE else 0
        resources = obj["spec"]["containers"][0].setdefault("resources", {})
        for part in ("requests", "limits"):
            resources.setdefault(part, {}).pop(GPU, None)
            if gpus:
                resources[part][GPU] = str(gpus)
        if pending:
            obj["spec"]["schedulerName"] = "nobody"  # stays unbound
        else:
            obj["spec"]["nodeName"] = name
        yield obj


def concurrently(cp: ControlPlane, items: Iterable[Any], work: Callable[[Kube, Any], None]) -> int:
    """``work`` on each item, from ``THREADS`` threads with a client each; how many."""
    local = threading.local()
    clients: list[Kube] = []

    def run(item: Any) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = cp.client()
            clients.append(client)
        work(client, item)

    done = 0
    with ThreadPoolExecutor(THREADS) as pool:
        for _ in pool.map(run, items, chunksize=64):
            done += 1
    for client in clients:
        client.close()
    return done


def fill(cp: ControlPlane, nodes: int, pods: int) -> None:
    names = node_names(nodes)
    kube = cp.client()
    for n in range(NAMESPACES):
        cluster.create_namespace(kube, f"team-{n}")
    # The PriorityClasses an install ships: the placed pods name them.
    for obj in yaml.safe_load_all(PRIORITY_CLASSES.read_text()):
        if obj:
            name = obj["metadata"]["name"]
            kube.apply(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}", obj)
    kube.close()
    started = time.perf_counter()

    def make_node(client: Kube, item: tuple[str, str]) -> None:
        cluster.create_node(client, item[0], item[1], gpus=GPUS_PER_NODE, pods=pods)

    concurrently(cp, names, make_node)
    print(f"{nodes:,} nodes created in {time.perf_counter() - started:.0f} s", flush=True)
    started = time.perf_counter()

    def make_pod(client: Kube, obj: Obj) -> None:
        client.create(f"/api/v1/namespaces/{obj['metadata']['namespace']}/pods", obj)

    made = concurrently(cp, pods_for(pods, names), make_pod)
    elapsed = time.perf_counter() - started
    print(f"{made:,} pods created in {elapsed:.0f} s ({made / elapsed:,.0f}/s)", flush=True)


@dataclass(frozen=True)
class Measured:
    label: str
    wall: float
    peak_rss_mib: float
    exit_status: int
    output_bytes: int
    note: str = ""


def measure(label: str, argv: list[str], env: dict[str, str]) -> Measured:
    """Run ``argv``; its wall time and peak RSS (``wait4``: this child alone)."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        stderr = proc.stderr.read().decode() if proc.stderr else ""
        size = out.tell()
        out.seek(0)
        note = _summary(label, out.read())
    for line in stderr.splitlines()[-3:]:
        print(f"  {label} stderr: {line}")
    return Measured(label, wall, usage.ru_maxrss / 1024, proc.returncode, size, note)


def _summary(label: str, output: bytes) -> str:
    try:
        doc = json.loads(output)
    except ValueError:
        return ""
    if "summary" in doc:
        return f"{doc['summary']['pods']:,} pods judged"
    if "suggestion" in doc:
        s = doc["suggestion"]
        return (
            f"{doc['pendingGpus']['total']:,} GPUs pending; target "
            f"{s['currentPreemptibleGpus']:,} -> {s['suggestedPreemptibleGpus']:,}"
        )
    if "items" in doc:
        return f"{len(doc['items']):,} pods"
    return ""


def find_kubectl(given: str | None) -> Path | None:
    if given:
        return Path(given)
    cache = Path(os.environ.get("PREEMPTGUARD_CACHE", Path.home() / ".cache" / "preemptguard"))
    found = sorted(p for p in cache.glob("**/bin/kubectl") if os.access(p, os.X_OK))
    return found[-1] if found else None


def run(nodes: int, pods: int, kubectl: str | None) -> list[Measured]:
    with running_control_plane(MAIN) as cp:
        print(f"Kubernetes {MAIN.version}", flush=True)
        fill(cp, nodes, pods)
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
        preemptguard = [sys.executable, "-m", "webhook"]
        rows = [
            measure(f"preemptguard {command} -o json", [*preemptguard, command, "-o", "json", "-q"],
                    env)
            for command in ("audit", "capacity")
        ]  # fmt: skip
        binary = find_kubectl(kubectl)
        if binary is None:
            rows.append(Measured("kubectl get pods -A -o json", 0, 0, 0, 0,
                                 "no kubectl in the control-plane cache: not run"))  # fmt: skip
        else:
            argv = [str(binary), "get", "pods", "-A", "-o", "json"]
            rows.append(measure("kubectl get pods -A -o json", argv, env))
        return rows


def table(rows: list[Measured], nodes: int, pods: int) -> str:
    lines = [
        f"{nodes:,} nodes, {pods:,} pods, Kubernetes {MAIN.version}",
        "",
        "| command | wall (s) | peak RSS (MiB) | exit | output | |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if not r.wall:
            lines.append(f"| `{r.label}` | - | - | - | - | {r.note} |")
            continue
        lines.append(
            f"| `{r.label}` | {r.wall:.1f} | {r.peak_rss_mib:,.0f} | {r.exit_status} | "
            f"{r.output_bytes / 2**20:,.1f} MiB | {r.note} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--kubectl", default=None, help="a kubectl binary to run beside")
    args = parser.parse_args()
    rows = run(args.nodes, args.pods, args.kubectl)
    print()
    print(table(rows, args.nodes, args.pods))


if __name__ == "__main__":
    main()
