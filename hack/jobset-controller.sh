#!/usr/bin/env bash
# Print the path of a JobSet controller binary (sigs.k8s.io/jobset, the release whose CRDs
# hack/upstream-crds.sh fetches), which the end-to-end tests run against the local control
# plane to take a JobSet through its life: its Jobs made by the real controller, failed and
# restarted as on a cluster.
#
# Order: $JOBSET_CONTROLLER; a cached build in
# ${PREEMPTGUARD_CACHE:-~/.cache/preemptguard}/jobset-$version/bin; else build it once with
# `go install` from the Go module proxy (its go.mod asks for Go 1.26), with the module and
# build caches the other hack/ scripts share. A cold build takes a few minutes.
set -euo pipefail

version=v0.12.0
log() { echo "jobset-controller.sh: $*" >&2; }

if [[ -n "${JOBSET_CONTROLLER:-}" ]]; then
  [[ -x $JOBSET_CONTROLLER ]] || { log "JOBSET_CONTROLLER=$JOBSET_CONTROLLER is not an executable"; exit 1; }
  echo "$JOBSET_CONTROLLER"
  exit 0
fi

cache_root=${PREEMPTGUARD_CACHE:-$HOME/.cache/preemptguard}
bin=$cache_root/jobset-$version/bin
if [[ -x $bin/jobset-controller ]]; then
  echo "$bin/jobset-controller"
  exit 0
fi

command -v go >/dev/null || { log "no 'go' on PATH to build the JobSet controller; set JOBSET_CONTROLLER"; exit 1; }
# shellcheck source=lib/go-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-env.sh"
go_env "$cache_root"
export CGO_ENABLED=0

staged=$(mktemp -d "$cache_root/jobset-$version.tmp.XXXXXX")
trap 'rm -rf "$staged"' EXIT
cd "$staged"
log "building the JobSet controller $version with $(go version | cut -d' ' -f3) into $bin"
GOBIN=$staged go install -trimpath -ldflags "-w -s" "sigs.k8s.io/jobset@$version" >&2
[[ -x $staged/jobset ]] || { log "the build left no jobset binary"; exit 1; }
mkdir -p "$bin"
mv "$staged/jobset" "$bin/jobset-controller"
echo "$bin/jobset-controller"
