"""Log lines written by many threads at once stay whole, one JSON object per line."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from webhook.server import logs


def test_lines_from_many_threads_are_whole(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with path.open("w") as stream:
        logs.configure("info", stream)
        try:
            log = logs.get_logger("test")

            def write(thread: int) -> None:
                for i in range(200):
                    log.info("line", thread=thread, i=i, pad="x" * 1000, odd="\udcff")

            threads = [threading.Thread(target=write, args=(t,)) for t in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            logs.configure("info")
    lines = path.read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]
    assert len(events) == 8 * 200
    assert sorted((e["thread"], e["i"]) for e in events) == [
        (t, i) for t in range(8) for i in range(200)
    ]
    assert all(e["component"] == "test" and e["level"] == "info" for e in events)
