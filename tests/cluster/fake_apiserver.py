"""An in-memory stand-in for the API server, over plain HTTP, for the live-cluster code.

Enough of the real one's behaviour for ``webhook.cluster``: discovery (``GET /apis`` and
``/apis/GROUP``: the groups of the resources it serves, the first version listed preferred),
lists with ``limit``/``continue``,
field selectors (``=``, ``==``, ``!=`` on dotted fields) and equality label selectors; watches
from a resourceVersion (replayed from a log, then live, ended after ``timeoutSeconds``); get,
create (``generateName``, 409), update (409 on a stale resourceVersion), merge and apply
patches, strategic merge patches of a pod's ``status`` subresource (conditions merged by
``type``, container statuses by ``name``; a ``metadata.uid`` that is not the pod's is a 409),
and deletes (a pod bound to a node with a grace period stays, with its
``deletionTimestamp``, as without a kubelet). Every request is recorded, so tests can check
the RBAC verbs the code needed (``calls``) and that nothing was read per object.
"""

from __future__ import annotations

import base64
import builtins
import copy
import datetime as dt
import itertools
import json
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from webhook.kube.access import Access, access_of

Obj = dict[str, Any]

# (group, version, resource) -> (kind, namespaced). Kubernetes' own first: a kind named without
# its group (``put`` of an object without apiVersion, ``get("Job", ...)``) is the first listed.
RESOURCES: dict[tuple[str, str, str], tuple[str, bool]] = {
    ("", "v1", "namespaces"): ("Namespace", False),
    ("", "v1", "nodes"): ("Node", False),
    ("", "v1", "pods"): ("Pod", True),
    ("", "v1", "events"): ("Event", True),
    ("", "v1", "replicationcontrollers"): ("ReplicationController", True),
    ("apps", "v1", "deployments"): ("Deployment", True),
    ("apps", "v1", "statefulsets"): ("StatefulSet", True),
    ("apps", "v1", "replicasets"): ("ReplicaSet", True),
    ("apps", "v1", "daemonsets"): ("DaemonSet", True),
    ("batch", "v1", "jobs"): ("Job", True),
    ("batch", "v1", "cronjobs"): ("CronJob", True),
    ("coordination.k8s.io", "v1", "leases"): ("Lease", True),
    ("", "v1", "secrets"): ("Secret", True),
    ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"): (
        "MutatingWebhookConfiguration",
        False,
    ),
    ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"): (
        "ValidatingWebhookConfiguration",
        False,
    ),
    ("wgpolicyk8s.io", "v1alpha2", "policyreports"): ("PolicyReport", True),
    # The CRDs of every workload kind of the default policy, at the versions they serve.
    ("ray.io", "v1", "rayclusters"): ("RayCluster", True),
    ("ray.io", "v1", "rayjobs"): ("RayJob", True),
    ("ray.io", "v1", "rayservices"): ("RayService", True),
    ("ray.io", "v1", "raycronjobs"): ("RayCronJob", True),
    # The training operator's kinds at v1 (the preferred version), mpi-operator's MPIJob at
    # v2beta1 only: found at the group's other version.
    ("kubeflow.org", "v1", "pytorchjobs"): ("PyTorchJob", True),
    ("kubeflow.org", "v1", "tfjobs"): ("TFJob", True),
    ("kubeflow.org", "v1", "xgboostjobs"): ("XGBoostJob", True),
    ("kubeflow.org", "v1", "paddlejobs"): ("PaddleJob", True),
    ("kubeflow.org", "v1", "jaxjobs"): ("JAXJob", True),
    ("kubeflow.org", "v2beta1", "mpijobs"): ("MPIJob", True),
    ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes"): ("TrainingRuntime", True),
    ("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes"): (
        "ClusterTrainingRuntime",
        False,
    ),
    ("trainer.kubeflow.org", "v1alpha1", "trainjobs"): ("TrainJob", True),
    ("jobset.x-k8s.io", "v1alpha2", "jobsets"): ("JobSet", True),
    ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"): ("LeaderWorkerSet", True),
    ("disaggregatedset.x-k8s.io", "v1", "disaggregatedsets"): ("DisaggregatedSet", True),
    ("batch.volcano.sh", "v1alpha1", "jobs"): ("Job", True),
    ("batch.volcano.sh", "v1alpha1", "cronjobs"): ("CronJob", True),
    ("flow.volcano.sh", "v1alpha1", "jobtemplates"): ("JobTemplate", True),
    ("flow.volcano.sh", "v1alpha1", "jobflows"): ("JobFlow", True),
    ("workload.codeflare.dev", "v1beta2", "appwrappers"): ("AppWrapper", True),
}
KINDS: dict[str, tuple[str, str, str]] = {}
GROUP_KINDS: dict[tuple[str, str], tuple[str, str, str]] = {}
for _key, (_kind, _) in RESOURCES.items():
    KINDS.setdefault(_kind, _key)
    GROUP_KINDS.setdefault((_key[0], _kind), _key)


