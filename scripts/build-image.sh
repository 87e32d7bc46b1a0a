#!/usr/bin/env bash
# Build the sandbox image as berth-sandbox:<package.json version> and
# berth-sandbox:latest, first making sure Docker runs and the base image
# exists (built with debootstrap where no registry is reachable).
#
#   scripts/build-image.sh [extra `docker build` args, e.g. --no-cache]
#
# Environment:
#   BERTH_IMAGE       image name (default berth-sandbox)
#   BERTH_APT_MIRROR  Debian mirror for the build (default: the host's apt mirror)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
image=${BERTH_IMAGE:-berth-sandbox}

log() { printf 'berth: %s\n' "$*" >&2; }

"$here/ensure-docker.sh"
"$here/ensure-base-image.sh"

version=$(sed -nE 's/^[[:space:]]*"version"[[:space:]]*:[[:space:]]*"([^"]+)".*/\1/p' "$root/package.json" | head -n 1)
[[ -n $version ]] || {
  log "error: no version in $root/package.json"
  exit 1
}

args=()
# The host's Debian mirrors: builds work wherever the host's apt works.
while IFS= read -r kv; do
  [[ -n $kv ]] && args+=(--build-arg "$kv")
done < <("$here/ensure-base-image.sh" --print-apt-mirrors)
[[ -n ${BERTH_APT_MIRROR:-} ]] && args+=(--build-arg "APT_MIRROR=$BERTH_APT_MIRROR")
# Proxy settings are predefined build args: forwarded, but not part of the cache key.
for var in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [[ -n ${!var:-} ]] && args+=(--build-arg "$var")
done
# With BuildKit (the buildx plugin), print every step's output as it runs.
docker buildx version >/dev/null 2>&1 && args+=(--progress=plain)

log "building $image:$version and $image:latest from sandbox-image/ ..."
docker build "${args[@]}" "$@" -t "$image:$version" -t "$image:latest" "$root/sandbox-image"
log "$image:$version is ready ($(docker image inspect --format '{{.Size}}' "$image:$version" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
