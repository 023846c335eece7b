"""Admission server benchmark: ``preemptguard serve`` against an always-allow app on the same
stack, driven by ``hey`` over TLS with keep-alive, in one run; prints figures, asserts none.

    .venv/bin/python benchmarks/server_bench.py [--seconds 10] [--repeats 3] [--rss-reviews 100000]

Both servers run at once, side by side: ``preemptguard serve`` as users start it (TLS with a
self-signed certificate, the built-in policy, its default settings, metrics on) and an app
that parses the review and allows it, through preemptguard's own transport on the same server
(granian), TLS, processes and settings: the same stack, but the review. Every request POSTs
the recorded sweep pod review to ``/mutate``. hey comes from ``hack/hey.sh`` (``HEY``
overrides it) and shares the cores with the servers, so compare columns, not absolute
figures with another machine.

(a) default settings (workers = CPUs) at 16 connections; (b) 1 process at 16 and at 1
connection, and at 1 connection the review's own time inside the worker, as its log lines
give it (beside engine_bench's whole review in process: what cold caches cost); (c) a fixed
400 requests/s (``hey -q`` per connection) p50/p99; (d) bursts of 64 and 128 connections
beside idle handshaken ones (as Go's client parks them), counting non-200 answers, errors and
hung requests (no answer within ``--timeout``). Each measurement runs
``--repeats`` times, alternating which server goes first; medians are printed, with the ratio
to the always-allow app and the goal. (e) preemptguard beside every yardstick of
``YARDSTICKS`` in requests/s: Flask on the same server, a bare WSGI function there, and Flask
under gunicorn, the stack before granian (where gunicorn is installed). Then the RSS of each
``serve`` worker (and of its large-review child) before and after ``--rss-reviews`` more
reviews.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.native import engine_build

REPO = Path(__file__).resolve().parents[1]
REVIEW = REPO / "tests" / "fixtures" / "admission-reviews" / "create-pod-sweep-mutate.json"
HOST = "127.0.0.1"
# The API server's default webhook timeout (and the shipped configuration's) is 3 s.
LATE_SECONDS = 3.0


# --- the always-allow app (also the do-nothing webhook of benchmarks/e2e_bench.py) -------

_FLASK: Any = None


def trivial_app(environ: dict[str, Any], start_response: Any) -> Any:
    """Always allow, through the same Flask stack: parse the review, echo the uid."""
    return _trivial_flask()(environ, start_response)


def _trivial_flask() -> Any:
    global _FLASK
    if _FLASK is None:
        from flask import Flask, request

        app = Flask("allow")
        # Made before gunicorn forks its workers, so every worker counts into the same value.
        seen = mp.Value(ctypes.c_long, 0)

        # The same-patch yardstick of benchmarks/e2e_bench.py: with this folder set, a pod
        # that names a workload class gets, from /mutate, the patch in its file "patch" (what
        # preemptguard answers for that pod); until that file exists, its review is kept in
        # "review.json" for the bench to compute that patch from.
        annotated = os.environ.get(SAME_PATCH_DIR)
        patch: list[str] = []

        @app.post("/mutate")
        @app.post("/validate")
        def allow() -> Any:
            review = request.get_json()
            uid = review["request"]["uid"]
            with seen.get_lock():
                seen.value += 1
            response = {"uid": uid, "allowed": True}
            if annotated and request.path == "/mutate" and _names_a_class(review):
                response.update(_same_patch(Path(annotated), request.get_data(), patch))
            body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": response}  # fmt: skip
            return app.response_class(json.dumps(body), mimetype="application/json")

        @app.get("/answered")
        def count() -> Any:
            # Lets a caller see when the API server has started calling this endpoint.
            return app.response_class(str(seen.value), mimetype="text/plain")

        @app.get("/readyz")
        def ready() -> Any:
            return app.response_class("ok", mimetype="text/plain")

        _FLASK = app
    return _FLASK


SAME_PATCH_DIR = "PREEMPTGUARD_BENCH_SAME_PATCH_DIR"


def _names_a_class(review: Any) -> bool:
    obj = review["request"].get("object") or {}
    return "together.ai/workload" in (obj.get("metadata", {}).get("annotations") or {})


def _same_patch(folder: Path, body: bytes, patch: list[str]) -> dict[str, Any]:
    if not patch:
        if not (folder / "patch").exists():
            (folder / "review.json").write_bytes(body)
            return {}
        patch.append((folder / "patch").read_text())
    return {"patch": patch[0], "patchType": "JSONPatch"}


def bare_allow(environ: dict[str, Any], start_response: Any) -> Any:
    """Always allow as a bare WSGI function (no Flask): the floor of the stack, for (e)."""
    if environ.get("REQUEST_METHOD") == "GET":  # /readyz, asked before the bench starts
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    uid = json.loads(environ["wsgi.input"].read(length))["request"]["uid"]
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "response": {"uid": uid, "allowed": True}}).encode()  # fmt: skip
    start_response("200 OK", [("Content-Type", "application/json"),
                              ("Content-Length", str(len(body)))])  # fmt: skip
    return [body]


# The yardsticks, each an always-allow app that parses the review and echoes its uid:
YARDSTICKS = {
    # through preemptguard's own transport on its own server: the same stack, but the review
    "transport": "always-allow, same transport",
    # Flask on the same server (granian), as Flask apps are served by it (WSGI)
    "flask": "always-allow, Flask on granian",
    # Flask on bare WSGI under the same server: how much of "flask" is Flask's
    "bare": "always-allow, bare WSGI on granian",
    # the stack before granian: Flask under gunicorn's threaded worker over TLS (only where
    # gunicorn is installed: pip install 'gunicorn==27.0.1')
    "gunicorn": "always-allow, Flask on gunicorn",
}


def serve_allow(port: int, tls: Path, workers: int, kind: str) -> None:
    """In a subprocess: one of the ``YARDSTICKS``, with ``preemptguard serve``'s settings."""
    from functools import partial

    from granian import Granian
    from granian.constants import HTTPModes, Interfaces, SSLProtocols

    from webhook.server import logs
    from webhook.server.serving import ServerSettings

    settings = ServerSettings(host=HOST, port=port, workers=workers)
    logs.configure(settings.log_level)
    if kind == "gunicorn":
        _serve_gunicorn(port, tls, workers, settings.threads)
        return
    server = Granian(
        "yardstick",
        address=HOST,
        port=port,
        interface=Interfaces.ASGI if kind == "transport" else Interfaces.WSGI,
        http=HTTPModes.http1,
        websockets=False,
        workers=workers,
        blocking_threads=None if kind == "transport" else settings.threads,
        backlog=settings.backlog,
        backpressure=settings.max_connections,
        ssl_cert=tls / "tls.crt",
        ssl_key=tls / "tls.key",
        ssl_protocol_min=SSLProtocols.tls12,
    )
    _trivial_flask()
    apps = {"transport": _allow_transport, "flask": _flask_app, "bare": _bare_app}
    server.serve(target_loader=partial(_loaded, apps[kind]))


