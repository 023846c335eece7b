"""Admission server benchmark: the real server stack over TLS with keep-alive, on 127.0.0.1.

Prints, for /mutate with a recorded pod review and for a trivial always-allow endpoint served
by the same stack (gunicorn + WebhookWorker + Flask over TLS):

- sequential latency on one connection (TCP_NODELAY: ~1 ms, not 40+ ms);
- admissions/s and p50/p99 latency at a fixed rate (latency counted from each request's
  scheduled send time, so a stalled server shows as latency, not as a lower rate);
- bursts on 16, 64 and 128 keep-alive connections with idle handshaken connections beside
  them, as Go's HTTP client leaves in its pool, counting requests that hang past the client
  timeout.

The load generator is Python (processes x threads with http.client) on the same cores as the
server, so absolute figures are bounded by the client too; compare the two endpoints.

    python benchmarks/server_bench.py [--quick] [--stock-gthread]
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import multiprocessing as mp
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REVIEW = REPO / "tests" / "fixtures" / "admission-reviews" / "create-pod-sweep-mutate.json"
HOST = "127.0.0.1"
CLIENT_PROCESSES = 2


@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    hung: int = 0
    seconds: float = 0.0

    def merge(self, other: Result) -> None:
        self.latencies += other.latencies
        self.errors += other.errors
        self.hung += other.hung

    def line(self) -> str:
        lat = sorted(self.latencies)
        if not lat:
            return f"{'no answers':>44}  errors {self.errors}  hung {self.hung}"
        rate = len(lat) / self.seconds if self.seconds else 0

        def ms(q: float) -> float:
            return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000

        return (
            f"{rate:8.0f}/s  p50 {ms(0.5):7.2f} ms  p99 {ms(0.99):7.2f} ms  "
            f"max {lat[-1] * 1000:7.1f} ms  n {len(lat):6d}  errors {self.errors}  hung {self.hung}"
        )


# --- the servers under test (run in subprocesses) ----------------------------------------


def trivial_app(environ: dict[str, Any], start_response: Any) -> Any:
    """Always allow, through the same Flask stack: parse the review, echo the uid."""
    return _trivial_flask()(environ, start_response)


_FLASK: Any = None


def _trivial_flask() -> Any:
    global _FLASK
    if _FLASK is None:
        from flask import Flask, request

        app = Flask("allow")
        answered = itertools.count(1)
        seen = [0]

        @app.post("/mutate")
        @app.post("/validate")
        def allow() -> Any:
            uid = request.get_json()["request"]["uid"]
            seen[0] = next(answered)
            body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": {"uid": uid, "allowed": True}}  # fmt: skip
            return app.response_class(json.dumps(body), mimetype="application/json")

        @app.get("/answered")
        def count() -> Any:
            # Lets a caller see when the API server has started calling this endpoint.
            return app.response_class(str(seen[0]), mimetype="text/plain")

        _FLASK = app
    return _FLASK


def serve(kind: str, port: int, tls: Path, threads: int, stock: bool) -> None:
    from gunicorn.workers import gthread

    from webhook.server import gunicorn as serving
    from webhook.server import logs
    from webhook.server.metrics import Metrics
    from webhook.server.reload import CertStore
    from webhook.server.runtime import ServeOptions, serve

    if stock:
        serving.WebhookWorker = gthread.ThreadWorker  # type: ignore[misc]
    settings = serving.ServerSettings(host=HOST, port=port, threads=threads, log_level="error")
    logs.configure("error")
    if kind == "mutate":
        serve(ServeOptions(tls / "tls.crt", tls / "tls.key", server=settings, metrics_port=0))
    else:
        store = CertStore(tls / "tls.crt", tls / "tls.key", Metrics())
        _trivial_flask()
        serving.run(trivial_app, store, settings, serving.Hooks())


@contextmanager
def server(kind: str, tls: Path, threads: int, stock: bool) -> Iterator[int]:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port = probe.getsockname()[1]
    args = [sys.executable, __file__, "--serve", kind, "--port", str(port), "--tls", str(tls),
            "--threads", str(threads)] + (["--stock-gthread"] if stock else [])  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_up(port, tls)
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_up(port: int, tls: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        conn = _connection(port, tls, 2)
        try:
            conn.request("GET", "/healthz")
            conn.getresponse().read()
        except OSError:
            time.sleep(0.1)
        else:
            return
        finally:
            conn.close()
    raise SystemExit("server did not start")


# --- the load generator -------------------------------------------------------------------


def _connection(port: int, tls: Path, timeout: float) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    return http.client.HTTPSConnection(HOST, port, context=context, timeout=timeout)


def _drive(
    port: int, tls: Path, body: bytes, conns: int, seconds: float, interval: float | None,
    timeout: float, out: Any,
) -> None:  # fmt: skip
    """One client process: ``conns`` threads, each on its own keep-alive connection."""
    results = [Result() for _ in range(conns)]
    start = time.monotonic() + 0.2
    stop = start + seconds

    def run(result: Result, offset: float) -> None:
        conn = _connection(port, tls, timeout)
        due = start + offset
        while True:
            if interval is not None:
                time.sleep(max(0.0, due - time.monotonic()))
            now = time.monotonic()
            if now >= stop:
                break
            sent = due if interval is not None else now
            try:
                conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                if resp.status == 200:
                    result.latencies.append(time.monotonic() - sent)
                else:
                    result.errors += 1
            except TimeoutError:
                result.hung += 1
                conn.close()
            except OSError:
                result.errors += 1
                conn.close()
            if interval is not None:
                due += interval
        conn.close()

    spread = interval or 0.0
    threads = [
        threading.Thread(target=run, args=(r, spread * i / conns)) for i, r in enumerate(results)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = Result()
    for result in results:
        total.merge(result)
    out.put(total)


def load(
    port: int, tls: Path, conns: int, seconds: float, *, rate: float | None = None,
    timeout: float = 5.0, idle: int = 0,
) -> Result:  # fmt: skip
    """Drive ``conns`` keep-alive connections for ``seconds``, at ``rate`` in all if given."""
    body = REVIEW.read_bytes()
    spare = _idle_connections(port, tls, idle)
    queue: Any = mp.Queue()
    procs = min(CLIENT_PROCESSES, conns)
    shares = [conns // procs + (1 if i < conns % procs else 0) for i in range(procs)]
    interval = conns / rate if rate else None
    workers = [
        mp.Process(target=_drive, args=(port, tls, body, n, seconds, interval, timeout, queue))
        for n in shares
    ]
    for worker in workers:
        worker.start()
    total = Result(seconds=seconds)
    for _ in workers:
        total.merge(queue.get())
    for worker in workers:
        worker.join()
    for sock in spare:
        sock.close()
    return total


def _idle_connections(port: int, tls: Path, count: int) -> list[ssl.SSLSocket]:
    """Handshaken connections that send nothing (a stalled server may refuse the handshake)."""
    context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    opened = []
    for _ in range(count):
        try:
            raw = socket.create_connection((HOST, port), timeout=5)
            opened.append(context.wrap_socket(raw, server_hostname=HOST))
        except OSError:
            break
    return opened


def sequential(port: int, tls: Path, requests: int) -> Result:
    body = REVIEW.read_bytes()
    conn = _connection(port, tls, 5)
    result = Result()
    started = time.monotonic()
    for _ in range(requests):
        sent = time.monotonic()
        conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
        conn.getresponse().read()
        result.latencies.append(time.monotonic() - sent)
    result.seconds = time.monotonic() - started
    conn.close()
    return result


# --- the report ---------------------------------------------------------------------------


def bench(args: argparse.Namespace) -> None:
    from webhook.server import certs

    seconds = 2.0 if args.quick else args.seconds
    tls = Path(tempfile.mkdtemp(prefix="pg-bench-"))
    certs.write(certs.issue(list(certs.LOCAL_HOSTS)), tls)
    worker = "stock gthread" if args.stock_gthread else "WebhookWorker"
    print(f"# {os.cpu_count()} cores; server: gunicorn {worker}, 1 process, {args.threads} threads,"
          f" TLS; client: Python, {CLIENT_PROCESSES} processes, same cores")  # fmt: skip
    print(f"# review: {REVIEW.name} ({REVIEW.stat().st_size} bytes); client timeout 5 s")
    for kind, label in (("mutate", "/mutate (engine)"), ("allow", "always-allow")):
        with server(kind, tls, args.threads, args.stock_gthread) as port:
            sequential(port, tls, 50)  # warm up
            print(f"\n## {label}")
            print(f"{'sequential, 1 connection':34} {sequential(port, tls, 300).line()}")
            res = load(port, tls, 16, seconds, rate=args.rate)
            print(f"{f'fixed rate {args.rate:g}/s, 16 connections':34} {res.line()}")
            for conns in (16, 64, 128):
                res = load(port, tls, conns, seconds, idle=args.idle)
                print(f"{f'burst, {conns} conns + {args.idle} idle':34} {res.line()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 s per measurement")
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--rate", type=float, default=200.0, help="fixed rate, requests/s")
    parser.add_argument("--idle", type=int, default=32, help="idle connections in bursts")
    parser.add_argument("--threads", type=int, default=16, help="server threads")
    parser.add_argument(
        "--stock-gthread",
        action="store_true",
        help="serve with gunicorn's stock gthread worker, for comparison",
    )
    parser.add_argument("--serve", choices=["mutate", "allow"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--tls", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.tls, args.threads, args.stock_gthread)
    else:
        mp.set_start_method("fork")
        bench(args)


if __name__ == "__main__":
    main()
