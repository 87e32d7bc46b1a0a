#!/usr/bin/env bash
# Build the Berth image (deploy/Dockerfile) as berth:<package.json version>
# and berth:latest, with no registry: the base image comes from
# ensure-base-image.sh, Node.js is this host's own binary, and the production
# dependencies are installed from package-lock.json once per lockfile (kept
# in dist/deploy-image/ and reused by later builds).
#
#   scripts/build-deploy-image.sh [extra `docker build` args]
#
# Environment:
#   BERTH_DEPLOY_IMAGE  image name (default berth)
#   BERTH_DEPLOY_NO_TSC=1  use dist/ as it is (the tests, which run from it, set this)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
image=${BERTH_DEPLOY_IMAGE:-berth}
ctx=$root/dist/deploy-image

log() { printf 'berth: %s\n' "$*" >&2; }
die() {
  printf 'berth: error: %s\n' "$*" >&2
  exit 1
}

"$here/ensure-docker.sh"
"$here/ensure-base-image.sh"

version=$(sed -nE 's/^[[:space:]]*"version"[[:space:]]*:[[:space:]]*"([^"]+)".*/\1/p' "$root/package.json" | head -n 1)
[[ -n $version ]] || die "no version in $root/package.json"

node_bin=$(readlink -f "$(command -v node)") || die "node is not installed on this host"
node_major=$("$node_bin" -p 'process.versions.node.split(".")[0]')
((node_major >= 20)) || die "this host's node is $("$node_bin" --version); the image needs Node.js 20 or later"

if [[ ${BERTH_DEPLOY_NO_TSC:-} != 1 ]]; then
  log "compiling TypeScript ..."
  (cd "$root" && npx tsc -p tsconfig.json)
fi
[[ -f $root/dist/services/cli/main.js && -f $root/dist/agent/berth_agent.pyz ]] || die "dist/ is not built; run 'make build'"


mkdir -p "$ctx/app"
lock_hash=$(sha256sum "$root/package-lock.json" | cut -c1-16)
if [[ ! -f $ctx/modules-$lock_hash ]]; then
  log "installing production dependencies from package-lock.json (once per lockfile) ..."
  rm -rf "$ctx/modules" "$ctx"/modules-*
  mkdir -p "$ctx/modules"
  cp "$root/package.json" "$root/package-lock.json" "$ctx/modules/"
  (cd "$ctx/modules" && npm ci --omit=dev --no-audit --no-fund --loglevel=error)
  touch "$ctx/modules-$lock_hash"
fi

log "staging the build context in $ctx ..."
rm -rf "$ctx/app"
mkdir -p "$ctx/app/dist" "$ctx/app/services/gen"
cp -a "$root/bin" "$root/package.json" "$ctx/app/"
cp -a "$root/dist/services" "$root/dist/agent" "$ctx/app/dist/"
cp -a "$root/services/gen/descriptor.binpb" "$ctx/app/services/gen/"
cp -a "$root/sandbox-image" "$ctx/app/"
cp "$node_bin" "$ctx/node"
cp "$root/deploy/Dockerfile" "$ctx/Dockerfile"

args=()
for var in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [[ -n ${!var:-} ]] && args+=(--build-arg "$var")
done
# With BuildKit (the buildx plugin), print every step's output as it runs.
docker buildx version >/dev/null 2>&1 && args+=(--progress=plain)

log "building $image:$version and $image:latest from deploy/Dockerfile ..."
docker build "${args[@]}" "$@" -t "$image:$version" -t "$image:latest" "$ctx"
log "$image:$version is ready ($(docker image inspect --format '{{.Size}}' "$image:$version" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"

# Prometheus for deploy/compose.yaml, from Debian's package (no Prometheus image needed).
mirror_args=()
while IFS= read -r kv; do
  [[ $kv == APT_MIRROR=* ]] && mirror_args+=(--build-arg "$kv")
done < <("$here/ensure-base-image.sh" --print-apt-mirrors)
log "building berth-prometheus:latest from deploy/prometheus/ ..."
docker build "${args[@]}" "${mirror_args[@]}" -t berth-prometheus:latest "$root/deploy/prometheus"
log "berth-prometheus:latest is ready"
