#!/usr/bin/env bash
# The real server's own venv (<repo>/.venv-realserver), apart from the project's: torch and
# transformers are large and nothing in sparkctl imports them. Idempotent: the install runs only
# when requirements.txt or requirements/uv.txt changed (stamp in the venv).
#
#   bash tests/realserver/setup.sh    # prints the venv's python on its last line
#
# Python: 3.11 first (the CPU wheel of torch on CI's machines is built for it), else the
# first of python3.12, python3.13, python3 (>= 3.10) on PATH, else a pyenv version.
set -euo pipefail
exec </dev/null
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(cd "$HERE/../.." && pwd -P)"
VENV="$REPO_ROOT/.venv-realserver"
REQS="$HERE/requirements.txt"
STAMP="$VENV/.sparkctl-realserver.stamp"

log() { printf 'realserver setup: %s\n' "$*" >&2; }
die() { printf 'realserver setup: ERROR: %s\n' "$*" >&2; exit 1; }

probe() { "$1" -c 'import sys; assert sys.version_info >= (3, 10); print(sys.executable)' 2>/dev/null; }
find_python() {
  local cand exe root=""
  for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1 && exe=$(probe "$cand"); then echo "$exe"; return 0; fi
  done
  if command -v pyenv >/dev/null 2>&1; then root=$(pyenv root); elif [ -d "${PYENV_ROOT:-$HOME/.pyenv}" ]; then root=${PYENV_ROOT:-$HOME/.pyenv}; fi
  if [ -n "$root" ]; then
    for cand in $(ls -d "$root"/versions/3.11.* "$root"/versions/3.1[23].* 2>/dev/null); do
      if [ -x "$cand/bin/python3" ] && exe=$(probe "$cand/bin/python3"); then echo "$exe"; return 0; fi
    done
  fi
  return 1
}

if ! { [ -x "$VENV/bin/python" ] && probe "$VENV/bin/python" >/dev/null; }; then
  PY=$(find_python) || die "no Python >= 3.10 found for the real server's venv (python3.11 preferred)"
  log "creating $VENV with $PY"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
fi
want=$( { "$VENV/bin/python" -V 2>&1; sha256sum "$REQS" "$REPO_ROOT/requirements/uv.txt"; } | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  log "requirements unchanged: skipping the install"
else
  log "uv pip install -r $REQS (torch and transformers; tests/uv_pip.sh)"
  # transformers' model definitions, a fifth of the venv's files: the tests serve one (Llama), which
  # compiles at its first import.
  bash "$REPO_ROOT/tests/uv_pip.sh" --compile-except /transformers/models/ "$VENV" -r "$REQS"
  echo "$want" > "$STAMP"
fi
echo "$VENV/bin/python"
