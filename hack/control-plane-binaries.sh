#!/usr/bin/env bash
# Provide etcd, kube-apiserver, kube-scheduler and kube-controller-manager for the
# end-to-end tests and print the directory that holds them.
#
# KUBEBUILDER_ASSETS (the envtest convention) wins when set. Otherwise the binaries
# are built once from Debian bookworm's `kubernetes` source package (1.20.2) and
# cached in ${PREEMPTGUARD_CACHE:-~/.cache/preemptguard}/k8s-1.20.2/bin.
set -euo pipefail

log() { echo "control-plane-binaries: $*" >&2; }
wanted=(etcd kube-apiserver kube-scheduler kube-controller-manager)

have_all() {
  local dir=$1 b
  for b in "${wanted[@]}"; do [[ -x "$dir/$b" ]] || return 1; done
}

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  # envtest's own asset sets hold etcd and kube-apiserver only: add a kube-scheduler and a
  # kube-controller-manager of the same release next to them.
  have_all "$KUBEBUILDER_ASSETS" || { log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks one of: ${wanted[*]}"; exit 1; }
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

cache=${PREEMPTGUARD_CACHE:-$HOME/.cache/preemptguard}/k8s-1.20.2
bin=$cache/bin
if have_all "$bin"; then echo "$bin"; exit 0; fi

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

# The cached etcd is a link to Debian's: if only that went away, reinstall it, not rebuild.
if [[ -x $bin/kube-apiserver && -x $bin/kube-scheduler && -x $bin/kube-controller-manager ]]; then
  log "installing etcd-server"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
  ln -sf /usr/bin/etcd "$bin/etcd"
  have_all "$bin" || { log "etcd-server did not provide /usr/bin/etcd"; exit 1; }
  echo "$bin"
  exit 0
fi

install_build_deps() {
  local src=/etc/apt/sources.list.d/preemptguard-bookworm-src.sources
  if ! grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    log "adding a deb-src entry for bookworm"
    as_root tee "$src" >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends \
    etcd-server golang-go golang-github-modern-go-reflect2-dev rsync jq dpkg-dev >/dev/null
}

fetch_source() {
  local work=$1
  (cd "$work" && apt-get source --download-only kubernetes >/dev/null)
  local orig
  orig=$(ls "$work"/kubernetes_*.orig.tar.* | head -n1)
  mkdir -p "$work/src"
  tar -xf "$orig" -C "$work/src" --strip-components=1
}

# Go 1.19 miscompiles the vendored reflect2 v1.0.1 (kube-apiserver faults in
# mapiterinit under load); Debian's reflect2 1.0.2 is the fix.
patch_reflect2() {
  local tree=$1 fixed=/usr/share/gocode/src/github.com/modern-go/reflect2
  local vend=$tree/vendor/github.com/modern-go/reflect2
  [[ -d $fixed ]] || { log "missing $fixed"; exit 1; }
  find "$vend" -maxdepth 1 \( -name '*.go' -o -name '*.s' \) -delete
  find "$fixed" -maxdepth 1 \( -name '*.go' -o -name '*.s' \) ! -name '*_test.go' -exec cp {} "$vend/" \;
}

build() {
  local tree=$1
  mkdir -p "$tree/.go/src/k8s.io"
  ln -sfn "$tree" "$tree/.go/src/k8s.io/kubernetes"
  # Debian's Go 1.19 first: Go >= 1.23 refuses the runtime linknames reflect2 uses.
  (cd "$tree/.go/src/k8s.io/kubernetes" &&
    env PATH="/usr/lib/go/bin:$PATH" GOPATH="$tree/.go" GO111MODULE=off GOFLAGS=-mod=vendor \
      CGO_ENABLED=0 GOCACHE="$cache/gocache" \
      make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager" >&2)
}

log "building Kubernetes 1.20.2 control-plane binaries into $bin (about 10 minutes)"
install_build_deps
work=$(mktemp -d "${TMPDIR:-/tmp}/preemptguard-k8s.XXXXXX")
trap 'rm -rf "$work"' EXIT
fetch_source "$work"
patch_reflect2 "$work/src"
build "$work/src"
mkdir -p "$bin.tmp"
for b in kube-apiserver kube-scheduler kube-controller-manager; do
  cp "$work/src/_output/local/bin/linux/amd64/$b" "$bin.tmp/$b" 2>/dev/null ||
    cp "$work/src/_output/bin/$b" "$bin.tmp/$b"
done
ln -sf /usr/bin/etcd "$bin.tmp/etcd"
rm -rf "$bin" && mv "$bin.tmp" "$bin"
have_all "$bin" || { log "build finished without every binary in $bin"; exit 1; }
log "done"
echo "$bin"
