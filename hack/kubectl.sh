#!/usr/bin/env bash
# Print the path of a kubectl binary, the yardstick benchmarks/scale_bench.py runs beside
# `preemptguard audit` and `preemptguard capacity`.
#
# Order: $KUBECTL; a cached build in ${PREEMPTGUARD_CACHE:-~/.cache/preemptguard}/kubectl-$version/bin;
# else build it once from the Go module proxy. A kubectl on PATH is not used: the yardstick is
# the release the control plane runs. k8s.io/kubernetes cannot be installed with `go install pkg@version` (its go.mod
# replaces the staging modules), so a two-file wrapper module builds upstream's own main
# (cmd/kubectl/kubectl.go of the same release) against k8s.io/kubectl, with the module and build
# caches the other hack/ scripts share. Needs Go 1.26 or newer; a cold build takes a few minutes.
set -euo pipefail

version=v1.37.2
log() { echo "kubectl.sh: $*" >&2; }

cache_root=${PREEMPTGUARD_CACHE:-$HOME/.cache/preemptguard}
bin=$cache_root/kubectl-$version/bin
# shellcheck source=lib/given-or-cached.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/given-or-cached.sh"
given_or_cached KUBECTL "$bin/kubectl"

command -v go >/dev/null || { log "no kubectl found and no 'go' on PATH to build one; set KUBECTL"; exit 1; }
# shellcheck source=lib/go-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-env.sh"
go_env "$cache_root"
export CGO_ENABLED=0

staged=$(mktemp -d "$cache_root/kubectl-$version.tmp.XXXXXX")
trap 'rm -rf "$staged"' EXIT
cd "$staged"
staging=v0.${version#v1.}
minor=${version#v1.}
minor=${minor%%.*}
log "building kubectl $version with $(go version | cut -d' ' -f3) into $bin"
src=$(go mod download -json "k8s.io/kubernetes@$version" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
go mod init preemptguard.local/kubectl >/dev/null 2>&1
cp "$src/cmd/kubectl/kubectl.go" main.go
go mod edit "-require=k8s.io/kubectl@$staging" "-require=k8s.io/component-base@$staging" \
  "-require=k8s.io/client-go@$staging"
go mod tidy >&2
ldflags="-w -s"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
done
go build -trimpath -ldflags "$ldflags" -o "$staged/kubectl" . >&2
[[ -x $staged/kubectl ]] || { log "the build left no kubectl binary"; exit 1; }
mkdir -p "$bin"
mv "$staged/kubectl" "$bin/kubectl"
echo "$bin/kubectl"
