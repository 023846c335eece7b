#!/usr/bin/env bash
# Print the path of a promtool binary (Prometheus's rule checker and tester), for the tests of
# the shipped alert rules (tests/test_alert_rules.py).
#
# Order: $PROMTOOL; `promtool` on PATH; a cached copy under ${PREEMPTGUARD_CACHE:-~/.cache/preemptguard};
# else, once: Debian's prometheus package unpacked (apt-get download: nothing installed, no
# service started; seconds), or where there is no apt, a `go install` of $version (Go >= 1.26
# and the Go module proxy; about 5 minutes on 2 cores).
set -euo pipefail

version=v0.316.0  # the Go module version of Prometheus 3.16
log() { echo "promtool.sh: $*" >&2; }

if [[ -n "${PROMTOOL:-}" ]]; then
  [[ -x $PROMTOOL ]] || { log "PROMTOOL=$PROMTOOL is not an executable"; exit 1; }
  echo "$PROMTOOL"
  exit 0
fi
if on_path=$(command -v promtool); then
  echo "$on_path"
  exit 0
fi

cache_root=${PREEMPTGUARD_CACHE:-$HOME/.cache/preemptguard}
debian=$cache_root/promtool-debian
built=$cache_root/promtool-$version
for cached in "$debian/promtool" "$built/bin/promtool"; do
  if [[ -x $cached ]]; then echo "$cached"; exit 0; fi
done

mkdir -p "$cache_root"
staged=$(mktemp -d "$cache_root/promtool.tmp.XXXXXX")
trap 'rm -rf "$staged"' EXIT
chmod 755 "$staged"  # apt downloads as its own user

from_debian() {
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || return 1
  log "unpacking promtool from Debian's prometheus package into $debian"
  (cd "$staged" && { apt-get download -qq prometheus 2>/dev/null ||
    { apt-get update -qq && apt-get download -qq prometheus; }; }) >&2 || return 1
  dpkg-deb -x "$staged"/prometheus_*.deb "$staged/tree" || return 1
  "$staged/tree/usr/bin/promtool" --version >/dev/null || return 1
  mkdir -p "$debian"
  mv "$staged/tree/usr/bin/promtool" "$debian/promtool"
  echo "$debian/promtool"
}

from_go() {
  local gobin="" candidate
  for candidate in "$(command -v go || true)" /usr/local/go/bin/go; do
    if [[ -n $candidate && -x $candidate ]] &&
       "$candidate" version 2>/dev/null | grep -Eq 'go1\.(2[6-9]|[3-9][0-9])'; then
      gobin=$candidate; break
    fi
  done
  [[ -n $gobin ]] || { log "no Go >= 1.26 to build promtool; install it or set PROMTOOL"; return 1; }
  mkdir -p "$cache_root/go/mod" "$cache_root/go/build"
  log "building promtool $version with $($gobin version | cut -d' ' -f3) into $built/bin"
  (cd "$staged" && GOBIN=$staged GOMODCACHE=$cache_root/go/mod GOCACHE=$cache_root/go/build \
    GOFLAGS="-mod=mod -modcacherw -buildvcs=false" CGO_ENABLED=0 "$gobin" install \
    -trimpath -ldflags "-w -s" "github.com/prometheus/prometheus/cmd/promtool@$version") >&2 ||
    return 1
  "$staged/promtool" --version >/dev/null || return 1
  mkdir -p "$built/bin"
  mv "$staged/promtool" "$built/bin/promtool"
  echo "$built/bin/promtool"
}

from_debian || from_go || { log "found no promtool and could make none"; exit 1; }
