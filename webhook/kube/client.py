"""The kubernetes client as plain JSON: paginated lists, watches as streams of events, writes.

Objects stay dicts, as the engine reads them (the typed models would cost more than judging
them, and lose fields the client's release does not know). The kubernetes client still does
what it is for: reading kubeconfig or the in-cluster service account, authentication and TLS.
Every call is recorded as the RBAC permission it needs (``calls``; see ``access``).
This is the one module that imports ``kubernetes``.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypedDict, TypeVar, Unpack
from urllib.parse import quote, urlencode

from webhook.errors import PreemptguardError
from webhook.kube.access import Access, access_of
from webhook.loading import jsondoc

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "preemptguard"
PAGE_SIZE = 500  # what kubectl asks for
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 60.0
WATCH_SECONDS = 300  # servers end a watch about this often; the caller watches again
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

Obj = dict[str, Any]


class Request(TypedDict, total=False):
    """What a call sends besides its method and path, the same for ``_json`` and ``_send``:
    the query, the body and its content type (JSON unless said)."""

    params: Mapping[str, str] | None
    body: Obj | None
    content_type: str


class ClusterError(PreemptguardError):
    """A call the API server refused or that did not reach it; ``str()`` says which and why."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        self.status, self.reason = status, reason
        super().__init__(message)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        """A resourceVersion or continue token too old to use (HTTP 410): list again."""
        return self.status == 410


