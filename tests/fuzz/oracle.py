"""What must hold for every input, decided without the webhook's own code.

Server (one review in, one answer out, plus follow-ups made from the answer):

- a well-formed AdmissionReview (decided here, from the bytes) gets HTTP 200 and a review
  echoing its ``uid`` and ``apiVersion`` with a boolean ``allowed``; one whose ``uid`` can be
  echoed but whose request cannot be read gets HTTP 200 and a refusal (code 400) echoing it;
  anything else gets 400 with one line of text; never 500, never an exception;
- every message (``status.message``, each warning, a 400's line) is at most 1,024 characters;
- a patch is base64 of a JSON Patch that applies to the object; the patched object sent to
  ``/mutate`` again gets no patch (idempotent) and sent to ``/validate`` is allowed (enforce
  mode);
- a serving, coordinator or login pod that is allowed can never land on a preemptible node
  after its patch, and a workload whose template is of such a class is never allowed when
  that template requires preemptible capacity (excluded namespaces and genuine DaemonSet and
  mirror pods aside, judged by the requester);
- every review is answered within ``bound_seconds``.

CLI: exit status 0, 1 or 2 consistent with the output; no traceback and no "internal error";
``-o json`` is JSON with ``results``, ``summary`` and ``inputErrors``.

The policy facts used here (class names, rules, namespaces, trusted requesters) are those of
the shipped default policy as DESIGN.md states them, written out again on purpose.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import jsonpointer

from tests.fuzz import corpus
from tests.fuzz.jsontext import NotJSON, Raw, TooDeep, deep_copy, dumps, parse, type_name
from webhook.engine.jsoncompare import same_json

MAX_MESSAGE = 1024
MAX_BODY_BYTES = 7 * 2**20
API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
KEY = "together.ai/compute-class"
PREEMPTIBLE = "preemptible"
STANDARD = "standard"
WORKLOAD = "together.ai/workload"
MIRROR = "kubernetes.io/config.mirror"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
STANDARD_CLASSES = frozenset({"serving", "coordinator", "login"})
EXCLUDED_NAMESPACES = frozenset(corpus.EXCLUDED_NAMESPACES)
DAEMONSET_CONTROLLERS = frozenset(
    {"system:serviceaccount:kube-system:daemon-set-controller", "system:kube-controller-manager"}
)
# Rules of the default policy that make a pod standard-only, by label.
STANDARD_LABELS: tuple[tuple[str, frozenset[str]], ...] = (
    ("ray.io/node-type", frozenset({"head"})),
    ("training.kubeflow.org/job-role", frozenset({"launcher", "master"})),
    ("app.kubernetes.io/component", frozenset({"login"})),
)
# Kinds whose pod template /validate checks, by API group and kind, and where the template
# is. A kind of another group (a Volcano Job, a Deployment in the core group) is not one of them.
TEMPLATE_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("apps", "Deployment"): ("spec", "template"),
    ("apps", "StatefulSet"): ("spec", "template"),
    ("apps", "ReplicaSet"): ("spec", "template"),
    ("", "ReplicationController"): ("spec", "template"),
    ("batch", "Job"): ("spec", "template"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template"),
}


def template_path(obj: Mapping[str, Any]) -> tuple[str, ...] | None:
    """Where the pod template of ``obj`` is, if its kind is one /validate checks."""
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api_version, str):
        return None
    group = api_version.rpartition("/")[0]
    return TEMPLATE_PATHS.get((group, kind))


MARKER = "<not read"  # what the webhook's reader puts where it did not read


@dataclass(frozen=True)
class Failure:
    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.detail}"


@dataclass(frozen=True)
class Reply:
    status: int
    mimetype: str
    data: bytes
    seconds: float


Post = Callable[[str, bytes, str], Reply]


# --- what the request is -----------------------------------------------------------------


@dataclass
class Expected:
    """What the oracle makes of a body: a well-formed review (``good``) or why it is not."""

    good: bool
    why: str = ""
    doc: Any = None
    api_version: str = ""
    uid: str = ""
    operation: str = ""
    kind: str = ""
    group: str = ""
    namespace: str | None = None
    sub_resource: str = ""
    username: str = ""
    groups: tuple[str, ...] = ()
    dry_run: bool = False
    obj: dict[str, Any] | None = None

    @property
    def is_pod(self) -> bool:
        """A pod, as the request says (what the webhook's hooks go by)."""
        return self.group == "" and self.kind == "Pod"

    @property
    def consistent(self) -> bool:
        """The object says it is what the request says: always so from an API server, which
        sets the object's kind itself. Placement is judged only on such objects."""
        return isinstance(self.obj, dict) and self.obj.get("kind") == self.kind


class _Bad(Exception):
    pass


def _show(value: Any) -> str:
    """A value for a message: scalars shortened, containers by type (they may be deep)."""
    if isinstance(value, dict | list):
        return f"a JSON {type_name(value)}"
    return repr(value)[:60]


def _optional(raw: Mapping[str, Any], key: str, want: str, where: str) -> Any:
    """``raw[key]`` when absent/null or of JSON type ``want``; else the review is malformed."""
    value = raw.get(key)
    if value is None:
        return None
    if type_name(value) != want:
        what = "a number of more than 4300 digits" if isinstance(value, Raw) else type_name(value)
        raise _Bad(f"{where}.{key} is {what}, not {want}")
    return value


def expect(body: bytes, content_type: str) -> Expected:
    """Whether ``body`` is a well-formed AdmissionReview, decided from its bytes alone."""
    if content_type.split(";")[0].strip().lower() != "application/json":
        return Expected(False, f"content type {content_type!r}")
    if len(body) > MAX_BODY_BYTES:
        return Expected(False, "body over 7 MiB")
    try:
        doc = parse(body)
    except NotJSON as exc:
        return Expected(False, f"not JSON: {exc}")
    try:
        return _expect(doc)
    except _Bad as exc:
        return Expected(False, str(exc), doc)
    except _Unreadable as exc:
        return Expected(False, str(exc), doc, api_version=exc.api_version, uid=exc.uid)


class _Unreadable(Exception):
    """A review whose uid can be echoed, with a request that cannot be read."""

    def __init__(self, why: str, api_version: str, uid: str) -> None:
        super().__init__(why)
        self.api_version, self.uid = api_version, uid


def _expect(doc: Any) -> Expected:
    if not isinstance(doc, dict):
        raise _Bad(f"body is {type_name(doc)}")
    if doc.get("apiVersion") not in API_VERSIONS or doc.get("kind") != "AdmissionReview":
        raise _Bad("not an AdmissionReview apiVersion/kind")
    request = doc.get("request")
    if not isinstance(request, dict):
        raise _Bad("request is not an object")
    uid = _optional(request, "uid", "string", "request")
    if not uid:
        raise _Bad("request.uid is missing or empty")
    try:
        return _expect_request(doc, request, uid)
    except _Bad as exc:
        raise _Unreadable(str(exc), doc["apiVersion"], uid) from None


def _expect_request(doc: dict[str, Any], request: dict[str, Any], uid: str) -> Expected:
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise _Bad(f"operation {_show(operation)}")
    obj = _optional(request, "object", "object", "request")
    _optional(request, "oldObject", "object", "request")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise _Bad(f"no object on {operation}")
    gvk = _optional(request, "kind", "object", "request") or {}
    kind = _optional(gvk, "kind", "string", "request.kind") or ""
    group = _optional(gvk, "group", "string", "request.kind") or ""
    if not kind and obj:
        kind = _optional(obj, "kind", "string", "object") or ""
    namespace = _optional(request, "namespace", "string", "request") or None
    _optional(request, "name", "string", "request")
    sub = _optional(request, "subResource", "string", "request") or ""
    user = _optional(request, "userInfo", "object", "request") or {}
    username = _optional(user, "username", "string", "request.userInfo")
    groups = _optional(user, "groups", "array", "request.userInfo") or []
    for item in groups:
        if not isinstance(item, str):
            what = "a number of more than 4300 digits" if isinstance(item, Raw) else type_name(item)
            raise _Bad(f"request.userInfo.groups holds {what}, not only strings")
    dry_run = _optional(request, "dryRun", "boolean", "request") or False
    if namespace is None and isinstance(obj, dict):
        meta = obj.get("metadata")
        ns = meta.get("namespace") if isinstance(meta, dict) else None
        namespace = ns if isinstance(ns, str) and ns else None
    return Expected(
        True,
        doc=doc,
        api_version=doc["apiVersion"],
        uid=uid,
        operation=operation,
        kind=kind,
        group=group,
        namespace=namespace,
        sub_resource=sub,
        username=username or "",
        groups=tuple(groups),
        dry_run=dry_run,
        obj=obj,
    )


# --- node selection, from the Kubernetes scheduler's rules ---------------------------------


def _term_admits(term: Any, value: str | None) -> bool:
    """Whether a node whose compute-class label is ``value`` (None: absent) can match."""
    if not isinstance(term, dict):
        return False
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node
    for expr in exprs if isinstance(exprs, list) else []:
        if not isinstance(expr, dict) or expr.get("key") != KEY:
            continue
        op = expr.get("operator")
        values = expr.get("values") or []
        values = values if isinstance(values, list) else []
        if op == "In" and (value is None or value not in values):
            return False
        if op == "NotIn" and value is not None and value in values:
            return False
        if op == "Exists" and value is None:
            return False
        if op == "DoesNotExist" and value is not None:
            return False
        if op in ("Gt", "Lt") and not _bounded(value, op, values):
            return False
    return True


def _bounded(value: str | None, op: str, values: list[Any]) -> bool:
    if value is None or len(values) != 1 or not isinstance(values[0], str):
        return False
    try:
        number, bound = int(value), int(values[0])
    except ValueError:
        return False
    return number > bound if op == "Gt" else number < bound


def _terms(spec: Mapping[str, Any]) -> list[Any] | None:
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node.get(REQUIRED) if isinstance(node, dict) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    return terms if isinstance(terms, list) and terms else None


def can_land_on_preemptible(spec: Mapping[str, Any]) -> str | None:
    """How a pod with ``spec`` could be bound to a preemptible node; None if it cannot."""
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict) and KEY in selector:
        if selector[KEY] == PREEMPTIBLE:
            return f"nodeSelector {KEY}={PREEMPTIBLE}"
        return None  # any other value keeps it off preemptible nodes
    terms = _terms(spec)
    if terms is None:
        return "no required node affinity and no nodeSelector on the class label"
    for i, term in enumerate(terms):
        if _term_admits(term, PREEMPTIBLE):
            return f"required nodeSelectorTerms[{i}] admits {KEY}={PREEMPTIBLE}"
    return None