def _loaded(make: Callable[[], Any], _target: str) -> Any:
    return make()


def _flask_app() -> Any:
    return trivial_app


def _bare_app() -> Any:
    return bare_allow


def _allow_transport() -> Any:
    """preemptguard's transport in front of a reviewer that parses each review and allows it."""
    from webhook.admission.lookups import no_namespaces
    from webhook.engine.evaluation import evaluate
    from webhook.loading.policies import builtin_policy
    from webhook.server.app import health_asgi
    from webhook.server.metrics import Metrics
    from webhook.server.reviewer import Head, Reply, Reviewer, json_reply
    from webhook.server.transport import Transport

    class Allowing(Reviewer):
        async def review(self, head: Head, body: bytes) -> Reply:
            uid = json.loads(body)["request"]["uid"]
            answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": uid, "allowed": True}}  # fmt: skip
            return json_reply(answer, uid)

    policy = builtin_policy()
    reviewer = Allowing(lambda: policy, no_namespaces, None, evaluate, Metrics())
    return Transport(reviewer, health_asgi(lambda: policy))


def _serve_gunicorn(port: int, tls: Path, workers: int, threads: int) -> None:
    from gunicorn.app.base import BaseApplication

    class Yardstick(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            for key, value in {
                "bind": f"{HOST}:{port}", "workers": workers, "threads": threads,
                "worker_class": "gthread", "certfile": str(tls / "tls.crt"),
                "keyfile": str(tls / "tls.key"), "keepalive": 120, "accesslog": None,
            }.items():  # fmt: skip
                self.cfg.set(key, value)

        def load(self) -> Any:
            return trivial_app

    Yardstick().run()


# --- servers as subprocesses ----------------------------------------------------------------


@dataclass
class Server:
    label: str
    url: str
    proc: subprocess.Popen[bytes]

    def processes(self) -> dict[str, list[int]]:
        """The arbiter, its workers, and the workers' children (large-review processes)."""
        workers = children(self.proc.pid)
        grand = [c for w in workers for c in children(w)]
        return {"arbiter": [self.proc.pid], "workers": workers, "children": grand}

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(pid) for pids in self.processes().values() for pid in pids)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def preemptguard_command() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m webhook``."""
    script = Path(sys.executable).with_name("preemptguard")
    return [str(script)] if script.exists() else [sys.executable, "-m", "webhook"]


@contextmanager
def _running(label: str, argv: list[str], port: int, tls: Path, log: Path) -> Iterator[Server]:
    # No cluster: namespace defaults stay off, as in `make run`.
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    server = Server(label, f"https://{HOST}:{port}", proc)
    try:
        _wait_ready(server, tls, log)
        yield server
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(server: Server, tls: Path, log: Path) -> None:
    context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise SystemExit(f"{server.label} exited with {server.proc.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(f"{server.url}/readyz", context=context, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{server.label} did not become ready in 60 s")


@contextmanager
def preemptguard_server(tls: Path, workers: int | None, log: Path) -> Iterator[Server]:
    """``preemptguard serve`` as the README runs it; ``workers`` None: its default."""
    port = free_port()
    argv = [*preemptguard_command(), "serve", "--self-signed", str(tls), "--host", HOST,
            "--port", str(port), "--metrics-port", str(free_port())]  # fmt: skip
    if workers is not None:
        argv += ["--workers", str(workers)]
    with _running("preemptguard", argv, port, tls, log) as server:
        yield server


@contextmanager
def allow_server(
    tls: Path, workers: int, log: Path | None = None, *, kind: str = "transport"
) -> Iterator[Server]:
    """The always-allow app ``kind`` (``YARDSTICKS``) on a free port, with ``preemptguard
    serve``'s settings; certificates in ``tls``."""
    port = free_port()
    argv = [sys.executable, __file__, "--serve-allow", kind, "--port", str(port),
            "--tls", str(tls), "--workers", str(workers)]  # fmt: skip
    with _running(YARDSTICKS[kind], argv, port, tls, log or Path(os.devnull)) as server:
        yield server


