"""`preemptguard audit` and `preemptguard capacity` on a large cluster, beside `kubectl get pods
-A -o json`: wall time and peak RSS of each, run as users run them (subprocesses).

A real control plane (the end-to-end harness's 1.37: etcd, kube-apiserver, ...) is filled with
``--nodes`` fake GPU nodes (8 GPUs each, one in four preemptible) and ``--pods`` pods bound
through ``spec.nodeName`` (no scheduler involved), created by concurrent requests: the recorded
sweep pod as the webhook places it, interruptible on preemptible nodes and serving on standard
ones, the first four on each node asking 2 GPUs; one pod in a hundred waits unbound (for a
scheduler no one runs), interruptible, asking one GPU. Without a kubelet no pod has started, so
no GPU-hours accrue: what is measured is listing and classifying.

The yardstick is the same release's kubectl: ``hack/kubectl.sh`` finds it in the cache (or
``KUBECTL``) or builds it once from the Go module proxy; ``--kubectl PATH`` gives another.

``--observe-minutes N`` then runs ``preemptguard observe`` for N minutes of churn on the same
cluster and samples its memory (``observer_churn``). Each ``--variant LABEL:NAME=VALUE,...``
runs one more observer beside it, with those environment variables (an allocator setting such
as ``MALLOC_ARENA_MAX=2`` or ``PYTHONMALLOC=malloc``), under the same churn.

Run: python benchmarks/scale_bench.py [--nodes 5000] [--pods 150000] [--observe-minutes 60]
     [--variant LABEL:NAME=VALUE,...]...
Prints tables; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import observer_churn
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
SAMPLE = 0.02  # seconds between readings of a measured command's peak memory
PENDING_EVERY = 100
AS_SHIPPED = "as shipped"  # the observer run without a variant's environment

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
        asks(obj, 1 if pending else 2 if i % per_node < GPU_PODS_PER_NODE else 0)
        if pending:
            obj["spec"]["schedulerName"] = "nobody"  # stays unbound
        else:
            obj["spec"]["nodeName"] = name
        yield obj


def asks(obj: Obj, gpus: int) -> None:
    """``obj``'s container asks ``gpus`` GPUs (none: no GPU request or limit)."""
    resources = obj["spec"]["containers"][0].setdefault("resources", {})
    for part in ("requests", "limits"):
        resources.setdefault(part, {}).pop(GPU, None)
        if gpus:
            resources[part][GPU] = str(gpus)


def concurrently(cp: ControlPlane, items: Iterable[Any], work: Callable[[Kube, Any], None]) -> int:
    """``work`` on each item, from ``THREADS`` threads with a client each; how many. Items are
    taken from ``items`` as threads come free (``Executor.map`` would take them all at once,
    and this process would hold every pod it makes)."""
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
        running: set[Future[None]] = set()
        for item in items:
            if len(running) >= THREADS * 4:
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                done += _count(finished)
            running.add(pool.submit(run, item))
        done += _count(wait(running).done)
    for client in clients:
        client.close()
    return done


