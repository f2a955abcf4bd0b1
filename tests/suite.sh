#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine as root: set-up, the tests that judge
# measured times (alone), the real-server tests, then beside each other the unit tests and
# lint on one side and on the other check mode on a fresh lab, the whole-site molecule
# scenario and every role scenario; then the lab integration tests. Prints the wall time
# of each stage and the count of what ran at the end. CI runs exactly this.
#
# --quick [SCENARIO]: set-up, unit tests, lint, a syntax check of every playbook and one
# role scenario (default: linger) on the shared lab, created if it is not up and left up.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
QUICK=0
QUICK_SCENARIO=linger
case "${1:-}" in
  --quick) QUICK=1; QUICK_SCENARIO=${2:-$QUICK_SCENARIO} ;;
  "") ;;
  *) echo "usage: $0 [--quick [SCENARIO]]" >&2; exit 2 ;;
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

# Tests that judge measured times run first, alone: nothing runs beside them yet.
stage timing python -m pytest tests/unit -q -p no:cacheprovider -m timing --junitxml="$COUNTS_DIR/timing.xml"

# The rest of the unit tests and lint need no lab: they run beside the lab's stages, which
# mostly wait on the nodes. Their output is printed when they end; their stage times are
# reported with the others.
SIDE_LOG=$REPO/.lab/side-stages.log
SIDE_TIMES=$REPO/.lab/side-stages.times
syntax_check() {
  local playbook
  for playbook in site.yml playbooks/*.yml; do
    ansible-playbook --syntax-check -i inventories/lab "$playbook" > /dev/null
  done
}
side_stages() {
  local start
  : > "$SIDE_TIMES"
  start=$SECONDS
  python -m pytest tests/unit -q -p no:cacheprovider -m "not timing" --junitxml="$COUNTS_DIR/unit.xml" || return 1
  echo "unit $((SECONDS - start))" >> "$SIDE_TIMES"
  start=$SECONDS
  ansible-lint --nocolor -q || return 1
  echo "lint $((SECONDS - start))" >> "$SIDE_TIMES"
  start=$SECONDS
  syntax_check || return 1
  echo "syntax $((SECONDS - start))" >> "$SIDE_TIMES"
}
SIDE_PID=
start_side_stages() {
  mkdir -p "$(dirname "$SIDE_LOG")"
  side_stages > "$SIDE_LOG" 2>&1 &
  SIDE_PID=$!
}
wait_side_stages() {
  local rc=0 name seconds
  wait "$SIDE_PID" || rc=$?
  SIDE_PID=
  printf '\n===== unit, lint and syntax (ran beside the lab stages) =====\n'
  cat "$SIDE_LOG"
  while read -r name seconds; do STAGE_NAMES+=("$name"); STAGE_SECONDS+=("$seconds"); done < "$SIDE_TIMES"
  return "$rc"
}
# A failing stage ends the suite; the side stages are not left running behind it.
stop_side_stages() { if [[ -n $SIDE_PID ]]; then kill "$SIDE_PID" 2> /dev/null || true; wait "$SIDE_PID" 2> /dev/null || true; fi; }
trap 'stop_side_stages; report_times' EXIT

# Every role scenario (molecule/<role>/), in the order site.yml runs the roles. The image
# runtime's comes after the integration tests, which install that profile's image anyway.
ROLE_SCENARIOS=(preflight direct_link firewall fabric_env linger ssh_mesh checkpoint engine_venv
                oom_guard ray_cluster api_proxy engine_service verify)
LATE_ROLE_SCENARIOS=(engine_image)
SCENARIO_RESULTS=$COUNTS_DIR/scenarios.txt
# On the lab the whole-site scenario converged, the role scenarios skip what that lab makes
# redundant (molecule/resources/converged-lab.yml); --quick runs the full sequence.
SCENARIO_BASE_CONFIGS=(--base-config .config/molecule/config.yml)
role_scenarios() {
  local scenario start rc
  for scenario in "$@"; do
    start=$SECONDS
    rc=0
    molecule "${SCENARIO_BASE_CONFIGS[@]}" test --scenario-name "$scenario" || rc=$?
    echo "$scenario $rc $((SECONDS - start))" >> "$SCENARIO_RESULTS"
    [[ $rc == 0 ]] || return "$rc"
  done
}

if [[ $QUICK == 1 ]]; then
  start_side_stages
  stage scenario role_scenarios "$QUICK_SCENARIO"
  wait_side_stages
  exit 0
fi
# The benchmark client and verify's probe module against a real OpenAI-compatible server
# nobody here wrote (tests/realserver: transformers serve on the CPU, in its own venv).
real_server() {
  bash tests/realserver/setup.sh > /dev/null
  python -m pytest tests/realserver -q -p no:cacheprovider --junitxml="$COUNTS_DIR/real-server.xml"
}
stage real-server real_server
start_side_stages
SCENARIO_BASE_CONFIGS+=(--base-config molecule/resources/converged-lab.yml)
# molecule's test sequence (destroy, syntax, create | converge, idempotence, verify), split
# so that `--check --diff` runs in between on the lab molecule has just created and nothing
# has touched yet: it lists a first run's changes and changes nothing. One lab start, not two.
molecule_create() {
  molecule destroy --scenario-name default
  molecule syntax --scenario-name default
  molecule create --scenario-name default
}
# The idempotence step is a whole-site re-run of the converged lab: its log stands in for the
# integration session's own (tests/integration/conftest.py, site_converged). The whole-site
# verify is every role scenario's verify (molecule/default/verify.yml imports them): each role
# scenario runs its own below, so the whole-site one is not run twice.
RERUN_LOG=$REPO/.lab/molecule-idempotence.log
rm -f "$RERUN_LOG"
molecule_converge() {
  molecule converge --scenario-name default
  molecule idempotence --scenario-name default 2>&1 | tee "$RERUN_LOG"
  export SPARKCTL_CONVERGED_RERUN_LOG=$RERUN_LOG
}
stage lab-create molecule_create
stage fresh-check python -m pytest tests/integration -q -p no:cacheprovider -m fresh --junitxml="$COUNTS_DIR/fresh-check.xml"
stage molecule molecule_converge
stage scenarios role_scenarios "${ROLE_SCENARIOS[@]}"
wait_side_stages
stage integration python -m pytest tests/integration -q -p no:cacheprovider -m lab --durations=30 --junitxml="$COUNTS_DIR/integration.xml"
stage scenarios-late role_scenarios "${LATE_ROLE_SCENARIOS[@]}"
if [[ "${SPARKCTL_KEEP_LAB:-0}" != 1 ]]; then
  stage lab-down molecule destroy --scenario-name default
fi
