#!/usr/bin/env bash
# Provide etcd, kube-apiserver, kube-scheduler and kube-controller-manager of a current
# Kubernetes release (1.37.2) and print the directory that holds them.
#
# KUBEBUILDER_ASSETS (the envtest convention) wins when set. Otherwise the binaries are built
# once with the local Go from the Go module proxy (no source tree, no vendor directory) and
# cached in ${PREEMPTGUARD_CACHE:-~/.cache/preemptguard}/k8s-1.37.2/bin; the Go module and
# build caches sit beside it (go/mod, go/build) so that a rebuild is quick.
#
# How (see shared/DESIGN.md, section 7b): k8s.io/kubernetes is a Go module, but its go.mod
# replaces every k8s.io staging module with a ./staging path that the module zip lacks. A small
# wrapper main module requires k8s.io/kubernetes, points each of those staging modules at its
# published v0.X.Y release, and lists upstream's own commands as tools, so upstream's main
# packages are what gets built. etcd comes from a wrapper module of its own: sharing the
# Kubernetes one would drag the etcd server to whatever version Kubernetes' module graph picks.
#
# Cold build: 14 to 16 minutes on 2 cores (kube-apiserver most of it), about 1 GB of modules and
# 4 GB of build cache. Warm rebuild (caches kept, binaries gone): under a minute.
set -euo pipefail

log() { echo "control-plane-binaries-1.37: $*" >&2; }
die() { log "error: $*"; exit 1; }
wanted=(etcd kube-apiserver kube-scheduler kube-controller-manager)

k8s_version=v1.37.2
# Tried in order: the first that the module proxy serves is used.
etcd_versions=(v3.6.16 v3.6.15 v3.6.14 v3.6.13)
build_tags=selinux,notest,grpcnotrace

have_all() {
  local dir=$1 b
  for b in "${wanted[@]}"; do [[ -x "$dir/$b" ]] || return 1; done
}

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  # envtest's own asset sets hold etcd and kube-apiserver only: add a kube-scheduler and a
  # kube-controller-manager of the same release next to them.
  have_all "$KUBEBUILDER_ASSETS" || die "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks one of: ${wanted[*]}"
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

