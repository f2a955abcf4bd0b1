#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine as root: set-up, unit tests,
# lint, the real-server tests, check mode on a fresh lab, the molecule scenario on the two-node lab, then
# the lab integration tests. Prints the wall time of each stage at the end. CI runs exactly this.
#
# --quick: set-up, unit tests, lint and a syntax check of every playbook, no lab (a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
QUICK=0
case "${1:-}" in
  --quick) QUICK=1 ;;
  "") ;;
  *) echo "usage: $0 [--quick]" >&2; exit 2 ;;
esac

declare -a STAGE_NAMES=() STAGE_SECONDS=()
stage() {
  local name=$1; shift
  local start=$SECONDS
  printf '\n===== %s =====\n' "$name"
  "$@"
  STAGE_NAMES+=("$name"); STAGE_SECONDS+=($((SECONDS - start)))
}
# Each pytest stage leaves a JUnit file here: the end report counts what ran, so a lost test shows.
COUNTS_DIR=$REPO/.lab/suite-counts
rm -rf "$COUNTS_DIR"; mkdir -p "$COUNTS_DIR"
report_times() {
  printf '\n===== stage wall times =====\n'
  local i
  for i in "${!STAGE_NAMES[@]}"; do printf '%-14s %5ss\n' "${STAGE_NAMES[$i]}" "${STAGE_SECONDS[$i]}"; done
  printf '%-14s %5ss\n' total "$SECONDS"
  python3 tests/suite_counts.py "$COUNTS_DIR" tests/catalogue || true
}
trap report_times EXIT

stage bootstrap bash tests/bootstrap.sh
# shellcheck disable=SC1091
source "$REPO/.venv/bin/activate"
export ANSIBLE_CONFIG=$REPO/ansible.cfg ANSIBLE_FORCE_COLOR=0 PY_COLORS=0
# The real nginx the bootstrap unpacked, for the API proxy's unit tests.
if [[ -x $REPO/.venv/nginx/usr/sbin/nginx ]]; then export SPARKCTL_NGINX=$REPO/.venv/nginx/usr/sbin/nginx; fi

stage unit python -m pytest tests/unit -q -p no:cacheprovider --junitxml="$COUNTS_DIR/unit.xml"
stage lint ansible-lint --nocolor -q
syntax_check() {
  local playbook
  for playbook in site.yml playbooks/*.yml; do
    ansible-playbook --syntax-check -i inventories/lab "$playbook" > /dev/null
  done
}
if [[ $QUICK == 1 ]]; then
  stage syntax syntax_check
  exit 0
fi
# The benchmark client and verify's probe module against a real OpenAI-compatible server
# nobody here wrote (tests/realserver: transformers serve on the CPU, in its own venv).
real_server() {
  bash tests/realserver/setup.sh > /dev/null
  python -m pytest tests/realserver -q -p no:cacheprovider --junitxml="$COUNTS_DIR/real-server.xml"
}
stage real-server real_server
# molecule's test sequence (destroy, syntax, create | converge, idempotence, verify), split
# so that `--check --diff` runs in between on the lab molecule has just created and nothing
# has touched yet: it lists a first run's changes and changes nothing. One lab start, not two.
molecule_create() {
  molecule destroy --scenario-name default
  molecule syntax --scenario-name default
  molecule create --scenario-name default
}
# The idempotence step is a whole-site re-run of the converged lab: its log stands in for the
# integration session's own (tests/integration/conftest.py, site_converged).
RERUN_LOG=$REPO/.lab/molecule-idempotence.log
rm -f "$RERUN_LOG"
molecule_converge() {
  molecule converge --scenario-name default
  molecule idempotence --scenario-name default 2>&1 | tee "$RERUN_LOG"
  molecule verify --scenario-name default
  export SPARKCTL_CONVERGED_RERUN_LOG=$RERUN_LOG
}
stage lab-create molecule_create
stage fresh-check python -m pytest tests/integration -q -p no:cacheprovider -m fresh --junitxml="$COUNTS_DIR/fresh-check.xml"
stage molecule molecule_converge
stage integration python -m pytest tests/integration -q -p no:cacheprovider -m lab --durations=30 --junitxml="$COUNTS_DIR/integration.xml"
if [[ "${SPARKCTL_KEEP_LAB:-0}" != 1 ]]; then
  stage lab-down molecule destroy --scenario-name default
fi