def requires_preemptible(spec: Mapping[str, Any]) -> str | None:
    """How a pod (template) with ``spec`` could run only on preemptible nodes; None if not."""
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict) and selector.get(KEY) == PREEMPTIBLE:
        return f"nodeSelector {KEY}={PREEMPTIBLE}"
    terms = _terms(spec)
    if terms is None:
        return None
    named = {
        v
        for term in terms
        if isinstance(term, dict) and isinstance(term.get("matchExpressions"), list)
        for expr in term["matchExpressions"]
        if isinstance(expr, dict)
        and expr.get("key") == KEY
        and isinstance(expr.get("values"), list)
        for v in expr["values"]
        if isinstance(v, str)
    }
    # Nodes of other label values are taken to be standard (the engine's reading; on the
    # platform of DESIGN.md they do not exist, and a pod asking for them is unschedulable).
    bounds = {
        str(int(v) + d) for v in named if v.lstrip("-").isdigit() and len(v) < 20 for d in (-1, 1)
    }
    others: list[str | None] = [
        None,
        STANDARD,
        "\x00other",
        *sorted((named | bounds) - {PREEMPTIBLE}),
    ]
    if any(_term_admits(term, value) for term in terms for value in others):
        return None
    if not any(_term_admits(term, PREEMPTIBLE) for term in terms):
        return None  # no node of either class matches: unschedulable, not preemptible
    return "every required nodeSelectorTerm excludes standard and unlabelled nodes"


