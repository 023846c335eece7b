from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.helpers import ServerProcess, free_port, serve_args
from webhook.server import certs


@pytest.fixture(scope="session")
def tls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    certs.write(certs.issue(list(certs.LOCAL_HOSTS)), directory)
    return directory


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tls_dir: Path) -> Iterator[ServerProcess]:
    """``preemptguard serve`` on the built-in policy, shared by a module's tests."""
    port, metrics_port = free_port(), free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    args = serve_args(tls_dir, port, metrics_port)
    proc = ServerProcess(args, ca=tls_dir / "ca.crt", log=log, port=port, metrics_port=metrics_port)
    yield proc
    assert proc.terminate() == 0, proc.logs()
