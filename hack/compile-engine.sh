#!/usr/bin/env bash
# Compiles the placement engine in place with mypyc (webhook/engine/*.so), the build the
# container image ships, and records the sources it was built from (webhook/engine/native.sha256):
# importing webhook refuses compiled modules whose sources changed since. Does nothing when the
# build in place is that of the sources as they are. `make clean-compiled` removes the build;
# the engine then runs interpreted, unchanged in behaviour.
#
#   hack/compile-engine.sh                # fails when it cannot compile
#   hack/compile-engine.sh --if-possible  # without a C compiler or Python's headers, says so
#                                         # and leaves the engine interpreted
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
engine=webhook/engine
record="$engine/native.sha256"

if [[ -f "$record" && "$(cd "$engine" && sha256sum -- *.py)" == "$(cat "$record")" ]]; then
  exit 0 # compiled from the sources as they are, and no source added since
fi

missing=""
command -v "${CC:-cc}" >/dev/null || missing="a C compiler (${CC:-cc})"
"$PYTHON" -c 'import os, sysconfig; os.stat(sysconfig.get_paths()["include"] + "/Python.h")' \
  2>/dev/null || missing="${missing:+$missing and }Python's headers (Python.h)"
if [[ -n "$missing" ]]; then
  if [[ "${1:-}" == "--if-possible" ]]; then
    rm -f "$record" "$engine"/*.so
    echo "compile-engine: without $missing the engine runs interpreted (the same behaviour, about half the speed)" >&2
    exit 0
  fi
  echo "compile-engine: cannot compile the engine without $missing" >&2
  exit 1
fi

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
