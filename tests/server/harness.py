"""Run the real server stack with test-only engine behaviour (a slow or trivial evaluate).

Usage: python harness.py '{"cert_file": ..., "key_file": ..., "port": ..., "slow_seconds": ...}'

``slow_seconds`` makes the engine wait that long on every object; ``cpu_seconds`` (a pod name
to seconds) makes it work that long on pods of that name, holding the CPU as a slow review does.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

from webhook import engine
from webhook.engine.decision import Context, Decision, Obj
from webhook.engine.policy import Policy
from webhook.server.gunicorn import Hooks, ServerSettings, run
from webhook.server.metrics import Metrics
from webhook.server.reload import CertStore
from webhook.server.runtime import ServeOptions, serve


def socket_probe(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """Report the options of the accepted socket this request came in on."""
    sock = environ["gunicorn.socket"]
    body = json.dumps(
        {"nodelay": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0}
    ).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]


def main() -> None:
    options = json.loads(sys.argv[1])
    if options.get("socket_probe"):
        settings = ServerSettings(host="127.0.0.1", port=options["port"])
        store = CertStore(Path(options["cert_file"]), Path(options["key_file"]), Metrics())
        run(socket_probe, store, settings, Hooks())
        return
    slow = float(options.get("slow_seconds", 0))
    cpu_seconds = {str(name): float(s) for name, s in options.get("cpu_seconds", {}).items()}

    def evaluate(obj: Obj, policy: Policy, ctx: Context) -> Decision:
        time.sleep(slow)
        metadata = obj.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        busy_until = time.thread_time() + cpu_seconds.get(str(name), 0.0)
        while time.thread_time() < busy_until:
            pass
        return engine.evaluate(obj, policy, ctx)

    serve(
        ServeOptions(
            cert_file=Path(options["cert_file"]),
            key_file=Path(options["key_file"]),
            policies=Path(options["policies"]) if options.get("policies") else None,
            server=ServerSettings(
                host="127.0.0.1",
                port=options["port"],
                workers=options.get("workers", 0),
                threads=options.get("threads", 16),
                max_connections=options.get("max_connections", 1000),
                graceful_timeout=options.get("graceful_timeout", 30),
            ),
            metrics_port=options.get("metrics_port", 0),
            reload_interval=options.get("reload_interval", 2.0),
        ),
        evaluate=evaluate,
    )


if __name__ == "__main__":
    main()