# --- /proc -----------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ")".
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# --- hey -------------------------------------------------------------------------------------


@dataclass
class Run:
    """One hey run, as its summary reports it."""

    ok: int = 0
    non_200: int = 0
    hung: int = 0
    errors: int = 0
    seconds: float = 0.0
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    slowest_ms: float = float("nan")
    server_cpu_s: float = 0.0
    error_text: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_review(self) -> float:
        answered = self.ok + self.non_200
        return self.server_cpu_s / answered * 1e6 if answered else float("nan")

    @property
    def failed(self) -> int:
        return self.non_200 + self.hung + self.errors


_PERCENTILE = re.compile(r"^\s*(\d+)%+ in (\S+) secs", re.MULTILINE)
_STATUS = re.compile(r"^\s*\[(\d+)\]\s+(\d+) responses", re.MULTILINE)
_ERROR = re.compile(r"^\s*\[(\d+)\]\s+(.+)$", re.MULTILINE)


def parse_hey(text: str) -> Run:
    run = Run()
    total = re.search(r"Total:\s+(\S+) secs", text)
    run.seconds = float(total.group(1)) if total else 0.0
    slowest = re.search(r"Slowest:\s+(\S+) secs", text)
    if slowest:
        run.slowest_ms = float(slowest.group(1)) * 1000
    for pct, secs in _PERCENTILE.findall(text):
        if pct == "50":
            run.p50_ms = float(secs) * 1000
        elif pct == "99":
            run.p99_ms = float(secs) * 1000
    status_part, _, error_part = text.partition("Error distribution:")
    for code, count in _STATUS.findall(status_part):
        if code == "200":
            run.ok += int(count)
        else:
            run.non_200 += int(count)
    for count, message in _ERROR.findall(error_part):
        if "Timeout" in message or "deadline exceeded" in message:
            run.hung += int(count)
        else:
            run.errors += int(count)
        run.error_text.append(f"[{count}] {message[:200]}")
    return run


