#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine as root: set-up (the real server's venv
# beside it), the tests that judge measured times (alone), the real-server tests, then beside
# each other the unit tests and lint on one side and on the other check mode on a fresh lab, the
# whole-site molecule scenario and every role scenario; then the lab integration tests, with
# ansible-test sanity beside them. Prints the wall time of each stage, the count of what ran and
# where the CPU went (every process, the lab nodes' included: tests/bench/cpu_census.py) at the end.
# CI runs exactly this.
#
# --quick [SCENARIO]: set-up, unit tests, lint (every playbook syntax-checked), ansible-test sanity and one
# role scenario (default: linger) on the shared lab, created if it is not up and left up.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
# The project's venv holds no byte code until a module's first import writes it beside the source
# (tests/uv_pip.sh --no-compile): where the environment forbids writing it, every process would
# compile again all it imports.
unset PYTHONDONTWRITEBYTECODE
QUICK=0
QUICK_SCENARIO=linger
case "${1:-}" in
  --quick) QUICK=1; QUICK_SCENARIO=${2:-$QUICK_SCENARIO} ;;
  "") ;;
  *) echo "usage: $0 [--quick [SCENARIO]]" >&2; exit 2 ;;
esac

declare -a STAGE_NAMES=() STAGE_SECONDS=()
# Every stage's start and end (epoch seconds), for the CPU report at the end (tests/suite_cpu.py).
STAGE_SPANS=$REPO/.lab/stage-spans.txt
CPU_LOG=$REPO/.lab/suite-cpu.log
CPU_ACCT=$REPO/.lab/suite.acct
mkdir -p "$REPO/.lab"; : > "$STAGE_SPANS"; : > "$CPU_LOG"
stage() {
  local name=$1; shift
  local start=$SECONDS epoch
  epoch=$(date +%s)
  printf '\n===== %s =====\n' "$name"
  "$@"
  STAGE_NAMES+=("$name"); STAGE_SECONDS+=($((SECONDS - start)))
  echo "$name $epoch $(date +%s)" >> "$STAGE_SPANS"
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
  if [[ -n ${CPU_SAMPLER:-} ]]; then kill "$CPU_SAMPLER" 2> /dev/null || true; fi
  python3 tests/suite_cpu.py report "$CPU_LOG" "$STAGE_SPANS" || true
  if [[ $QUICK == 0 ]]; then
    python3 tests/bench/cpu_census.py --stop > /dev/null || true
    printf '\n===== where the CPU went (process accounting, tests/bench/cpu_census.py) =====\n'
    python3 tests/bench/cpu_census.py --read "$CPU_ACCT" || true
  fi
}
# Chains of stages that run in the background, beside the lab's stages, which mostly wait on
# the nodes: each writes its output to .lab/<chain>.log, printed when the chain is waited for,
# and its stage times to .lab/<chain>.times, reported with the others.
declare -A CHAIN_PIDS=()
chain_stage() {
  local name=$1; shift
  local start=$SECONDS epoch
  epoch=$(date +%s)
  printf '\n===== %s =====\n' "$name"
  "$@" || return 1
  echo "$name $((SECONDS - start))" >> "$CHAIN_TIMES"
  echo "$name $epoch $(date +%s)" >> "$STAGE_SPANS"
}
start_chain() {
  local chain=$1; shift
  mkdir -p "$REPO/.lab"
  : > "$REPO/.lab/$chain.times"
  (CHAIN_TIMES=$REPO/.lab/$chain.times; "$@") > "$REPO/.lab/$chain.log" 2>&1 &
  CHAIN_PIDS[$chain]=$!
}
wait_chain() {
  local chain=$1 rc=0 name seconds
  wait "${CHAIN_PIDS[$chain]}" || rc=$?
  unset "CHAIN_PIDS[$chain]"
  printf '\n===== %s (ran in the background) =====\n' "$chain"
  cat "$REPO/.lab/$chain.log"
  while read -r name seconds; do STAGE_NAMES+=("$name"); STAGE_SECONDS+=("$seconds"); done < "$REPO/.lab/$chain.times"
  return "$rc"
}
# A failing stage ends the suite; no chain is left running behind it, and what each wrote is shown.
kill_tree() {
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child"; done
  kill "$1" 2> /dev/null || true
}
stop_chains() {
  local chain
  for chain in "${!CHAIN_PIDS[@]}"; do
    kill_tree "${CHAIN_PIDS[$chain]}"
    wait_chain "$chain" || true
  done
}
trap 'stop_chains; report_times' EXIT
python3 tests/suite_cpu.py sample "$CPU_LOG" &
CPU_SAMPLER=$!
# Every process's CPU, the lab nodes' included, summed by what ran it at the end (a full run only;
# without root or kernel support it says so and the suite goes on).
if [[ $QUICK == 0 ]]; then python3 tests/bench/cpu_census.py --start "$CPU_ACCT" || true; fi

