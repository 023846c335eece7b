"""Which pods are left alone, decided by who sends them, never by what they say of themselves.

A pod's ``ownerReferences`` and annotations are written by whoever creates it; the API server
checks their format, not their truth. Only ``request.userInfo`` says who created the pod. A
DaemonSet pod is left alone when the DaemonSet controller creates it for an ``apps/v1``
DaemonSet; a mirror pod when a node creates it. Anyone else's claim is ignored, with a warning.
"""

from __future__ import annotations

from typing import Final, final

from webhook.engine.decision import Context, Obj, Requester
from webhook.engine.findings import Code, Finding, finding, shorten
from webhook.engine.policy import TrustedRequesters
from webhook.engine.workloads import MIRROR_ANNOTATION, Owner, controller_owner, mapping_at

DAEMONSET_API_VERSION = "apps/v1"


@final
class Exemption:
    """Why the pod is left alone (``skip``), or what its claims earn it (``notes``), and the
    controlling owner the pod names (a claim), read once for classification too."""

    __slots__ = ("notes", "owner", "skip")

    def __init__(
        self,
        *,
        skip: Finding | None = None,
        notes: tuple[Finding, ...] = (),
        owner: Owner | None = None,
    ) -> None:
        self.skip: Final = skip
        self.notes: Final = notes
        self.owner: Final = owner

    @property
    def reason(self) -> str | None:
        return self.skip.message if self.skip is not None else None


def exemption(pod: Obj, ctx: Context, trusted: TrustedRequesters) -> Exemption:
    """Whether ``pod`` is a DaemonSet or mirror pod by the requester's identity."""
    notes: list[Finding] = []
    annotations = mapping_at(pod, "metadata", "annotations")
    if MIRROR_ANNOTATION in annotations:
        if ctx.requester is not None and _is_node(ctx.requester, trusted):
            message = "mirror pods of static pods belong to their node"
            return Exemption(skip=finding(Code.MIRROR_POD, message, _MIRROR_PATH))
        notes.append(finding(Code.CLAIM_NOT_TRUSTED, _mirror_claim(ctx.requester), _MIRROR_PATH))
    owner = controller_owner(pod)
    if owner is not None and owner.kind == "DaemonSet":
        by_controller = ctx.requester is not None and _is_daemonset_controller(
            ctx.requester, trusted
        )
        if by_controller and owner.api_version == DAEMONSET_API_VERSION:
            message = "DaemonSet pods run on every node, of both classes"
            return Exemption(skip=finding(Code.DAEMONSET, message, _OWNER_PATH))
        claim = _daemonset_claim(ctx.requester, owner.api_version)
        notes.append(finding(Code.CLAIM_NOT_TRUSTED, claim, _OWNER_PATH))
    return Exemption(notes=tuple(notes), owner=owner)


_MIRROR_PATH = f"metadata.annotations.{MIRROR_ANNOTATION}"
_OWNER_PATH = "metadata.ownerReferences"


def _is_node(requester: Requester, trusted: TrustedRequesters) -> bool:
    return (
        requester.username.startswith(trusted.node_username_prefix)
        and trusted.node_group in requester.groups
    )


def _is_daemonset_controller(requester: Requester, trusted: TrustedRequesters) -> bool:
    return requester.username in trusted.daemonset_controllers


def _who(requester: Requester) -> str:
    return shorten(requester.username or "an anonymous user", 100)


def _mirror_claim(requester: Requester | None) -> str:
    claim = f"the pod carries the mirror-pod annotation {MIRROR_ANNOTATION}"
    if requester is None:
        return (
            f"{claim}: the webhook leaves it alone only when a node creates it; created by "
            "anyone else it gets what is shown here"
        )
    return (
        f"{claim}, but {_who(requester)} created it, not a node: the claim is not trusted and "
        "the pod is placed like any other"
    )


def _daemonset_claim(requester: Requester | None, api_version: str) -> str:
    claim = "the pod names a DaemonSet as its controller"
    if requester is None:
        return (
            f"{claim}: the webhook leaves it alone only when the DaemonSet controller creates "
            "it for an apps/v1 DaemonSet; created by anyone else it gets what is shown here"
        )
    if api_version != DAEMONSET_API_VERSION:
        return (
            f"{claim} of apiVersion {shorten(api_version)!r}, not {DAEMONSET_API_VERSION}: "
            "the claim is not trusted and the pod is placed like any other"
        )
    return (
        f"{claim}, but {_who(requester)} created it, not the DaemonSet controller: the claim "
        "is not trusted and the pod is placed like any other"
    )