def path(
    resource: str,
    *,
    group: str = "",
    version: str = "v1",
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """``/api/v1/namespaces/NS/pods/NAME`` and the like (``.../status`` with ``subresource``)."""
    prefix = "/api/v1" if not group else f"/apis/{group}/{version}"
    parts = [prefix]
    if namespace is not None:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(resource)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource is not None:
        parts.append(subresource)
    return "/".join(parts)


T = TypeVar("T")


def _itself(item: Obj) -> Obj:
    return item


@dataclass(frozen=True)
class Listing(Generic[T]):
    """Every item of a collection (or what was made of each), read page by page, and the
    version to watch from."""

    items: list[T]
    resource_version: str
    pages: int


class Cluster:
    """One API server, spoken to in JSON through a kubernetes ``ApiClient``."""

    def __init__(self, api_client: Any, *, source: str, namespace: str = "default") -> None:
        self._api = api_client
        self.source = source
        # The namespace of the kubeconfig's context, or the pod's own: where the observer's
        # Lease lives unless told otherwise.
        self.namespace = namespace
        self._calls: set[Access] = set()
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> Cluster:
        """From ``kubeconfig`` (or ``KUBECONFIG``), else the in-cluster service account, else
        ``~/.kube/config``; raises ``ClusterError`` when none can be used."""
        chosen = kubeconfig or os.environ.get("KUBECONFIG")
        if not chosen and not _in_cluster():
            default = Path("~/.kube/config").expanduser()
            if not default.exists():
                raise ClusterError(
                    "no cluster configured: set KUBECONFIG (or pass --kubeconfig), or run in a "
                    "pod with a service account"
                )
            chosen = str(default)
        if chosen and os.pathsep not in chosen and not Path(chosen).is_file():
            what = "is not a file" if Path(chosen).exists() else "does not exist"
            raise ClusterError(f"cannot use the cluster configuration: kubeconfig {chosen} {what}")
        config = _kubernetes("config")
        try:
            if chosen:
                api = config.new_client_from_config(config_file=chosen, context=context)
                contexts, active = config.list_kube_config_contexts(config_file=chosen)
                current = next((c for c in contexts if c["name"] == context), active)
                namespace = (current.get("context") or {}).get("namespace") or "default"
                return cls(api, source=f"kubeconfig {chosen}", namespace=namespace)
            client = _kubernetes("client")
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
            api = client.ApiClient(configuration)
        except Exception as exc:  # noqa: BLE001 - any configuration problem is the same to users
            raise ClusterError(f"cannot use the cluster configuration: {_one_line(exc)}") from None
        return cls(api, source="in-cluster service account", namespace=namespace)

    @classmethod
    def configured(cls) -> tuple[Callable[[], Cluster] | None, str]:
        """The cluster a server finds by itself: ``KUBECONFIG``, else the in-cluster service
        account (never ``~/.kube/config``); as a function that connects on first call and
        then returns that one client (``ClusterError`` while it cannot), with where it comes
        from, for the log. ``(None, "none")`` without either."""
        kubeconfig = os.environ.get("KUBECONFIG")
        if not kubeconfig and not _in_cluster():
            return None, "none"
        source = f"KUBECONFIG={kubeconfig}" if kubeconfig else "in-cluster service account"
        connected: list[Cluster] = []
        lock = threading.Lock()

        def cluster() -> Cluster:
            with lock:
                if not connected:
                    connected.append(cls.connect(kubeconfig))
                return connected[0]

        return cluster, source

    @property
    def calls(self) -> frozenset[Access]:
        """The permissions the calls made so far needed."""
        with self._lock:
            return frozenset(self._calls)

    def close(self) -> None:
        closer = getattr(self._api, "close", None)
        if closer is not None:
            closer()

    # --- reading ----------------------------------------------------------------------------

    def get(self, resource_path: str, *, timeout: tuple[float, float] | None = None) -> Obj:
        """The object; ``timeout``: seconds to connect and to read, where the defaults
        (``CONNECT_TIMEOUT``, ``READ_TIMEOUT``) are too long to wait."""
        if timeout is None:
            return self._json("GET", resource_path)
        return self._json("GET", resource_path, timeout=timeout)

    def list_all(
        self,
        resource_path: str,
        *,
        params: Mapping[str, str] | None = None,
        page_size: int = PAGE_SIZE,
        on_page: Callable[[int], None] | None = None,
    ) -> Listing[Obj]:
        """Every item, ``page_size`` at a time (``limit``/``continue``)."""
        return self.collect(
            resource_path, _itself, params=params, page_size=page_size, on_page=on_page
        )

    def collect(
        self,
        resource_path: str,
        take: Callable[[Obj], T | None],
        *,
        params: Mapping[str, str] | None = None,
        page_size: int = PAGE_SIZE,
        on_page: Callable[[int], None] | None = None,
    ) -> Listing[T]:
        """What ``take`` makes of each item (None: nothing is kept), ``page_size`` items at a
        time (``limit``/``continue``): a page's items are gone before the next page is read,
        so a large collection is never held whole. A continue token that expired mid-way
        (HTTP 410) starts the list again, once: ``take`` may see an item twice, and what it
        made the first time is dropped."""
        for attempt in (1, 2):
            try:
                return self._pages(resource_path, params or {}, page_size, on_page, take)
            except ClusterError as exc:
                if not exc.gone or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _pages(
        self,
        resource_path: str,
        params: Mapping[str, str],
        page_size: int,
        on_page: Callable[[int], None] | None,
        take: Callable[[Obj], T | None],
    ) -> Listing[T]:
        """The pages in turn, each asked for while the one before is taken: the API server
        makes the next page while this process works on the last."""

        def fetch(token: str) -> Obj:
            query = {**params, "limit": str(page_size)}
            if token:
                query["continue"] = token
            return self._json("GET", resource_path, params=query)

        items: list[T] = []
        pages = 0
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="list-ahead") as ahead:
            page = fetch("")
            while True:
                meta = page.get("metadata") or {}
                token = meta.get("continue") or ""
                following = ahead.submit(fetch, token) if token else None
                found = page.get("items") or []
                for item in found:
                    made = take(item)
                    if made is not None:
                        items.append(made)
                pages += 1
                if on_page is not None:
                    on_page(len(found))
                if following is None:
                    return Listing(items, str(meta.get("resourceVersion") or ""), pages)
                page = following.result()

    def watch(
        self,
        resource_path: str,
        *,
        resource_version: str,
        params: Mapping[str, str] | None = None,
        seconds: int = WATCH_SECONDS,
    ) -> Iterator[Obj]:
        """The events of one watch from ``resource_version``, until the server ends it.

        An ``ERROR`` event (such as 410 Gone: the version is too old) raises ``ClusterError``:
        the caller lists again. ``BOOKMARK`` events are passed on (they carry a version).
        """
        query = {
            **(params or {}),
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(seconds),
        }
        response = self._send("GET", resource_path, params=query, timeout=seconds + 30)
        raw = response.response
        try:
            buffer = b""
            for chunk in _chunks(raw, resource_path):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _event(line)
            if buffer.strip():
                yield _event(buffer)
        finally:
            raw.release_conn()

    # --- writing ----------------------------------------------------------------------------

    def create(self, resource_path: str, obj: Obj) -> Obj:
        return self._json("POST", resource_path, body=obj)

    def update(self, resource_path: str, obj: Obj) -> Obj:
        return self._json("PUT", resource_path, body=obj)

    def merge_patch(self, resource_path: str, patch: Obj) -> Obj:
        return self._json("PATCH", resource_path, body=patch, content_type=MERGE_PATCH)

    def strategic_merge_patch(self, resource_path: str, patch: Obj) -> Obj:
        """A strategic merge patch: lists such as a pod's ``status.conditions`` are merged by
        their key (a condition's ``type``), so a patch of one entry keeps the others."""
        return self._json("PATCH", resource_path, body=patch, content_type=STRATEGIC_MERGE_PATCH)

    def apply(self, resource_path: str, obj: Obj) -> Obj:
        """Server-side apply as preemptguard: creates the object or updates the fields it owns.

        An apply that creates is authorized as a ``create`` too, so it is recorded as both.
        """
        params = {"fieldManager": FIELD_MANAGER, "force": "true"}
        patch = access_of("PATCH", resource_path)
        with self._lock:
            self._calls.add(Access(patch.group, patch.resource, "create"))
        return self._json("PATCH", resource_path, body=obj, params=params, content_type=APPLY_PATCH)

    def delete(
        self, resource_path: str, *, grace_seconds: int | None = None, uid: str | None = None
    ) -> Obj:
        """Delete; with ``uid``, only the object of that uid: a name a newer object has taken
        since answers 409 and that object is left alone."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        return self._json("DELETE", resource_path, body=body)

    # --- the wire ---------------------------------------------------------------------------

    def _json(
        self,
        method: str,
        resource_path: str,
        *,
        timeout: float | tuple[float, float] = READ_TIMEOUT,
        **request: Unpack[Request],
    ) -> Obj:
        """``_send``, and the answer read as a JSON object."""
        response = self._send(method, resource_path, timeout=timeout, **request)
        data = response.read()
        try:
            value = jsondoc.loads(data) if data else {}
        except ValueError:
            raise ClusterError(
                f"{method} {resource_path}: the answer is not JSON", status=response.status
            ) from None
        return value if isinstance(value, dict) else {}

    def _send(
        self,
        method: str,
        resource_path: str,
        *,
        timeout: float | tuple[float, float] = READ_TIMEOUT,
        **request: Unpack[Request],
    ) -> Any:
        """``timeout``: seconds to read, or to connect and to read."""
        limits = timeout if isinstance(timeout, tuple) else (CONNECT_TIMEOUT, timeout)
        query = urlencode(request.get("params") or {})
        with self._lock:
            self._calls.add(access_of(method, resource_path, query))
        headers = {"Accept": JSON}
        body = request.get("body")
        if body is not None:
            headers["Content-Type"] = request.get("content_type", JSON)
        try:
            serialized = self._api.param_serialize(
                method=method,
                resource_path=resource_path + (f"?{query}" if query else ""),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self._api.call_api(*serialized, _request_timeout=limits)
        except Exception as exc:  # noqa: BLE001 - network, TLS, auth plugin: all unreachable
            raise ClusterError(f"{method} {resource_path}: {_one_line(exc)}") from None
        if response.status >= 400:
            raise _refused(method, resource_path, response)
        return response


def _refused(method: str, resource_path: str, response: Any) -> ClusterError:
    try:
        status = json.loads(response.read() or b"{}")
    except ValueError:
        status = {}
    if not isinstance(status, dict):
        status = {}
    message = status.get("message") or response.reason or "no message"
    return ClusterError(
        f"{method} {resource_path}: HTTP {response.status}: {_one_line(message)}",
        status=response.status,
        reason=str(status.get("reason") or ""),
    )


def _chunks(raw: Any, resource_path: str) -> Iterator[bytes]:
    """The body of a watch as it arrives; a connection that breaks is a ``ClusterError``."""
    stream = raw.stream(64 * 1024, decode_content=True)
    while True:
        try:
            chunk = next(stream)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 - urllib3's protocol, timeout, connection errors
            raise ClusterError(f"watch of {resource_path} broke: {_one_line(exc)}") from None
        yield chunk


def _event(line: bytes) -> Obj:
    try:
        event = jsondoc.loads(line)
    except ValueError:
        raise ClusterError("a watch sent a line that is not JSON") from None
    if not isinstance(event, dict):
        raise ClusterError("a watch sent an event that is not an object")
    if event.get("type") == "ERROR":
        found = event.get("object")
        status: dict[str, Any] = found if isinstance(found, dict) else {}
        code = status.get("code")
        code = code if isinstance(code, int) else 0
        raise ClusterError(f"watch ended: {_one_line(str(status.get('message')))}", status=code)
    return event


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def _one_line(value: object) -> str:
    reason = getattr(value, "reason", None) if isinstance(value, Exception) else None
    return " ".join(str(reason or value).split())[:300]


def _kubernetes(module: str) -> Any:
    """A module of the ``kubernetes`` client, imported on first use (it is slow to import)."""
    return importlib.import_module(f"kubernetes.{module}")
