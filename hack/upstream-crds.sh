#!/usr/bin/env bash
# Provide the upstream CustomResourceDefinitions of the GPU operators' workload kinds, and those
# of OpenReports (the policy reports `preemptguard audit --report` writes), and print the
# directory that holds them: <dir>/<project>/<file>.yaml, each file byte for byte as the project
# publishes it, and <dir>/SOURCES.tsv (module, version, go.sum hash, commit, path).
#
# The CRD files live inside Go modules that the Go module proxy serves (the same proxy and
# module cache as hack/control-plane-binaries-1.37.sh): `go mod download` fetches each module
# once into ${PREEMPTGUARD_CACHE:-~/.cache/preemptguard}/go/mod, checks it against the hash
# recorded below (and Go's checksum database, as always), and the CRD files are copied into
# ${PREEMPTGUARD_CACHE:-~/.cache/preemptguard}/upstream-crds-<versions>/. A second run prints
# that directory at once. Anything missing (no Go, a module or file the proxy does not serve,
# a hash that differs) fails the run with what went wrong.
#
# The versions are the newest each proxy serves here (the list endpoint of some modules is not
# served; a version was checked with `go mod download -json MODULE@VERSION`). They are older
# than the releases tests/fixtures/upstream/CRDS.md read for KubeRay (1.7.0) and
# LeaderWorkerSet (0.10.0, which adds DisaggregatedSet); the template paths the default policy
# names are the same in both. The training operator v1 module stops at v1.8.1 (CRDS.md read
# v1.9.4) and holds the kubeflow.org/v1 MPIJob, not mpi-operator's v2beta1.
#
# The files are large (up to 1.5 MB; all but a few over the 256 KiB that client-side
# `kubectl apply` can keep in its annotation): install them with `kubectl create` or
# `kubectl apply --server-side`.
#
# Cold run: about 45 MB of module zips (Volcano 25 MB, Kubeflow Trainer 19 MB).
set -euo pipefail

log() { echo "upstream-crds: $*" >&2; }
die() { log "error: $*"; exit 1; }

# project | module | version | go.sum hash of the module zip | files inside the module
modules=(
  "kuberay|github.com/ray-project/kuberay/ray-operator|v1.6.1|h1:IMtV0QW8AxGp4/CbPLd/olXBBxpUNQQr1n4Mu59khl4=|config/crd/bases/ray.io_rayclusters.yaml config/crd/bases/ray.io_rayjobs.yaml config/crd/bases/ray.io_rayservices.yaml config/crd/bases/ray.io_raycronjobs.yaml"
  "jobset|sigs.k8s.io/jobset|v0.12.0|h1:YYPuV0px8Ongq/RXmJg6V0w2UC67aiR+rCMD06vhQQQ=|config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
  "lws|sigs.k8s.io/lws|v0.9.0|h1:DcJCgxjjoGOx//QHZkeKpyiblxYq70aCRZNYSfykWyI=|config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml config/crd/bases/disaggregatedset.x-k8s.io_disaggregatedsets.yaml"
  "kubeflow-training-operator|github.com/kubeflow/training-operator|v1.8.1|h1:mVvoBSCInbMBX0gGSn4+Ihj3ycwoLO1iEAw+0qPhQfc=|manifests/base/crds/kubeflow.org_pytorchjobs.yaml manifests/base/crds/kubeflow.org_tfjobs.yaml manifests/base/crds/kubeflow.org_xgboostjobs.yaml manifests/base/crds/kubeflow.org_paddlejobs.yaml manifests/base/crds/kubeflow.org_mpijobs.yaml"
  "kubeflow-trainer|github.com/kubeflow/trainer/v2|v2.3.0|h1:Je+e7zvTLzB4qW09J1fB7pZrqvPtWuGng2NqdN5p5QU=|manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml"
  "volcano|volcano.sh/volcano|v1.15.1|h1:M0iGzhy1dvod2GFy1QiyWdv1jmmNfHW4+2WoRU7CIAk=|config/crd/volcano/bases/batch.volcano.sh_jobs.yaml config/crd/volcano/bases/batch.volcano.sh_cronjobs.yaml config/crd/jobflow/bases/flow.volcano.sh_jobtemplates.yaml config/crd/jobflow/bases/flow.volcano.sh_jobflows.yaml"
  "openreports|github.com/openreports/reports-api|v0.2.1|h1:g9KS3yle9Y1elmww4TK9EkD1rl6inIaiIJPX6e+u680=|config/crd/openreports.io_reports.yaml config/crd/openreports.io_clusterreports.yaml"
)