def key_of(kind: str, api_version: str | None = None) -> tuple[str, str, str]:
    """Where objects of ``kind`` are kept: of the group of ``api_version`` when given, else
    ``Kind.group`` (``Job.batch.volcano.sh``), else the first kind of that name."""
    if api_version is not None:
        group, slash, _ = api_version.rpartition("/")
        return GROUP_KINDS[(group if slash else "", kind)]
    name, dot, group = kind.partition(".")
    return GROUP_KINDS[(group, name)] if dot else KINDS[kind]


END = object()
BREAK = object()


def stamp(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str

    @property
    def access(self) -> Access:
        return access_of(self.method, self.path, self.query)


class FakeApiServer:
    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self.now = now
        self.served = set(RESOURCES)
        self.objects: dict[tuple[tuple[str, str, str], str, str], Obj] = {}
        self.version = itertools.count(100)
        self.last_version = 100
        self.log: list[tuple[int, tuple[str, str, str], str, Obj]] = []
        self.requests: list[Request] = []
        self.expire_next_continue = False
        self.closed = False
        self._snapshots: dict[Any, list[Obj]] = {}
        self._watchers: list[tuple[tuple[str, str, str], queue.Queue[object]]] = []
        self._lock = threading.RLock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    # --- test helpers -----------------------------------------------------------------------

    def kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "fake", "user": {"token": "test"}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))
        return path

    @property
    def calls(self) -> set[Access]:
        return {r.access for r in self.requests}

    def reset_requests(self) -> None:
        self.requests.clear()

    def put(self, obj: Obj) -> Obj:
        """Store ``obj`` as a create would (uid, resourceVersion, creationTimestamp)."""
        key = key_of(obj["kind"], obj.get("apiVersion"))
        with self._lock:
            return self._create(key, obj.get("metadata", {}).get("namespace", ""), obj)

    def get(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        found = self.objects.get((key_of(kind), namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def list(self, kind: str, namespace: str | None = None) -> list[Obj]:
        key = key_of(kind)
        return [
            copy.deepcopy(o)
            for (k, ns, _), o in sorted(self.objects.items())
            if k == key and (namespace is None or ns == namespace)
        ]

    def modify(self, kind: str, name: str, namespace: str = "", **changes: Any) -> Obj:
        """Merge ``changes`` into the stored object (as a controller's update would)."""
        key = key_of(kind)
        with self._lock:
            obj = copy.deepcopy(self.objects[(key, namespace, name)])
            _merge(obj, changes)
            return self._store(key, namespace, name, obj, "MODIFIED")

    def remove(self, kind: str, name: str, namespace: str = "") -> None:
        """Gone at once (a delete with grace 0, a kubelet confirming, the pod GC)."""
        key = key_of(kind)
        with self._lock:
            obj = self.objects.pop((key, namespace, name), None)
            if obj is not None:
                obj = copy.deepcopy(obj)
                obj["metadata"]["resourceVersion"] = self._next_version()
                self._emit(key, "DELETED", obj)

    def break_watches(self) -> None:
        """Drop every open watch mid-stream, as a restarting API server or a proxy does."""
        for _, watcher in list(self._watchers):
            watcher.put(BREAK)

    def close(self) -> None:
        """Go away: refuse new connections, drop the open ones, end watches."""
        self.closed = True
        for _, watcher in list(self._watchers):
            watcher.put(END)
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- the store --------------------------------------------------------------------------

    def _next_version(self) -> str:
        self.last_version = next(self.version)
        return str(self.last_version)

    def _create(self, key: tuple[str, str, str], namespace: str, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        kind, namespaced = RESOURCES[key]
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', 'x-')}{uuid.uuid4().hex[:5]}"
        if namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", stamp(self.now()))
        obj["apiVersion"] = "v1" if not key[0] else f"{key[0]}/{key[1]}"
        obj["kind"] = kind
        return self._store(key, meta.get("namespace", ""), meta["name"], obj, "ADDED")

    def _store(
        self, key: tuple[str, str, str], namespace: str, name: str, obj: Obj, event: str
    ) -> Obj:
        obj["metadata"]["resourceVersion"] = self._next_version()
        self.objects[(key, namespace, name)] = obj
        self._emit(key, event, obj)
        return copy.deepcopy(obj)

    def _emit(self, key: tuple[str, str, str], event: str, obj: Obj) -> None:
        version = int(obj["metadata"]["resourceVersion"])
        snapshot = copy.deepcopy(obj)
        self.log.append((version, key, event, snapshot))
        for wkey, watcher in list(self._watchers):
            if wkey == key:
                watcher.put((event, snapshot))

    def _delete(self, key: tuple[str, str, str], namespace: str, name: str, body: Obj) -> Obj:
        obj = self.objects.get((key, namespace, name))
        if obj is None:
            raise _Status(404, "NotFound", f'{key[2]} "{name}" not found')
        wanted = (body.get("preconditions") or {}).get("uid")
        if wanted is not None and wanted != obj["metadata"].get("uid"):
            message = (
                f"Precondition failed: UID in precondition: {wanted}, UID in object meta: "
                f"{obj['metadata'].get('uid')}"
            )
            raise _Status(409, "Conflict", message)
        grace = body.get("gracePeriodSeconds")
        if RESOURCES[key][0] == "Pod" and obj.get("spec", {}).get("nodeName"):
            if grace is None:
                grace = obj["spec"].get("terminationGracePeriodSeconds", 30)
            meta = obj["metadata"]
            current = meta.get("deletionGracePeriodSeconds")
            if grace > 0 and (current is None or grace < current):
                updated = copy.deepcopy(obj)
                updated["metadata"]["deletionTimestamp"] = stamp(self.now() + grace)
                updated["metadata"]["deletionGracePeriodSeconds"] = grace
                return self._store(key, namespace, name, updated, "MODIFIED")
            if grace > 0:
                return copy.deepcopy(obj)
        self.remove(f"{RESOURCES[key][0]}.{key[0]}" if key[0] else RESOURCES[key][0], name,
                    namespace)  # fmt: skip
        return copy.deepcopy(obj)

    # --- HTTP -------------------------------------------------------------------------------

    def _groups(self) -> builtins.list[Obj]:
        """The API groups served, as ``GET /apis`` lists them (the core group is not one)."""
        versions: dict[str, list[str]] = {}
        for group, version, _ in RESOURCES:
            if group and (group, version, _) in self.served:
                listed = versions.setdefault(group, [])
                if version not in listed:
                    listed.append(version)
        return [
            {
                "name": group,
                "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in listed],
                "preferredVersion": {"groupVersion": f"{group}/{listed[0]}", "version": listed[0]},
            }
            for group, listed in versions.items()
        ]

    def _discovery(self, url_path: str) -> Obj | None:
        """``GET /apis`` or ``/apis/GROUP``; None for any other path."""
        parts = [p for p in url_path.split("/") if p]
        if parts == ["apis"]:
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": self._groups()}
        if len(parts) == 2 and parts[0] == "apis":
            for group in self._groups():
                if group["name"] == parts[1]:
                    return {"kind": "APIGroup", "apiVersion": "v1", **group}
            raise _Status(404, "NotFound", "the server could not find the requested resource")
        return None

    def _route(
        self, url_path: str
    ) -> tuple[tuple[str, str, str], str | None, str | None, str | None]:
        """The resource, namespace, name and subresource (only a pod's ``status`` is served)."""
        parts = [unquote(p) for p in url_path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _Status(404, "NotFound", "no such path")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        key = (group, version, rest[0]) if rest else ("", "", "")
        if key not in RESOURCES or key not in self.served:
            raise _Status(
                404, "NotFound", f"the server could not find the requested resource {url_path}"
            )
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and (RESOURCES[key][0], sub) != ("Pod", "status"):
            raise _Status(404, "NotFound", f"no subresource {sub} of {rest[0]}")
        return key, namespace, rest[1] if len(rest) > 1 else None, sub

    def _list(
        self, key: tuple[str, str, str], namespace: str | None, q: dict[str, builtins.list[str]]
    ) -> Obj:
        # Stored objects are replaced, never changed in place: a page can be made of them as
        # they are, without copies (the 10,000-pod benchmark measures the audit, not this).
        # Continued pages come from the snapshot the first page was cut from, as the API
        # server serves them from the first page's resourceVersion.
        selectors = (q.get("fieldSelector", [""])[0], q.get("labelSelector", [""])[0])
        with self._lock:
            version = str(self.last_version)
            cache_key = (key, namespace, selectors, version)
            items = self._snapshots.get(cache_key)
            if items is None:
                found = [
                    (ns, name, o)
                    for (k, ns, name), o in self.objects.items()
                    if k == key and (namespace is None or ns == namespace)
                ]
                found.sort(key=lambda t: (t[0], t[1]))
                items = [o for _, _, o in found if _selected(o, q)]
                self._snapshots = {cache_key: items}
        start = 0
        token = q.get("continue", [""])[0]
        if token:
            if self.expire_next_continue:
                self.expire_next_continue = False
                raise _Status(410, "Expired", "The provided continue parameter is too old")
            start = int(base64.b64decode(token))
        limit = int(q.get("limit", ["0"])[0] or 0)
        end = start + limit if limit else len(items)
        meta: Obj = {"resourceVersion": version}
        if end < len(items):
            meta["continue"] = base64.b64encode(str(end).encode()).decode()
        kind = RESOURCES[key][0]
        return {
            "apiVersion": "v1" if not key[0] else f"{key[0]}/{key[1]}",
            "kind": f"{kind}List",
            "metadata": meta,
            # As the API server sends them: items carry no kind or apiVersion.
            "items": [
                {k: v for k, v in o.items() if k not in ("kind", "apiVersion")}
                for o in items[start:end]
            ],
        }

    def load(self, objs: builtins.list[Obj]) -> None:
        """Store many objects at once, as they are (no copies, no watch events): for setting
        up large clusters fast."""
        with self._lock:
            for obj in objs:
                key = key_of(obj["kind"], obj.get("apiVersion"))
                meta = obj["metadata"]
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", stamp(self.now()))
                meta["resourceVersion"] = self._next_version()
                self.objects[(key, meta.get("namespace", ""), meta["name"])] = obj

    def _watch_events(
        self, key: tuple[str, str, str], namespace: str | None, q: dict[str, builtins.list[str]]
    ) -> Iterator[tuple[str, Obj]]:
        since = int(q.get("resourceVersion", ["0"])[0] or 0)
        timeout = float(q.get("timeoutSeconds", ["300"])[0])
        events: queue.Queue[object] = queue.Queue()
        with self._lock:
            backlog = [(e, o) for v, k, e, o in self.log if k == key and v > since]
            self._watchers.append((key, events))
        try:
            yield from backlog
            deadline = time.monotonic() + timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                try:
                    item = events.get(timeout=min(left, 0.5))
                except queue.Empty:
                    continue
                if item is END:
                    return
                if item is BREAK:
                    raise ConnectionAbortedError("watch dropped")
                assert isinstance(item, tuple)
                yield item
        finally:
            with self._lock:
                self._watchers = [w for w in self._watchers if w[1] is not events]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in two writes: without this, Nagle's algorithm
                # holds the body until the client's delayed ACK, 40 ms per request.
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length)) if length else {}

            def _send(self, status: int, body: Obj) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _serve(self, method: str) -> None:
                if fake.closed:
                    self.close_connection = True  # kept-alive connections die too
                    return
                url = urlparse(self.path)
                fake.requests.append(Request(method, url.path, url.query))
                q = parse_qs(url.query)
                try:
                    body = self._body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
                    discovered = fake._discovery(url.path) if method == "GET" else None
                    if discovered is not None:
                        self._send(200, discovered)
                        return
                    key, namespace, name, sub = fake._route(url.path)
                    if method == "GET" and name is None and q.get("watch") == ["true"]:
                        self._stream(key, namespace, q)
                        return
                    if sub is not None:
                        status, answer = self._status(method, key, namespace or "", name, body)
                    else:
                        status, answer = self._answer(method, key, namespace, name, q, body)
                except _Status as exc:
                    status, answer = exc.code, exc.body()
                self._send(status, answer)

            def _answer(
                self,
                method: str,
                key: tuple[str, str, str],
                namespace: str | None,
                name: str | None,
                q: dict[str, list[str]],
                body: Any,
            ) -> tuple[int, Obj]:
                with fake._lock:
                    if method == "GET" and name is None:
                        return 200, fake._list(key, namespace, q)
                    if method == "POST":
                        if (
                            body.get("metadata", {}).get("name")
                            and (key, namespace or "", body["metadata"]["name"]) in fake.objects
                        ):
                            raise _Status(
                                409, "AlreadyExists", f'"{body["metadata"]["name"]}" already exists'
                            )
                        return 201, fake._create(key, namespace or "", body)
                    if name is None:
                        raise _Status(405, "MethodNotAllowed", "not on a collection")
                    stored = fake.objects.get((key, namespace or "", name))
                    if method == "GET":
                        if stored is None:
                            raise _Status(404, "NotFound", f'"{name}" not found')
                        return 200, copy.deepcopy(stored)
                    if method == "PUT":
                        if stored is None:
                            raise _Status(404, "NotFound", f'"{name}" not found')
                        sent = body.get("metadata", {}).get("resourceVersion")
                        if sent and sent != stored["metadata"]["resourceVersion"]:
                            raise _Status(409, "Conflict", "the object has been modified")
                        updated = copy.deepcopy(body)
                        updated["metadata"] = {**stored["metadata"], **updated.get("metadata", {})}
                        return 200, fake._store(key, namespace or "", name, updated, "MODIFIED")
                    if method == "PATCH":
                        apply = self.headers.get("Content-Type", "").startswith(
                            "application/apply-patch"
                        )
                        if stored is None:
                            if not apply:
                                raise _Status(404, "NotFound", f'"{name}" not found')
                            return 201, fake._create(key, namespace or "", body)
                        updated = copy.deepcopy(stored)
                        if apply:
                            for field in list(updated):
                                if field not in ("metadata", "apiVersion", "kind"):
                                    del updated[field]
                        _merge(updated, body)
                        return 200, fake._store(key, namespace or "", name, updated, "MODIFIED")
                    if method == "DELETE":
                        return 200, fake._delete(key, namespace or "", name, body or {})
                raise _Status(405, "MethodNotAllowed", method)

            def _status(
                self, method: str, key: tuple[str, str, str], namespace: str, name: Any, body: Any
            ) -> tuple[int, Obj]:
                """A pod's ``status`` subresource: read it, or patch its status only."""
                with fake._lock:
                    stored = fake.objects.get((key, namespace, name))
                    if stored is None:
                        raise _Status(404, "NotFound", f'pods "{name}" not found')
                    if method == "GET":
                        return 200, copy.deepcopy(stored)
                    strategic = self.headers.get("Content-Type", "").startswith(
                        "application/strategic-merge-patch"
                    )
                    if method != "PATCH" or not strategic:
                        raise _Status(405, "MethodNotAllowed", f"{method} of pods/status")
                    wanted = (body.get("metadata") or {}).get("uid")
                    uid = stored["metadata"].get("uid")
                    if wanted is not None and wanted != uid:
                        message = (
                            f"Precondition failed: UID in precondition: {wanted}, UID in "
                            f"object meta: {uid}"
                        )
                        raise _Status(409, "Conflict", message)
                    updated = copy.deepcopy(stored)
                    status = updated.setdefault("status", {})
                    _strategic_merge(status, body.get("status") or {}, STATUS_LIST_KEYS)
                    return 200, fake._store(key, namespace, name, updated, "MODIFIED")

            def _stream(
                self, key: tuple[str, str, str], namespace: str | None, q: dict[str, list[str]]
            ) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for event, obj in fake._watch_events(key, namespace, q):
                        if namespace is not None and obj["metadata"].get("namespace") != namespace:
                            continue
                        if not _selected(obj, q):
                            continue
                        line = json.dumps({"type": event, "object": obj}).encode() + b"\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except ConnectionAbortedError:
                    # No last chunk: the client sees the response end prematurely.
                    self.close_connection = True
                    return
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_PUT(self) -> None:
                self._serve("PUT")

            def do_PATCH(self) -> None:
                self._serve("PATCH")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

        return Handler


class _Status(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def body(self) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "reason": self.reason,
            "message": self.message,
            "code": self.code,
        }


def _merge(target: Obj, patch: Obj) -> None:
    """RFC 7386 merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


# The lists of a pod's status that a strategic merge patch merges by a key, and their keys.
STATUS_LIST_KEYS = {"conditions": "type", "containerStatuses": "name"}


def _strategic_merge(target: Obj, patch: Obj, keys: dict[str, str]) -> None:
    """A strategic merge patch, as far as a pod's status needs: the lists of ``keys`` merged
    entry by entry on their key, everything else as a merge patch."""
    for field, value in patch.items():
        key = keys.get(field)
        if key is None or not isinstance(value, list):
            _merge(target, {field: value})
            continue
        merged = list(target.get(field) or [])
        for entry in value:
            at = next((i for i, e in enumerate(merged) if e.get(key) == entry.get(key)), None)
            if at is None:
                merged.append(copy.deepcopy(entry))
            else:
                merged[at] = {**merged[at], **copy.deepcopy(entry)}
        target[field] = merged


def _field(obj: Obj, dotted: str) -> str:
    node: Any = obj
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


def _selected(obj: Obj, q: dict[str, list[str]]) -> bool:
    for term in filter(None, q.get("fieldSelector", [""])[0].split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if _field(obj, key) == value:
                return False
        else:
            key, value = term.replace("==", "=").split("=", 1)
            if _field(obj, key) != value:
                return False
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, q.get("labelSelector", [""])[0].split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True
