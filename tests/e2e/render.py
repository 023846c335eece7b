"""Moved to ``harness.manifests``; kept for the importers outside the end-to-end suite
(tests/test_manifests.py) until they import from there."""

from harness.manifests import (
    CERTIFICATE_KINDS,
    MANIFESTS,
    NAMESPACE,
    SERVICE,
    VARIANTS,
    Tree,
    find,
    prepare_tree,
    webhooks,
)

__all__ = [
    "CERTIFICATE_KINDS",
    "MANIFESTS",
    "NAMESPACE",
    "SERVICE",
    "VARIANTS",
    "Tree",
    "find",
    "prepare_tree",
    "webhooks",
]
