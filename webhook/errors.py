"""The errors preemptguard raises, in one hierarchy; ``str()`` of each says what to change.

A refusal by the policy is not an error: the engine returns it as a finding. These are for
input that cannot be used at all (a policy, a review, a test case, certificates) and for the
server's own failures that the API server must see as a failed call.
"""

from __future__ import annotations


class PreemptguardError(Exception):
    """Anything preemptguard refuses to work with, or cannot do."""


class PolicyError(PreemptguardError):
    """A policy that cannot be used; ``str()`` reads ``file:line: field: what to change``."""

    def __init__(self, source: str, line: int | None, field: str, message: str) -> None:
        self.source, self.line, self.field, self.message = source, line, field, message
        where = source if line is None else f"{source}:{line}"
        super().__init__(f"{where}: {field or '(document)'}: {message}")


class CaseError(PreemptguardError):
    """A policy test case file that cannot be run as written."""


class BadReview(PreemptguardError, ValueError):
    """The body is not an AdmissionReview this server can answer; ``str()`` is one line."""


class UnreadableRequest(BadReview):
    """An AdmissionReview whose request cannot be read in full, though its uid can: it is
    answered with a refusal that echoes the uid, since the API server takes an HTTP error for
    no answer at all and applies the webhook's failurePolicy."""

    def __init__(self, message: str, api_version: str, uid: str) -> None:
        super().__init__(message)
        self.api_version, self.uid = api_version, uid

    def __reduce__(self) -> tuple[type[UnreadableRequest], tuple[str, str, str]]:
        return (type(self), (str(self), self.api_version, self.uid))


class ClusterStateUnknown(PreemptguardError):
    """Something of the cluster a review needs cannot be known now; ``str()`` says why.

    Guessing could let a pod through unplaced or misplaced, so the review fails instead
    (HTTP 500) and the webhook's failurePolicy decides.
    """


class NamespaceUnknown(ClusterStateUnknown):
    """The namespace's annotations cannot be known now (guessing "no default class" could
    let a pod through unplaced)."""


class PriorityClassUnknown(ClusterStateUnknown):
    """A PriorityClass the policy names cannot be read now."""


class NotCached(PreemptguardError):
    """A lookup would have to read the cluster, and its caller may not wait: it asks again
    where it may (the server checks reviews on its event loop only while the caches hold all
    they need)."""


class CertificateError(PreemptguardError):
    """Certificate files that cannot serve TLS; ``str()`` says which and why."""


class OffloadFailed(PreemptguardError):
    """The process checking large reviews died or did not answer in time."""
