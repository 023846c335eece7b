"""AdmissionReview ``admission.k8s.io/v1`` on the wire: read a request, build the answer.

Every answer echoes the request's ``uid`` and ``apiVersion``/``kind``: the API server treats a
response without them as a failed call and falls back to the webhook's ``failurePolicy``.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, TypeVar, cast, get_args

from webhook.engine.decision import AdmissionOperation, Obj, Requester
from webhook.engine.findings import shorten
from webhook.engine.podshape import describe
from webhook.engine.workloads import display_name
from webhook.errors import BadReview, UnreadableRequest
from webhook.loading import jsondoc

API_VERSION = "admission.k8s.io/v1"
# v1beta1 has the same fields; an API server configured with it must get v1beta1 back.
API_VERSIONS = (API_VERSION, "admission.k8s.io/v1beta1")
REVIEW_KIND = "AdmissionReview"
PATCH_TYPE: Literal["JSONPatch"] = "JSONPatch"
# How much of a value from the request a reason or a log field shows: enough to recognise it,
# while a client cannot make the answer or the log line as large as its request.
ECHO_CHARS = 100
# The type of a field read from the request (``_optional``).
V = TypeVar("V")


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class Status(TypedDict, total=False):
    code: int
    reason: str
    message: str


class _ResponseRequired(TypedDict):
    uid: str
    allowed: bool


class AdmissionResponse(_ResponseRequired, total=False):
    status: Status
    patch: str
    patchType: Literal["JSONPatch"]
    warnings: list[str]
    auditAnnotations: dict[str, str]


class AdmissionReview(TypedDict):
    apiVersion: str
    kind: str
    response: AdmissionResponse


@dataclass(frozen=True, slots=True)
class Request:
    """The parts of an AdmissionReview request the server acts on and logs."""

    api_version: str
    uid: str
    kind: str
    group: str
    operation: AdmissionOperation
    namespace: str | None
    name: str
    sub_resource: str | None
    user: str
    groups: tuple[str, ...]
    dry_run: bool
    object: Obj | None
    old_object: Obj | None
    # The apiVersion request.kind names whole (group, version and kind, as the API server
    # always writes them): its word for what the object is, which the object's own fields
    # cannot change. None when request.kind does not name all three.
    object_api_version: str | None = None

    @property
    def is_pod(self) -> bool:
        return self.group == "" and self.kind == "Pod"

    @property
    def requester(self) -> Requester:
        return Requester(username=self.user, groups=self.groups)


_OPERATIONS = frozenset(get_args(AdmissionOperation))


def loads(body: bytes) -> object:
    """The JSON document in ``body``, however deeply nested (see ``jsondoc``)."""
    if not body.strip():
        raise BadReview("body is empty: send an AdmissionReview as JSON")
    try:
        return cast(object, jsondoc.loads(body))
    except ValueError as exc:
        raise BadReview(f"body is not JSON: {_one_line(exc)}") from None


def parse_review(doc: object) -> Request:
    """The request of an AdmissionReview document, or ``BadReview`` saying what is wrong."""
    if not isinstance(doc, dict):
        raise BadReview(f"not an AdmissionReview: the body is {describe(doc, json=True)}")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if api_version not in API_VERSIONS or kind != REVIEW_KIND:
        raise BadReview(
            f"not an AdmissionReview: apiVersion {shorten(repr(api_version), ECHO_CHARS)}, "
            f"kind {shorten(repr(kind), ECHO_CHARS)}; "
            f"expected {API_VERSION} {REVIEW_KIND}"
        )
    request = doc.get("request")
    if not isinstance(request, dict):
        raise BadReview("the AdmissionReview has no request")
    return _request(str(api_version), request)


def _request(api_version: str, raw: dict[str, Any]) -> Request:
    uid = raw.get("uid")
    if uid is None or uid == "":
        raise BadReview("request.uid is missing: the answer must echo it")
    if not isinstance(uid, str) or uid in jsondoc.UNREAD:
        raise BadReview(f"request.uid is {describe(uid, json=True)}, not a string")
    try:
        return _identified(api_version, uid, raw)
    except BadReview as exc:
        raise UnreadableRequest(str(exc), api_version, uid) from None


def _identified(api_version: str, uid: str, raw: dict[str, Any]) -> Request:
    """The request of a review whose answer can echo ``uid``."""
    operation = raw.get("operation")
    if not isinstance(operation, str) or operation not in _OPERATIONS:
        raise BadReview(
            f"request.operation {shorten(repr(operation), ECHO_CHARS)} is not one of "
            "CREATE, UPDATE, DELETE, CONNECT"
        )
    obj, old = _object(raw, "object"), _object(raw, "oldObject")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise BadReview(f"request.object is missing: a {operation} review carries the object")
    gvk = _mapping(raw, "kind")
    return Request(
        api_version=api_version,
        uid=uid,
        kind=_text(gvk, "kind", "request.kind") or _text(obj or {}, "kind", "object.kind"),
        group=_text(gvk, "group", "request.kind"),
        object_api_version=_named_api_version(gvk),
        operation=cast(AdmissionOperation, operation),
        namespace=_text(raw, "namespace", "request") or None,
        name=_text(raw, "name", "request") or display_name(obj or old or {}, pending=""),
        sub_resource=_text(raw, "subResource", "request") or None,
        user=_text(_mapping(raw, "userInfo"), "username", "request.userInfo"),
        groups=_texts(_mapping(raw, "userInfo"), "groups", "request.userInfo"),
        dry_run=_flag(raw, "dryRun"),
        object=obj,
        old_object=old,
    )


# How the API server writes a review: kind, apiVersion, then the request, whose fields come in
# the order of Go's AdmissionRequest: uid first; kind, resource and the like (which hold no
# "namespace"), name and namespace, then operation, userInfo and the objects. Read this way
# only to answer a large review before reading all of it (refusing it as busy, looking its
# namespace up for the process that will read it); the answer itself always comes from
# ``parse_review``, which checks what this assumed.
_ENVELOPE = re.compile(
    rb'\A\s*\{\s*"kind"\s*:\s*"AdmissionReview"\s*,\s*"apiVersion"\s*:\s*'
    rb'"(admission\.k8s\.io/v1(?:beta1)?)"\s*,\s*"request"\s*:\s*\{\s*"uid"\s*:\s*'
    rb'("(?:[^"\\\x00-\x1f]|\\.){1,1024}")'
)
_NAMESPACE = re.compile(rb'"namespace"\s*:\s*"([-a-z0-9]{1,63})"')
_OPERATION = re.compile(rb'"operation"\s*:')
# The request's fields before "operation" take a few hundred bytes.
_PREAMBLE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the start of a review, as the API server writes it, says."""

    api_version: str
    uid: str
    namespace: str | None