def _count(finished: set[Future[None]]) -> int:
    for future in finished:
        future.result()  # a failed create ends the run, said
    return len(finished)


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
    """Run ``argv``; its wall time and peak RSS.

    The peak is the child's own high-water mark (``VmHWM``), read every ``SAMPLE`` seconds
    until it exits: ``wait4``'s ``ru_maxrss`` would report this large process's peak, which
    the child inherits from the fork before its exec."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        peak = 0.0
        while proc.poll() is None:
            peak = max(peak, _high_water_mib(proc.pid))
            time.sleep(SAMPLE)
        wall = time.perf_counter() - started
        size = out.tell()
        out.seek(0)
        note = _summary(label, out.read())
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    for line in stderr.splitlines()[-3:]:
        print(f"  {label} stderr: {line}")
    return Measured(label, wall, peak, proc.returncode, size, note)


def _high_water_mib(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # gone since the poll
        return 0.0
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    return int(found.group(1)) / 1024 if found else 0.0


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
    """``given``, else what ``hack/kubectl.sh`` finds or builds; None when it cannot."""
    if given:
        return Path(given)
    found = subprocess.run(["bash", str(REPO / "hack" / "kubectl.sh")], stdout=subprocess.PIPE,
                           text=True, check=False)  # fmt: skip
    return Path(found.stdout.strip()) if found.returncode == 0 and found.stdout.strip() else None


def doomed(pods: int, nodes: list[tuple[str, str]]) -> deque[tuple[str, str]]:
    """The filled pods bound to preemptible nodes, (namespace, name), as ``pods_for`` made them."""
    per_node = max(pods // len(nodes), 1)
    return deque(
        (f"team-{i % NAMESPACES}", f"p-{i:06d}")
        for i in range(pods)
        if i % PENDING_EVERY != PENDING_EVERY - 1
        and nodes[(i // per_node) % len(nodes)][1] == cluster.PREEMPTIBLE
    )


def churn_pod_maker(per_node: int) -> Callable[[str, str, str], Obj]:
    """New pods shaped as the filled ones they replace: of every ``per_node``, the first
    ``GPU_PODS_PER_NODE`` ask 2 GPUs, the others none (a churn of larger pods would grow what
    the observer holds as it replaces the filled ones, an hour long at 37,500 pods)."""
    shape = templates()["interruptible"]
    made_so_far = itertools.count()

    def made(name: str, namespace: str, node: str) -> Obj:
        obj = copy.deepcopy(shape)
        obj["metadata"].pop("generateName", None)
        obj["metadata"]["name"], obj["metadata"]["namespace"] = name, namespace
        obj["spec"]["nodeName"] = node
        asks(obj, 2 if next(made_so_far) % per_node < GPU_PODS_PER_NODE else 0)
        return obj

    return made


def run(
    nodes: int,
    pods: int,
    kubectl: str | None,
    observe_minutes: float,
    variants: dict[str, dict[str, str]],
) -> tuple[list[Measured], observer_churn.Churned | None]:
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
            note = "no kubectl (hack/kubectl.sh could not build one): not run"
            rows.append(Measured("kubectl get pods -A -o json", 0, 0, 0, 0, note))
        else:
            argv = [str(binary), "get", "pods", "-A", "-o", "json"]
            rows.append(measure("kubectl get pods -A -o json", argv, env))
        if not observe_minutes:
            return rows, None
        names = node_names(nodes)
        churn = observer_churn.Churn(
            cp=cp,
            preemptible=[n for n, c in names if c == cluster.PREEMPTIBLE],
            make_pod=churn_pod_maker(max(pods // nodes, 1)),
            namespaces=NAMESPACES,
            doomed=doomed(pods, names),
        )
        print(f"observer: {observe_minutes:g} minutes of churn", flush=True)
        return rows, observer_churn.run(churn, observe_minutes, env, variants)


def churn_table(done: observer_churn.Churned, minutes: float) -> str:
    """What the churn did, then each observer's RSS and the pods it holds at its start and
    every tenth of the run, and what it counted."""
    lines = [
        f"churn: {done.created:,} pods created, {done.deleted:,} deleted, {done.reclaims} "
        f"reclaims ({done.errors} calls refused)",
    ]
    for label, observed in done.observed.items():
        lines += ["", f"observer {label}:" if label != AS_SHIPPED else "observer:", ""]
        lines += _observed_table(observed, minutes)
    return "\n".join(lines)


def _observed_table(observed: observer_churn.Observed, minutes: float) -> list[str]:
    marks = [minutes * k / 10 for k in range(11)]
    picked = [min(observed.samples, key=lambda s: abs(s.minutes - m)) for m in marks]
    c = observed.counts
    return [
        "| minute | " + " | ".join(f"{s.minutes:.0f}" for s in picked) + " | peak |",
        "|---" * (len(picked) + 2) + "|",
        "| observer RSS (MiB) | " + " | ".join(f"{s.rss_mib:,.0f}" for s in picked)
        + f" | {observed.peak_mib:,.0f} |",
        "| pods held, on nodes | " + " | ".join(f"{s.on_node:,.0f}" for s in picked) + " | |",
        "| pods held, deleted | " + " | ".join(f"{s.deleted:,.0f}" for s in picked) + " | |",
        "",
        f"counted {c.get('preemptguard_reclaims_total', 0):,.0f} reclaims, "
        f"{c.get('preemptguard_displaced_pods_total', 0):,.0f} displaced pods, "
        f"{c.get('preemptguard_reclaim_pods_marked_total', 0):,.0f} pods marked, "
        f"{c.get('preemptguard_observer_write_failures_total', 0):,.0f} writes failed, "
        f"{c.get('preemptguard_observer_watch_errors_total', 0):,.0f} watch errors",
    ]  # fmt: skip


def variant(text: str) -> tuple[str, dict[str, str]]:
    """``LABEL:NAME=VALUE,...`` as (label, environment)."""
    label, _, assignments = text.partition(":")
    pairs = [a.split("=", 1) for a in assignments.split(",")]
    env = {name: value for name, value in (p for p in pairs if len(p) == 2) if name}
    if not label or label == AS_SHIPPED or not env or len(env) != len(pairs):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give LABEL:NAME=VALUE[,NAME=VALUE...], e.g. arena2:MALLOC_ARENA_MAX=2"
        )
    return label, env


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
    parser.add_argument(
        "--observe-minutes",
        type=float,
        default=0,
        help="then the observer under churn for this long (0: not)",
    )
    parser.add_argument(
        "--variant",
        type=variant,
        action="append",
        default=[],
        help="one more observer beside it, LABEL:NAME=VALUE,... in its env",
    )
    args = parser.parse_args()  # fmt: skip
    variants = {AS_SHIPPED: {}, **dict(args.variant)}
    rows, churned = run(args.nodes, args.pods, args.kubectl, args.observe_minutes, variants)
    print()
    print(table(rows, args.nodes, args.pods))
    if churned is not None:
        print()
        print(churn_table(churned, args.observe_minutes))


if __name__ == "__main__":
    main()
