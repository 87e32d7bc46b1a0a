#!/usr/bin/env bash
# Make sure a Docker Engine answers on this host.
#
# If `docker info` already works, exit quietly. Otherwise, on Debian/Ubuntu
# as root: install Debian's docker.io (and debootstrap, for building the base
# image without a registry), write /etc/docker/daemon.json, start dockerd in
# the background and wait until /var/run/docker.sock answers. No systemd is
# assumed; where systemd runs, it is asked to start the service instead.
#
# Environment:
#   BERTH_DOCKERD_TIMEOUT  seconds to wait for the daemon (default 60)
#   BERTH_DOCKERD_LOG      dockerd's log file (default /var/log/berth-dockerd.log)
set -euo pipefail

DOCKERD_TIMEOUT=${BERTH_DOCKERD_TIMEOUT:-60}
DOCKERD_LOG=${BERTH_DOCKERD_LOG:-/var/log/berth-dockerd.log}
APT_LOG=/var/log/berth-apt.log
DOCKER_SOCK=/var/run/docker.sock
DAEMON_JSON=/etc/docker/daemon.json
# Records the checksum of the daemon.json we wrote, so that we rewrite our own
# file when the wanted config changes but never overwrite an admin's file.
DAEMON_JSON_STAMP=/etc/docker/.berth-daemon.json.sha256
LOCK_FILE=/run/berth-ensure-docker.lock

log() { printf 'berth: %s\n' "$*" >&2; }
die() {
  printf 'berth: error: %s\n' "$*" >&2
  exit 1
}

docker_answers() { timeout 20 docker info >/dev/null 2>&1; }

# --- daemon configuration -------------------------------------------------

# Extra OCI runtimes to register, one "name path [runtime arg ...]" per line.
# gVisor (`docker.runtime: runsc`): --host-uds=all lets sandboxed processes
# connect to Unix sockets the host created in bind mounts (the exec agent and
# execute_code dial out to the executor that way); --network=none because a
# task's network policy is applied by Docker for runc, and a gVisor sandbox
# gets none at all; --overlay2=none (where this runsc knows the flag) so the
# container's file changes reach the host, where `docker commit` (snapshots)
# sees them, instead of staying in gVisor's own overlay.
daemon_runtimes() {
  local runsc overlay=""
  if runsc=$(command -v runsc); then
    runsc flags 2>&1 | grep -q -- '-overlay2 ' && overlay=" --overlay2=none"
    printf 'runsc %s --host-uds=all --network=none%s\n' "$runsc" "$overlay"
  fi
}

# Prints the daemon.json berth wants.
daemon_config() {
  local runtimes name path first=1
  runtimes=$(daemon_runtimes)
  printf '{\n'
  printf '  "log-driver": "json-file",\n'
  printf '  "log-opts": { "max-size": "10m", "max-file": "3" }'
  if [[ -n $runtimes ]]; then
    printf ',\n  "runtimes": {'
    while read -r name path args; do
      [[ -n $name ]] || continue
      ((first)) || printf ','
      first=0
      printf '\n    "%s": { "path": "%s"' "$name" "$path"
      if [[ -n $args ]]; then
        local arg sep=""
        printf ', "runtimeArgs": ['
        for arg in $args; do
          printf '%s"%s"' "$sep" "$arg"
          sep=", "
        done
        printf ']'
      fi
      printf ' }'
    done <<<"$runtimes"
    printf '\n  }'
  fi
  printf '\n}\n'
}

write_daemon_config() {
  local want current_sum stamp_sum=""
  want=$(daemon_config)
  mkdir -p "$(dirname "$DAEMON_JSON")"
  if [[ -f $DAEMON_JSON ]]; then
    [[ $(cat "$DAEMON_JSON") == "$want" ]] && return 0
    current_sum=$(sha256sum <"$DAEMON_JSON" | cut -d' ' -f1)
    [[ -f $DAEMON_JSON_STAMP ]] && stamp_sum=$(cat "$DAEMON_JSON_STAMP")
    if [[ $current_sum != "$stamp_sum" ]]; then
      log "keeping the existing $DAEMON_JSON (not written by berth)"
      return 0
    fi
  fi
  log "writing $DAEMON_JSON"
  printf '%s\n' "$want" >"$DAEMON_JSON.tmp"
  mv "$DAEMON_JSON.tmp" "$DAEMON_JSON"
  sha256sum <"$DAEMON_JSON" | cut -d' ' -f1 >"$DAEMON_JSON_STAMP"
}

# --- packages -------------------------------------------------------------

