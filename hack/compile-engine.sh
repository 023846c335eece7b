#!/usr/bin/env bash
# Compiles the placement engine in place with mypyc (webhook/engine/*.so), the build the
# container image ships, and records the sources it was built from (webhook/engine/native.sha256):
# importing webhook refuses compiled modules whose sources changed since. `make clean-compiled`
# removes the build; the engine then runs interpreted, unchanged in behaviour.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
engine=webhook/engine
record="$engine/native.sha256"

rm -f "$record" "$engine"/*.so
# The record is written from the sources as they are before the build starts: one edited
# during the build shows as stale.
sums="$(cd "$engine" && sha256sum -- *.py)"
PREEMPTGUARD_COMPILE=1 "$PYTHON" setup.py --quiet build_ext --inplace >build-engine.log 2>&1 || {
  tail -n 40 build-engine.log >&2
  echo "compile-engine: the mypyc build failed (full log: build-engine.log)" >&2
  exit 1
}
rm -f build-engine.log
printf '%s\n' "$sums" >"$record"
"$PYTHON" -c 'from webhook.native import engine_build; b = engine_build(); print("engine:", b); assert b == "compiled", b'