# --- which objects must stay off preemptible nodes ----------------------------------------


def _mapping(node: Any, *path: str) -> dict[str, Any]:
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def standard_only(
    pod: Mapping[str, Any],
    namespace: str | None,
    defaults: Mapping[str, str] = corpus.NAMESPACE_DEFAULTS,
    *,
    is_pod: bool = True,
) -> str | None:
    """Which source makes this pod (or, not ``is_pod``, template) standard-only under the
    default policy; ``defaults`` are the namespaces' ``together.ai/default-workload``."""
    meta = _mapping(pod, "metadata")
    annotations, labels = _mapping(meta, "annotations"), _mapping(meta, "labels")
    value = annotations.get(WORKLOAD)
    if isinstance(value, str) and value in STANDARD_CLASSES:
        return f"annotation {WORKLOAD}={value}"
    for key, values in STANDARD_LABELS:
        label = labels.get(key)
        if isinstance(label, str) and label in values:
            return f"label {key}={label}"
    made = operator_made(labels, annotated=WORKLOAD in annotations) if is_pod else None
    if made is not None:
        return made
    default = defaults.get(namespace or "")
    if default in STANDARD_CLASSES:
        return f"namespace {namespace} defaults to {default}"
    return None


# Coordinator templates (the policy's rule for roles head, master, launcher, chief, ps), by the
# labels each operator sets on the pods it makes from them.
COORDINATOR_PODS: dict[str, tuple[str, frozenset[str]]] = {
    "tfjob-controller": ("replica-type", frozenset({"chief", "master", "ps"})),
    "pytorchjob-controller": ("replica-type", frozenset({"master"})),
    "xgboostjob-controller": ("replica-type", frozenset({"master"})),
    "paddlejob-controller": ("replica-type", frozenset({"master"})),
    "mpi-operator": ("job-role", frozenset({"launcher", "master"})),
    "mpijob-controller": ("job-role", frozenset({"launcher", "master"})),
}