require_root_debian() {
  local why=$1 id_like=""
  if [[ $(id -u) -ne 0 ]]; then
    die "$why, and installing it needs root. Start Docker yourself (and make sure this user may use $DOCKER_SOCK), or rerun as root."
  fi
  if [[ -r /etc/os-release ]]; then
    # shellcheck source=/dev/null
    id_like=$(. /etc/os-release && printf '%s %s' "${ID:-}" "${ID_LIKE:-}")
  fi
  if [[ " $id_like " != *" debian "* && " $id_like " != *" ubuntu "* ]] || ! command -v apt-get >/dev/null; then
    die "$why, and berth only knows how to install it on Debian or Ubuntu (this host: ${id_like:-unknown}). Install and start Docker Engine yourself."
  fi
}

apt_has_candidate() {
  local candidate
  candidate=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { print $2; exit }')
  [[ -n $candidate && $candidate != "(none)" ]]
}

apt_update() {
  log "running apt-get update ..."
  apt-get -q -o DPkg::Lock::Timeout=300 update >>"$APT_LOG" 2>&1 ||
    { tail -n 20 "$APT_LOG" >&2; die "apt-get update failed (full log: $APT_LOG)"; }
}

# apt_install PKG...: installs without recommends; runs `apt-get update`
# only when a package is unknown or the install fails on stale lists.
apt_install() {
  local pkg updated=0
  export DEBIAN_FRONTEND=noninteractive
  for pkg in "$@"; do
    if ! apt_has_candidate "$pkg"; then
      apt_update
      updated=1
      break
    fi
  done
  log "installing $* ..."
  local install=(apt-get -q -y -o DPkg::Lock::Timeout=300 install --no-install-recommends "$@")
  "${install[@]}" >>"$APT_LOG" 2>&1 9>&- && return 0
  if ((!updated)); then
    apt_update
    "${install[@]}" >>"$APT_LOG" 2>&1 9>&- && return 0
  fi
  tail -n 20 "$APT_LOG" >&2
  die "installing $* failed (full log: $APT_LOG)"
}

