"""Prometheus metrics of the admission server, in a registry of its own.

Served on a separate plain-HTTP port so scraping needs no TLS trust and never competes with
admission traffic for the TLS listener.

The server runs several worker processes. Each writes its metrics (``Metrics``) to files in
one folder (prometheus_client's multiprocess mode), and the main process serves the sum
(``MainMetrics``): counters and histograms add up across workers; each gauge says how (the
policy in use: the latest; the namespace cache synced: only if every live worker is,
``livemin``). The main process's own metrics (the certificate it watches, ``process_*``)
are served beside the sum; each worker's memory is
``preemptguard_worker_resident_memory_bytes{pid}``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    multiprocess,
    values,
)

from webhook.exposition import RegistryMetrics

# Admissions take microseconds in the engine and a few milliseconds on the wire; the API
# server's default webhook timeout is 10 s.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass(frozen=True, kw_only=True)
class CacheMetrics:
    """The metrics of one watch cache (``watchcache.WatchCache``)."""

    synced: Gauge
    size: Gauge
    lookup_failures: Counter
    watch_errors: Counter


def watch_cache_metrics(
    reg: CollectorRegistry,
    *,
    noun: str,
    plural: str,
    size_name: str,
    when_unreachable: str,
    lookup_needs: str,
) -> CacheMetrics:
    """The four metrics of the watch cache of ``noun`` objects, registered in ``reg``.

    Every cache reports the same states (synced, size, failed lookups, broken watches), so
    they are defined once, named after the kind in lower case: ``preemptguard_<kind>_cache_synced``,
    ``preemptguard_<kind>_cache_<size_name>``, ``preemptguard_<kind>_lookup_failures`` and
    ``preemptguard_<kind>_watch_errors``. The help texts name the objects (``noun``,
    ``plural``), what reviews do while the cache is unreachable, and what a failed lookup
    was needed for.
    """
    kind = noun.lower()
    return CacheMetrics(
        synced=Gauge(
            f"preemptguard_{kind}_cache_synced",
            f"1 while the {noun} cache is listed and watched; 0 when no cluster "
            f"is configured, or while it is unreachable ({when_unreachable}).",
            registry=reg,
            multiprocess_mode="livemin",
        ),
        size=Gauge(
            f"preemptguard_{kind}_cache_{size_name}",
            f"{plural[:1].upper()}{plural[1:]} in the cache.",
            registry=reg,
            multiprocess_mode="livemax",
        ),
        lookup_failures=Counter(
            f"preemptguard_{kind}_lookup_failures",
            f"Reviews failed (HTTP 500) because {lookup_needs} was not cached and could not "
            "be read from the API server.",
            registry=reg,
        ),
        watch_errors=Counter(
            f"preemptguard_{kind}_watch_errors",
            f"Failed lists or broken watches of {plural} (each followed by a relist).",
            registry=reg,
        ),
    )


class CertificateMetrics:
    """The serving certificate, watched by the main process."""

    def __init__(self, reg: CollectorRegistry) -> None:
        self.reloads = Counter(
            "preemptguard_certificate_reloads",
            "Serving certificates loaded: once at start, then at each change of the files.",
            registry=reg,
        )
        self.reload_failures = Counter(
            "preemptguard_certificate_reload_failures",
            "Certificate changes that could not be loaded; the previous one keeps serving.",
            registry=reg,
        )
        self.rotations = Counter(
            "preemptguard_certificate_rotations",
            "Certificates this replica issued into the Secret while it held the Lease "
            "(self-rotating certificates only).",
            registry=reg,
        )
        self.rotation_errors = Counter(
            "preemptguard_certificate_rotation_errors",
            "Steps of the certificate rotation that failed: the Secret, the Lease or a webhook "
            "configuration could not be read or written (self-rotating certificates only).",
            registry=reg,
        )
        self.expiry = Gauge(
            "preemptguard_certificate_expiry_timestamp_seconds",
            "When the serving certificate in use expires (Unix time).",
            registry=reg,
        )


class Metrics(RegistryMetrics):
    """Every metric a worker process exports."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        reg = self.registry
        if not multiprocess_enabled():
            ProcessCollector(registry=reg)
        self.worker_memory = Gauge(
            "preemptguard_worker_resident_memory_bytes",
            "Resident memory of each worker process, by pid.",
            registry=reg,
            multiprocess_mode="liveall",
        )
        self.admissions = Counter(
            "preemptguard_admissions",
            "Admission reviews answered, by hook, outcome and workload class.",
            ["hook", "outcome", "workload_class"],
            registry=reg,
        )
        self.admission_seconds = Histogram(
            "preemptguard_admission_duration_seconds",
            "Time from a review's arrival (read off the event loop's queue) to its answer, "
            "by hook.",
            ["hook"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.reviews_dropped = Counter(
            "preemptguard_reviews_dropped",
            "Review calls whose answer the API server did not get in time, by hook and why: "
            "answered after the call's timeout (late), the body not all in before the "
            "review's deadline (body-late), a body given up to make room for others "
            "(body-given-up). Under failurePolicy Ignore each let its object through "
            "unchecked.",
            ["hook", "why"],
            registry=reg,
        )
        self.loop_lag = Gauge(
            "preemptguard_event_loop_lag_seconds",
            "How long work ready for a worker's event loop last waited for it: a review "
            "arriving now waits about as long before it is read.",
            registry=reg,
            multiprocess_mode="livemax",
        )
        self.review_backlog = Gauge(
            "preemptguard_review_backlog_seconds",
            "The expected seconds of the reviews a worker is checking at once (its work "
            "ledger); a review that would not finish before its deadline behind them is "
            "refused as busy.",
            registry=reg,
            multiprocess_mode="livesum",
        )
        self.bad_requests = Counter(
            "preemptguard_bad_requests",
            "Requests refused with HTTP 400 because they were not a usable AdmissionReview.",
            ["hook"],
            registry=reg,
        )
        self._policy_labels: tuple[str, str] | None = None
        # The labelled children, looked up once: labels() takes a lock and parses its arguments.
        self._admission_children: dict[tuple[str, str, str], Any] = {}
        self._duration_children: dict[str, Any] = {}
        self._policy(reg)
        self.namespace_cache = watch_cache_metrics(
            reg,
            noun="namespace",
            plural="namespaces",
            size_name="namespaces",
            when_unreachable="each review then reads its namespace",
            lookup_needs="their namespace",
        )
        self.priorityclass_cache = watch_cache_metrics(
            reg,
            noun="PriorityClass",
            plural="PriorityClasses",
            size_name="classes",
            when_unreachable="reviews then read the class they need",
            lookup_needs="a PriorityClass their class names",
        )

    def _policy(self, reg: CollectorRegistry) -> None:
        self.policy_reloads = Counter(
            "preemptguard_policy_reloads",
            "Policy changes loaded and in use, counted in each worker process that loads one.",
            registry=reg,
        )
        self.policy_reload_failures = Counter(
            "preemptguard_policy_reload_failures",
            "Policy changes refused as invalid, counted in each worker process; the last good "
            "policy keeps serving.",
            registry=reg,
        )
        self.policy_info = Gauge(
            "preemptguard_policy_info",
            "The policy in use (value 1).",
            ["name", "mode"],
            registry=reg,
            multiprocess_mode="livemax",
        )

    def set_policy(self, name: str, mode: str) -> None:
        # The new series first, then the old one gone: a scrape in between never sees none.
        self.policy_info.labels(name=name, mode=mode).set(1)
        if self._policy_labels not in (None, (name, mode)):
            self.policy_info.remove(*self._policy_labels)
        self._policy_labels = (name, mode)

    def count_admission(self, hook: str, outcome: str, workload_class: str, seconds: float) -> None:
        """One review answered: counted, and its time observed."""
        key = (hook, outcome, workload_class)
        counter = self._admission_children.get(key)
        if counter is None:
            counter = self._admission_children[key] = self.admissions.labels(*key)
        counter.inc()
        histogram = self._duration_children.get(hook)
        if histogram is None:
            histogram = self._duration_children[hook] = self.admission_seconds.labels(hook)
        histogram.observe(seconds)

    def count_dropped(self, hook: str, why: str) -> None:
        self.reviews_dropped.labels(hook=hook, why=why).inc()

    def sample_memory(self) -> None:
        """Record this process's resident memory (read from /proc where there is one)."""
        try:
            pages = int(Path("/proc/self/statm").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            return
        self.worker_memory.set(pages * os.sysconf("SC_PAGE_SIZE"))


MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_enabled() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


def enable_multiprocess(directory: Path) -> None:
    """Make metrics created from now on write their values to files in ``directory``.

    Call before any ``Metrics`` is made, in the process that then forks the workers. Setting
    the variable alone is not enough once prometheus_client has been imported: it reads it at
    import, so its value class is set here as well.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()
    os.environ[MULTIPROC_ENV] = str(directory)
    values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]


class MainMetrics(RegistryMetrics):
    """What the main process serves: its own metrics, and the sum over every worker's files.

    Made before the workers, it turns multiprocess mode on for every ``Metrics`` made after
    it (the workers'), its own metrics staying in its memory.
    """

    def __init__(self, directory: Path) -> None:
        # The workers' metrics, summed from their files, carry no creation times: neither
        # do these.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        self.certificates = CertificateMetrics(self.registry)
        ProcessCollector(registry=self.registry)
        enable_multiprocess(directory)
        _WorkerFiles(self.registry, path=str(directory))  # type: ignore[no-untyped-call]


def aggregated(directory: Path) -> CollectorRegistry:
    """A registry of the sum over every worker's files."""
    registry = CollectorRegistry()
    _WorkerFiles(registry, path=str(directory))  # type: ignore[no-untyped-call]
    return registry


class _WorkerFiles(multiprocess.MultiProcessCollector):
    """The sum over the workers' files but those still being created.

    prometheus_client creates a worker's file empty and sizes it a moment later; read in
    that moment, it fails the whole scrape with a 500, and for good if the worker died
    then (prometheus/client_python#1199). An empty file holds no value yet.
    """

    def collect(self) -> Any:
        _forget_gone_workers(Path(self._path))
        files = [str(f) for f in Path(self._path).glob("*.db") if _sized(f)]
        return self.merge(files, accumulate=True)  # type: ignore[no-untyped-call]


def _forget_gone_workers(directory: Path) -> None:
    """Drop the live gauges of worker processes that have exited (their counters stay in the
    sums): a worker respawned, or replaced after a crash, leaves its files behind."""
    gone = set()
    for file in directory.glob("gauge_live*_*.db"):
        number = file.stem.rsplit("_", 1)[-1]
        if number.isdigit() and not _alive(int(number)):
            gone.add(int(number))
    for pid in gone:
        forget_worker(pid, directory)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sized(file: Path) -> bool:
    try:
        return file.stat().st_size > 0
    except FileNotFoundError:  # a live gauge's file, removed for a worker that exited
        return False


def forget_worker(pid: int, directory: Path) -> None:
    """Drop the live gauges of a worker that exited (its counters stay in the sums)."""
    multiprocess.mark_process_dead(pid, str(directory))  # type: ignore[no-untyped-call]
