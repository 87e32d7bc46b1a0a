#!/usr/bin/env bash
# Make sure the base image debian:bookworm-slim exists locally.
#
# Present: exit quietly. Else try `docker pull` with a short timeout; where no
# registry is reachable, build it from Debian packages with
# `debootstrap --variant=minbase`, trimmed like the official slim image, and
# `docker import` it under that name. The Debian mirror is the one this host's
# apt uses (falling back to deb.debian.org).
#
#   scripts/ensure-base-image.sh                    ensure the image
#   scripts/ensure-base-image.sh --print-apt-mirrors print APT_MIRROR=... and
#                                                    APT_SECURITY_MIRROR=... as
#                                                    found in the host's apt sources
# Environment:
#   BERTH_PULL_TIMEOUT  seconds allowed for `docker pull` (default 20)
#   BERTH_SKIP_PULL=1   do not try the registry at all
#   BERTH_APT_MIRROR    Debian mirror for debootstrap (default: the host's)
set -euo pipefail

IMAGE=debian:bookworm-slim
SUITE=bookworm
DEFAULT_MIRROR=http://deb.debian.org/debian
PULL_TIMEOUT=${BERTH_PULL_TIMEOUT:-20}
DEBOOTSTRAP_LOG=/var/log/berth-debootstrap.log

log() { printf 'berth: %s\n' "$*" >&2; }
die() {
  printf 'berth: error: %s\n' "$*" >&2
  exit 1
}

# host_mirror SUITE: the first deb URI in the host's apt sources (one-line
# .list and deb822 .sources formats) that serves SUITE.
host_mirror() {
  local suite=$1 f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -r $f ]] || continue
    awk -v suite="$suite" '
      $1 == "deb" {
        i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) == suite) { print $i; exit }
      }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -r $f ]] || continue
    awk -v suite="$suite" '
      BEGIN { RS = ""; FS = "\n" }
      {
        types = ""; uris = ""; suites = ""; enabled = "yes"
        for (i = 1; i <= NF; i++) {
          line = $i
          if (line ~ /^#/) continue
          key = tolower(line); sub(/:.*/, "", key)
          val = line; sub(/^[^:]*:[ \t]*/, "", val)
          if (key == "types") types = val
          else if (key == "uris") uris = val
          else if (key == "suites") suites = val
          else if (key == "enabled") enabled = tolower(val)
        }
        if (enabled == "no" || (" " types " ") !~ / deb /) next
        if ((" " suites " ") ~ (" " suite " ")) { split(uris, u, /[ \t]+/); print u[1]; exit }
      }' "$f"
  done
}