install_missing() {
  local pkgs=()
  command -v dockerd >/dev/null || pkgs+=(docker.io ca-certificates)
  command -v debootstrap >/dev/null || pkgs+=(debootstrap)
  # Without apparmor_parser, dockerd cannot load its default profile on
  # hosts where AppArmor is enabled.
  if [[ $(cat /sys/module/apparmor/parameters/enabled 2>/dev/null) == Y ]] &&
    ! command -v apparmor_parser >/dev/null; then
    pkgs+=(apparmor)
  fi
  ((${#pkgs[@]} == 0)) || apt_install "${pkgs[@]}"
  command -v dockerd >/dev/null || die "dockerd is still not on PATH after installing docker.io"
}

# --- OCI runtimes ---------------------------------------------------------

# Installs gVisor's runsc from Debian where the archive has it. Optional: on
# failure the docker backend still works with runc, and this says why.
# BERTH_INSTALL_RUNSC=0 skips it.
install_optional_runtimes() {
  [[ ${BERTH_INSTALL_RUNSC:-1} == 1 ]] || return 0
  command -v runsc >/dev/null && return 0
  [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null || return 0
  apt_has_candidate runsc || return 0
  (apt_install runsc) || log "warning: could not install runsc; docker.runtime: runsc will be unavailable"
}

# The names of the runtimes the running daemon knows, space-separated.
daemon_known_runtimes() {
  # shellcheck disable=SC2016 # a Go template, not shell
  timeout 20 docker info --format '{{range $name, $_ := .Runtimes}}{{$name}} {{end}}' 2>/dev/null || true
}

# Prints the runtimes of daemon_runtimes() that the running daemon lacks.
missing_runtimes() {
  local wanted known name
  wanted=$(daemon_runtimes)
  [[ -n $wanted ]] || return 0
  known=" $(daemon_known_runtimes) "
  while read -r name _; do
    [[ -z $name || $known == *" $name "* ]] || printf '%s\n' "$name"
  done <<<"$wanted"
}

# Makes the running dockerd re-read daemon.json. `runtimes` is among the
# settings dockerd reloads live on SIGHUP, so running containers (and the
# tasks in them) are untouched: the daemon is never restarted for this.
reload_daemon() {
  local pid
  if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null && systemctl is-active --quiet docker 2>/dev/null; then
    systemctl reload docker && return 0
  fi
  pid=$(pidof -s dockerd) || {
    log "warning: no dockerd process to reload on this host; register the runtimes with your Docker daemon yourself"
    return 1
  }
  kill -HUP "$pid"
}

# Whether daemon.json is berth's and asks for other runtime settings than
# berth wants now (a runtime's arguments changed).
daemon_config_stale() {
  [[ -f $DAEMON_JSON && -f $DAEMON_JSON_STAMP ]] || return 1
  [[ $(sha256sum <"$DAEMON_JSON" | cut -d' ' -f1) == "$(cat "$DAEMON_JSON_STAMP")" ]] || return 1
  [[ $(cat "$DAEMON_JSON") != "$(daemon_config)" ]]
}

# Registers runtimes installed after the daemon started, or whose arguments
# changed (call with the lock held).
register_runtimes() {
  local missing deadline
  missing=$(missing_runtimes)
  if [[ -z $missing ]]; then
    daemon_config_stale || return 0
    log "updating the runtimes' arguments in $DAEMON_JSON (live reload, containers keep running) ..."
    write_daemon_config
    reload_daemon || true
    return 0
  fi
  missing=${missing//$'\n'/ }
  write_daemon_config
  if [[ $(cat "$DAEMON_JSON") != "$(daemon_config)" ]]; then
    log "warning: runtime(s) $missing not registered: $DAEMON_JSON is not berth's; add them there yourself"
    return 0
  fi
  log "registering runtime(s) $missing with dockerd (live reload, containers keep running) ..."
  reload_daemon || return 0
  deadline=$((SECONDS + 15))
  while ((SECONDS < deadline)); do
    [[ -z $(missing_runtimes) ]] && { log "runtime(s) $missing registered"; return 0; }
    sleep 0.5
  done
  log "warning: dockerd did not pick up runtime(s) $missing (log: $DOCKERD_LOG)"
}

# With Docker answering: install and register optional runtimes (root only).
ensure_runtimes() {
  [[ $(id -u) -eq 0 ]] || return 0
  if command -v runsc >/dev/null || [[ ${BERTH_INSTALL_RUNSC:-1} != 1 ]]; then
    [[ -n $(missing_runtimes) ]] || daemon_config_stale || return 0
  fi
  exec 9>"$LOCK_FILE"
  flock 9
  install_optional_runtimes
  register_runtimes
}

# --- daemon ---------------------------------------------------------------

print_log_tail() {
  if [[ -s $DOCKERD_LOG ]]; then
    printf 'berth: last lines of %s:\n' "$DOCKERD_LOG" >&2
    tail -n 25 "$DOCKERD_LOG" | sed 's/^/    /' >&2
  fi
}

# wait_for_daemon [PID]: until `docker info` answers; stops early if PID dies.
wait_for_daemon() {
  local pid=${1:-} deadline=$((SECONDS + DOCKERD_TIMEOUT))
  while ((SECONDS < deadline)); do
    docker_answers && return 0
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
      print_log_tail
      die "dockerd exited before $DOCKER_SOCK answered (log: $DOCKERD_LOG)"
    fi
    sleep 0.5
  done
  print_log_tail
  die "dockerd${pid:+ (pid $pid, left running)} did not answer on $DOCKER_SOCK within ${DOCKERD_TIMEOUT}s (log: $DOCKERD_LOG)"
}

start_daemon() {
  if pidof dockerd >/dev/null; then
    log "dockerd is running but not answering yet; waiting up to ${DOCKERD_TIMEOUT}s ..."
    wait_for_daemon "$(pidof -s dockerd)"
    return
  fi
  if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
    log "starting docker with systemctl ..."
    if systemctl start docker >/dev/null 2>&1; then
      wait_for_daemon
      return
    fi
    log "systemctl start docker failed; starting dockerd directly"
  fi
  log "starting dockerd (log: $DOCKERD_LOG) ..."
  mkdir -p "$(dirname "$DOCKERD_LOG")"
  # setsid + nohup: the daemon outlives this script and the caller's session.
  # fd 9 (the lock) is closed so the daemon does not hold it.
  setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null 9>&- &
  local pid=$!
  wait_for_daemon "$pid"
}

main() {
  if docker_answers; then
    ensure_runtimes
    return 0
  fi

  if [[ -n ${DOCKER_HOST:-} && $DOCKER_HOST != "unix://$DOCKER_SOCK" && $DOCKER_HOST != unix:///run/docker.sock ]]; then
    die "DOCKER_HOST=$DOCKER_HOST does not answer \`docker info\`; berth only starts a local daemon on $DOCKER_SOCK"
  fi

  local why="Docker Engine is not answering"
  if command -v docker >/dev/null; then
    why="$why ($({ timeout 20 docker info 2>&1 || true; } | grep -m1 -iE 'error|cannot|denied' || echo 'docker info failed'))"
  fi
  require_root_debian "$why"

  # Serialise concurrent runs (make setup, make test and .ci/run may overlap).
  exec 9>"$LOCK_FILE"
  flock 9
  docker_answers && { install_optional_runtimes; register_runtimes; return 0; }

  install_missing
  install_optional_runtimes
  # docker.io's maintainer scripts may have started the service already.
  docker_answers && { register_runtimes; log "docker is ready"; return 0; }
  write_daemon_config
  start_daemon
  log "docker is ready ($(docker version --format 'engine {{.Server.Version}}' 2>/dev/null || echo running))"
}

main "$@"
