"""Free ports, polling, and the child processes of the control plane."""

from __future__ import annotations

import http.client
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from harness.binaries import ControlPlaneError

STOP_TIMEOUT = 10.0

T = TypeVar("T")


class ComponentExited(ControlPlaneError):
    """A component died while starting, typically because another process took its port."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(
    check: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    fatal: tuple[type[Exception], ...] = (),
) -> T:
    """Poll ``check`` until it returns something other than None/False, or fail saying ``what``.

    An exception from ``check`` means "not yet", except those of the ``fatal`` types (a process
    that died will not come up), which end the wait at once.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = check()
        except fatal:
            raise
        except Exception as exc:  # noqa: BLE001 - any other failure while polling means "not yet"
            last_error, value = exc, None
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def https_status(port: int, path: str) -> int:
    """The status of ``GET path`` on 127.0.0.1:port, certificate unchecked: the scheduler and
    the controller-manager serve self-signed ones, and only liveness matters."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=ctx)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def http_status(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


@dataclass
class Component:
    """One control-plane process, its log file and how to stop it.

    A component that exits after ``stop`` has signalled it has stopped, whatever its exit code:
    kube-scheduler without leader election exits 1 on SIGTERM ("finished without leader
    elect"), etcd 3.6 dies of the signal itself. Only an exit before that is a failure.
    """

    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

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
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)