def hey_binary() -> str:
    proc = subprocess.run(
        [str(REPO / "hack" / "hey.sh")], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"hack/hey.sh found no hey:\n{proc.stderr}")
    return proc.stdout.strip()


@dataclass
class Hey:
    binary: str
    body: Path
    timeout: int

    def run(
        self, server: Server, conns: int, *, seconds: float | None = None,
        requests: int | None = None, qps: float | None = None,
    ) -> Run:  # fmt: skip
        # hey names the server by its Host header, port and all, which TLS forbids in a
        # server name (rustls refuses the hello): the name the certificate holds instead.
        argv = [self.binary, "-m", "POST", "-T", "application/json", "-D", str(self.body),
                "-c", str(conns), "-t", str(self.timeout), "-host", "localhost"]  # fmt: skip
        if seconds is not None:
            argv += ["-z", f"{seconds:g}s"]
        else:
            argv += ["-n", str(requests)]
        if qps is not None:
            argv += ["-q", f"{qps:g}"]
        cpu_before = server.cpu_seconds()
        proc = subprocess.run(
            [*argv, f"{server.url}/mutate"], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise SystemExit(f"hey failed ({proc.returncode}): {proc.stderr[-2000:]}")
        run = parse_hey(proc.stdout)
        run.server_cpu_s = server.cpu_seconds() - cpu_before
        return run


@contextmanager
def idle_connections(port: int, tls: Path, count: int) -> Iterator[int]:
    """``count`` handshaken TLS connections that send nothing; yields how many opened."""
    context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    opened: list[ssl.SSLSocket] = []
    try:
        for _ in range(count):
            try:
                raw = socket.create_connection((HOST, port), timeout=5)
                opened.append(context.wrap_socket(raw, server_hostname=HOST))
            except OSError:
                break
        yield len(opened)
    finally:
        for conn in opened:
            conn.close()


# --- the report --------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def alternate(
    pair: tuple[Server, Server], repeats: int, measure: Callable[[Server], Run]
) -> tuple[list[Run], list[Run]]:
    """``measure`` on both servers ``repeats`` times, alternating which goes first."""
    first: list[Run] = []
    second: list[Run] = []
    for i in range(repeats):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for which in order:
            (first if which == 0 else second).append(measure(pair[which]))
    return first, second


def _fmt_runs(runs: list[Run], value: Callable[[Run], float], spec: str) -> str:
    return "/".join(format(value(r), spec) for r in runs)


