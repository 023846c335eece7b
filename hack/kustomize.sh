#!/usr/bin/env bash
# Print the path of a kustomize (v5) binary for rendering manifests/.
#
# Order: $KUSTOMIZE; `kustomize` on PATH; a cached build in
# ${PREEMPTGUARD_CACHE:-~/.cache/preemptguard}/kustomize-$version/bin; else build it once with
# `go install` (needs Go >= 1.22 and the Go module proxy).
set -euo pipefail

version=v5.5.0
log() { echo "kustomize.sh: $*" >&2; }

is_v5() { "$1" version 2>/dev/null | grep -q 'v5\.'; }

if [[ -n "${KUSTOMIZE:-}" ]]; then
  [[ -x $KUSTOMIZE ]] || { log "KUSTOMIZE=$KUSTOMIZE is not an executable"; exit 1; }
  echo "$KUSTOMIZE"
  exit 0
fi
if on_path=$(command -v kustomize) && is_v5 "$on_path"; then
  echo "$on_path"
  exit 0
fi

bin=${PREEMPTGUARD_CACHE:-$HOME/.cache/preemptguard}/kustomize-$version/bin
if [[ -x $bin/kustomize ]]; then
  echo "$bin/kustomize"
  exit 0
fi

# Debian bookworm's Go is 1.19, too old for kustomize v5: prefer a newer one where installed.
go_ok() { "$1" version 2>/dev/null | grep -Eq 'go1\.(2[2-9]|[3-9][0-9])'; }
gobin=""
for candidate in "$(command -v go || true)" /usr/local/go/bin/go /usr/lib/go-1.2*/bin/go; do
  if [[ -n $candidate && -x $candidate ]] && go_ok "$candidate"; then gobin=$candidate; break; fi
done
if [[ -z $gobin ]]; then
  log "no kustomize v5 found and no Go >= 1.22 to build one; install kustomize or set KUSTOMIZE"
  exit 1
fi

log "building kustomize $version with $($gobin version | cut -d' ' -f3) into $bin"
mkdir -p "$bin"
GOBIN=$bin GOFLAGS=-mod=mod "$gobin" install \
  -ldflags "-X sigs.k8s.io/kustomize/api/provenance.version=$version" \
  "sigs.k8s.io/kustomize/kustomize/v5@$version" >&2
echo "$bin/kustomize"