def envelope(body: bytes) -> Envelope | None:
    """The envelope of a review as the API server writes it; None for anything else."""
    match = _ENVELOPE.match(body)
    if match is None:
        return None
    try:
        # A JSON string, escapes and all: the uid is echoed exactly as the request has it.
        uid = json.loads(match.group(2))
    except ValueError:
        return None
    rest = match.end()
    operation = _OPERATION.search(body, rest, rest + _PREAMBLE_BYTES)
    namespace = None
    if operation is not None:
        found = _NAMESPACE.search(body, rest, operation.start())
        namespace = found.group(1).decode() if found else None
    return Envelope(match.group(1).decode(), uid, namespace)


def unreadable(problem: UnreadableRequest) -> AdmissionReview:
    """Refuse a review whose request cannot be read in full, saying what is wrong with it."""
    message = f"preemptguard cannot read this review: {problem}"
    status: Status = {"code": 400, "reason": "BadRequest", "message": message}
    return {
        "apiVersion": problem.api_version,
        "kind": REVIEW_KIND,
        "response": {"uid": problem.uid, "allowed": False, "status": status},
    }


def refused_unread(api_version: str, uid: str, message: str, code: int) -> AdmissionReview:
    """Refuse a review read no further than its ``envelope``."""
    reason = "RequestEntityTooLarge" if code == 413 else "TooManyRequests"
    status: Status = {"code": code, "reason": reason, "message": message}
    return {
        "apiVersion": api_version,
        "kind": REVIEW_KIND,
        "response": {"uid": uid, "allowed": False, "status": status},
    }


