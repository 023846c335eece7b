#!/usr/bin/env bash
# Regenerate the admission policies the manifests ship: the default policy compiled by
# `preemptguard export` to a ValidatingAdmissionPolicy (components/admission-policies, in every
# overlay) and a MutatingAdmissionPolicy (components/mutating-admission-policy, opt-in), each
# with its binding. tests/test_export.py fails when a file is out of date.
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
[ -x "$python" ] || python=python3
for only in validating mutating; do
  case $only in
    validating) out=manifests/components/admission-policies/admission-policies.yaml ;;
    mutating) out=manifests/components/mutating-admission-policy/mutating-admission-policy.yaml ;;
  esac
  "$python" -m webhook export --policies policies/default --only "$only" -o yaml >"$out.tmp" 2>/dev/null
  mv "$out.tmp" "$out"
  echo "$out"
done
# The chart keeps a copy (Helm reads no file outside the chart).
cp manifests/components/admission-policies/admission-policies.yaml \
  manifests/components/mutating-admission-policy/mutating-admission-policy.yaml \
  charts/preemptguard/files/admission-policies/
