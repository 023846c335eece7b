#!/usr/bin/env bash
# Print the path of a JobSet controller binary (sigs.k8s.io/jobset, the release whose CRDs
# hack/upstream-crds.sh fetches), which the end-to-end tests run against the local control
# plane to take a JobSet through its life: its Jobs made by the real controller, failed and
# restarted as on a cluster. Beside the binary's bin/ folder: webhooks.yaml, upstream's
# webhook configurations (config/components/webhook/manifests.yaml) of the same release.
#
# Order: $JOBSET_CONTROLLER; a cached build in
# ${PREEMPTGUARD_CACHE:-~/.cache/preemptguard}/jobset-$version/bin; else build it once from the
# Go module proxy (its go.mod asks for Go 1.26), in a wrapper module that requires the exact
# release (`go install pkg@version` would also ask the proxy for the module's version list),
# with the module and build caches the other hack/ scripts share. A cold build takes a few
# minutes.
set -euo pipefail

version=v0.12.0
log() { echo "jobset-controller.sh: $*" >&2; }

cache_root=${PREEMPTGUARD_CACHE:-$HOME/.cache/preemptguard}
bin=$cache_root/jobset-$version/bin
# shellcheck source=lib/given-or-cached.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/given-or-cached.sh"
given_or_cached JOBSET_CONTROLLER "$bin/jobset-controller" "$bin/../webhooks.yaml"

command -v go >/dev/null || { log "no 'go' on PATH to build the JobSet controller; set JOBSET_CONTROLLER"; exit 1; }
# shellcheck source=lib/go-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-env.sh"
go_env "$cache_root"
export CGO_ENABLED=0

staged=$(mktemp -d "$cache_root/jobset-$version.tmp.XXXXXX")
trap 'rm -rf "$staged"' EXIT
cd "$staged"
log "building the JobSet controller $version with $(go version | cut -d' ' -f3) into $bin"
go mod init preemptguard.local/jobset-controller >/dev/null 2>&1
go mod edit "-require=sigs.k8s.io/jobset@$version"
# The tools.go-style import keeps tidy from dropping the requirement.
printf 'package main\n\nimport _ "sigs.k8s.io/jobset"\n' >tools.go
go mod tidy >&2
go build -trimpath -ldflags "-w -s" -o "$staged/jobset-controller" sigs.k8s.io/jobset >&2
[[ -x $staged/jobset-controller ]] || { log "the build left no jobset-controller binary"; exit 1; }
src=$(go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)
mkdir -p "$bin"
cp "$src/config/components/webhook/manifests.yaml" "$bin/../webhooks.yaml"
chmod u+w "$bin/../webhooks.yaml"
mv "$staged/jobset-controller" "$bin/jobset-controller"
echo "$bin/jobset-controller"