def operator_made(labels: Mapping[str, Any], *, annotated: bool) -> str | None:
    """Which template an operator made this standard-only pod from: a coordinator's whatever
    the pod says, a serving one (a LeaderWorkerSet's, a RayService's workers) unless the pod
    is annotated with a class."""
    operator = labels.get("training.kubeflow.org/operator-name")
    if isinstance(operator, str) and operator in COORDINATOR_PODS:
        key, values = COORDINATOR_PODS[operator]
        if labels.get(f"training.kubeflow.org/{key}") in values:
            return f"the labels {operator} sets on a coordinator's pods"
    if annotated:
        return None
    if "leaderworkerset.sigs.k8s.io/name" in labels:
        return "the labels of a LeaderWorkerSet's pods (serving by default)"
    if labels.get("ray.io/node-type") == "worker" and labels.get("ray.io/serve") == "true":
        return "the labels of a RayService's workers (serving by default)"
    return None


def exempt(expected: Expected, pod: Mapping[str, Any]) -> str | None:
    """Why the webhook rightly leaves this pod alone, judged by who sent it."""
    if expected.namespace in EXCLUDED_NAMESPACES:
        return "excluded namespace"
    meta = _mapping(pod, "metadata")
    user = expected.username or ""
    if MIRROR in _mapping(meta, "annotations") and (
        user.startswith("system:node:") and "system:nodes" in expected.groups
    ):
        return "mirror pod created by its node"
    refs = meta.get("ownerReferences")
    controller = (
        next(
            (r for r in refs if isinstance(r, dict) and r.get("controller") is True),
            None,
        )
        if isinstance(refs, list)
        else None
    )
    if (
        controller is not None
        and controller.get("kind") == "DaemonSet"
        and controller.get("apiVersion") == "apps/v1"
        and user in DAEMONSET_CONTROLLERS
    ):
        return "DaemonSet pod created by the DaemonSet controller"
    return None


# --- the answer ---------------------------------------------------------------------------


@dataclass
class Verdict:
    outcome: str
    failures: list[Failure] = field(default_factory=list)

    def fail(self, check: str, detail: str) -> None:
        self.failures.append(Failure(check, detail[:500]))


def _short(data: bytes, limit: int = 200) -> str:
    return data[:limit].decode("utf-8", "backslashreplace").replace("\n", "\\n")