cache_root=${PREEMPTGUARD_CACHE:-$HOME/.cache/preemptguard}
cache=$cache_root/k8s-${k8s_version#v}
bin=$cache/bin
if have_all "$bin"; then echo "$bin"; exit 0; fi

# From here on everything the tools print goes to stderr; stdout carries only the directory.
exec 3>&1 1>&2

command -v go >/dev/null || die "no 'go' on PATH: install Go 1.26 or newer (or set KUBEBUILDER_ASSETS)"
command -v python3 >/dev/null || die "no 'python3' on PATH (used to read upstream's go.mod)"

# shellcheck source=lib/go-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-env.sh"
go_env "$cache_root"
export CGO_ENABLED=0

work=$(mktemp -d "${TMPDIR:-/tmp}/preemptguard-k8s-1.37.XXXXXX")
staged=""
cleanup() { rm -rf "$work"; [[ -z $staged ]] || rm -rf "$staged"; }
trap cleanup EXIT

# The staging modules that upstream's go.mod both requires and replaces with a local path
# (the sample-* ones are neither served nor needed), one "path" per line, then upstream's
# "go VERSION" and "godebug KEY=VALUE" lines.
read_upstream_gomod() {
  local gomod=$1
  go mod edit -json "$gomod" | python3 -c '
import json, sys
m = json.load(sys.stdin)
required = {r["Path"] for r in m.get("Require") or []}
for r in m.get("Replace") or []:
    old, new = r["Old"]["Path"], r["New"]
    if (old in required and new["Path"].startswith("./") and not new.get("Version")
            and not old.rsplit("/", 1)[-1].startswith("sample-")):
        print("replace", old)
if m.get("Go"):
    print("go", m["Go"])
# "GoDebug" is what go mod edit -json writes, "Godebug" what its help text says.
for g in m.get("GoDebug") or m.get("Godebug") or []:
    print("godebug", g["Key"] + "=" + g["Value"])
'
}

build_kubernetes() {
  local out=$1 dir=$work/kubernetes info gomod kind value staging_version
  local -a edits=() replaced=()
  staging_version=v0.${k8s_version#v1.}
  log "fetching k8s.io/kubernetes@$k8s_version"
  info=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$k8s_version") ||
    die "the Go module proxy did not serve k8s.io/kubernetes@$k8s_version:
$info"
  gomod=$(python3 -c 'import json, sys; print(json.load(sys.stdin).get("GoMod", ""))' <<<"$info")
  [[ -f $gomod ]] || die "go mod download gave no go.mod for k8s.io/kubernetes@$k8s_version:
$info"

  while read -r kind value; do
    case $kind in
      replace) replaced+=("$value"); edits+=("-replace=$value=$value@$staging_version") ;;
      go) edits+=("-go=$value") ;;
      godebug) edits+=("-godebug=$value") ;;
    esac
  done < <(read_upstream_gomod "$gomod")
  ((${#replaced[@]} > 0)) || die "found no staging replacements in $gomod: has upstream's layout changed?"
  log "wrapper module: ${#replaced[@]} staging modules at $staging_version"

  mkdir -p "$dir"
  (
    cd "$dir"
    go mod init preemptguard.local/k8s-control-plane 2>/dev/null || die "go mod init failed in $dir"
    go mod edit "${edits[@]}" \
      "-require=k8s.io/kubernetes@$k8s_version" \
      -tool=k8s.io/kubernetes/cmd/kube-apiserver \
      -tool=k8s.io/kubernetes/cmd/kube-scheduler \
      -tool=k8s.io/kubernetes/cmd/kube-controller-manager
    log "resolving the module graph (go mod tidy)"
    go mod tidy || die "go mod tidy failed for the Kubernetes wrapper module in $dir (go.mod above)"
    local minor=${k8s_version#v1.}
    minor=${minor%%.*}
    local ldflags="" pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    done
    log "building kube-apiserver, kube-scheduler, kube-controller-manager $k8s_version (the long part)"
    go build -trimpath -tags "$build_tags" -ldflags "${ldflags# }" -o "$out/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kube-controller-manager ||
      die "go build of the Kubernetes commands failed (wrapper module: $dir/go.mod)"
  )
}

build_etcd() {
  local out=$1 dir=$work/etcd
  mkdir -p "$dir"
  (
    cd "$dir"
    go mod init preemptguard.local/etcd 2>/dev/null || die "go mod init failed in $dir"
    local version chosen=""
    for version in "${etcd_versions[@]}"; do
      if go mod download "go.etcd.io/etcd/server/v3@$version"; then chosen=$version; break; fi
      log "go.etcd.io/etcd/server/v3@$version was not served, trying the next"
    done
    [[ -n $chosen ]] || die "the Go module proxy served none of go.etcd.io/etcd/server/v3 ${etcd_versions[*]}"
    go mod edit "-require=go.etcd.io/etcd/server/v3@$chosen" -tool=go.etcd.io/etcd/server/v3
    go mod tidy || die "go mod tidy failed for the etcd wrapper module in $dir"
    log "building etcd $chosen"
    go build -trimpath -o "$out/etcd" go.etcd.io/etcd/server/v3 || die "go build of etcd $chosen failed"
  )
}

log "building Kubernetes $k8s_version control-plane binaries into $bin (about 14 minutes on 2 cores)"
log "Go: $(go version); module cache $GOMODCACHE, build cache $GOCACHE"
mkdir -p "$cache"
staged=$(mktemp -d "$cache/bin.tmp.XXXXXX")
build_etcd "$staged"
build_kubernetes "$staged"
have_all "$staged" || die "build finished without every binary (${wanted[*]}) in $staged"
chmod 755 "$staged"
rm -rf "$bin" && mv "$staged" "$bin"
staged=""
have_all "$bin" || die "build finished without every binary in $bin"
log "done: $("$bin/kube-apiserver" --version), etcd $("$bin/etcd" --version | sed -n 's/^etcd Version: //p')"
echo "$bin" >&3