tag=""
for entry in "${modules[@]}"; do
  IFS='|' read -r project _ version _ _ <<<"$entry"
  tag+="${tag:+_}$project-${version#v}"
done
cache_root=${PREEMPTGUARD_CACHE:-$HOME/.cache/preemptguard}
out=$cache_root/upstream-crds-$tag
# SOURCES.tsv is written last: its presence means the directory is complete.
if [[ -f $out/SOURCES.tsv ]]; then echo "$out"; exit 0; fi

# From here on everything the tools print goes to stderr; stdout carries only the directory.
exec 3>&1 1>&2

command -v go >/dev/null || die "no 'go' on PATH: install Go (any release of the last years)"
command -v python3 >/dev/null || die "no 'python3' on PATH (used to read go's JSON)"

# shellcheck source=lib/go-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-env.sh"
go_env "$cache_root"

work=$(mktemp -d "${TMPDIR:-/tmp}/preemptguard-upstream-crds.XXXXXX")
staged=""
cleanup() { rm -rf "$work"; [[ -z $staged ]] || rm -rf "$staged"; }
trap cleanup EXIT

mkdir -p "$cache_root"
staged=$(mktemp -d "$cache_root/upstream-crds.tmp.XXXXXX")
printf 'project\tmodule\tversion\tsum\tcommit\tfile\tbytes\n' >"$work/SOURCES.tsv"

log "module cache $GOMODCACHE; $(go version)"
for entry in "${modules[@]}"; do
  IFS='|' read -r project module version sum files <<<"$entry"
  log "fetching $module@$version"
  # Outside any module (GOFLAGS above, GOWORK off): go mod download takes module@version as is.
  info=$(cd "$work" && go mod download -json "$module@$version") ||
    die "the Go module proxy did not serve $module@$version:
$info"
  read -r dir got commit < <(python3 -c '
import json, sys
d = json.load(sys.stdin)
if d.get("Error"):
    sys.exit("go mod download: " + d["Error"])
print(d.get("Dir", ""), d.get("Sum", ""), (d.get("Origin") or {}).get("Hash", "-"))
' <<<"$info") || die "$module@$version: $info"
  [[ -d $dir ]] || die "go mod download gave no directory for $module@$version:
$info"
  [[ $got == "$sum" ]] || die "$module@$version has hash $got, not the $sum recorded in $0"
  mkdir -p "$staged/$project"
  for file in $files; do
    [[ -f $dir/$file ]] || die "$module@$version lacks $file"
    grep -q '^kind: CustomResourceDefinition$' "$dir/$file" ||
      die "$module@$version: $file is not a CustomResourceDefinition"
    cp "$dir/$file" "$staged/$project/"
    chmod 644 "$staged/$project/$(basename "$file")"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$project" "$module" "$version" "$sum" "$commit" \
      "$file" "$(wc -c <"$dir/$file")" >>"$work/SOURCES.tsv"
  done
done
cp "$work/SOURCES.tsv" "$staged/SOURCES.tsv"
chmod 755 "$staged"
rm -rf "$out" && mv "$staged" "$out"
staged=""
log "done: $(($(wc -l <"$out/SOURCES.tsv") - 1)) CRD files in $out"
echo "$out" >&3