class ReviewOracle:
    """Judges one review by sending it (and its follow-ups) through ``post``."""

    def __init__(self, post: Post, *, bound_seconds: float = 3.0, warn_mode: bool = False):
        self.post, self.bound, self.warn_mode = post, bound_seconds, warn_mode

    def judge(self, hook: str, body: bytes, content_type: str = "application/json") -> Verdict:
        expected = expect(body, content_type)
        reply = self.post(hook, body, content_type)
        verdict = Verdict("?")
        self._timely(verdict, hook, reply, body, content_type)
        if not expected.good and not expected.uid:
            self._bad_request(verdict, reply, expected.why)
            return verdict
        if not expected.good:
            self._unreadable(verdict, hook, reply, expected)
            return verdict
        review = self._review(verdict, hook, reply, expected)
        if review is None:
            return verdict
        self._placement(verdict, hook, review, expected)
        return verdict

    def _timely(
        self, verdict: Verdict, hook: str, reply: Reply, body: bytes, content_type: str
    ) -> None:
        """Answered within the bound; a late answer is measured again once, so that a
        moment of load on a shared machine is not taken for a slow review."""
        if reply.seconds <= self.bound:
            return
        again = self.post(hook, body, content_type)
        if again.seconds > self.bound:
            verdict.fail(
                "slow",
                f"/{hook} answered in {reply.seconds:.2f} s, then {again.seconds:.2f} s "
                f"(bound {self.bound} s)",
            )

    def _bad_request(self, verdict: Verdict, reply: Reply, why: str) -> None:
        verdict.outcome = "bad-request"
        if reply.status != 400:
            verdict.outcome = f"malformed-answered-{reply.status}"
            verdict.fail(
                "expected-400",
                f"malformed review ({why}) answered {reply.status}: {_short(reply.data)}",
            )
            return
        self._text_line(verdict, reply)

    def _unreadable(self, verdict: Verdict, hook: str, reply: Reply, expected: Expected) -> None:
        """A review with a uid to echo and a request that cannot be read: refused."""
        response = self._review(verdict, hook, reply, expected)
        if response is None:
            return
        verdict.outcome = "unreadable-refused"
        if response.get("allowed") is not False:
            verdict.fail("unreadable-allowed", f"({expected.why}) answered allowed")

    def _text_line(self, verdict: Verdict, reply: Reply) -> None:
        try:
            text = reply.data.decode("utf-8")
        except UnicodeDecodeError:
            verdict.fail("400-not-utf8", _short(reply.data))
            return
        if reply.mimetype != "text/plain":
            verdict.fail("400-not-text", reply.mimetype)
        if not text.endswith("\n") or text.count("\n") != 1:
            verdict.fail("400-not-one-line", repr(text[:200]))
        if len(text.rstrip("\n")) > MAX_MESSAGE:
            verdict.fail("long-message", f"400 line of {len(text)} characters: {text[:100]!r}")

    def _review(
        self, verdict: Verdict, hook: str, reply: Reply, expected: Expected
    ) -> dict[str, Any] | None:
        """The answer's ``response``, checked; None when there is none to go on with."""
        if reply.status != 200:
            verdict.outcome = f"http-{reply.status}"
            verdict.fail(
                f"http-{reply.status}",
                f"well-formed review answered {reply.status}: {_short(reply.data)}",
            )
            return None
        try:
            answer = parse(reply.data)
        except (NotJSON, TooDeep) as exc:
            verdict.outcome = "unreadable"
            verdict.fail("answer-not-json", f"{exc}: {_short(reply.data)}")
            return None
        response = answer.get("response") if isinstance(answer, dict) else None
        if not isinstance(response, dict):
            verdict.outcome = "unreadable"
            verdict.fail("answer-not-review", _short(reply.data))
            return None
        if answer.get("apiVersion") != expected.api_version:
            verdict.fail("apiVersion-not-echoed", f"{answer.get('apiVersion')!r}")
        if answer.get("kind") != "AdmissionReview":
            verdict.fail("kind-not-review", f"{answer.get('kind')!r}")
        if response.get("uid") != expected.uid:
            verdict.fail("uid-not-echoed", f"{str(response.get('uid'))[:80]!r}")
        allowed = response.get("allowed")
        if not isinstance(allowed, bool):
            verdict.fail("allowed-not-boolean", repr(allowed))
            return None
        self._messages(verdict, response)
        status = s if isinstance(s := response.get("status"), dict) else {}
        if not allowed:
            verdict.outcome = "busy" if status.get("code") == 429 else "refused"
            message = status.get("message")
            if not isinstance(message, str) or not message.strip():
                verdict.fail("refusal-without-message", repr(status)[:200])
            if "patch" in response:
                verdict.fail("patch-on-refusal", "a refused review carries a patch")
            return response
        warned = any(
            "would be refused" in w for w in response.get("warnings") or [] if isinstance(w, str)
        )
        verdict.outcome = "patched" if "patch" in response else "warned" if warned else "allowed"
        if "patch" in response and hook != "mutate":
            verdict.fail("patch-on-validate", "/validate answered with a patch")
        return response

    def _messages(self, verdict: Verdict, response: Mapping[str, Any]) -> None:
        status = response.get("status")
        if status is not None:
            message = status.get("message") if isinstance(status, dict) else None
            if not isinstance(status, dict) or not isinstance(message, str | type(None)):
                verdict.fail("status-malformed", repr(status)[:200])
            elif message is not None and len(message) > MAX_MESSAGE:
                verdict.fail(
                    "long-message",
                    f"status.message of {len(message)} characters: {message[:160]!r}",
                )
        warnings = response.get("warnings", [])
        if not isinstance(warnings, list):
            verdict.fail("warnings-malformed", repr(warnings)[:200])
            return
        for w in warnings:
            if not isinstance(w, str):
                verdict.fail("warnings-malformed", repr(w)[:200])
            elif len(w) > MAX_MESSAGE:
                verdict.fail("long-message", f"warning of {len(w)} characters: {w[:160]!r}")
        audit = response.get("auditAnnotations", {})
        if not isinstance(audit, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in audit.items()
        ):
            verdict.fail("audit-malformed", repr(audit)[:200])

    # -- the patch and where the object may run ---------------------------------------------

    def _placement(
        self, verdict: Verdict, hook: str, response: dict[str, Any], expected: Expected
    ) -> None:
        obj = expected.obj
        patched = obj
        if "patch" in response and response.get("allowed") is True:
            patched = self._apply(verdict, response, obj)
            if patched is None:
                return
            self._again(verdict, expected, patched)
        if response.get("allowed") is not True or self.warn_mode or not isinstance(patched, dict):
            return
        if expected.operation != "CREATE" or expected.sub_resource or not expected.consistent:
            return
        if expected.is_pod:
            self._standard_pod(verdict, hook, expected, patched)
        elif hook == "validate":
            self._standard_template(verdict, expected, patched)

    def _apply(
        self, verdict: Verdict, response: Mapping[str, Any], obj: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        if response.get("patchType") != "JSONPatch":
            verdict.fail("patch-type", repr(response.get("patchType")))
        raw = response.get("patch")
        try:
            text = base64.b64decode(raw, validate=True).decode("utf-8")  # type: ignore[arg-type]
            ops = json.loads(text)
        except (TypeError, ValueError, binascii.Error) as exc:
            verdict.fail("patch-not-base64-json", f"{type(exc).__name__}: {exc}")
            return None
        if not isinstance(ops, list) or not all(
            isinstance(op, dict)
            and isinstance(op.get("op"), str)
            and isinstance(op.get("path"), str)
            for op in ops
        ):
            verdict.fail("patch-not-json-patch", text[:200])
            return None
        if not ops:
            verdict.fail("empty-patch", "a patch with no operations")
        if MARKER in text:
            verdict.fail("patch-carries-unread-value", text[:300])
        if obj is None:
            verdict.fail("patch-without-object", text[:200])
            return None
        try:
            patched = jsonpatch.apply_patch(deep_copy(obj), ops, in_place=True)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError) as exc:
            verdict.fail("patch-does-not-apply", f"{type(exc).__name__}: {exc}; {text[:200]}")
            return None
        if not isinstance(patched, dict):
            verdict.fail("patch-replaces-object", text[:200])
            return None
        return patched

    def _again(self, verdict: Verdict, expected: Expected, patched: dict[str, Any]) -> None:
        """The patched object through /mutate (no patch this time) and /validate (allowed)."""
        doc = dict(expected.doc)
        doc["request"] = dict(doc["request"], object=patched)
        body = dumps(doc).encode("ascii")
        second = self._follow(verdict, "mutate", body, expected)
        if second is not None:
            if "patch" in second:
                ops = base64.b64decode(second["patch"]).decode("utf-8", "replace")
                verdict.fail("not-idempotent", f"second /mutate patches again: {ops[:300]}")
            if second.get("allowed") is not True:
                message = _mapping(second, "status").get("message")
                verdict.fail("refused-after-patch", f"second /mutate refuses: {str(message)[:300]}")
        if self.warn_mode or not expected.is_pod or expected.operation != "CREATE":
            return
        if expected.sub_resource:
            return
        validated = self._follow(verdict, "validate", body, expected)
        if validated is not None and validated.get("allowed") is not True:
            message = _mapping(validated, "status").get("message")
            verdict.fail("validate-refuses-patched", f"{str(message)[:300]}")

    def _follow(
        self, verdict: Verdict, hook: str, body: bytes, expected: Expected
    ) -> dict[str, Any] | None:
        reply = self.post(hook, body, "application/json")
        self._timely(verdict, hook, reply, body, "application/json")
        inner = Verdict("?")
        response = self._review(inner, hook, reply, expected)
        for failure in inner.failures:
            verdict.fail(f"follow-up-{hook}:{failure.check}", failure.detail)
        return response

    def _standard_pod(
        self, verdict: Verdict, hook: str, expected: Expected, pod: dict[str, Any]
    ) -> None:
        source = standard_only(pod, expected.namespace)
        if source is None or exempt(expected, pod) is not None:
            return
        spec = pod.get("spec")
        how = can_land_on_preemptible(spec if isinstance(spec, dict) else {})
        if how is not None:
            verdict.fail(
                "standard-pod-on-preemptible",
                f"/{hook} allowed a pod that is standard-only by {source}, and after its patch "
                f"it can run on preemptible nodes: {how}",
            )

    def _standard_template(self, verdict: Verdict, expected: Expected, obj: dict[str, Any]) -> None:
        kind = obj.get("kind")
        path = template_path(obj)
        if path is None or expected.namespace in EXCLUDED_NAMESPACES:
            return
        template = _mapping(obj, *path)
        source = standard_only(template, expected.namespace, is_pod=False)
        spec = template.get("spec")
        if source is None or not isinstance(spec, dict):
            return
        how = requires_preemptible(spec)
        if how is not None:
            verdict.fail(
                "standard-template-requires-preemptible",
                f"/validate allowed a {kind} whose pods are standard-only by {source} but "
                f"require preemptible capacity: {how}",
            )