# The real server's venv (torch, transformers: most of that stage's time) installs beside the
# bootstrap; it needs nothing the bootstrap puts in place, and is done before the timed tests.
# Both venvs install at a lower priority (nice 10) than the node image's build below, which the
# timed tests wait for: on two cores the three together left the image a third of the CPU.
# Then, from that venv, the lab's real vLLM (tests/lab/vllm/README.md): its wheelhouse, which every lab
# node mounts, and the tiny Llama, which the hub stand-in publishes when a lab is created below; the
# model switch on the twin serves it.
real_engines_setup() {
  nice -n 10 bash tests/realserver/setup.sh && nice -n 10 bash tests/lab/vllm/setup.sh
}
if [[ $QUICK == 0 ]]; then start_chain realserver-setup chain_stage realserver-setup real_engines_setup; fi
# The system packages and a running dockerd first (a second once installed). The lab's node image
# (mmdebstrap and docker import: about 35 s alone on a machine that has none cached, as on every
# fresh one) then builds beside the venvs' installs, with the distribution's python3, instead of in
# front of the lab's first start; a cached image takes a tenth of a second.
stage system bash tests/bootstrap.sh --system
start_chain lab-image chain_stage lab-image /usr/bin/python3 tests/lab/sparklab image
stage bootstrap nice -n 10 bash tests/bootstrap.sh
if [[ $QUICK == 0 ]]; then wait_chain realserver-setup; fi
# shellcheck disable=SC1091
source "$REPO/.venv/bin/activate"
export ANSIBLE_CONFIG=$REPO/ansible.cfg ANSIBLE_FORCE_COLOR=0 PY_COLORS=0
# The real nginx the bootstrap unpacked, for the API proxy's unit tests.
if [[ -x $REPO/.venv/nginx/usr/sbin/nginx ]]; then export SPARKCTL_NGINX=$REPO/.venv/nginx/usr/sbin/nginx; fi

# Tests that judge measured times run first, alone: nothing runs beside them yet (the node image's
# build is waited for).
wait_chain lab-image
# Only the files that hold such tests are collected (the whole directory's collection is about two
# seconds of the stage); the unit stage's `-m "not timing"` leaves out the same tests wherever they are.
mapfile -t TIMING_FILES < <(grep -l 'pytest\.mark\.timing' tests/unit/test_*.py)
stage timing python -m pytest "${TIMING_FILES[@]}" -q -p no:cacheprovider -m timing --junitxml="$COUNTS_DIR/timing.xml"

# The unit tests but the timed ones, lint and ansible-test sanity: no lab.
unit_stage() {
  chain_stage unit python -m pytest tests/unit -q -p no:cacheprovider -m "not timing" --junitxml="$COUNTS_DIR/unit.xml"
}
# Lint: ruff on every Python file (pyproject.toml's [tool.ruff]), then ansible-lint, which also
# runs `ansible-playbook --syntax-check` on every playbook (.ansible-lint's kinds: site.yml,
# playbooks/ and the scenarios' playbooks) and fails on any error it reports.
lint_stage() {
  ruff check . && ansible-lint --nocolor -q
}
static_stages() {
  chain_stage lint lint_stage && chain_stage sanity bash tests/sanity/run.sh
}
# Beside the labs' converges the two cores are saturated; beside their integration tests about a
# tenth of them idles (both labs waiting on an engine or a timer at once). ansible-test sanity, one
# process on one core, runs there (docs/performance.md, "Where the suite's CPU goes").
side_stages() {
  unit_stage && chain_stage lint lint_stage
}
sanity_stage() {
  chain_stage sanity bash tests/sanity/run.sh
}

