#!/usr/bin/env bash
# Install requirements into a venv with uv instead of pip: the same packages from the same index,
# resolved in a few seconds where pip took a minute and a half for the project's venv
# (docs/performance.md, "The set-up beside the node image"). uv itself comes into the venv by
# pip, at the version requirements/uv.txt pins.
#
#   bash tests/uv_pip.sh [--no-compile | --compile-except REGEX] VENV UV-PIP-INSTALL-ARGUMENTS...
#   bash tests/uv_pip.sh --no-compile .venv -r requirements/dev.txt -e .
#   bash tests/uv_pip.sh --compile-except /transformers/models/ .venv-realserver -r tests/realserver/requirements.txt
#
# What uv does not take from pip's configuration is passed on: the machine's certificate store
# (a machine whose proxy re-signs TLS has its CA only there) and pip's configured find-links and
# constraints (a machine keeps local wheels and caps there). Byte code is compiled at install, as
# pip does, so that the first run of a test does not pay for it; but for the files
# --compile-except's regular expression finds in their path (searched as compileall -x does).
# --no-compile leaves it all to Python, which compiles a module at its first import and keeps the
# byte code beside it: a whole suite imports two fifths of the project's venv (2 797 of its 6 824
# files outside the collections), so compiling the rest at install only cost the set-up's CPU
# (docs/performance.md, "Byte code at first import").
set -euo pipefail
exec </dev/null
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
UV_REQS="$REPO_ROOT/requirements/uv.txt"

compile_at_install=1
compile_except=""
case "${1:-}" in
  --no-compile) compile_at_install=0; shift ;;
  --compile-except)
    [ $# -ge 2 ] || { echo "uv_pip: --compile-except needs a regular expression" >&2; exit 2; }
    compile_except=$2
    shift 2 ;;
esac
[ $# -ge 2 ] || { echo "usage: $0 [--no-compile | --compile-except REGEX] VENV UV-PIP-INSTALL-ARGUMENTS..." >&2; exit 2; }
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
pip_config=$("$python" -m pip config list 2>/dev/null || true)
pip_setting() {
  sed -n "s/^[^=]*\.$1='\(.*\)'\$/\1/p" <<< "$pip_config" | tr ' ' '\n' | sed '/^$/d' | sort -u
}
extra=()
while read -r dir; do [ -z "$dir" ] || extra+=(--find-links "$dir"); done < <(pip_setting find-links)
while read -r file; do [ -z "$file" ] || extra+=(--constraint "$file"); done < <(pip_setting constraint)

"$venv/bin/uv" pip install --system-certs --python "$python" -q "${extra[@]}" "$@"

[ "$compile_at_install" -eq 1 ] || exit 0
site_packages=$("$python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
compile=(-q -j 0)
[ -z "$compile_except" ] || compile+=(-x "$compile_except")
# A file that is not Python 3 (a package's template or test data) fails to compile, as it does
# under pip, and is no reason to stop: such a file is never imported.
if ! "$python" -m compileall "${compile[@]}" "$site_packages" > /dev/null; then
  echo "uv_pip: some files under $site_packages did not compile (not Python 3); they are not imported" >&2
fi
