#!/usr/bin/env bash
# Print the path of a helm (v4) binary for linting, rendering and installing charts/preemptguard.
#
# Order: $HELM; `helm` on PATH when it is v4; a cached build in
# ${PREEMPTGUARD_CACHE:-~/.cache/preemptguard}/helm-$version/bin; else build it once with
# `go install` (needs Go >= 1.26 and the Go module proxy), with the Go module and build caches
# that hack/control-plane-binaries-1.37.sh uses (go/mod, go/build beside the binaries; both
# builds share the k8s.io modules at v0.37.2). Cold build on 2 cores: about 10 minutes.
set -euo pipefail

version=v4.3.2
log() { echo "helm.sh: $*" >&2; }

is_v4() { "$1" version --short 2>/dev/null | grep -q '^v4\.'; }

if [[ -n "${HELM:-}" ]]; then
  [[ -x $HELM ]] || { log "HELM=$HELM is not an executable"; exit 1; }
  is_v4 "$HELM" || log "warning: HELM=$HELM does not report a v4 version"
  echo "$HELM"
  exit 0
fi
if on_path=$(command -v helm) && is_v4 "$on_path"; then
  echo "$on_path"
  exit 0
fi

cache_root=${PREEMPTGUARD_CACHE:-$HOME/.cache/preemptguard}
bin=$cache_root/helm-$version/bin
if [[ -x $bin/helm ]]; then
  echo "$bin/helm"
  exit 0
fi

# helm v4's go.mod says go 1.26.0: Debian bookworm's Go (1.19) cannot build it.
go_ok() { "$1" version 2>/dev/null | grep -Eq 'go1\.(2[6-9]|[3-9][0-9])'; }
gobin=""
for candidate in "$(command -v go || true)" /usr/local/go/bin/go /usr/lib/go-1.2*/bin/go; do
  if [[ -n $candidate && -x $candidate ]] && go_ok "$candidate"; then gobin=$candidate; break; fi
done
if [[ -z $gobin ]]; then
  log "no helm v4 found and no Go >= 1.26 to build one; install helm v4 or set HELM"
  exit 1
fi

mkdir -p "$cache_root/go/mod" "$cache_root/go/build"
export GOMODCACHE=$cache_root/go/mod GOCACHE=$cache_root/go/build
log "building helm $version with $($gobin version | cut -d' ' -f3) into $bin (module cache" \
  "$GOMODCACHE, build cache $GOCACHE)"
staged=$(mktemp -d "$cache_root/helm-$version.tmp.XXXXXX")
trap 'rm -rf "$staged"' EXIT
# Run from the staging folder, outside any module, so that no go.mod or go.work around the caller
# takes part. The flags are those of helm's own Makefile; client-go's version (which
# `helm version` and the default capabilities report) comes from the build info. Built into the
# staging folder and moved into place, so an interrupted build leaves no binary behind.
cd "$staged"
GOBIN=$staged GOFLAGS="-mod=mod -modcacherw -buildvcs=false" CGO_ENABLED=0 "$gobin" install \
  -trimpath -ldflags "-w -s -X helm.sh/helm/v4/internal/version.version=$version" \
  "helm.sh/helm/v4/cmd/helm@$version" >&2
is_v4 "$staged/helm" || { log "the build does not report a v4 version"; exit 1; }
mkdir -p "$bin"
mv "$staged/helm" "$bin/helm"
echo "$bin/helm"