# Every role scenario (molecule/<role>/), in the order site.yml runs the roles, then the benchmark's
# (a short run against the served lab; playbooks/benchmark.yml is not a stage of site.yml). Two run their
# whole sequence on the twin right after its converge. The image runtime's, with its prepare
# (Docker, the lab's base image): the whole-site scenario runs the default profile, a venv, so
# nothing on a converged lab has put them in place, and the twin's image-runtime tests and fault
# catalogue need the same Docker and base image. The fabric test's (not a stage of site.yml):
# its first run installs the test's tool, so its second run is the idempotence check.
ROLE_SCENARIOS=(preflight direct_link firewall fabric_env linger ssh_mesh checkpoint engine_venv
                oom_guard jit_cache ray_cluster api_proxy engine_service verify benchmark)
PREPARED_ROLE_SCENARIOS=(engine_image fabric_test)
# The teardown's, last on the twin: it takes everything off (tests/integration/test_lab_teardown.py
# runs its check mode before it and a half-failed first run after it).
LAST_ROLE_SCENARIOS=(teardown)
# The observe stage's, last on the first lab, after its lab test (test_lab_observe.py) has turned
# the stage on: Prometheus and node exporter stay installed and their ports open, which any later
# converge without spark_observe and the twin's teardown comparison would trip on.
OBSERVE_ROLE_SCENARIOS=(observe)
SCENARIO_RESULTS=$COUNTS_DIR/scenarios.txt
# role_scenarios full|converged SCENARIO...: `full` is molecule's whole test sequence with each
# role's prepare (--quick; the image runtime, whose prerequisites the whole-site converge does
# not put in place); `converged` runs on the lab the whole-site scenario converged and skips
# what that lab makes redundant (.config/molecule/converged-lab.yml): there the scenario's
# converge is the role's second run, and tests/quiet_run.py holds it to changed=0 on every
# node, as molecule's idempotence step would a third run.
role_scenarios() {
  local sequence=$1 scenario start rc log
  shift
  local configs=(--base-config .config/molecule/config.yml)
  if [[ $sequence == converged ]]; then configs+=(--base-config .config/molecule/converged-lab.yml); fi
  for scenario in "$@"; do
    start=$SECONDS
    rc=0
    log=$REPO/.lab/scenario-$scenario.log
    molecule "${configs[@]}" test --scenario-name "$scenario" 2>&1 | tee "$log" || rc=$?
    if [[ $rc == 0 && $sequence == converged ]]; then python3 tests/quiet_run.py "$log" --scenario "$scenario" || rc=$?; fi
    echo "$scenario $rc $((SECONDS - start))" >> "$SCENARIO_RESULTS"
    [[ $rc == 0 ]] || return "$rc"
  done
}

# --quick has the machine to itself: the unit tests and lint, each one process on one core,
# run beside each other and beside the scenario instead of one after the other.
if [[ $QUICK == 1 ]]; then
  start_chain unit unit_stage
  start_chain static static_stages
  stage scenario role_scenarios full "$QUICK_SCENARIO"
  quick_rc=0
  wait_chain unit || quick_rc=$?
  wait_chain static || quick_rc=$?
  exit "$quick_rc"
