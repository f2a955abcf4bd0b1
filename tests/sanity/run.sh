#!/usr/bin/env bash
# ansible-test sanity on the collection: every sanity test ansible-core runs for a collection
# (ansible-doc, compile, import, pep8, pylint, validate-modules, yamllint, ...), on the
# project venv's Python, each test's own pinned requirements in the virtual environments
# ansible-test makes for them. Needs the venv (tests/bootstrap.sh) and a package index.
#
# ansible-test puts pip into each of those environments with a script it downloads from a
# host these machines cannot reach; tests/sanity/get_pip.py stands in for it, copied into
# ansible-test's cache under the name of the pip release this ansible-test asks for.
#
# Usage: bash tests/sanity/run.sh [ansible-test sanity options, e.g. --test pylint]
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
PYTHON=$REPO/.venv/bin/python

pip_version=$("$PYTHON" - <<'PY'
import inspect
import re

from ansible_test._internal import python_requirements

print(re.search(r"pip='([0-9.]+)'", inspect.getsource(python_requirements.get_venv_packages)).group(1))
PY
)
cache=${HOME}/.ansible/test/cache
mkdir -p "$cache"
cp tests/sanity/get_pip.py "$cache/get_pip_${pip_version//./_}.py"

cd collections/ansible_collections/sparkctl/spark
exec "$REPO/.venv/bin/ansible-test" sanity --local --python-interpreter "$PYTHON" --color no "$@"
