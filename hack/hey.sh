#!/usr/bin/env bash
# Print the path of a hey binary (the HTTP load generator benchmarks/server_bench.py drives).
#
# Order: $HEY; `hey` on PATH; a cached build in
# ${PREEMPTGUARD_CACHE:-~/.cache/preemptguard}/hey-$version/bin; else build it once with
# `go install` (any Go from 1.16 on, and the Go module proxy), with the Go module and build
# caches that hack/control-plane-binaries-1.37.sh and hack/helm.sh use (go/mod, go/build beside
# the binaries). A cold build takes well under a minute.
set -euo pipefail

version=v0.1.4
log() { echo "hey.sh: $*" >&2; }

if [[ -n "${HEY:-}" ]]; then
  [[ -x $HEY ]] || { log "HEY=$HEY is not an executable"; exit 1; }
  echo "$HEY"
  exit 0
fi
if on_path=$(command -v hey); then
  echo "$on_path"
  exit 0
fi

cache_root=${PREEMPTGUARD_CACHE:-$HOME/.cache/preemptguard}
bin=$cache_root/hey-$version/bin
if [[ -x $bin/hey ]]; then
  echo "$bin/hey"
  exit 0
fi

# `go install pkg@version` arrived in Go 1.16.
go_ok() { "$1" version 2>/dev/null | grep -Eq 'go1\.(1[6-9]|[2-9][0-9])'; }
gobin=""
for candidate in "$(command -v go || true)" /usr/local/go/bin/go /usr/lib/go/bin/go; do
  if [[ -n $candidate && -x $candidate ]] && go_ok "$candidate"; then gobin=$candidate; break; fi
done
if [[ -z $gobin ]]; then
  log "no hey found and no Go >= 1.16 to build one; install hey or set HEY"
  exit 1
fi

mkdir -p "$cache_root/go/mod" "$cache_root/go/build"
export GOMODCACHE=$cache_root/go/mod GOCACHE=$cache_root/go/build
log "building hey $version with $($gobin version | cut -d' ' -f3) into $bin (module cache" \
  "$GOMODCACHE, build cache $GOCACHE)"
staged=$(mktemp -d "$cache_root/hey-$version.tmp.XXXXXX")
trap 'rm -rf "$staged"' EXIT
# Run from the staging folder, outside any module, so that no go.mod or go.work around the caller
# takes part; built there and moved into place, so an interrupted build leaves no binary behind.
cd "$staged"
GOBIN=$staged GOWORK=off GOFLAGS="-mod=mod -modcacherw -buildvcs=false" CGO_ENABLED=0 \
  "$gobin" install -trimpath -ldflags "-w -s" "github.com/rakyll/hey@$version" >&2
[[ -x $staged/hey ]] || { log "the build left no hey binary"; exit 1; }
mkdir -p "$bin"
mv "$staged/hey" "$bin/hey"
echo "$bin/hey"