fi
# The benchmark client and verify's probe module against a real OpenAI-compatible server
# nobody here wrote (tests/realserver: transformers serve on the CPU, in its own venv).
real_server() {
  bash tests/realserver/setup.sh > /dev/null
  python -m pytest tests/realserver -q -p no:cacheprovider --junitxml="$COUNTS_DIR/real-server.xml"
}
stage real-server real_server
start_chain side side_stages
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
# The twin lab (inventories/lab-twin; tests/lab/README.md): a second pair of nodes beside the
# first, fresh, converged and checked idempotent in the background; the integration test
# files below then run on it, beside the others on the first lab.
TWIN_INVENTORY=$REPO/inventories/lab-twin/hosts.yml
# The two chains end about together (docs/performance.md has the split measured): the twin's
# starts its tests earlier (no fresh check, no role scenarios first) but runs the image
# runtime's scenario and the fault catalogue, the longest test file, the firewall's tests (they
# touch neither the runtime nor the checkpoint), the venv runtime's (each leaves the venv as it
# found it) and the bad-input catalogue (refused before any change), then the image runtime's upgrade (a tag upgraded
# and rolled back: Docker and the lab's base image are already there) and the
# model switch, whose leftovers the teardown stages after them take off too. The first lab runs
# the rest, then the rollbacks and the observe stage. (The kernel caches' tests
# stay on the first lab: run on the twin right before the catalogue, its killed-engine batch's
# repair run met a booting engine, changed what no fault of the batch owns, and once restarted Ray
# with the engine at its start limit; docs/performance.md.)
TWIN_TESTS=(tests/integration/test_lab_faults.py tests/integration/test_lab_runtime_image.py
            tests/integration/test_lab_firewall.py tests/integration/test_lab_runtime_venv.py
            tests/integration/test_lab_bad_inputs.py)
# The twin's nodes as they are before anything runs on them: the teardown stage compares them
# with it at the end (tests/integration/test_lab_teardown.py).
TWIN_FRESH_SNAPSHOT=$REPO/.lab/twin-fresh-snapshot.json
twin_create() {
  python tests/lab/sparklab down
  python tests/lab/sparklab up
  python tests/lab/sparklab hub start
  python tests/lab/node_snapshot.py -i "$TWIN_INVENTORY" "$TWIN_FRESH_SNAPSHOT"
}
# The twin converges with the collection as a user installs it (README.md, "Use the collection
# without the checkout"): built from this checkout, installed into an empty directory outside
# it, run from there with the collection's own ansible.cfg; a few seconds, no extra converge.
twin_install_collection() {
  TWIN_COLLECTION_DIR=$(mktemp -d /tmp/sparkctl-twin-collection.XXXXXX)
  python tools/build_collection.py --output "$TWIN_COLLECTION_DIR/build" --install "$TWIN_COLLECTION_DIR/collections" \
    2> >(grep -v "is not part of the configured Ansible collections paths" >&2)
  mkdir "$TWIN_COLLECTION_DIR/run"
  cp "$TWIN_COLLECTION_DIR/collections/ansible_collections/sparkctl/spark/config/ansible.cfg" "$TWIN_COLLECTION_DIR/run/"
}
twin_site() {
  (cd "$TWIN_COLLECTION_DIR/run" &&
    ANSIBLE_CONFIG=$TWIN_COLLECTION_DIR/run/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$TWIN_COLLECTION_DIR/collections \
      ansible-playbook sparkctl.spark.site -i "$TWIN_INVENTORY")
}
twin_converge() {
  local rerun=$REPO/.lab/twin-idempotence.log
  twin_install_collection
  twin_site > "$REPO/.lab/twin-converge.log" || { tail -n 80 "$REPO/.lab/twin-converge.log"; return 1; }
  twin_site > "$rerun" || { tail -n 80 "$rerun"; return 1; }
  rm -rf "$TWIN_COLLECTION_DIR"
  python tests/quiet_run.py "$rerun"
  tail -n 4 "$rerun"
  export SPARKCTL_CONVERGED_RERUN_LOG=$rerun
}
# The teardown's check mode on the converged twin, the teardown role's scenario (the teardown,
# again with nothing to do, every node against its fresh snapshot), then a half-failed first
# run torn down.
twin_teardown() {
  python -m pytest tests/integration/test_lab_teardown.py -q -p no:cacheprovider -m teardown_check \
    --junitxml="$COUNTS_DIR/teardown-twin.xml" &&
    role_scenarios full "${LAST_ROLE_SCENARIOS[@]}" &&
    python -m pytest tests/integration/test_lab_teardown.py -q -p no:cacheprovider -m teardown_after -s \
      --junitxml="$COUNTS_DIR/teardown-twin-after.xml"
}
twin_stages() {
  export SPARKLAB_INVENTORY=$TWIN_INVENTORY SPARKCTL_REPORT_DIR=$REPO/.lab/twin-reports
  export SPARKCTL_FRESH_SNAPSHOT=$TWIN_FRESH_SNAPSHOT
  chain_stage twin-create twin_create &&
    chain_stage twin-converge twin_converge &&
    chain_stage scenarios-prepared role_scenarios full "${PREPARED_ROLE_SCENARIOS[@]}" &&
    chain_stage twin-integration python -m pytest "${TWIN_TESTS[@]}" -q -p no:cacheprovider -m lab --durations=15 \
      --junitxml="$COUNTS_DIR/integration-twin.xml" &&
    chain_stage twin-day-two python -m pytest tests/integration/test_lab_upgrade.py tests/integration/test_lab_model_switch.py \
      -q -p no:cacheprovider -m "upgrade or model_switch" --durations=10 --junitxml="$COUNTS_DIR/day-two-twin.xml" &&
    chain_stage twin-teardown twin_teardown &&
    if [[ "${SPARKCTL_KEEP_LAB:-0}" != 1 ]]; then chain_stage twin-down python tests/lab/sparklab down; fi
}
TWIN_IGNORES=()
for test_file in "${TWIN_TESTS[@]}"; do TWIN_IGNORES+=("--ignore=$test_file"); done

