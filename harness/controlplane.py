"""etcd, kube-apiserver, kube-scheduler and kube-controller-manager on loopback, with free ports
and throwaway state, for one Kubernetes release.

No kubelet runs: fake Node objects (``harness.cluster``) are what the scheduler binds pods to,
so a pod's placement is its ``spec.nodeName`` while it stays Pending.

Each component has an identity of its own, as in a kubeadm cluster: the tests and the
kubeconfig use an admin token (``system:masters``), the scheduler and the controller-manager
the users the default RBAC bootstrap binds (``system:kube-scheduler``,
``system:kube-controller-manager``), and every controller its own service account
(``--use-service-account-credentials``), so a DaemonSet's pods are created by
``system:serviceaccount:kube-system:daemon-set-controller`` as in a real cluster.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from harness import pki
from harness.binaries import MAIN, Binaries, ControlPlaneError, Release, binaries
from harness.kube import Kube, write_kubeconfig
from harness.processes import (
    Component,
    ComponentExited,
    free_port,
    http_status,
    https_status,
    wait_until,
)

START_TIMEOUT = float(os.environ.get("PREEMPTGUARD_CONTROLPLANE_START_TIMEOUT", "90"))
START_ATTEMPTS = 3
SERVICE_CIDR = "10.0.0.0/24"
ISSUER = "https://kubernetes.default.svc.cluster.local"
# What the API server accepts in one request body is 3 MiB; etcd's default limit (1.5 MiB)
# would refuse some of what passed admission. Room for anything the API server takes, so that
# what a test sees is decided by the API server and its webhooks, not by the storage.
ETCD_MAX_REQUEST_BYTES = 4 * 2**20


@dataclass(frozen=True)
class Controller:
    """A controller to run: its name in 1.26+ (``daemonset-controller``), its older name
    (``daemonset``), and the service account it acts as."""

    name: str
    old_name: str
    account: str


# The controllers that turn workloads into pods and clean up after them. The node lifecycle
# controller stays off: it would taint every fake node unreachable, since no kubelet heartbeats.
CONTROLLERS = (
    Controller("daemonset-controller", "daemonset", "daemon-set-controller"),
    Controller("deployment-controller", "deployment", "deployment-controller"),
    Controller("replicaset-controller", "replicaset", "replicaset-controller"),
    Controller("job-controller", "job", "job-controller"),
    Controller("cronjob-controller", "cronjob", "cronjob-controller"),
    Controller("statefulset-controller", "statefulset", "statefulset-controller"),
    Controller("garbage-collector-controller", "garbagecollector", "generic-garbage-collector"),
)
# Runs with the controller-manager's own credentials; signs legacy token secrets.
TOKEN_CONTROLLER = Controller("serviceaccount-token-controller", "serviceaccount-token", "")


@dataclass(frozen=True)
class Credentials:
    tls: pki.TLSFiles
    service_account: pki.ServiceAccountKeys
    token_file: Path
    tokens: dict[str, str]


@dataclass
class ControlPlane:
    """The four components of one release in a temporary directory.

    Use as a context manager, or call ``start``/``stop``; ``stop`` is also registered with atexit
    so that no process outlives the Python that started it.
    """

    binaries: Binaries
    workdir: Path | None = None
    components: list[Component] = field(default_factory=list)
    api_port: int = 0
    ca_file: Path = Path()
    kubeconfig: Path = Path()
    credentials: Credentials | None = None
    _own_workdir: bool = False
    _tmp_dirs: list[Path] = field(default_factory=list)

    @property
    def release(self) -> Release:
        return self.binaries.release

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def token(self) -> str:
        """The admin's token (``system:masters``)."""
        if self.credentials is None:
            raise ControlPlaneError("the control plane is not started")
        return self.credentials.tokens[pki.ADMIN.user]

    def client(self) -> Kube:
        """An admin client."""
        return Kube(self.server, self.token, self.ca_file)

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- starting ---------------------------------------------------------------------------

    def start(self) -> None:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="preemptguard-e2e-"))
            self._own_workdir = True
        atexit.register(self.stop)
        # Ports are picked free but taken only when each binary starts; retry on a lost race.
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start_once()
            except ComponentExited:
                self._stop_components()
                if attempt == START_ATTEMPTS:
                    self.stop()
                    raise
            except BaseException:
                self.stop()
                raise
            else:
                return

    def _start_once(self) -> None:
        for sub in ("pki", "logs"):
            (self._work() / sub).mkdir(parents=True, exist_ok=True)
        etcd_url = self._start_etcd()
        self.credentials = self._write_credentials()
        self._start_apiserver(etcd_url, self.credentials)
        kubeconfigs = self._write_kubeconfigs(self.credentials)
        # Both start before either is waited for: they come up side by side.
        wait_scheduler = self._start_scheduler(kubeconfigs["scheduler"])
        wait_controllers = self._start_controller_manager(
            kubeconfigs["controller-manager"], self.credentials
        )
        wait_scheduler()
        wait_controllers()

    def _start_etcd(self) -> str:
        """etcd on two free ports; returns its client URL once healthy."""
        etcd_port, peer_port = free_port(), free_port()
        url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
        quiet = (
            "--log-level=warn" if self.binaries.has_flag("etcd", "--log-level") else "--debug=false"
        )
        etcd = self._spawn(
            "etcd",
            [
                "--name=e2e",
                f"--data-dir={self._etcd_data_dir()}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=e2e={peer_url}",
                f"--max-request-bytes={ETCD_MAX_REQUEST_BYTES}",
                quiet,
            ],
        )
        self._wait_ready(etcd, lambda: http_status(etcd_port, "/health") == 200, "etcd /health")
        return url

    def _write_credentials(self) -> Credentials:
        """The CA and serving certificate, the service-account key pair, and a token each for
        the admin, the scheduler and the controller-manager."""
        directory = self._work() / "pki"
        tls = pki.write_serving_tls(directory, ["127.0.0.1", "localhost"])
        self.ca_file = tls.ca
        token_file = directory / "tokens.csv"
        identities = (pki.ADMIN, pki.SCHEDULER, pki.CONTROLLER_MANAGER)
        tokens = pki.write_token_file(token_file, identities)
        return Credentials(tls, pki.write_service_account_keys(directory), token_file, tokens)

    def _start_apiserver(self, etcd_url: str, credentials: Credentials) -> None:
        self.api_port = free_port()
        args = [
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            f"--cert-dir={self._work() / 'pki'}",
            f"--tls-cert-file={credentials.tls.cert}",
            f"--tls-private-key-file={credentials.tls.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--token-auth-file={credentials.token_file}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={credentials.service_account.public}",
            f"--service-account-signing-key-file={credentials.service_account.private}",
            # No serviceaccount controller runs, so there is no `default` service account to
            # attach; envtest makes the same choice.
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            # Nothing runs that would answer for a Service's endpoints.
            "--endpoint-reconciler-type=none",
        ]
        if self.binaries.minor() <= 20:
            # Without it 1.20 looks for a non-loopback address; later releases refuse loopback
            # here (fatal on 1.37) and need none with the endpoint reconciler off.
            args.append("--advertise-address=127.0.0.1")
        if self.binaries.has_flag("kube-apiserver", "--insecure-port"):
            args.append("--insecure-port=0")  # gone in 1.24
        apiserver = self._spawn("kube-apiserver", args)
        self._wait_ready(apiserver, self._apiserver_ready, "kube-apiserver /readyz")

    def _write_kubeconfigs(self, credentials: Credentials) -> dict[str, Path]:
        """The admin's kubeconfig (``self.kubeconfig``) and one per component."""
        work = self._work()
        tokens = credentials.tokens
        self.kubeconfig = write_kubeconfig(
            work / "kubeconfig", self.server, self.ca_file, tokens[pki.ADMIN.user], "admin"
        )
        return {
            "scheduler": write_kubeconfig(
                work / "pki" / "scheduler.kubeconfig",
                self.server,
                self.ca_file,
                tokens[pki.SCHEDULER.user],
                pki.SCHEDULER.user,
            ),
            "controller-manager": write_kubeconfig(
                work / "pki" / "controller-manager.kubeconfig",
                self.server,
                self.ca_file,
                tokens[pki.CONTROLLER_MANAGER.user],
                pki.CONTROLLER_MANAGER.user,
            ),
        }

    def _component_args(self, name: str, kubeconfig: Path, port: int) -> list[str]:
        """What the scheduler and the controller-manager share: their identity, also for
        checking who calls their own port (only /healthz is called, always allowed)."""
        args = [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
        ]
        if self.binaries.has_flag(name, "--authentication-skip-lookup"):
            # Otherwise it logs forever that extension-apiserver-authentication is missing.
            args.append("--authentication-skip-lookup")
        if self.binaries.has_flag(name, "--port"):
            args.append("--port=0")  # the insecure port, gone in 1.24
        return args

    def _start_scheduler(self, kubeconfig: Path) -> Callable[[], None]:
        """Starts kube-scheduler; returns what waits until it is healthy."""
        port = free_port()
        scheduler = self._spawn(
            "kube-scheduler", self._component_args("kube-scheduler", kubeconfig, port)
        )
        return lambda: self._wait_ready(
            scheduler, lambda: https_status(port, "/healthz") == 200, "kube-scheduler /healthz"
        )

    def _start_controller_manager(
        self, kubeconfig: Path, credentials: Credentials
    ) -> Callable[[], None]:
        """Starts kube-controller-manager, each controller with its own service account; returns
        what waits until it is healthy and every controller has its identity."""
        port = free_port()
        name = "kube-controller-manager"
        controllers = ",".join(self._controller_names())
        kcm = self._spawn(
            name,
            [
                *self._component_args(name, kubeconfig, port),
                f"--controllers={controllers}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={credentials.service_account.private}",
                f"--root-ca-file={credentials.tls.ca}",
            ],
        )

        def ready() -> bool:
            return https_status(port, "/healthz") == 200 and self._controller_accounts_exist()

        return lambda: self._wait_ready(kcm, ready, "kube-controller-manager and its controllers")

    def _controller_names(self) -> list[str]:
        """The names this build knows the controllers by, read from its ``--help``."""
        match = re.search(
            r"All controllers: ([^\n]+)", self.binaries.help("kube-controller-manager")
        )
        if match is None:
            raise ControlPlaneError("kube-controller-manager --help lists no controllers")
        known = {name.strip() for name in match.group(1).split(",")}
        names = []
        for controller in (*CONTROLLERS, TOKEN_CONTROLLER):
            if controller.name in known:
                names.append(controller.name)
            elif controller.old_name in known:
                names.append(controller.old_name)
            else:
                raise ControlPlaneError(
                    f"kube-controller-manager knows no controller {controller.name} "
                    f"({controller.old_name})"
                )
        return names

    def _controller_accounts_exist(self) -> bool:
        """Every controller has started under its service account (created as it starts)."""
        with self.client() as kube:
            found = kube.get("/api/v1/namespaces/kube-system/serviceaccounts")["items"]
        names = {account["metadata"]["name"] for account in found}
        return all(controller.account in names for controller in CONTROLLERS)

    # --- helpers ----------------------------------------------------------------------------

    def _work(self) -> Path:
        if self.workdir is None:
            raise ControlPlaneError("the control plane has no working directory")
        return self.workdir

    def _etcd_data_dir(self) -> Path:
        # fsync on a real disk dominates every write; tmpfs keeps the suite and the benchmark
        # measuring the API server and the webhook rather than the disk.
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK):
            data = Path(tempfile.mkdtemp(prefix="preemptguard-etcd-", dir=shm))
            self._tmp_dirs.append(data)
            return data
        return self._work() / "etcd"

    def _spawn(self, name: str, args: list[str]) -> Component:
        argv = [str(self.binaries.path(name)), *args]
        component = Component(name, argv, self._work() / "logs" / f"{name}.log")
        component.start()
        self.components.append(component)
        return component

    def _wait_ready(self, component: Component, check: Callable[[], bool], what: str) -> None:
        def ready() -> bool:
            component.check_alive()
            return check()

        try:
            wait_until(
                ready, timeout=START_TIMEOUT, what=what, interval=0.2, fatal=(ComponentExited,)
            )
        except TimeoutError as exc:
            raise ControlPlaneError(
                f"{exc}\n--- {component.name} log ---\n{component.log_tail()}"
            ) from None

    def _apiserver_ready(self) -> bool:
        with self.client() as kube:
            resp = kube.session.get(self.server + "/readyz", timeout=2)
            # Bootstrapping ends with the default namespace; tests create into it.
            return resp.status_code == 200 and kube.exists("/api/v1/namespaces/default")

    # --- stopping ---------------------------------------------------------------------------

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
def running_control_plane(
    release: Release = MAIN, workdir: Path | None = None
) -> Iterator[ControlPlane]:
    """A control plane of ``release`` for the duration of the ``with`` block."""
    with ControlPlane(binaries(release), workdir) as control_plane:
        yield control_plane
