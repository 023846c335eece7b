"""The reclaim observer's memory while a large cluster churns: ``preemptguard observe`` run as
users run it (a process of its own, acting without a Lease), its resident memory sampled every
ten seconds while pods come and go and preemptible nodes are reclaimed.

The churn, for ``minutes``: each second ``PER_TICK`` pods on preemptible nodes are deleted and
as many created on other preemptible nodes (the filled cluster's own pods first, so the pods
the observer tracks are replaced several times an hour); every ``RECLAIM_EVERY`` seconds a
preemptible node is reclaimed as the provider does it (cordoned, its ``TogetherPreempted``
Event written; ``GRACE`` seconds later its pods deleted and the node deleted and created anew,
as a new machine of the same name), and as many pods as it held created on other nodes. The
observer marks, counts and reports every reclaim as on a real cluster.

Several observers may run side by side, each with environment variables of its own (an
allocator setting, say): they see the same churn, and each acts as if alone, so their writes
race (a reclaim's Event is written by whichever comes first) and what each counts is its share.

Used by ``scale_bench.py --observe-minutes N``; prints its samples and the observer's counts.
"""

from __future__ import annotations

import itertools
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import cluster, reclaim
from harness.controlplane import ControlPlane
from harness.kube import Kube, KubeError

PER_TICK = 10
RECLAIM_EVERY = 30.0
GRACE = 5.0
SAMPLE_EVERY = 10.0
SEED = 20261205

Obj = dict[str, Any]
Running = tuple["subprocess.Popen[bytes]", int, Path]  # an observer, its metrics port, its log


@dataclass(frozen=True)
class Sample:
    """The observer at one moment: its resident memory and the pods it holds."""

    minutes: float
    rss_mib: float
    on_node: float  # pods of preemptible nodes
    deleted: float  # deleted pods kept for a reclaim learnt of late


@dataclass
class Observed:
    """One observer's memory over the churn and what it counted."""

    samples: list[Sample] = field(default_factory=list)
    peak_mib: float = 0.0
    counts: dict[str, float] = field(default_factory=dict)  # its own counters


@dataclass
class Churned:
    """What the churn did, and what each observer (by variant) made of it."""

    observed: dict[str, Observed] = field(default_factory=dict)
    created: int = 0
    deleted: int = 0
    reclaims: int = 0
    errors: int = 0


@dataclass
class Churn:
    """The churn's state: which pods are where, what to delete next."""

    cp: ControlPlane
    preemptible: list[str]
    make_pod: Callable[[str, str, str], Obj]  # (name, namespace, node) -> pod
    namespaces: int
    doomed: deque[tuple[str, str]]  # (namespace, name), the next to delete
    rng: random.Random = field(default_factory=lambda: random.Random(SEED))
    done: Churned = field(default_factory=Churned)
    lock: threading.Lock = field(default_factory=threading.Lock)
    names: itertools.count[int] = field(default_factory=itertools.count)

    def replace_some(self, kube: Kube, count: int, away_from: str = "") -> None:
        """Delete ``count`` pods (when ``away_from`` is empty) and create ``count`` new ones on
        preemptible nodes other than ``away_from``."""
        for _ in range(count):
            if not away_from:
                with self.lock:
                    victim = self.doomed.popleft() if self.doomed else None
                if victim is not None:
                    self._call(kube.delete, f"/api/v1/namespaces/{victim[0]}/pods/{victim[1]}")
                    self.done.deleted += 1
            node = self.rng.choice([n for n in self.preemptible if n != away_from])
            name = f"churn-{next(self.names):07d}"
            namespace = f"team-{self.rng.randrange(self.namespaces)}"
            pod = self.make_pod(name, namespace, node)
            if self._call(kube.create, f"/api/v1/namespaces/{namespace}/pods", pod):
                self.done.created += 1
                with self.lock:
                    self.doomed.append((namespace, name))

    def reclaim(self, kube: Kube) -> None:
        """One reclaim as the provider makes it, then a new machine under the same name."""
        node = self.rng.choice(self.preemptible)
        reclaim.provider_reclaims(kube, node)
        time.sleep(GRACE)
        listed = kube.get("/api/v1/pods", fieldSelector=f"spec.nodeName={node}")["items"]
        gone = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in listed}
        for namespace, name in gone:
            self._call(kube.delete, f"/api/v1/namespaces/{namespace}/pods/{name}")
        with self.lock:
            self.doomed = deque(p for p in self.doomed if p not in gone)
        self.done.deleted += len(gone)
        self._call(kube.delete, f"/api/v1/nodes/{node}")
        cluster.create_node(kube, node, cluster.PREEMPTIBLE, gpus=8, pods=1000)
        self.done.reclaims += 1
        self.replace_some(kube, len(gone), away_from=node)

    def _call(
        self, method: Callable[[str, Any], object] | Callable[..., object], *args: Any
    ) -> bool:
        try:
            method(*args)
        except KubeError:
            self.done.errors += 1  # a pod already gone, a name taken: counted, not fatal
            return False
        return True


