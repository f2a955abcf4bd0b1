#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian machine (run as root) for sparkctl development,
# the two-node lab (tests/lab) and CI.  Safe to re-run; a re-run with nothing to do
# takes about a second.
#
#   bash tests/bootstrap.sh              # venv + docker.io/mmdebstrap + running dockerd
#   bash tests/bootstrap.sh --no-docker  # only the Python venv
#   bash tests/bootstrap.sh --system     # only the system packages and a running dockerd
#                                        # (the lab's node image can build beside the venv)
#
# Stages:
#   venv    find Python >= 3.12 (python3.13/python3.12 on PATH, else pyenv's versions),
#           create <repo>/.venv and install requirements/dev.txt [-e .] with uv (tests/uv_pip.sh);
#           only when requirements/dev.txt, uv.txt or pyproject.toml changed (stamp in .venv);
#           then the lab's stand-in engine wheel (tests/lab/engine/dist) from its sources.
#   apt     apt-get update + install rsync (and docker.io mmdebstrap python3-yaml: the lab's
#           node image is built with the distribution's python3), skipped when installed.
#   nginx   unpack the distribution's nginx binary into <repo>/.venv/nginx (no service) for
#           the API proxy's unit tests.
#   promtool unpack the distribution's prometheus package into <repo>/.venv/prometheus (no
#           daemon) for the alert rules' promtool tests.
#   dockerd start dockerd in the background when `docker info` fails
#           (log /var/log/sparklab-dockerd.log, pid /run/sparklab-dockerd.pid), wait <= 60 s.
set -euo pipefail
exec </dev/null

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
VENV="$REPO_ROOT/.venv"
REQS="$REPO_ROOT/requirements/dev.txt"
STAMP="$VENV/.sparkctl-bootstrap.stamp"
DOCKERD_LOG=/var/log/sparklab-dockerd.log
DOCKERD_PID=/run/sparklab-dockerd.pid
DOCKERD_WAIT=60

with_docker=1
with_venv=1
for arg in "$@"; do
  case "$arg" in
    --no-docker) with_docker=0 ;;
    --system) with_venv=0 ;;
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bootstrap: unknown argument: $arg (known: --no-docker, --system)" >&2; exit 2 ;;
  esac
done
if [ "$with_venv" -eq 0 ] && [ "$with_docker" -eq 0 ]; then
  echo "bootstrap: --system and --no-docker together leave nothing to do but rsync; give one of them" >&2
  exit 2
fi

log() { printf 'bootstrap: %s\n' "$*"; }
die() { printf 'bootstrap: ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
stage_done() {  # name start
  awk -v n="$1" -v s="$2" -v e="$(now)" 'BEGIN { printf "bootstrap: stage %-7s %6.1f s\n", n, e - s }'
}

[ "$(id -u)" -eq 0 ] || die "run as root (installs packages and starts dockerd)"
t_all=$(now)

# --- venv -----------------------------------------------------------------------
# Print the real path of an interpreter if it runs and is >= 3.12 (pyenv shims of a
# version that is not selected fail to run, so every candidate is executed).
probe_python() {
  "$1" -c 'import sys; assert sys.version_info >= (3, 12); print(sys.executable)' 2>/dev/null
}

find_python() {
  local cand exe root
  for cand in python3.13 python3.12; do
    if command -v "$cand" >/dev/null 2>&1 && exe=$(probe_python "$cand"); then
      echo "$exe"; return 0
    fi
  done
  if command -v pyenv >/dev/null 2>&1 || [ -x "${PYENV_ROOT:-$HOME/.pyenv}/bin/pyenv" ]; then
    root=$( (command -v pyenv >/dev/null 2>&1 && pyenv root) || "${PYENV_ROOT:-$HOME/.pyenv}/bin/pyenv" root)
    # Newest first: 3.13.* before 3.12.*.
    for cand in $(ls -d "$root"/versions/3.13.* "$root"/versions/3.12.* 2>/dev/null | sort -rV); do
      if [ -x "$cand/bin/python3" ] && exe=$(probe_python "$cand/bin/python3"); then
        echo "$exe"; return 0
      fi
    done
  fi
  return 1
}

venv_stage() {
  t=$(now)
  if [ -x "$VENV/bin/python" ] && probe_python "$VENV/bin/python" >/dev/null; then
    log "venv $VENV exists ($("$VENV/bin/python" -V 2>&1))"
  else
    PY=$(find_python) || die "no Python >= 3.12 found: looked for python3.13/python3.12 on PATH and \$(pyenv root)/versions/3.13.*|3.12.*; install one (e.g. 'pyenv install 3.12') and re-run"
    log "creating venv $VENV with $PY"
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    rm -f "$STAMP"
  fi

  [ -f "$REQS" ] || die "missing $REQS"
  editable=()
  stamp_src=("$REQS" "$REPO_ROOT/requirements/uv.txt")
  if [ -f "$REPO_ROOT/pyproject.toml" ]; then
    editable=(-e "$REPO_ROOT")
    stamp_src+=("$REPO_ROOT/pyproject.toml")
  else
    log "no pyproject.toml yet: installing requirements only (re-run once it exists)"
  fi
  want_stamp=$( { "$VENV/bin/python" -V 2>&1; sha256sum "${stamp_src[@]}"; } | sha256sum | cut -d' ' -f1)
  if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want_stamp" ]; then
    log "requirements unchanged: skipping the install"
  else
    log "uv pip install -r requirements/dev.txt ${editable[*]:-} (tests/uv_pip.sh)"
    (cd "$REPO_ROOT" && bash tests/uv_pip.sh --no-compile "$VENV" -r "$REQS" "${editable[@]}")
    echo "$want_stamp" > "$STAMP"
  fi
  # The lab's stand-in engine wheel, which the lab profile installs from tests/lab/engine/dist:
  # built from its sources on every bootstrap (stdlib only, byte for byte reproducible), not committed.
  "$VENV/bin/python" "$REPO_ROOT/tests/lab/engine/_build/sparklab_build.py"
  stage_done venv "$t"
}
if [ "$with_venv" -eq 1 ]; then venv_stage; fi

# --- apt ------------------------------------------------------------------------
# rsync: the checkpoint mirror's unit tests run the real binary (>= 3.2.3 for --mkpath).
# nftables: the firewall watcher's unit test runs the real nft in a network namespace of its own.
t=$(now)
packages=(rsync nftables)
[ "$with_docker" -eq 1 ] && packages+=(docker.io mmdebstrap python3-yaml)
missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$pkg")
done
if [ "${#missing[@]}" -eq 0 ]; then
  log "${packages[*]} already installed"
else
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # policy-rc.d-free: on a host without systemd the postinst cannot start the daemon
  # anyway; the dockerd stage below does it.
  apt-get install -y -q "${missing[@]}"
fi
stage_done apt "$t"

# --- nginx and promtool ------------------------------------------------------------
# Unpack a distribution package's files into ROOT (no service, no maintainer scripts),
# unless ROOT already holds the binary BIN (a path inside the package). A package that
# cannot be downloaded is a warning saying which tests WITHOUT skips, not an error.
#   unpack_deb PACKAGE ROOT BIN WITHOUT VERSION-ARG...
unpack_deb() {
  local package=$1 root=$2 bin=$3 without=$4 tmp
  shift 4
  if [ -x "$root/$bin" ]; then
    log "$package present ($root)"
    return 0
  fi
  tmp=$(mktemp -d)
  if (cd "$tmp" && { apt-get download -q "$package" >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get download -q "$package"; }; }); then
    rm -rf "$root" && dpkg-deb -x "$tmp/${package}"_*.deb "$root"
    log "$package unpacked into $root ($("$root/$bin" "$@" 2>&1 | head -1))"
  else
    log "WARNING: could not download the $package package: $without will be skipped"
  fi
  rm -rf "$tmp"
}

