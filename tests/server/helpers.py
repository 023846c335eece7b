"""Start the real server in a subprocess and talk to it over verified TLS."""

from __future__ import annotations

import contextlib
import copy
import ctypes
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# Recorded from a real kube-apiserver; see the README beside them.
FIXTURES = REPO / "tests" / "fixtures" / "admission-reviews"
HARNESS = Path(__file__).with_name("harness.py")
STARTUP_SECONDS = 20.0

DEFAULT_POLICY = resources.files("webhook").joinpath("data/default-policy.yaml").read_text()
WARN_POLICY = DEFAULT_POLICY.replace("mode: enforce", "mode: warn").replace(
    "name: default", "name: relaxed"
)
BROKEN_POLICY = DEFAULT_POLICY.replace("mode: enforce", "mode: sometimes")


def fixture(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return doc


def fixture_names() -> list[str]:
    names = sorted(p.stem for p in FIXTURES.glob("*.json"))
    assert names, f"no recorded reviews in {FIXTURES}"
    return names


# Worker processes of the servers under test: several, as `serve` runs on a machine of
# several cores; a fixed number, so that counters summed over them are known.
WORKERS = 2


def serve_args(tls: Path, port: int, metrics_port: int) -> list[str]:
    """``preemptguard serve`` flags: 127.0.0.1, the given ports, the pair in ``tls``."""
    return [
        "--host", "127.0.0.1",
        "--port", str(port),
        "--metrics-port", str(metrics_port),
        "--workers", str(WORKERS),
        "--cert-file", str(tls / "tls.crt"),
        "--key-file", str(tls / "tls.key"),
    ]  # fmt: skip


def harness_server(tls: Path, log: Path, **options: Any) -> ServerProcess:
    """The harness (the real stack with test-only behaviour, see harness.py) on a free port."""
    port = free_port()
    return ServerProcess(
        [],
        ca=tls / "ca.crt",
        log=log,
        port=port,
        metrics_port=options.get("metrics_port", 0),
        harness_options={
            "cert_file": str(tls / "tls.crt"),
            "key_file": str(tls / "tls.key"),
            "port": port,
            **options,
        },
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def client_context(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.body)
        return doc

    @property
    def response(self) -> dict[str, Any]:
        response: dict[str, Any] = self.json()["response"]
        return response


class Client:
    """One keep-alive HTTPS connection, verified against a CA."""

    def __init__(self, port: int, ca: Path, *, host: str = "127.0.0.1", timeout: float = 10):
        self.conn = http.client.HTTPSConnection(
            host, port, context=client_context(ca), timeout=timeout
        )

    def post(
        self, path: str, body: bytes | dict[str, Any], content_type: str = "application/json"
    ) -> Reply:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        self.conn.request("POST", path, data, {"Content-Type": content_type})
        return self._reply()

    def get(self, path: str) -> Reply:
        self.conn.request("GET", path)
        return self._reply()

    def _reply(self) -> Reply:
        resp = self.conn.getresponse()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())

    def peer_certificate(self) -> dict[str, Any]:
        sock = self.conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        cert = sock.getpeercert()
        assert cert is not None
        return dict(cert)

    def close(self) -> None:
        self.conn.close()


SERVE = (sys.executable, "-m", "webhook", "serve")
"""``preemptguard serve`` exactly as the console script runs it."""


class ServerProcess:
    """``preemptguard serve`` (or the test harness) in a subprocess, logs in a file."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        ca: Path,
        log: Path,
        port: int,
        metrics_port: int,
        env: dict[str, str] | None = None,
        harness_options: dict[str, Any] | None = None,
        cpus: set[int] | None = None,
    ) -> None:
        """``cpus``: the CPUs the server and its workers may use (all: None)."""
        self.ca, self.log_path, self.port, self.metrics_port = ca, log, port, metrics_port
        if harness_options is None:
            command = [*SERVE, *args]
        else:
            command = [sys.executable, str(HARNESS), json.dumps(harness_options)]
        environment = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        environment.update(env or {})
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=REPO,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
        self.wait_ready()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited {self.proc.returncode}:\n{self.logs()}")
            try:
                client = Client(self.port, self.ca, timeout=2)
                if client.get("/healthz").status == 200:
                    client.close()
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server did not come up:\n{self.logs()}")

    def client(self) -> Client:
        return Client(self.port, self.ca)

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text: str = resp.read().decode()
            return text

    def metric(self, name: str) -> float:
        """The value of one sample line (name with labels, as printed)."""
        for line in self.metrics().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        raise AssertionError(f"no sample {name}")

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_events(self, event: str) -> list[dict[str, Any]]:
        found = []
        for line in self.logs().splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                if record.get("event") == event:
                    found.append(record)
        return found

    def terminate(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._log.close()


def server_socket_option(server_pid: int, client_port: int, level: int, option: int) -> int:
    """An option of the socket that the server process ``server_pid`` (or one of its
    children) accepted for the connection from ``client_port`` on 127.0.0.1, read from a copy
    of that socket taken with pidfd_getfd(2)."""
    inode = _server_inode(client_port)
    for pid in [server_pid, *_children(server_pid)]:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target == f"socket:[{inode}]":
                with _copied_socket(pid, int(fd.name)) as sock:
                    value: int = sock.getsockopt(level, option)
                    return value
    raise AssertionError(f"no socket of {server_pid} serves the connection from {client_port}")


def _server_inode(client_port: int) -> str:
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote_port = int(fields[2].split(":")[1], 16)
        if remote_port == client_port and fields[9] != "0":
            return fields[9]
    raise AssertionError(f"no server socket for the connection from port {client_port}")


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()]


_PIDFD_GETFD = 438  # x86_64 and arm64 share the number


@contextlib.contextmanager
def _copied_socket(pid: int, fd: int) -> Iterator[socket.socket]:
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        copy = libc.syscall(_PIDFD_GETFD, pidfd, fd, 0)
        if copy < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd failed")
    finally:
        os.close(pidfd)
    sock = socket.socket(fileno=copy)
    try:
        yield sock
    finally:
        sock.detach()
        os.close(copy)


def wait_for(condition: Any, timeout: float = 30, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


def with_object(review: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(review)
    changed["request"]["object"] = obj
    return changed
