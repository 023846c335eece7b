"""A real single-machine control plane for the end-to-end tests: etcd, kube-apiserver,
kube-scheduler and kube-controller-manager on loopback, with free ports and throwaway state.

No kubelet runs: fake Node objects (see ``nodes.py``) are what the scheduler binds pods to, so a
pod's placement is its ``spec.nodeName`` while it stays Pending. Run this module to get a cluster
for manual experiments::

    python -m tests.e2e.controlplane        # prints KUBECONFIG, stops on Ctrl-C
"""

from __future__ import annotations

import atexit
import datetime as dt
import http.client
import ipaddress
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import requests
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPO = Path(__file__).resolve().parents[2]
BINARIES_SCRIPT = REPO / "hack" / "control-plane-binaries.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
# The controllers that turn workloads into pods and clean up after them. The node lifecycle
# controller stays off: it would taint every fake node unreachable, since no kubelet heartbeats.
CONTROLLERS = ("deployment", "replicaset", "job", "cronjob", "statefulset", "garbagecollector")
START_TIMEOUT = float(os.environ.get("PREEMPTGUARD_CONTROLPLANE_START_TIMEOUT", "90"))
STOP_TIMEOUT = 10.0

T = TypeVar("T")


class ControlPlaneError(RuntimeError):
    """The control plane could not be obtained or started; the message says what to do."""


class ComponentExited(ControlPlaneError):
    """A component died while starting, typically because another process took its port."""


# --- binaries ------------------------------------------------------------------------------


def binaries_dir() -> Path:
    """The directory holding the four binaries, from KUBEBUILDER_ASSETS or the cached build.

    The first call on a fresh machine builds Kubernetes (about 10 minutes); see the script.
    """
    proc = subprocess.run(
        [str(BINARIES_SCRIPT)], capture_output=True, text=True, check=False, cwd=REPO
    )
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-30:])
        raise ControlPlaneError(
            f"{BINARIES_SCRIPT.relative_to(REPO)} failed (exit {proc.returncode}); set "
            f"KUBEBUILDER_ASSETS to a directory with {', '.join(BINARIES)} or fix the build:\n{tail}"
        )
    directory = Path(proc.stdout.strip().splitlines()[-1])
    missing = [b for b in BINARIES if not os.access(directory / b, os.X_OK)]
    if missing:
        raise ControlPlaneError(f"{directory} lacks executable {', '.join(missing)}")
    return directory


def _help_text(binary: Path) -> str:
    proc = subprocess.run([str(binary), "--help"], capture_output=True, text=True, check=False)
    return proc.stdout + proc.stderr


# --- small utilities -----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(
    check: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.1
) -> T:
    """Poll ``check`` until it returns something other than None/False, or fail saying ``what``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = check()
        except Exception as exc:  # noqa: BLE001 - any failure while polling means "not yet"
            last_error, value = exc, None
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def _https_status(port: int, path: str) -> int:
    # The scheduler and controller-manager serve self-signed certificates: only liveness matters.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=ctx)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def _http_status(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


# --- certificates --------------------------------------------------------------------------


@dataclass(frozen=True)
class TLSFiles:
    ca: Path
    cert: Path
    key: Path


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_serving_tls(directory: Path, hosts: Sequence[str]) -> TLSFiles:
    """A throwaway CA and a serving certificate for ``hosts``, written as ca.crt/tls.crt/tls.key.

    Kept separate from the product's own certificate code so that the harness does not depend on
    the code it tests.
    """
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "e2e control plane CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = TLSFiles(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(_pem_key(key))
    files.key.chmod(0o600)
    return files


def _write_service_account_keys(directory: Path) -> tuple[Path, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private, public = directory / "sa.key", directory / "sa.pub"
    private.write_bytes(_pem_key(key))
    private.chmod(0o600)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


# --- processes -----------------------------------------------------------------------------


@dataclass
class Component:
    """One control-plane process, its log file and how to stop it."""

    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            # A session of its own: a Ctrl-C in the terminal reaches only our handler, which
            # then stops the components in order instead of racing them.
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise ComponentExited(
                f"{self.name} exited with code {self.proc.returncode}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT)


# --- the API client the tests use ----------------------------------------------------------


class KubeError(Exception):
    """A non-2xx answer from the API server, with its Status object."""

    def __init__(self, method: str, path: str, status: int, body: dict[str, Any] | str) -> None:
        self.status = status
        self.body = body
        self.message = body.get("message", "") if isinstance(body, dict) else str(body)
        self.reason = body.get("reason", "") if isinstance(body, dict) else ""
        super().__init__(f"{method} {path}: HTTP {status}: {self.message}")


@dataclass
class Response:
    status: int
    body: dict[str, Any]
    warnings: list[str]


def _warnings(header: str | None) -> list[str]:
    # 'Warning: 299 - "text"' headers, comma-joined by the HTTP library when repeated.
    if not header:
        return []
    out, i = [], 0
    while (start := header.find('"', i)) != -1:
        j, buf = start + 1, []
        while j < len(header) and header[j] != '"':
            if header[j] == "\\" and j + 1 < len(header):
                j += 1
            buf.append(header[j])
            j += 1
        out.append("".join(buf))
        i = j + 1
    return out


class Kube:
    """A thin JSON client over one keep-alive session: plain dicts in and out, warnings kept.

    Plain REST rather than the typed client so that tests see exactly what the API server stored
    and returned, including admission warnings.
    """

    def __init__(self, server: str, token: str, ca_file: Path) -> None:
        self.server = server.rstrip("/")
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.verify = str(ca_file)
        # Environment CA bundles and proxies are for the outside world, never for this loopback
        # cluster; requests would otherwise let REQUESTS_CA_BUNDLE override `verify`.
        self.session.trust_env = False

    def close(self) -> None:
        self.session.close()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> Response:
        headers = {"Content-Type": content_type} if body is not None else {}
        resp = self.session.request(
            method,
            self.server + path,
            json=body,
            params=params,
            headers=headers,
            timeout=timeout,
        )
        try:
            payload: Any = resp.json()
        except ValueError:
            payload = resp.text
        if resp.status_code >= 400:
            raise KubeError(method, path, resp.status_code, payload)
        return Response(
            resp.status_code,
            payload if isinstance(payload, dict) else {},
            _warnings(resp.headers.get("Warning")),
        )

    def get(self, path: str, **params: str) -> dict[str, Any]:
        return self.call("GET", path, params=params or None).body

    def create(self, path: str, obj: dict[str, Any], *, dry_run: bool = False) -> Response:
        return self.call("POST", path, obj, params={"dryRun": "All"} if dry_run else None)

    def apply(self, path: str, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply (create or update), as ``kubectl apply --server-side`` does.

        One field manager for everything the tests apply, so that applying an object again
        also removes the fields the previous version set and this one does not.
        """
        params = {"fieldManager": "preemptguard-e2e", "force": "true"}
        if dry_run:
            params["dryRun"] = "All"
        return self.call(
            "PATCH", path, obj, params=params, content_type="application/apply-patch+yaml"
        ).body

    def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.call("PATCH", path, patch, content_type="application/merge-patch+json").body

    def delete(self, path: str, *, grace_seconds: int | None = 0) -> None:
        body = None if grace_seconds is None else {"gracePeriodSeconds": grace_seconds}
        with suppress(KubeError):
            self.call("DELETE", path, body)

    def exists(self, path: str) -> bool:
        try:
            self.call("GET", path)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True


