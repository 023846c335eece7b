"""``helm test``: the webhook answers a review through its Service.

Sends the AdmissionReview of a pod create (class interruptible, a dry run) to the hook the API
server calls, over TLS verified with the CA the hooks trust, and exits 0 only on a valid answer:
HTTP 200, an admission.k8s.io/v1 AdmissionReview echoing the uid, ``allowed`` true or false, and
a JSONPatch that decodes where there is a patch. Standard library only: it runs in the
webhook's own image. Environment: WEBHOOK_URL, and CA_FILE or CA_PEM.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

ATTEMPTS = 5


def review(uid: str) -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "preemptguard-helm-test",
            "namespace": "default",
            "annotations": {"together.ai/workload": "interruptible"},
        },
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    resource = {"group": "", "version": "v1", "resource": "pods"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": kind,
            "resource": resource,
            "requestKind": kind,
            "requestResource": resource,
            "name": "preemptguard-helm-test",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "preemptguard-helm-test"},
            "object": pod,
            "dryRun": True,
        },
    }


def problem(body: bytes, uid: str) -> str | None:
    """What is wrong with the answer, or None."""
    try:
        answer = json.loads(body)
    except ValueError:
        return f"not JSON: {body[:200]!r}"
    if not isinstance(answer, dict):
        return "not an AdmissionReview"
    what = (answer.get("apiVersion"), answer.get("kind"))
    if what != ("admission.k8s.io/v1", "AdmissionReview"):
        return f"not an admission.k8s.io/v1 AdmissionReview: {what}"
    response = answer.get("response")
    if not isinstance(response, dict):
        return "no response"
    if response.get("uid") != uid:
        return f"the uid {response.get('uid')!r} is not the review's {uid!r}"
    if not isinstance(response.get("allowed"), bool):
        return "allowed is not true or false"
    if "patch" in response:
        if response.get("patchType") != "JSONPatch":
            return f"a patch of type {response.get('patchType')!r}"
        try:
            patch = json.loads(base64.b64decode(response["patch"], validate=True))
        except ValueError:
            return "a patch that is not base64 JSON"
        if not isinstance(patch, list):
            return "a patch that is not a list of operations"
    return None


def post(url: str, data: bytes, context: ssl.SSLContext) -> tuple[int, bytes]:
    """The answer's status and body; connection failures retried a few times (a replica may
    still be starting), an HTTP error or a certificate that does not verify not. Straight to
    the Service, whatever proxy is set."""
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    for attempt in range(1, ATTEMPTS + 1):
        request = urllib.request.Request(
            url, data=data, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with opener.open(request, timeout=10) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if attempt == ATTEMPTS or isinstance(reason, ssl.SSLError):
                raise
            time.sleep(2)
    raise AssertionError("unreachable")


def main() -> int:
    url = os.environ["WEBHOOK_URL"]
    cafile, cadata = os.environ.get("CA_FILE"), os.environ.get("CA_PEM")
    if not (cafile or cadata):
        print("FAILED: neither CA_FILE nor CA_PEM is set", file=sys.stderr)
        return 1
    context = ssl.create_default_context(cafile=cafile or None, cadata=cadata or None)
    uid = str(uuid.uuid4())
    try:
        status, body = post(url, json.dumps(review(uid)).encode(), context)
    except OSError as exc:
        print(f"FAILED: {url}: {exc}", file=sys.stderr)
        return 1
    wrong = problem(body, uid) if status == 200 else f"HTTP {status}: {body[:200]!r}"
    if wrong is not None:
        print(f"FAILED: {url} answered, but {wrong}", file=sys.stderr)
        return 1
    response = json.loads(body)["response"]
    patched = "with a patch" if "patch" in response else "without a patch"
    print(f"ok: {url} answered the review: allowed={response['allowed']}, {patched}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
