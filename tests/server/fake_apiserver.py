"""A tiny stand-in for the API server's namespace list and watch, over plain HTTP; it also
serves the PriorityClass preemptguard ships (list, read, and a watch that stays quiet)."""

from __future__ import annotations

import json
import queue
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

STOP = object()
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
BATCH = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "preemptguard-batch", "resourceVersion": "1"},
    "value": -100,
    "preemptionPolicy": "Never",
}


def namespace(name: str, annotations: dict[str, str], version: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "annotations": annotations, "resourceVersion": version},
    }


class FakeApiServer:
    """Serves ``namespaces``; tests push watch events and count lists."""

    def __init__(self) -> None:
        self.namespaces: dict[str, dict[str, str]] = {}
        self.version = 1
        self.lists = 0
        self.reads: list[str] = []  # names read one by one (GET /api/v1/namespaces/NAME)
        self.watches: queue.Queue[queue.Queue[object]] = queue.Queue()
        self._open: list[queue.Queue[object]] = []
        handler = self._handler()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "fake", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}
                    ],
                    "users": [{"name": "fake", "user": {"token": "test"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": "fake",
                }
            )
        )
        return path

    def next_watch(self, timeout: float = 10) -> queue.Queue[object]:
        """The event queue of the next watch the client opens."""
        return self.watches.get(timeout=timeout)

    def event(self, events: queue.Queue[object], kind: str, name: str, ann: dict[str, str]) -> None:
        self.version += 1
        events.put({"type": kind, "object": namespace(name, ann, str(self.version))})

    def close(self) -> None:
        """Go away: end open watches and refuse new connections."""
        self.httpd.shutdown()
        for events in self._open:
            events.put(STOP)
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            # Chunked, as the API server streams a watch: clients read each event as it comes.
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path.startswith(PRIORITY_CLASSES):
                    self._priority_classes(url.path, parse_qs(url.query).get("watch") == ["true"])
                    return
                prefix = "/api/v1/namespaces/"
                if url.path.startswith(prefix) and "/" not in url.path[len(prefix) :]:
                    self._read(url.path[len(prefix) :])
                    return
                if url.path != "/api/v1/namespaces":
                    self.send_error(404)
                    return
                if parse_qs(url.query).get("watch") == ["true"]:
                    self._watch()
                else:
                    self._list()

            def _read(self, name: str) -> None:
                fake.reads.append(name)
                if name not in fake.namespaces:
                    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                       "reason": "NotFound", "code": 404}).encode()  # fmt: skip
                    self.send_response(404)
                else:
                    body = json.dumps(
                        namespace(name, fake.namespaces[name], str(fake.version))
                    ).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _priority_classes(self, path: str, watch: bool) -> None:
                if watch:
                    quiet: queue.Queue[object] = queue.Queue()
                    fake._open.append(quiet)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    quiet.get()  # until the fake goes away
                    return
                if path == PRIORITY_CLASSES:
                    doc: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1",
                                           "kind": "PriorityClassList",
                                           "metadata": {"resourceVersion": "1"}, "items": [BATCH]}  # fmt: skip
                elif path == f"{PRIORITY_CLASSES}/preemptguard-batch":
                    doc = BATCH
                else:
                    self.send_error(404)
                    return
                body = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _list(self) -> None:
                fake.lists += 1
                items = [namespace(n, a, str(fake.version)) for n, a in fake.namespaces.items()]
                body = json.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "NamespaceList",
                        "metadata": {"resourceVersion": str(fake.version)},
                        "items": items,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _watch(self) -> None:
                events: queue.Queue[object] = queue.Queue()
                fake._open.append(events)
                fake.watches.put(events)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while True:
                    event = events.get()
                    if event is STOP:
                        self.wfile.write(b"0\r\n\r\n")
                        self.close_connection = True
                        return
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()

        return Handler
