"""Attack a running server and report how its ordinary reviews fared, one line per attack.

    python -m tests.attacks --url https://127.0.0.1:8443 --ca .certs/ca.crt \\
        [--attack SPEC]... [--seconds 10] [--seed 1] [--rate 0] [--server-pid PID]

Without ``--attack``, every attack of the suite runs in turn (``SUITE``). Seeded: the same seed
builds the same hellos and reviews.
"""

from __future__ import annotations

import argparse
import json
import sys
from urllib.parse import urlsplit

from tests.attacks import hello
from tests.attacks.floods import Attack, Target
from tests.attacks.runner import HEADER, assault
from tests.server.helpers import FIXTURES

# Every group an attacker may name, half-done and whole; every way of holding connections.
SUITE = (
    *(f"hello:{group}" for group in hello.GROUPS),
    *(f"handshake:{group}" for group in hello.GROUPS),
    "slowloris",
    "slow-body",
    "idle",
    "large",
    "churn",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.attacks", description=__doc__)
    parser.add_argument("--url", required=True, help="the server, https://HOST:PORT")
    parser.add_argument("--ca", required=True, help="the CA that signed its certificate")
    parser.add_argument("--attack", action="append", help="an attack spec (repeatable)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=0.0, help="new connections/s; 0: no cap")
    parser.add_argument("--probe-rate", type=float, default=20.0)
    parser.add_argument("--server-pid", type=int, action="append", default=[])
    args = parser.parse_args(argv)
    url = urlsplit(args.url)
    if url.scheme != "https" or not url.hostname or not url.port:
        parser.error("--url must be https://HOST:PORT")
    try:
        attacks = [Attack.parse(spec, args.rate) for spec in args.attack or SUITE]
    except ValueError as exc:
        parser.error(str(exc))
    review = json.loads((FIXTURES / "create-pod-sweep-mutate.json").read_text())
    target = Target(url.hostname, url.port)
    print(HEADER, flush=True)
    for attack in attacks:
        report = assault(
            target,
            args.ca,
            review,
            attack,
            seconds=args.seconds,
            seed=args.seed,
            probe_rate=args.probe_rate,
            server_pids=args.server_pid,
        )
        print(report.line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
