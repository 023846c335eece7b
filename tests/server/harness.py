"""Run the real server stack with test-only engine behaviour (a slow engine).

Usage: python harness.py '{"cert_file": ..., "key_file": ..., "port": ..., "slow_seconds": ...}'

``slow_seconds`` makes the engine wait that long on every object; ``cpu_seconds`` (a pod name
to seconds) makes it work that long on pods of that name, holding the CPU as a slow review does.
The other options are those of ``ServerSettings`` and ``ServeOptions``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from webhook import engine
from webhook.engine.decision import Context, Decision, Obj
from webhook.engine.policy import Policy
from webhook.server.runtime import ServeOptions, serve
from webhook.server.serving import ServerSettings


@dataclass(frozen=True)
class SlowEngine:
    """The engine, slowed down as the options say (a class, so that it pickles into a worker)."""

    slow: float = 0.0
    cpu_seconds: dict[str, float] = field(default_factory=dict)

    def __call__(self, obj: Obj, policy: Policy, ctx: Context) -> Decision:
        time.sleep(self.slow)
        metadata = obj.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        busy_until = time.thread_time() + self.cpu_seconds.get(str(name), 0.0)
        while time.thread_time() < busy_until:
            pass
        return engine.evaluate(obj, policy, ctx)


def main() -> None:
    options = json.loads(sys.argv[1])
    slow = SlowEngine(
        float(options.get("slow_seconds", 0)),
        {str(name): float(s) for name, s in options.get("cpu_seconds", {}).items()},
    )
    defaults = ServerSettings()
    serve(
        ServeOptions(
            cert_file=Path(options["cert_file"]),
            key_file=Path(options["key_file"]),
            policies=Path(options["policies"]) if options.get("policies") else None,
            server=ServerSettings(
                host="127.0.0.1",
                port=options["port"],
                workers=options.get("workers", 0),
                threads=options.get("threads", defaults.threads),
                max_connections=options.get("max_connections", defaults.max_connections),
                idle_timeout=options.get("idle_timeout", defaults.idle_timeout),
                graceful_timeout=options.get("graceful_timeout", defaults.graceful_timeout),
                # An engine slowed down would hold the event loop: it runs in threads.
                inline_review_bytes=0
                if slow.slow or slow.cpu_seconds
                else defaults.inline_review_bytes,
            ),
            metrics_port=options.get("metrics_port", 0),
            reload_interval=options.get("reload_interval", 2.0),
        ),
        evaluate=slow,
    )


if __name__ == "__main__":
    main()
