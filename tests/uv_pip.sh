#!/usr/bin/env bash
# Install requirements into a venv with uv instead of pip: the same packages from the same index,
# resolved in a few seconds where pip took a minute and a half for the project's venv
# (docs/performance.md, "The venvs"). uv itself comes into the venv by pip, at the version
# requirements/uv.txt pins.
#
#   bash tests/uv_pip.sh VENV UV-PIP-INSTALL-ARGUMENTS...    # e.g. -r requirements/dev.txt -e .
#
# What uv does not take from pip's configuration is passed on: the machine's certificate store
# (a machine whose proxy re-signs TLS has its CA only there) and pip's configured find-links and
# constraints (a machine keeps local wheels and caps there). Byte code is compiled at install, as
# pip does: the first run of a test then does not pay for it.
set -euo pipefail
exec </dev/null
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
UV_REQS="$REPO_ROOT/requirements/uv.txt"

[ $# -ge 2 ] || { echo "usage: $0 VENV UV-PIP-INSTALL-ARGUMENTS..." >&2; exit 2; }
venv=$1
shift
python=$venv/bin/python
[ -x "$python" ] || { echo "uv_pip: no venv at $venv" >&2; exit 1; }

want=$(sed -n 's/^uv==\([^ #]*\).*/\1/p' "$UV_REQS")
[ -n "$want" ] || { echo "uv_pip: $UV_REQS pins no uv==VERSION" >&2; exit 1; }
if [ "$("$venv/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$want" ]; then
  "$python" -m pip install --disable-pip-version-check -q -r "$UV_REQS"
fi

# pip config list prints e.g. global.find-links='/opt/wheels' (a value may hold several, space-separated).
pip_setting() {
  "$python" -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.$1='\(.*\)'\$/\1/p" | tr ' ' '\n' | sed '/^$/d' | sort -u
}
extra=()
while read -r dir; do [ -z "$dir" ] || extra+=(--find-links "$dir"); done < <(pip_setting find-links)
while read -r file; do [ -z "$file" ] || extra+=(--constraint "$file"); done < <(pip_setting constraint)

exec "$venv/bin/uv" pip install --system-certs --compile-bytecode --python "$python" -q "${extra[@]}" "$@"
