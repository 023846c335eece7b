#!/usr/bin/env bash
# Copy the default policy into the kustomize base. kustomize refuses files outside a
# kustomization's folder, so manifests/base keeps a copy; tests/test_manifests.py fails when the
# copy and policies/default differ.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=manifests/base/policies
rm -f "$dest"/*.yaml "$dest"/*.yml
find policies/default -maxdepth 1 -type f \( -name '*.yaml' -o -name '*.yml' \) -exec cp {} "$dest/" \;
ls "$dest"
