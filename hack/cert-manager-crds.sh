#!/usr/bin/env bash
# Provide cert-manager's CustomResourceDefinitions (cert-manager.io: Issuer, ClusterIssuer,
# Certificate, CertificateRequest; acme.cert-manager.io: Order, Challenge) and print the
# directory that holds them, one YAML file each.
#
# The end-to-end tests install them on the 1.37 API server, so that overlays/cert-manager's
# Issuers and Certificates are applied for real and checked against cert-manager's own schemas.
# No cert-manager runs: nothing issues the certificates, the objects are only stored.
#
# Where from: the Go module github.com/cert-manager/cert-manager carries upstream's CRD sources in
# deploy/crds/ (the schemas its Helm chart templates its CRDs from), so the module proxy that
# hack/control-plane-binaries-1.37.sh builds from serves them too: fetched once with
# `go mod download` into the same module cache (go/mod), copied to
# ${PREEMPTGUARD_CACHE:-~/.cache/preemptguard}/cert-manager-<version>/crds, with upstream's
# LICENSE. The module is checked against the hash recorded below (and Go's checksum database, as
# always). A second run prints the directory at once. Anything missing (no Go, a version the proxy
# does not serve, a hash that differs, a file upstream moved) fails the run saying what.
#
# The version is the newest the module proxy serves here (`go list -m -versions` lists
# v1.21.0 to v1.21.2). Cold run: one module zip of 4 MB (17 MB unpacked), about a second.
set -euo pipefail

log() { echo "cert-manager-crds: $*" >&2; }
die() { log "error: $*"; exit 1; }

module=github.com/cert-manager/cert-manager
version=v1.21.2
# go.sum's hash of the module zip at that version.
sum=h1:UWgoYM+KLNtRlqmoWOKjKBOBUPVHeepQ6/ac3ERJW68=
# What a complete copy holds (deploy/crds/<group>_<plural>.yaml).
wanted=(
  cert-manager.io_certificaterequests.yaml
  cert-manager.io_certificates.yaml
  cert-manager.io_clusterissuers.yaml
  cert-manager.io_issuers.yaml
  acme.cert-manager.io_challenges.yaml
  acme.cert-manager.io_orders.yaml
)

have_all() {
  local dir=$1 f
  for f in "${wanted[@]}"; do [[ -s "$dir/$f" ]] || return 1; done
}

cache_root=${PREEMPTGUARD_CACHE:-$HOME/.cache/preemptguard}
out=$cache_root/cert-manager-$version/crds
if have_all "$out"; then echo "$out"; exit 0; fi

# From here on everything the tools print goes to stderr; stdout carries only the directory.
exec 3>&1 1>&2

command -v go >/dev/null || die "no 'go' on PATH: install Go (any version that runs 'go mod download')"
command -v python3 >/dev/null || die "no 'python3' on PATH (used to read go mod download's answer)"

# shellcheck source=lib/go-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-env.sh"
go_env "$cache_root"

# Outside any module, so that no go.mod or go.work around the caller takes part.
work=$(mktemp -d "${TMPDIR:-/tmp}/preemptguard-cert-manager.XXXXXX")
staged=""
cleanup() { rm -rf "$work"; [[ -z $staged ]] || rm -rf "$staged"; }
trap cleanup EXIT
cd "$work"

log "fetching $module@$version"
info=$(go mod download -json "$module@$version") ||
  die "the Go module proxy did not serve $module@$version (see 'go list -m -versions $module'):
$info"
read -r dir got < <(python3 -c '
import json, sys
answer = json.load(sys.stdin)
print(answer.get("Dir", ""), answer.get("Sum", ""))' <<<"$info") ||
  die "go mod download gave an answer that is not JSON for $module@$version:
$info"
[[ $got == "$sum" ]] || die "$module@$version has hash $got, not the $sum recorded here"
[[ -d $dir/deploy/crds ]] || die "$module@$version has no deploy/crds in $dir: has upstream's layout changed?"
have_all "$dir/deploy/crds" || die "$module@$version lacks one of ${wanted[*]} in $dir/deploy/crds"

mkdir -p "$cache_root/cert-manager-$version"
staged=$(mktemp -d "$cache_root/cert-manager-$version/crds.tmp.XXXXXX")
for f in "${wanted[@]}"; do
  # Each is a CustomResourceDefinition (the tests check each document's kind again).
  grep -q '^kind: CustomResourceDefinition$' "$dir/deploy/crds/$f" ||
    die "$dir/deploy/crds/$f is not a CustomResourceDefinition"
  cp "$dir/deploy/crds/$f" "$staged/$f"
done
cp "$dir/LICENSE" "$staged/LICENSE"
chmod 755 "$staged"
chmod 644 "$staged"/*
rm -rf "$out" && mv "$staged" "$out"
staged=""
have_all "$out" || die "copy finished without every CRD in $out"
log "cert-manager $version CRDs in $out"
echo "$out" >&3