def allowed(
    request: Request, *, warnings: Iterable[str] = (), audit: Mapping[str, str] | None = None
) -> AdmissionReview:
    """Admit the object as it is."""
    return _review(request, _response(request, True, warnings, audit))


def patched(
    request: Request,
    ops: Sequence[Mapping[str, Any]],
    *,
    warnings: Iterable[str] = (),
    audit: Mapping[str, str] | None = None,
) -> AdmissionReview:
    """Admit the object with ``ops`` applied; without ops, the same as ``allowed``."""
    response = _response(request, True, warnings, audit)
    if ops:
        response["patch"] = encode_patch(ops)
        response["patchType"] = PATCH_TYPE
    return _review(request, response)


def denied(
    request: Request,
    message: str,
    *,
    code: int = 403,
    reason: str = "Forbidden",
    warnings: Iterable[str] = (),
    audit: Mapping[str, str] | None = None,
) -> AdmissionReview:
    """Refuse the object; kubectl shows ``message`` after the webhook's name."""
    response = _response(request, False, warnings, audit)
    response["status"] = {"code": code, "reason": reason, "message": message}
    return _review(request, response)


def errored(request: Request, message: str, *, code: int = 500) -> AdmissionReview:
    """Refuse because the webhook itself failed on a well-formed request."""
    return denied(request, message, code=code, reason="InternalError")


def encode_patch(ops: Sequence[Mapping[str, Any]]) -> str:
    """JSON Patch as the API server wants it in ``response.patch``: base64 of the JSON."""
    return base64.b64encode(jsondoc.dumps(list(ops))).decode()


def decode_patch(patch: str) -> list[dict[str, Any]]:
    """The operations of an encoded ``response.patch``."""
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(patch))
    return ops


def _review(request: Request, response: AdmissionResponse) -> AdmissionReview:
    return {"apiVersion": request.api_version, "kind": REVIEW_KIND, "response": response}


def _response(
    request: Request, allow: bool, warnings: Iterable[str], audit: Mapping[str, str] | None
) -> AdmissionResponse:
    response: AdmissionResponse = {"uid": request.uid, "allowed": allow}
    # The API server drops duplicates too, but repeated lines clutter kubectl's output.
    unique = [w for w in dict.fromkeys(warnings) if w]
    if unique:
        response["warnings"] = unique
    if audit:
        response["auditAnnotations"] = dict(audit)
    return response


def _named_api_version(gvk: Mapping[str, Any]) -> str | None:
    group, version, kind = gvk.get("group"), gvk.get("version"), gvk.get("kind")
    if not (isinstance(group, str) and isinstance(version, str) and isinstance(kind, str)):
        return None
    if not version or not kind or jsondoc.UNREAD & {group, version, kind}:
        return None
    return f"{group}/{version}" if group else version


def _optional(raw: Mapping[str, Any], key: str, kind: type[V], what: str, where: str) -> V | None:
    """``raw[key]`` when it is a ``kind``, None when absent or null; anything else is a bad
    review, said as ``<where>.<key> is <what it is>, not <what>``. The one check of every
    optional field of a review, so that each is refused in the same words."""
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, kind):
        raise BadReview(f"{where}.{key} is {describe(value, json=True)}, not {what}")
    return value


def _object(raw: Mapping[str, Any], key: str) -> Obj | None:
    return _optional(raw, key, dict, "an object", "request")


def _mapping(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = _object(raw, key)
    return {} if value is None else value


def _text(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = _optional(raw, key, str, "a string", where)
    if value is None:
        return ""
    if value in jsondoc.UNREAD:
        raise BadReview(f"{where}.{key} is {describe(value)}, not a string")
    return value


def _texts(raw: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = raw.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadReview(f"{where}.{key} is not a list of strings")
    unread = next((v for v in value if v in jsondoc.UNREAD), None)
    if unread is not None:
        raise BadReview(f"{where}.{key} holds {describe(unread)}, not only strings")
    return tuple(value)


def _flag(raw: Mapping[str, Any], key: str) -> bool:
    return _optional(raw, key, bool, "a boolean", "request") is True


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