# The API proxy's unit tests run the real nginx (`nginx -t` on every rendered config,
# requests through it).
# Both unpack into the venv's directory, which the venv stage may create anew.
if [ "$with_venv" -eq 1 ]; then
  t=$(now)
  unpack_deb nginx "$VENV/nginx" usr/sbin/nginx "the proxy's real-nginx unit tests" -v
  stage_done nginx "$t"

  # The observe role's alert rules are unit-tested with `promtool test rules`.
  t=$(now)
  unpack_deb prometheus "$VENV/prometheus" usr/bin/promtool "the alert rules' promtool tests" --version
  stage_done promtool "$t"
fi

if [ "$with_docker" -eq 0 ]; then
  log "--no-docker: skipping dockerd"
  stage_done total "$t_all"
  exit 0
fi

# --- dockerd --------------------------------------------------------------------
t=$(now)
docker_ok() { timeout 10 docker info >/dev/null 2>&1; }
if docker_ok; then
  log "docker engine already running"
else
  if [ -f "$DOCKERD_PID" ] && kill -0 "$(cat "$DOCKERD_PID")" 2>/dev/null; then
    log "dockerd (pid $(cat "$DOCKERD_PID")) is starting; waiting"
  else
    command -v dockerd >/dev/null 2>&1 || die "dockerd not found although docker.io is installed"
    log "starting dockerd (log $DOCKERD_LOG)"
    # setsid: not tied to this shell; stdin from /dev/null, output appended to the log.
    # Every other descriptor this shell inherited is closed first: dockerd outlives the
    # caller, and a lock file it inherited (a caller's flock) would stay held for good.
    (
      for fd_path in /proc/"$BASHPID"/fd/*; do
        fd=${fd_path##*/}
        if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-"; fi
      done
      exec setsid dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null
    ) &
    echo $! > "$DOCKERD_PID"
  fi
  deadline=$(( $(date +%s) + DOCKERD_WAIT ))
  until docker_ok; do
    if ! kill -0 "$(cat "$DOCKERD_PID")" 2>/dev/null; then
      tail -n 20 "$DOCKERD_LOG" >&2 || true
      die "dockerd exited; see $DOCKERD_LOG"
    fi
    [ "$(date +%s)" -lt "$deadline" ] || die "docker engine not up after ${DOCKERD_WAIT} s; see $DOCKERD_LOG"
    sleep 0.5
  done
  log "docker engine up (dockerd pid $(cat "$DOCKERD_PID"))"
fi
stage_done dockerd "$t"
stage_done total "$t_all"
