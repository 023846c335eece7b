#!/usr/bin/env bash
# Pins the Dockerfile's base image to the digest its tag has now: resolves the tag that the
# FROM lines name (python:3.12.N-slim-<release>, with or without a digest already) in the
# registry, and rewrites every such FROM line as tag@sha256:<digest>. To move to another
# release, change the tag in the FROM lines first, then run this again.
#
#   hack/pin-image.sh [DOCKERFILE]     # default: the Dockerfile at the top of the repository
#
# Resolves with `docker buildx imagetools inspect`, `crane digest` or `skopeo inspect`, the
# first installed (PIN_IMAGE_TOOL=buildx|crane|skopeo picks one). Needs the registry reachable;
# when the digest cannot be had, it says why and leaves the Dockerfile as it was.
set -euo pipefail
dockerfile=$(realpath -- "${1:-$(dirname "$0")/../Dockerfile}")
log() { echo "pin-image: $*" >&2; }
die() {
  log "$*"
  exit 1
}

[[ -f $dockerfile ]] || die "no such file: $dockerfile"
from_re='^(FROM[[:space:]]+)(python:3\.12\.[0-9]+-slim-[a-z]+)(@sha256:[0-9a-f]{64})?([[:space:]].*)?$'
tags=$(sed -nE "s/$from_re/\\2/p" "$dockerfile" | sort -u)
[[ -n $tags ]] || die "$dockerfile has no FROM line naming python:3.12.N-slim-<release>"
(($(wc -l <<<"$tags") == 1)) || die "the FROM lines of $dockerfile name different tags: $(tr '\n' ' ' <<<"$tags")"
tag=$tags

tool=${PIN_IMAGE_TOOL:-}
if [[ -z $tool ]]; then
  if command -v docker >/dev/null && docker buildx version >/dev/null 2>&1; then
    tool=buildx
  elif command -v crane >/dev/null; then
    tool=crane
  elif command -v skopeo >/dev/null; then
    tool=skopeo
  else
    die "none of docker buildx, crane or skopeo is installed: install one to resolve $tag"
  fi
fi

err=$(mktemp)
trap 'rm -f "$err" "$dockerfile.pin-image"' EXIT
# The digest of what the tag points at: for these images, the index of every platform's image.
case $tool in
  buildx)
    if manifest=$(timeout 120 docker buildx imagetools inspect --format '{{json .Manifest}}' "$tag" 2>"$err"); then
      digest=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["digest"])' "$manifest" 2>>"$err") || digest=""
    else
      digest=""
    fi
    ;;
  crane) digest=$(timeout 120 crane digest "$tag" 2>"$err") || digest="" ;;
  skopeo)
    raw=$(mktemp)
    if timeout 120 skopeo inspect --raw "docker://$tag" >"$raw" 2>"$err" && [[ -s $raw ]]; then
      digest=sha256:$(sha256sum <"$raw" | cut -d' ' -f1)
    else
      digest=""
    fi
    rm -f "$raw"
    ;;
  *) die "PIN_IMAGE_TOOL=$tool: expected buildx, crane or skopeo" ;;
esac

if [[ ! $digest =~ ^sha256:[0-9a-f]{64}$ ]]; then
  [[ -s $err ]] && tail -n 5 "$err" >&2
  die "could not resolve the digest of $tag with $tool (is the registry reachable?); $dockerfile left unchanged"
fi

sed -E "s/$from_re/\\1\\2@$digest\\4/" "$dockerfile" >"$dockerfile.pin-image"
mv "$dockerfile.pin-image" "$dockerfile"
log "$tag@$digest"