def run(
    churn: Churn, minutes: float, env: dict[str, str], variants: dict[str, dict[str, str]]
) -> Churned:
    """Start one observer per variant (its label: what it adds to ``env``), churn for
    ``minutes`` while sampling their memory, then stop them. Side by side, the variants see the
    same churn: how an allocator setting changes the memory is read without a second cluster."""
    running: dict[str, Running] = {}
    try:
        for label, extra in variants.items():
            running[label] = _start({**env, **extra})
        for proc, _, log in running.values():
            _wait_for(log, "observer_started", proc, timeout=600)
        _churn_while_sampling(churn, minutes, running)
    finally:
        for proc, _, log in running.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
            log.unlink()
    for label, (proc, _, _) in running.items():
        if proc.returncode not in (0, -signal.SIGTERM):
            raise RuntimeError(f"the observer {label!r} exited with {proc.returncode}")
    return churn.done


def _start(env: dict[str, str]) -> Running:
    port = _free_port()
    log = tempfile.NamedTemporaryFile(prefix="observer-", suffix=".log", delete=False)  # noqa: SIM115
    argv = [sys.executable, "-m", "webhook", "observe", "--no-leader-election",
            "--metrics-port", str(port), "--metrics-host", "127.0.0.1"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    return proc, port, Path(log.name)


def _churn_while_sampling(churn: Churn, minutes: float, running: dict[str, Running]) -> None:
    started = time.monotonic()
    deadline = started + minutes * 60
    stop = threading.Event()
    workers = [
        threading.Thread(target=_every, args=(1.0, churn.cp, stop, deadline,
                                              lambda k: churn.replace_some(k, PER_TICK))),
        threading.Thread(target=_every, args=(RECLAIM_EVERY, churn.cp, stop, deadline,
                                              churn.reclaim)),
    ]  # fmt: skip
    observed = {label: churn.done.observed.setdefault(label, Observed()) for label in running}

    def sample() -> None:
        for label, (proc, port, _) in running.items():
            observed[label].samples.append(_sample(proc.pid, port, started))

    for w in workers:
        w.start()
    while time.monotonic() < deadline and all(p.poll() is None for p, _, _ in running.values()):
        sample()
        time.sleep(SAMPLE_EVERY)
    stop.set()
    for w in workers:
        w.join()
    time.sleep(GRACE * 2)  # the last reclaim's pods reported
    sample()
    for label, (proc, port, _) in running.items():
        observed[label].peak_mib = _peak_mib(proc.pid)
        observed[label].counts = _counters(port)


def _every(
    period: float, cp: ControlPlane, stop: threading.Event, deadline: float,
    work: Callable[[Kube], None],
) -> None:  # fmt: skip
    kube = cp.client()
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            began = time.monotonic()
            work(kube)
            stop.wait(max(period - (time.monotonic() - began), 0))
    finally:
        kube.close()


def _wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"the observer exited: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"no {text} from the observer within {timeout:.0f} s")


def _status_kib(pid: int, key: str) -> float:
    found = re.search(rf"^{key}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    return float(found.group(1)) if found else 0.0


def _rss_mib(pid: int) -> float:
    return _status_kib(pid, "VmRSS") / 1024


def _peak_mib(pid: int) -> float:
    return _status_kib(pid, "VmHWM") / 1024


def _sample(pid: int, port: int, started: float) -> Sample:
    held = {"on-node": 0.0, "deleted": 0.0}
    for line in _metrics(port).splitlines():
        if line.startswith("preemptguard_observer_pods_held{"):
            held[line.split('"')[1]] = float(line.rsplit(" ", 1)[1])
    minutes = (time.monotonic() - started) / 60
    return Sample(minutes, _rss_mib(pid), held["on-node"], held["deleted"])


def _metrics(port: int) -> str:
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text: str = response.read().decode()
    return text


def _counters(port: int) -> dict[str, float]:
    """The observer's counters of reclaims, displaced pods and pods marked, summed by name."""
    text = _metrics(port)
    counts: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name.endswith("_total") and name.startswith("preemptguard_"):
            counts[name] = counts.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