usable_uri() { [[ $1 =~ ^(https?|ftp|file):// ]]; }

first_usable() {
  local uri
  while IFS= read -r uri; do
    usable_uri "$uri" && { printf '%s\n' "${uri%/}"; return 0; }
  done
  return 1
}

print_apt_mirrors() {
  local main security
  main=$(host_mirror "$SUITE" | first_usable) || return 0
  security=$(host_mirror "$SUITE-security" | first_usable) || security=""
  printf 'APT_MIRROR=%s\nAPT_SECURITY_MIRROR=%s\n' "$main" "$security"
}

ensure_debootstrap() {
  local pkgs=()
  command -v debootstrap >/dev/null || pkgs+=(debootstrap)
  # Ubuntu hosts need Debian's keys to verify the Debian archive.
  [[ -r /usr/share/keyrings/debian-archive-keyring.gpg ]] || pkgs+=(debian-archive-keyring)
  ((${#pkgs[@]} == 0)) && return 0
  command -v apt-get >/dev/null || die "debootstrap is missing and this host has no apt-get; install debootstrap yourself"
  log "installing ${pkgs[*]} ..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get -q -y -o DPkg::Lock::Timeout=300 install --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1 || {
    apt-get -q -o DPkg::Lock::Timeout=300 update >/dev/null 2>&1 &&
      apt-get -q -y -o DPkg::Lock::Timeout=300 install --no-install-recommends "${pkgs[@]}" >/dev/null
  } || die "could not install ${pkgs[*]}"
}

try_pull() {
  [[ ${BERTH_SKIP_PULL:-0} == 1 ]] && return 1
  log "pulling $IMAGE (timeout ${PULL_TIMEOUT}s) ..."
  local out
  if out=$(timeout "$PULL_TIMEOUT" docker pull -q "$IMAGE" 2>&1); then
    return 0
  fi
  log "pull failed: $(printf '%s' "${out:-timed out}" | tail -n 1)"
  return 1
}

ROOTFS=""
cleanup() {
  [[ -n $ROOTFS && -d $ROOTFS ]] || return 0
  # debootstrap mounts proc/sys inside the target; never recurse into those.
  local m
  awk -v root="$ROOTFS/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r |
    while IFS= read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$ROOTFS"
}

# Runs debootstrap, showing its phases (not every package) with elapsed time.
run_debootstrap() {
  local mirror=$1 keyring=() start=$SECONDS line fetched=0
  [[ -r /usr/share/keyrings/debian-archive-keyring.gpg ]] &&
    keyring=(--keyring=/usr/share/keyrings/debian-archive-keyring.gpg)
  : >"$DEBOOTSTRAP_LOG"
  debootstrap --variant=minbase "${keyring[@]}" "$SUITE" "$ROOTFS" "$mirror" 2>&1 |
    tee -a "$DEBOOTSTRAP_LOG" |
    while IFS= read -r line; do
      case $line in
        "I: Retrieving InRelease"* | "I: Resolving"* | \
          "I: "*" packages..." | "I: "*" system..." | "I: Base system installed"* | [EW]:*)
          line=${line#I: }
          log "debootstrap [$((SECONDS - start))s] ${line% }"
          ;;
        "I: Retrieving "*)
          ((++fetched % 25 == 0)) || continue
          log "debootstrap [$((SECONDS - start))s] retrieved $fetched packages ..."
          ;;
      esac
    done || {
    tail -n 20 "$DEBOOTSTRAP_LOG" >&2
    die "debootstrap failed (full log: $DEBOOTSTRAP_LOG)"
  }
}

# Trims the tree the way Debian's official "slim" images are trimmed, so that
# later `apt-get install`s in the sandbox image skip docs, man pages and locales.
slim_rootfs() {
  local r=$ROOTFS
  cat >"$r/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
# Files that do not matter in containers are not installed (as in
# debian:*-slim). Remove an exclusion here if something needs those files.
path-exclude /usr/share/doc/*
# copyright files are kept for legal reasons
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
  find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$r"/usr/share/{groff,info,linda,lintian/overrides,locale,man}/*

  cat >"$r/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' >"$r/etc/apt/apt.conf.d/docker-no-languages"
  echo 'Acquire::GzipIndexes "true";' >"$r/etc/apt/apt.conf.d/docker-gzip-indexes"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$r/etc/apt/apt.conf.d/docker-autoremove-suggests"

  # Host-specific files debootstrap copied in; docker provides its own at run time.
  : >"$r/etc/resolv.conf"
  : >"$r/etc/hostname"
  rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/* "$r"/var/log/*.log \
    "$r"/var/cache/debconf/*-old "$r"/var/lib/dpkg/*-old
}

build_with_debootstrap() {
  [[ $(id -u) -eq 0 ]] || die "$IMAGE is not available and building it with debootstrap needs root; rerun as root or load the image yourself (docker load)"
  ensure_debootstrap

  local mirror=${BERTH_APT_MIRROR:-}
  [[ -n $mirror ]] || mirror=$(host_mirror "$SUITE" | first_usable) || mirror=$DEFAULT_MIRROR

  trap cleanup EXIT
  ROOTFS=$(mktemp -d /var/tmp/berth-rootfs.XXXXXX)
  log "building $IMAGE: debootstrap --variant=minbase $SUITE from $mirror (takes a few minutes; log: $DEBOOTSTRAP_LOG) ..."
  run_debootstrap "$mirror"
  slim_rootfs

  log "importing the tree as $IMAGE ..."
  tar --numeric-owner -C "$ROOTFS" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -c . |
    docker import \
      --change 'CMD ["bash"]' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --message "debootstrap --variant=minbase $SUITE $mirror" \
      - "$IMAGE" >/dev/null
  cleanup
  ROOTFS=""
  log "$IMAGE is ready ($(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
}

main() {
  if [[ ${1:-} == --print-apt-mirrors ]]; then
    print_apt_mirrors
    return 0
  fi
  docker image inspect "$IMAGE" >/dev/null 2>&1 && return 0
  try_pull && { log "$IMAGE pulled"; return 0; }
  build_with_debootstrap
}

main "$@"