# --- the CLI ------------------------------------------------------------------------------


def judge_cli(
    args: list[str], exit_code: int | None, stdout: str, stderr: str, exception: str | None
) -> list[Failure]:
    failures: list[Failure] = []
    if exception is not None:
        failures.append(Failure("cli-exception", exception[:300]))
    if exit_code not in (0, 1, 2):
        failures.append(Failure("cli-exit-status", f"exit status {exit_code}"))
    for name, text in (("stdout", stdout), ("stderr", stderr)):
        for word in ("Traceback", "internal error"):
            if word in text:
                at = text.index(word)
                failures.append(
                    Failure("cli-" + word.split()[0].lower(), f"{name}: {text[at : at + 300]!r}")
                )
    if args[0] == "check" and "json" in args:
        failures += _json_output(stdout, exit_code)
    return failures


def _json_output(stdout: str, exit_code: int | None) -> list[Failure]:
    try:
        doc = json.loads(stdout)
    except ValueError as exc:
        return [Failure("cli-json-unreadable", f"{exc}: {stdout[:200]!r}")]
    if not isinstance(doc, dict) or not (
        isinstance(doc.get("results"), list)
        and isinstance(doc.get("summary"), dict)
        and isinstance(doc.get("inputErrors"), list)
    ):
        return [Failure("cli-json-shape", stdout[:200])]
    failures: list[Failure] = []
    results, errors = doc["results"], doc["inputErrors"]
    refused = any(isinstance(r, dict) and r.get("allowed") is False for r in results)
    want = 2 if errors else 1 if refused else 0
    if exit_code != want:
        failures.append(
            Failure(
                "cli-exit-inconsistent",
                f"exit {exit_code}, output says {want} ({len(errors)} input errors)",
            )
        )
    if doc["summary"].get("objects") != len(results):
        failures.append(Failure("cli-summary", f"{doc['summary']} for {len(results)} results"))
    for r in results:
        for key in ("reasons", "warnings"):
            for message in r.get(key, []) if isinstance(r, dict) else []:
                if isinstance(message, str) and len(message) > MAX_MESSAGE:
                    failures.append(
                        Failure(
                            "cli-long-message",
                            f"{key}: {len(message)} characters: {message[:120]!r}",
                        )
                    )
    return failures


