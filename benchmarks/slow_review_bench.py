"""Reviews built to be slow: how long each takes, and what a burst of them does to others.

Starts ``preemptguard serve`` as shipped (TLS, keep-alive) on 127.0.0.1 and prints:

- for every pod in ``tests/adversarial.py`` (serving pods asking for preemptible nodes, about
  3 MiB each: thousands of terms or values, tolerations, annotations, managedFields nested
  10,000 levels, dense nested containers), the slowest of three /mutate and /validate answers
  and what the answer was;
- an ordinary review's latency alone, then while 16 connections send the slowest of those
  pods back to back: p50 and max, and how the large ones were answered (checked, or refused
  as busy), with the slowest of their answers;
- bursts of 24 pods just under the size of a large review (``deep_and_dense``, ~480 KiB,
  checked in the server's threads), each burst on 24 new connections at once, one after
  another: how they were answered (checked, refused as busy), the slowest answer, and an
  ordinary review's p50 and max meanwhile.

Every answer must come inside the API server's 3 s timeout (``?timeout=3s``, as the API server
calls). The server runs one worker process, as the shipped one-CPU replica does.

    python benchmarks/slow_review_bench.py [--burst-seconds 10] [--workers 1]
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.adversarial import SLOW_PODS, deep_and_dense, encode, review_of  # noqa: E402

HOST = "127.0.0.1"
ORDINARY = REPO / "tests" / "fixtures" / "admission-reviews" / "create-pod-sweep-mutate.json"
PATH = "/mutate?timeout=3s"
CLIENT_TIMEOUT = 10.0
DEADLINE = 3.0
MEDIUM_BURST = 24


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def server(workdir: Path, workers: int) -> Iterator[tuple[int, Path]]:
    port = free_port()
    certs = workdir / "certs"
    exe = Path(sys.executable).with_name("preemptguard")
    argv = [str(exe), "serve", "--self-signed", str(certs), "--host", HOST, "--port", str(port),
            "--metrics-port", "0", "--log-level", "error", "--workers", str(workers)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = connection(port, certs)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    conn.close()
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("preemptguard serve did not start")
            time.sleep(0.2)
        yield port, certs
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def connection(port: int, certs: Path) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    return http.client.HTTPSConnection(HOST, port, context=context, timeout=CLIENT_TIMEOUT)


def post(conn: http.client.HTTPSConnection, path: str, body: bytes) -> tuple[float, str]:
    """Seconds to the answer, and what it was: allowed, refused, busy, or an HTTP status."""
    started = time.perf_counter()
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    reply = conn.getresponse()
    data = reply.read()
    seconds = time.perf_counter() - started
    if reply.status != 200:
        return seconds, f"HTTP {reply.status}"
    response = json.loads(data)["response"]
    if response["allowed"]:
        return seconds, "allowed"
    return seconds, "busy" if response["status"]["code"] == 429 else "refused"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def each_pod(port: int, certs: Path) -> dict[str, bytes]:
    print("Each pod alone (slowest of 3 answers):")
    bodies: dict[str, bytes] = {}
    conn = connection(port, certs)
    for name, build in SLOW_PODS.items():
        body = encode(review_of(build(), uid=f"{name}-0"))
        bodies[name] = body
        for hook in ("mutate", "validate"):
            runs = [post(conn, f"/{hook}?timeout=3s", body) for _ in range(3)]
            worst = max(s for s, _ in runs)
            answers = ",".join(sorted({a for _, a in runs}))
            print(f"  {name:22} {len(body) / 2**20:5.2f} MiB  /{hook:8} {ms(worst)}  {answers}")
    conn.close()
    return bodies


def ordinary_latencies(port: int, certs: Path, seconds: float) -> list[float]:
    body = ORDINARY.read_bytes()
    conn = connection(port, certs)
    out: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        took, answer = post(conn, PATH, body)
        assert answer == "allowed", answer
        out.append(took)
        time.sleep(0.02)
    conn.close()
    return out


def burst(
    port: int, certs: Path, body: bytes, seconds: float
) -> tuple[list[float], Counter[str], float]:
    """16 connections sending ``body`` back to back, beside an ordinary review every 20 ms."""
    answers: Counter[str] = Counter()
    slowest = [0.0]
    lock = threading.Lock()
    stop = threading.Event()

    def hammer() -> None:
        conn = connection(port, certs)
        while not stop.is_set():
            try:
                took, answer = post(conn, PATH, body)
            except OSError as exc:
                took, answer = CLIENT_TIMEOUT, f"error {type(exc).__name__}"
                conn.close()
                conn = connection(port, certs)
            with lock:
                answers[answer] += 1
                slowest[0] = max(slowest[0], took)
        conn.close()

    threads = [threading.Thread(target=hammer) for _ in range(16)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    ordinary = ordinary_latencies(port, certs, seconds)
    stop.set()
    for t in threads:
        t.join()
    return ordinary, answers, slowest[0]


def medium_bursts(
    port: int, certs: Path, seconds: float
) -> tuple[list[float], Counter[str], Counter[str], float]:
    """Bursts of ``MEDIUM_BURST`` slow ~480 KiB reviews, each on its own new connection and
    sent at once, one burst after another, beside an ordinary review every 20 ms."""
    # Encoded once: encoding it takes longer than the server takes to answer it.
    template = encode(review_of(deep_and_dense(500 * 1024), uid="medium"))
    answers: Counter[str] = Counter()
    ordinary_answers: Counter[str] = Counter()
    latencies: list[float] = []
    slowest = [0.0]
    lock = threading.Lock()
    stop = threading.Event()

    def one(body: bytes, start: threading.Barrier) -> None:
        conn = connection(port, certs)
        try:
            conn.connect()
            start.wait()
            took, answer = post(conn, PATH, body)
        except OSError as exc:
            took, answer = CLIENT_TIMEOUT, f"error {type(exc).__name__}"
        conn.close()
        with lock:
            answers[answer] += 1
            slowest[0] = max(slowest[0], took)

    def ordinary() -> None:
        body = ORDINARY.read_bytes()
        conn = connection(port, certs)
        while not stop.is_set():
            took, answer = post(conn, PATH, body)
            with lock:
                ordinary_answers[answer] += 1
                latencies.append(took)
            time.sleep(0.02)
        conn.close()

    prober = threading.Thread(target=ordinary)
    prober.start()
    end = time.monotonic() + seconds
    number = 0
    while time.monotonic() < end:
        bodies = [
            template.replace(b'"uid":"medium"', f'"uid":"medium-{number}-{i}"'.encode(), 1)
            for i in range(MEDIUM_BURST)
        ]
        start = threading.Barrier(MEDIUM_BURST)
        threads = [threading.Thread(target=one, args=(body, start)) for body in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        number += 1
    stop.set()
    prober.join()
    return latencies, answers, ordinary_answers, slowest[0]


def summary(latencies: list[float]) -> str:
    lat = sorted(latencies)
    return f"p50 {ms(lat[len(lat) // 2])}  max {ms(lat[-1])}  n {len(lat)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst-seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, server(Path(tmp), args.workers) as (port, certs):
        bodies = each_pod(port, certs)
        slowest_name = max(bodies, key=lambda n: min(
            post(connection(port, certs), PATH, bodies[n])[0] for _ in range(2)))  # fmt: skip
        print(
            f"\nAn ordinary review, alone:          {summary(ordinary_latencies(port, certs, 3))}"
        )
        ordinary, answers, worst = burst(port, certs, bodies[slowest_name], args.burst_seconds)
        print(f"... during 16 x {slowest_name:>16}: {summary(ordinary)}")
        print(f"    the large reviews: {dict(answers)}, slowest answer {ms(worst)}")
        if worst >= DEADLINE or any(a.startswith(("HTTP", "error")) for a in answers):
            print("    FAIL: a large review was answered late or not with a review")
        ordinary, answers, beside, worst = medium_bursts(port, certs, args.burst_seconds)
        size = len(encode(review_of(deep_and_dense(500 * 1024)))) // 1024
        print(f"... during bursts of {MEDIUM_BURST} x {size} KiB: {summary(ordinary)}")
        print(f"    the ordinary reviews: {dict(beside)}")
        print(
            f"    the {size} KiB reviews: {dict(answers)}, slowest answer {ms(worst)}"
            f" (deadline {ms(DEADLINE)})"
        )
        if worst >= DEADLINE or any(a.startswith(("HTTP", "error")) for a in answers):
            print("    FAIL: a review was answered late or not with a review")
        if set(beside) != {"allowed"}:
            print("    FAIL: an ordinary review was not checked")


if __name__ == "__main__":
    main()
