#!/usr/bin/env bash
# Copy the default policy into the kustomize base and the Helm chart. kustomize and Helm refuse
# files outside their folders, so manifests/base and the chart keep a copy; tests fail when a
# copy and policies/default differ.
set -euo pipefail
cd "$(dirname "$0")/.."
for dest in manifests/base/policies charts/preemptguard/files/policies; do
  rm -f "$dest"/*.yaml "$dest"/*.yml
  find policies/default -maxdepth 1 -type f \( -name '*.yaml' -o -name '*.yml' \) -exec cp {} "$dest/" \;
  ls "$dest"/*
done