def same_in_every_format(
    objects: list[Any],
    output: Mapping[str, Any],
    rerun: Callable[[list[Any]], tuple[int | None, str]],
) -> list[Failure]:
    """``check`` answers each object alike however the file writes it: the objects as read,
    written again as one JSON List, get the same class, source, verdict and patch."""
    results = output.get("results")
    if not isinstance(results, list) or len(results) != len(objects) or output.get("inputErrors"):
        return []
    _, stdout = rerun(objects)
    try:
        again = json.loads(stdout)
    except ValueError:
        return [Failure("cli-json-unreadable", f"as a JSON List: {stdout[:200]!r}")]
    failures: list[Failure] = []
    for obj, before, after in zip(objects, results, again.get("results", []), strict=False):
        # Objects may nest deeper than Python's == can recurse: compared on a stack.
        patched_alike = same_json(_patched(obj, before), _patched(obj, after))
        if _answer_of(before) != _answer_of(after) or not patched_alike:
            failures.append(
                Failure(
                    "cli-format-dependent",
                    f"{before.get('kind')} {before.get('namespace')}/{before.get('name')}: "
                    f"as written: {_shown(before)}; as a JSON List: {_shown(after)}",
                )
            )
    return failures


def _answer_of(result: Any) -> tuple[Any, ...]:
    if not isinstance(result, dict):
        return (result,)
    keys = ("class", "source", "allowed", "refused")
    return (*(result.get(k) for k in keys), result.get("skipped") is None)


def _patched(obj: Any, result: Any) -> Any:
    """``obj`` with the result's patch applied (the order of independent operations follows
    the order of the keys in the file, which YAML writers often sort)."""
    ops = result.get("patch") if isinstance(result, dict) else None
    if not ops:
        return obj
    try:
        return jsonpatch.apply_patch(deep_copy(obj), ops, in_place=True)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError):
        return ("unappliable", json.dumps(ops, sort_keys=True))


def _shown(result: Any) -> str:
    if not isinstance(result, dict):
        return repr(result)[:100]
    return (
        f"class {result.get('class')} ({result.get('source')}), "
        f"allowed {result.get('allowed')}, {len(result.get('patch') or [])} patch operations"
    )


