#!/usr/bin/env bash
# Regenerate manifests/components/admission-policies/admission-policies.yaml: the default policy
# compiled by `preemptguard export` to a ValidatingAdmissionPolicy and a MutatingAdmissionPolicy
# with their bindings. tests/test_export.py fails when the file is out of date.
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
[ -x "$python" ] || python=python3
out=manifests/components/admission-policies/admission-policies.yaml
"$python" -m webhook export --policies policies/default -o yaml >"$out.tmp" 2>/dev/null
mv "$out.tmp" "$out"
echo "$out"