# --- the control plane ---------------------------------------------------------------------


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-scheduler + kube-controller-manager in a temporary directory.

    Use as a context manager, or call ``start``/``stop``; ``stop`` is also registered with atexit
    so that no process outlives the Python that started it.
    """

    bin_dir: Path
    workdir: Path | None = None
    components: list[Component] = field(default_factory=list)
    api_port: int = 0
    token: str = ""
    ca_file: Path = Path()
    kubeconfig: Path = Path()
    _own_workdir: bool = False
    _tmp_dirs: list[Path] = field(default_factory=list)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def client(self) -> Kube:
        return Kube(self.server, self.token, self.ca_file)

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="preemptguard-e2e-"))
            self._own_workdir = True
        atexit.register(self.stop)
        # Ports are picked free but taken only when each binary starts; retry on a lost race.
        for attempt in range(3):
            try:
                self._start_once()
            except ComponentExited:
                self._stop_components()
                if attempt == 2:
                    self.stop()
                    raise
            except BaseException:
                self.stop()
                raise
            else:
                return

    def _start_once(self) -> None:
        assert self.workdir is not None
        work = self.workdir
        for sub in ("etcd", "pki", "logs"):
            (work / sub).mkdir(parents=True, exist_ok=True)
        bin_ = self.bin_dir

        etcd_port, peer_port = free_port(), free_port()
        etcd_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
        etcd = self._spawn(
            "etcd",
            [
                str(bin_ / "etcd"),
                "--name=e2e",
                f"--data-dir={self._etcd_data_dir()}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=e2e={peer_url}",
                "--log-level=warn"
                if "--log-level" in _help_text(bin_ / "etcd")
                else "--debug=false",
            ],
        )
        self._wait_ready(etcd, lambda: _http_status(etcd_port, "/health") == 200, "etcd /health")

        pki = work / "pki"
        tls = write_serving_tls(pki, ["127.0.0.1", "localhost"])
        sa_key, sa_pub = _write_service_account_keys(pki)
        self.token = secrets.token_hex(16)
        tokens = pki / "tokens.csv"
        # system:masters bypasses RBAC, as the admin of any fresh cluster does.
        tokens.write_text(f'{self.token},admin,admin-uid,"system:masters"\n')
        tokens.chmod(0o600)
        self.ca_file = tls.ca
        self.api_port = free_port()
        apiserver_help = _help_text(bin_ / "kube-apiserver")
        apiserver_args = [
            str(bin_ / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            f"--cert-dir={pki}",
            f"--tls-cert-file={tls.cert}",
            f"--tls-private-key-file={tls.key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            # No serviceaccount controller runs, so there is no `default` service account to
            # attach; envtest makes the same choice.
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            # Nothing runs that would answer for a Service's endpoints.
            "--endpoint-reconciler-type=none",
        ]
        if "--insecure-port" in apiserver_help:
            apiserver_args.append("--insecure-port=0")
        apiserver = self._spawn("kube-apiserver", apiserver_args)
        self._wait_ready(apiserver, self._apiserver_ready, "kube-apiserver /readyz")

        self.kubeconfig = work / "kubeconfig"
        self.kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "e2e",
                            "cluster": {
                                "server": self.server,
                                "certificate-authority": str(self.ca_file),
                            },
                        }
                    ],
                    "users": [{"name": "admin", "user": {"token": self.token}}],
                    "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
                    "current-context": "e2e",
                }
            )
        )
        self.kubeconfig.chmod(0o600)

        # Only /healthz of these two is ever called, and it is always allowed: no delegated
        # authentication or authorization is configured for their ports.
        kubeconfig_args = [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
        ]
        scheduler_port = free_port()
        scheduler_args = [
            str(bin_ / "kube-scheduler"),
            *kubeconfig_args,
            f"--secure-port={scheduler_port}",
        ]
        if "--port int" in _help_text(bin_ / "kube-scheduler"):
            scheduler_args.append("--port=0")
        scheduler = self._spawn("kube-scheduler", scheduler_args)

        kcm_port = free_port()
        kcm_args = [
            str(bin_ / "kube-controller-manager"),
            *kubeconfig_args,
            f"--secure-port={kcm_port}",
            f"--controllers={','.join(CONTROLLERS)}",
            "--use-service-account-credentials=false",
        ]
        if "--port int" in _help_text(bin_ / "kube-controller-manager"):
            kcm_args.append("--port=0")
        kcm = self._spawn("kube-controller-manager", kcm_args)

        self._wait_ready(
            scheduler, lambda: _https_status(scheduler_port, "/healthz") == 200, "scheduler"
        )
        self._wait_ready(kcm, lambda: _https_status(kcm_port, "/healthz") == 200, "controllers")

    def _etcd_data_dir(self) -> Path:
        # fsync on a real disk dominates every write; tmpfs keeps the suite and the benchmark
        # measuring the API server and the webhook rather than the disk.
        assert self.workdir is not None
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK):
            data = Path(tempfile.mkdtemp(prefix="preemptguard-etcd-", dir=shm))
            self._tmp_dirs.append(data)
            return data
        return self.workdir / "etcd"

    def _spawn(self, name: str, argv: list[str]) -> Component:
        assert self.workdir is not None
        component = Component(name, argv, self.workdir / "logs" / f"{name}.log")
        component.start()
        self.components.append(component)
        return component

    def _wait_ready(self, component: Component, check: Callable[[], bool], what: str) -> None:
        def ready() -> bool:
            component.check_alive()
            return check()

        try:
            wait_until(ready, timeout=START_TIMEOUT, what=what, interval=0.2)
        except TimeoutError as exc:
            raise ControlPlaneError(
                f"{exc}\n--- {component.name} log ---\n{component.log_tail()}"
            ) from None

    def _apiserver_ready(self) -> bool:
        kube = self.client()
        try:
            resp = kube.session.get(self.server + "/readyz", timeout=2)
            if resp.status_code != 200:
                return False
            # Bootstrapping ends with the default namespace; tests create into it.
            return kube.exists("/api/v1/namespaces/default")
        finally:
            kube.close()

    def _stop_components(self) -> None:
        # Reverse order: the API server's clients first, etcd last.
        for component in reversed(self.components):
            component.stop()
        self.components.clear()

    def stop(self) -> None:
        self._stop_components()
        for tmp in self._tmp_dirs:
            shutil.rmtree(tmp, ignore_errors=True)
        self._tmp_dirs.clear()
        if self._own_workdir and self.workdir is not None and not os.environ.get("E2E_KEEP"):
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        with suppress(Exception):
            atexit.unregister(self.stop)

    def logs(self, lines: int = 25) -> str:
        return "\n".join(f"--- {c.name} ---\n{c.log_tail(lines)}" for c in self.components)

    def check_alive(self) -> None:
        for component in self.components:
            component.check_alive()


@contextmanager
def running_control_plane(workdir: Path | None = None) -> Iterator[ControlPlane]:
    with ControlPlane(binaries_dir(), workdir) as cp:
        yield cp


def main() -> int:
    """Bring a control plane up, print how to reach it, and keep it until Ctrl-C or SIGTERM."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # A shell starts background jobs with SIGINT ignored; Ctrl-C and `kill -INT` should still stop us.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        print(
            "starting etcd, kube-apiserver, kube-scheduler, kube-controller-manager ...", flush=True
        )
        with running_control_plane() as cp:
            print(f"export KUBECONFIG={cp.kubeconfig}")
            print(
                f"# API server {cp.server}; logs in {cp.workdir}/logs; Ctrl-C stops it", flush=True
            )
            while True:
                cp.check_alive()
                time.sleep(1)
    except KeyboardInterrupt:
        return 0
    except ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