def row(
    label: str, pg: list[Run], allow: list[Run], value: Callable[[Run], float], unit: str,
    goal: str, meets: Callable[[float], bool] | None, spec: str = ".0f",
) -> None:  # fmt: skip
    a, b = median([value(r) for r in pg]), median([value(r) for r in allow])
    ratio = a / b if b else float("nan")
    verdict = "" if meets is None else ("meets" if meets(ratio) else "MISSES")
    print(f"{label:44} {format(a, spec):>9} {format(b, spec):>9} {unit:6} {ratio:6.2f}x  "
          f"{goal:14} {verdict}")  # fmt: skip
    print(f"{'':44}   runs: {_fmt_runs(pg, value, spec)}  |  {_fmt_runs(allow, value, spec)}")


def failures_row(label: str, pg: list[Run], allow: list[Run]) -> None:
    def total(runs: list[Run]) -> str:
        return (f"{sum(r.non_200 for r in runs)} non-200, {sum(r.hung for r in runs)} hung, "
                f"{sum(r.errors for r in runs)} errors, slowest "
                f"{max(r.slowest_ms for r in runs):.0f} ms")  # fmt: skip

    clean = all(r.failed == 0 and r.slowest_ms < LATE_SECONDS * 1000 for r in pg)
    print(f"{label:44} preemptguard: {total(pg)}  |  always-allow: {total(allow)}  "
          f"goal: none  {'meets' if clean else 'MISSES'}")  # fmt: skip
    for r in pg + allow:
        for text in r.error_text[:3]:
            print(f"{'':44}   {text}")


HEADER = (f"{'':44} {'preempt':>9} {'always':>9} {'':6} {'ratio':>7}  {'goal':14}\n"
          f"{'':44} {'guard':>9} {'-allow':>9}")  # fmt: skip


def section(
    title: str, hey: Hey, tls: Path, workers: int | None, allow_workers: int, args: Any,
    work: Path, body: Callable[[tuple[Server, Server]], None],
) -> None:  # fmt: skip
    with ExitStack() as stack:
        pg = stack.enter_context(preemptguard_server(tls, workers, work / "preemptguard.log"))
        allow = stack.enter_context(allow_server(tls, allow_workers, work / "allow.log"))
        counts = (len(pg.processes()["workers"]), len(allow.processes()["workers"]))
        print(f"\n## {title}: preemptguard serve with {counts[0]} worker process(es), "
              f"always-allow with {counts[1]}; serve's default threads; "
              f"load average {load_average()}")  # fmt: skip
        print(HEADER)
        for server in (pg, allow):  # warm up: imports, caches, TLS sessions
            hey.run(server, 4, requests=400)
        body((pg, allow))


