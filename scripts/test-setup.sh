#!/usr/bin/env bash
# Every tool a test tier needs, installed or named with the exact fix, so
# that `make test` runs every test instead of skipping some: as root on
# Debian/Ubuntu the missing Debian packages are installed; elsewhere each
# missing tool is named with the command that installs it, and the script
# exits 1. Docker and the sandbox image are `make image`'s (make test runs it
# first).
#
#   scripts/test-setup.sh               the tools of the test tiers
#   scripts/test-setup.sh --generators  also protoc and its gRPC plugin (make proto-python, CI's check)
set -euo pipefail

log() { printf 'berth: %s\n' "$*" >&2; }

# command | Debian package | what needs it
TOOLS=(
  "bwrap|bubblewrap|the apptainer test double (singularity tiers)"
  "nsenter|util-linux|the apptainer test double"
  "unshare|util-linux|the apptainer test double, the private btrfs Docker daemon"
  "rg|ripgrep|search_files' preferred search (integration)"
  "mkfs.btrfs|btrfs-progs|the private Docker daemon on btrfs that enforces container_disk (integration)"
  "losetup|mount|the private Docker daemon on btrfs"
  "iptables|iptables|docker.network: isolated (isolation tier)"
  "ip|iproute2|the network isolation tests' namespaces (isolation tier)"
  "openssl|openssl|certificates made at run time (TLS tests)"
  "docker-compose|docker-compose|the compose stack (deploy tier)"
  "criu|criu|berth doctor's report of what criu check says (e2e)"
)
if [[ ${1:-} == --generators ]]; then
  TOOLS+=(
    "protoc|protobuf-compiler|make proto-python (the Python client's stubs)"
    "grpc_python_plugin|protobuf-compiler-grpc|make proto-python"
  )
fi

missing_packages=()
missing_lines=()
for entry in "${TOOLS[@]}"; do
  IFS='|' read -r cmd pkg why <<<"$entry"
  if ! command -v "$cmd" >/dev/null 2>&1; then
    missing_packages+=("$pkg")
    missing_lines+=("$cmd is missing, needed by $why: apt-get install -y $pkg")
  fi
done
# The Python client's tests run on Debian's gRPC runtime (test/support/python-bin.ts).
if ! /usr/bin/python3 -c 'import grpc, google.protobuf' >/dev/null 2>&1; then
  missing_packages+=(python3-grpcio python3-protobuf)
  missing_lines+=("Python's grpc or protobuf module is missing, needed by the Python client's tests: apt-get install -y python3-grpcio python3-protobuf")
fi

if ((${#missing_packages[@]} > 0)); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    mapfile -t unique < <(printf '%s\n' "${missing_packages[@]}" | sort -u)
    log "installing ${unique[*]} for the test tiers"
    apt_log=/var/log/berth-apt.log
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${unique[@]}"; } >>"$apt_log" 2>&1; then
      log "error: apt-get could not install ${unique[*]} (see $apt_log)"
      exit 1
    fi
  else
    for line in "${missing_lines[@]}"; do log "$line"; done
    log "error: the tools above are missing; install them (as root on Debian/Ubuntu, make test does it itself) and run make test again"
    exit 1
  fi
fi

# kubectl (with its built-in Kustomize) renders deploy/kubernetes; Debian's kubernetes-client is too old for its components.
if ! kubectl version --client 2>/dev/null | grep -q 'Kustomize Version'; then
  log "error: kubectl with Kustomize is missing, needed by test/deploy/kubernetes.test.ts: install kubectl 1.21 or newer (https://kubernetes.io/docs/tasks/tools/install-kubectl-linux/)"
  exit 1
fi