# The twin's chain, the longer one now (docs/performance.md, "The set-up beside the node image"),
# starts beside the first lab's creation: the two labs' `up` queue on the lab tool's lock, which
# costs the first lab's creation about 20 s and saves the twin's chain about 30.
start_chain twin twin_stages
stage lab-create molecule_create
stage fresh-check python -m pytest tests/integration -q -p no:cacheprovider -m fresh --junitxml="$COUNTS_DIR/fresh-check.xml"
stage molecule molecule_converge
stage scenarios role_scenarios converged "${ROLE_SCENARIOS[@]}"
wait_chain side
start_chain sanity sanity_stage
# The day-two tests that change what the lab serves run after the others, in stages of their own:
# the image upgrade (test_lab_upgrade.py) and `model_switch` (test_lab_model_switch.py: two
# whole-site runs switching the served model and back) on the twin, above; here `rollback`
# (test_lab_rollback.py: a venv pin bump built beside and switched to, a broken change and a broken
# runtime upgrade rolled back by `sparkctl up` itself, `sparkctl rollback` to an older record). tests/lab/README.md has
# their times.
stage integration python -m pytest tests/integration "${TWIN_IGNORES[@]}" -q -p no:cacheprovider -m "lab and not model_switch and not rollback and not upgrade" --durations=30 \
  --junitxml="$COUNTS_DIR/integration.xml"
stage day-two python -m pytest tests/integration/test_lab_rollback.py -q -p no:cacheprovider -m rollback --durations=15 \
  --junitxml="$COUNTS_DIR/day-two.xml"
# The observe stage last (OBSERVE_ROLE_SCENARIOS above): its lab test converges site.yml with
# spark_observe on twice, breaks the cluster and watches the alerts fire and resolve; the role's
# scenario then converges the stage a third time (held to changed=0) and runs its verify.
stage observe python -m pytest tests/integration/test_lab_observe.py -q -p no:cacheprovider -m observe --durations=10 \
  --junitxml="$COUNTS_DIR/observe.xml"
stage observe-scenario role_scenarios converged "${OBSERVE_ROLE_SCENARIOS[@]}"
# sparklab's own output (each step timed) shows in the log, which molecule's destroy hides;
# molecule's destroy then finds the lab gone and resets its scenario state.
lab_down() {
  python tests/lab/sparklab down
  molecule destroy --scenario-name default > /dev/null
}
if [[ "${SPARKCTL_KEEP_LAB:-0}" != 1 ]]; then stage lab-down lab_down; fi
wait_chain sanity
wait_chain twin