def bench(args: argparse.Namespace) -> None:
    from webhook.server import certs
    from webhook.server.serving import available_cpus

    work = Path(tempfile.mkdtemp(prefix="pg-server-bench-"))
    tls = work / "certs"
    certs.write(certs.issue(list(certs.LOCAL_HOSTS)), tls)
    hey = Hey(hey_binary(), REVIEW, args.timeout)
    cpus = available_cpus()
    seconds, repeats = args.seconds, args.repeats
    print(f"# {os.cpu_count()} cores ({cpus} available to the server); load average "
          f"{load_average()}; hey {hey.binary}; engine {engine_build()}")  # fmt: skip
    print(f"# POST /mutate {REVIEW.name} ({REVIEW.stat().st_size} bytes), TLS, keep-alive; "
          f"{seconds:g} s per run, {repeats} runs per figure (medians; runs listed "
          f"preemptguard | always-allow); server CPU summed over its processes")  # fmt: skip

    def default_settings(pair: tuple[Server, Server]) -> None:
        pg, allow = alternate(pair, repeats, lambda s: hey.run(s, 16, seconds=seconds))
        row("(a) throughput, 16 connections", pg, allow, lambda r: r.rate, "/s",
            ">= 0.9x", lambda x: x >= 0.9)  # fmt: skip
        row("    server CPU per review", pg, allow, lambda r: r.cpu_us_per_review, "us",
            "", None)  # fmt: skip
        failures_row("    failures", pg, allow)
        per_conn = args.rate / args.rate_conns
        pg, allow = alternate(
            pair, repeats, lambda s: hey.run(s, args.rate_conns, seconds=seconds, qps=per_conn)
        )
        label = f"(c) fixed {args.rate:g}/s ({args.rate_conns} conns x {per_conn:g}/s)"
        row(label, pg, allow, lambda r: r.rate, "/s", "", None)
        row("    p50", pg, allow, lambda r: r.p50_ms, "ms", "", None, ".1f")
        row("    p99", pg, allow, lambda r: r.p99_ms, "ms", "<= 1.2x", lambda x: x <= 1.2, ".1f")
        failures_row("    failures", pg, allow)
        for conns in (64, 128):

            def burst(server: Server, conns: int = conns) -> Run:
                port = int(server.url.rsplit(":", 1)[1])
                with idle_connections(port, tls, args.idle):
                    return hey.run(server, conns, seconds=seconds)

            pg, allow = alternate(pair, repeats, burst)
            label = f"(d) burst, {conns} connections + {args.idle} idle"
            row(label, pg, allow, lambda r: r.rate, "/s", "", None)
            row("    p99", pg, allow, lambda r: r.p99_ms, "ms", "", None, ".1f")
            failures_row("    failures", pg, allow)

    def one_process(pair: tuple[Server, Server]) -> None:
        for conns in (16, 1):

            def measure(server: Server, conns: int = conns) -> Run:
                return hey.run(server, conns, seconds=seconds)

            logged = (work / "preemptguard.log").stat().st_size
            pg, allow = alternate(pair, repeats, measure)
            row(f"(b) throughput, {conns} connection(s)", pg, allow, lambda r: r.rate, "/s",
                ">= 0.9x", lambda x: x >= 0.9)  # fmt: skip
            row("    p50", pg, allow, lambda r: r.p50_ms, "ms", "", None, ".1f")
            row("    server CPU per review", pg, allow, lambda r: r.cpu_us_per_review, "us",
                "", None)  # fmt: skip
            failures_row("    failures", pg, allow)
            if conns == 1:
                review_inside(work / "preemptguard.log", logged)

    if not args.skip_default:
        section("default settings (workers = CPUs)", hey, tls, None, cpus, args, work,
                default_settings)  # fmt: skip
    if not args.skip_one:
        section("1 process", hey, tls, 1, 1, args, work, one_process)
    if not args.skip_default:
        stack_floor(hey, tls, cpus, args, work)
    if args.rss_reviews:
        memory(hey, tls, args, work)
    print(f"\n# load average at the end {load_average()}; server logs in {work}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def review_inside(log: Path, offset: int) -> None:
    """The review's own time inside the worker: ``duration_ms`` of the log lines written from
    ``offset`` on (one connection, so no other review shares the worker: time there is CPU).
    Set beside engine_bench's whole review in process, it shows what cold caches cost."""
    with log.open("rb") as lines:
        lines.seek(offset)
        durations = [
            float(event["duration_ms"]) * 1000
            for event in map(json.loads, (line for line in lines if line.startswith(b"{")))
            if event.get("event") == "admission" and "duration_ms" in event
        ]
    print(f"    the review inside the worker: {median(durations):.0f} us, median of "
          f"{len(durations)} (logged duration_ms: from the request's arrival)")  # fmt: skip


def stack_floor(hey: Hey, tls: Path, workers: int, args: argparse.Namespace, work: Path) -> None:
    """(e) preemptguard beside every yardstick, in requests/s: the same stack as (a), Flask on
    the same server, a bare WSGI function there, and Flask under gunicorn (the stack before
    granian) where gunicorn is installed."""
    kinds = [k for k in YARDSTICKS if k != "gunicorn" or importlib.util.find_spec("gunicorn")]
    with ExitStack() as stack:
        servers = [stack.enter_context(preemptguard_server(tls, None, work / "pg-e.log"))]
        for kind in kinds:
            log = work / f"allow-{kind}.log"
            servers.append(stack.enter_context(allow_server(tls, workers, log, kind=kind)))
        for server in servers:
            hey.run(server, 4, requests=400)
        runs: list[list[Run]] = [[] for _ in servers]
        for i in range(args.repeats):
            order = range(len(servers)) if i % 2 == 0 else reversed(range(len(servers)))
            for which in order:
                runs[which].append(hey.run(servers[which], 16, seconds=args.seconds))
        print(f"\n## (e) preemptguard beside every yardstick, {workers} worker(s), 16 connections;"
              f" load average {load_average()}")  # fmt: skip
        ours = median([r.rate for r in runs[0]])
        for server, side in zip(servers, runs, strict=True):
            rate = median([r.rate for r in side])
            cpu = median([r.cpu_us_per_review for r in side])
            listed = _fmt_runs(side, lambda r: r.rate, ".0f")
            ratio = ours / rate if rate else float("nan")
            print(f"{server.label:44} {rate:9.0f} /s   preemptguard {ratio:5.2f}x   "
                  f"server CPU {cpu:4.0f} us per review   runs: {listed}")  # fmt: skip
        if "gunicorn" not in kinds:
            print("(Flask on gunicorn: pip install 'gunicorn==27.0.1' to measure it too)")


def memory(hey: Hey, tls: Path, args: argparse.Namespace, work: Path) -> None:
    steps = 4
    per_step = args.rss_reviews // steps
    with preemptguard_server(tls, None, work / "preemptguard-rss.log") as server:
        hey.run(server, 16, requests=2000)  # warm up
        procs = server.processes()
        workers, kids = procs["workers"], procs["children"]
        print(f"\n## RSS of preemptguard serve's processes over {args.rss_reviews} reviews "
              f"(16 connections; MiB, VmRSS; load average {load_average()})")  # fmt: skip
        names = [f"worker {p}" for p in workers] + [f"child {p}" for p in kids]
        print(f"{'reviews':>10}  {'arbiter':>9}  " + "  ".join(f"{n:>14}" for n in names))

        def sample(done: int) -> list[float]:
            values = [rss_mib(p) for p in [server.proc.pid, *workers, *kids]]
            print(f"{done:>10}  {values[0]:9.1f}  " + "  ".join(f"{v:14.1f}" for v in values[1:]))
            return values[1 : 1 + len(workers)]

        before = sample(0)
        failed = 0
        done = 0
        for _ in range(steps):
            run = hey.run(server, 16, requests=per_step)
            failed += run.failed
            done += run.ok + run.non_200
            after = sample(done)
        if server.processes()["workers"] != workers:
            print("  (a worker was replaced during the run)")
        growth = max(a - b for a, b in zip(after, before, strict=True))
        worst = max(after)
        print(f"largest worker RSS {worst:.1f} MiB (goal <= 100 MiB: "
              f"{'meets' if worst <= 100 else 'MISSES'}); largest growth {growth:+.1f} MiB "
              f"after {done} reviews ({failed} failed)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per hey run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure")
    parser.add_argument("--rate", type=float, default=400.0, help="the fixed rate, requests/s")
    parser.add_argument("--rate-conns", type=int, default=16, help="connections at fixed rate")
    parser.add_argument("--idle", type=int, default=32, help="idle connections beside bursts")
    parser.add_argument("--timeout", type=int, default=10, help="hey's per-request timeout, s")
    parser.add_argument("--rss-reviews", type=int, default=100_000, help="0: skip RSS")
    parser.add_argument("--skip-default", action="store_true", help="skip (a), (c), (d)")
    parser.add_argument("--skip-one", action="store_true", help="skip (b)")
    parser.add_argument("--keep", action="store_true", help="keep the server logs")
    parser.add_argument("--serve-allow", choices=YARDSTICKS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--tls", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_allow:
        serve_allow(args.port, args.tls, args.workers, args.serve_allow)
    else:
        bench(args)


if __name__ == "__main__":
    main()