def cli_placement(
    objects: list[Any],
    output: Mapping[str, Any],
    rerun: Callable[[list[Any]], tuple[int | None, str]],
) -> list[Failure]:
    """For ``check -o json`` on ``objects`` (read back exactly as written): each patch
    applies to its object, the patched objects checked again need no patch, and no allowed
    standard-only pod or template can land on preemptible nodes once patched."""
    results = output.get("results")
    if not isinstance(results, list) or len(results) != len(objects) or output.get("inputErrors"):
        return []
    failures: list[Failure] = []
    defaults = {
        o["metadata"]["name"]: o["metadata"]["annotations"].get("together.ai/default-workload")
        for o in objects
        if isinstance(o, dict)
        and o.get("kind") == "Namespace"
        and isinstance(_mapping(o, "metadata").get("name"), str)
        and isinstance(_mapping(o, "metadata").get("annotations"), dict)
    }
    patched_objects: list[Any] = []
    changed = False
    for obj, result in zip(objects, results, strict=True):
        ops = result.get("patch") if isinstance(result, dict) else None
        if not ops:
            patched_objects.append(obj)
            continue
        changed = True
        if MARKER in json.dumps(ops):
            failures.append(Failure("cli-patch-carries-unread-value", json.dumps(ops)[:300]))
        try:
            patched = jsonpatch.apply_patch(deep_copy(obj), ops, in_place=True)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError) as exc:
            failures.append(Failure("cli-patch-does-not-apply", f"{type(exc).__name__}: {exc}"))
            return failures
        patched_objects.append(patched)
        if result.get("allowed") is True and result.get("skipped") is None:
            failures += _cli_standard(patched, result, defaults)
    if not changed:
        return failures
    exit_code, stdout = rerun(patched_objects)
    try:
        again = json.loads(stdout)
    except ValueError:
        return [*failures, Failure("cli-json-unreadable", f"second run: {stdout[:200]!r}")]
    if exit_code not in (0, 1) or again.get("inputErrors"):
        detail = f"exit {exit_code}: {again.get('inputErrors')}"[:300]
        return [*failures, Failure("cli-patched-unreadable", f"second run: {detail}")]
    for before, after in zip(results, again.get("results", []), strict=False):
        if after.get("patch"):
            failures.append(
                Failure(
                    "cli-not-idempotent",
                    f"{after.get('kind')} {after.get('name')!r}: the patched object gets "
                    f"another patch: {json.dumps(after['patch'])[:300]}",
                )
            )
        if before.get("allowed") is True and after.get("allowed") is not True:
            failures.append(
                Failure("cli-refused-after-patch", f"{after.get('kind')}: {after.get('reasons')}")
            )
    return failures


def _cli_standard(
    obj: Mapping[str, Any], result: Mapping[str, Any], defaults: Mapping[str, str]
) -> list[Failure]:
    namespace = result.get("namespace")
    if namespace in EXCLUDED_NAMESPACES:
        return []
    kind, path = obj.get("kind"), template_path(obj)
    if kind == "Pod" and obj.get("apiVersion") == "v1":
        pod: Mapping[str, Any] = obj
    elif path is not None:
        pod = _mapping(obj, *path)
    else:
        return []
    source = standard_only(pod, namespace, defaults, is_pod=kind == "Pod")
    spec = pod.get("spec")
    if source is None or not isinstance(spec, dict):
        return []
    how = can_land_on_preemptible(spec)
    if how is None:
        return []
    return [
        Failure(
            "cli-standard-on-preemptible",
            f"check allowed a {kind} that is standard-only by {source}, and with its patch "
            f"applied it can run on preemptible nodes: {how}",
        )
    ]


def same_answers(
    server: Mapping[str, Reply], exit_code: int | None, output: Mapping[str, Any]
) -> list[Failure]:
    """``check`` answers an AdmissionReview exactly as the server does (README): the JSON
    result's ``reviews`` hold, for each hook, the review the server sends."""
    answered = [r for r in output.get("results", []) if isinstance(r, dict) and r.get("reviews")]
    failures: list[Failure] = []
    for hook, reply in server.items():
        if reply.status != 200:
            if answered:
                failures.append(
                    Failure(
                        "cli-answers-what-server-refuses",
                        f"/{hook} answered {reply.status} ({_short(reply.data)}) but check "
                        f"answers it: {json.dumps(answered[0]['reviews'].get(hook))[:200]}",
                    )
                )
            continue
        if not answered:
            if exit_code != 2:  # refusing the input (a duplicate key, say) is documented
                failures.append(
                    Failure(
                        "cli-does-not-answer-review",
                        f"/{hook} answers it, check does not (exit {exit_code})",
                    )
                )
            continue
        cli = answered[0]["reviews"].get(hook)
        try:
            ours = parse(reply.data)
        except (NotJSON, TooDeep):
            continue  # the server's own check reports it
        if cli != ours:
            failures.append(
                Failure(
                    "cli-review-differs",
                    f"/{hook}: server {_short(reply.data, 300)} / check {json.dumps(cli)[:300]}",
                )
            )
    return failures
