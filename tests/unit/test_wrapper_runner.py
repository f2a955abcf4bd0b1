"""The wrapper end to end through the real ansible-runner, on the control node only:
a throwaway project whose stages are small localhost playbooks."""

import hashlib
import json
import os
import shutil
import signal
import threading
import time
import textwrap
from pathlib import Path

import jsonschema
import pytest
from sparkctl import cli, runner
from sparkctl.result import SCHEMA_PATH
from sparkctl.stages import COMMAND_STAGES
from sparkctl.stages import Stage
from wrapper_project import make_project

# In the whole unit run, other modules' loopback servers are still running threads
# when ansible-runner forks ansible-playbook; the wrapper itself forks with none.
pytestmark = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")

PLAYBOOKS = {
    # Writes a preflight report like the real stage; fails when asked to.
    "preflight": """
        - name: Preflight every node
          hosts: all
          gather_facts: false
          tasks:
            - name: Judge the node
              ansible.builtin.set_fact:
                verdict: "{{ 'fail' if fake_preflight_fail | default(false) | bool else 'pass' }}"
            - name: Write the report
              ansible.builtin.copy:
                dest: "{{ lookup('ansible.builtin.env', 'SPARKCTL_REPORT_DIR') }}/preflight.json"
                content: >-
                  {{ {'ok': verdict == 'pass', 'hosts': {inventory_hostname: {'ok': verdict == 'pass', 'judged': true,
                  'checks': [{'id': 'gpu.driver', 'title': 'driver', 'status': verdict, 'detail': '580.95.05',
                  'fix': 'Update the driver.'}]}}} | to_json }}
                mode: "0644"
              delegate_to: localhost
            - name: Fail with every failed check
              ansible.builtin.fail:
                msg: "Preflight failed on {{ inventory_hostname }}: gpu.driver"
              when: verdict == 'fail'
        """,
    # Uses the hub token the way the checkpoint stage does, without printing it.
    "provision": """
        - name: Provision every node
          hosts: all
          gather_facts: false
          tasks:
            - name: Use the secrets
              ansible.builtin.assert:
                that:
                  - lookup('ansible.builtin.env', 'HF_TOKEN') | hash('sha256') == expected_env_sha256
                  - spark_hf_token | hash('sha256') == expected_var_sha256
              no_log: true
              when: expected_env_sha256 is defined
            - name: Change something
              ansible.builtin.command: "true"
              changed_when: true
        """,
    # Like playbooks/logs.yml: prints the last logs_lines lines.
    "logs": """
        - name: Show the last lines of the sparkctl units
          hosts: all
          gather_facts: false
          vars:
            logs_lines: 50
          tasks:
            - name: Print them
              ansible.builtin.debug:
                msg: "{{ range(logs_lines | int) | map('string') | map('regex_replace', '^', 'journal line ') | list }}"
        """,
    # Like playbooks/fabric_test.yml: writes its report and prints a line per cable half.
    "fabric_test": """
        - name: Measure every cable half
          hosts: all
          gather_facts: false
          tasks:
            - name: Write the report
              ansible.builtin.copy:
                dest: "{{ lookup('ansible.builtin.env', 'SPARKCTL_REPORT_DIR') }}/fabric-test.json"
                content: "{{ {'schema_version': 1, 'ok': true, 'pairs': []} | to_json }}"
                mode: "0644"
              delegate_to: localhost
            - name: Print the halves
              ansible.builtin.debug:
                msg: "node1 enp1s0f1np1 -> node1: 98.1 Gbit/s (minimum 90)"
        """,
    "checkpoint": """
        - name: Put the checkpoint on every node
          hosts: all
          gather_facts: false
          tasks:
            - name: Profile in use
              ansible.builtin.debug:
                msg: "{{ spark_model_profile | default('default') }}"
        """,
}


@pytest.fixture
def project(tmp_path, monkeypatch):
    # A site.yml of three stages: `up` runs what it imports.
    return make_project(tmp_path / "project", monkeypatch, PLAYBOOKS, ["preflight", "provision", "checkpoint"])


def run_json(capsys, *argv):
    code = cli.main(["--json", *argv])
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text()))
    assert doc["exit_code"] == code
    return doc


def test_up_runs_the_stages_in_order_and_reports_each(project, capsys):
    doc = run_json(capsys, "up", "-i", "inventories/local", "--profile", "lab-standin")
    assert doc["exit_code"] == 0
    assert [s["name"] for s in doc["stages"]] == ["preflight", "provision", "checkpoint"]
    assert doc["inventory"] == str(project / "inventories" / "local")
    assert doc["profile"] == "lab-standin"
    provision = doc["stages"][1]
    assert provision["status"] == "successful" and provision["rc"] == 0
    assert provision["stats"]["node1"] == {"ok": 1, "changed": 1, "failed": 0, "unreachable": 0, "skipped": 1}
    assert Path(provision["log"]).is_file()
    assert doc["reports"]["preflight"]["ok"] is True
    # One artifact directory per stage, named after it.
    names = sorted(Path(s["artifact_dir"]).name.split("-")[0] for s in doc["stages"])
    assert names == ["checkpoint", "preflight", "provision"]


def test_a_failing_stage_stops_the_sequence(project, capsys):
    doc = run_json(capsys, "up", "-i", "inventories/local", "-e", "fake_preflight_fail=true")
    assert doc["exit_code"] == 1
    preflight, *later = doc["stages"]
    assert preflight["status"] == "failed" and preflight["exit_code"] == 1
    assert preflight["failures"] == [{"host": "node1", "task": "Fail with every failed check", "kind": "failed",
                                      "msg": "Preflight failed on node1: gpu.driver", "play": "Preflight every node"}]
    assert [(s["name"], s["status"], s["artifact_dir"]) for s in later] == [
        ("provision", "not_run", None), ("checkpoint", "not_run", None)]
    assert doc["reports"]["preflight"]["ok"] is False
    artifacts = list((project / ".sparkctl" / "runner" / "artifacts").iterdir())
    assert [a.name.split("-")[0] for a in artifacts] == ["preflight"]


def test_human_output_has_the_table_the_failure_and_the_log(project, capsys):
    code = cli.main(["doctor", "-i", "inventories/local", "-e", '{"fake_preflight_fail": true}'])
    out = capsys.readouterr().out
    assert code == 1
    assert "preflight: failed" in out
    assert "node1 failed at task Fail with every failed check" in out
    assert "Preflight failed on node1: gpu.driver" in out
    assert "full log: " + str(project / ".sparkctl" / "runner" / "artifacts") in out
    # The doctor's own table follows, from the report the stage wrote.
    assert "Preflight: FAILED" in out
    assert "node1: gpu.driver: 580.95.05 Fix: Update the driver." in out


def test_limit_keeps_the_control_node_and_check_mode_changes_nothing(project, capsys):
    doc = run_json(capsys, "provision", "-i", "inventories/local", "--check", "--limit", "node1")
    [stage] = doc["stages"]
    assert doc["check"] is True
    # command with changed_when: true is skipped in check mode.
    assert stage["stats"]["node1"]["changed"] == 0 and stage["stats"]["node1"]["skipped"] == 2
    command = json.loads((Path(stage["artifact_dir"]) / "command").read_text())["command"]
    assert command[command.index("--limit") + 1] == "node1,localhost"
    assert "--check" in command and "--diff" in command


SENTINEL = "hf_sentinel_9f1c2b7e4d"
SENTINEL_VAR = "vault_sentinel_51d0aa"


def test_secrets_never_land_in_the_artifacts(project, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SENTINEL)
    expected = {"expected_env_sha256": hashlib.sha256(SENTINEL.encode()).hexdigest(),
                "expected_var_sha256": hashlib.sha256(SENTINEL_VAR.encode()).hexdigest()}
    doc = run_json(capsys, "provision", "-i", "inventories/local", "-e", f"spark_hf_token={SENTINEL_VAR}",
                   "-e", json.dumps(expected))
    # The play saw both secrets (the assert compares them) ...
    assert doc["exit_code"] == 0, doc
    # ... and no file the run left behind holds either.
    private = project / ".sparkctl"
    files = [p for p in private.rglob("*") if p.is_file()]
    assert any(p.name == "command" for p in files)
    for path in files:
        data = path.read_bytes()
        assert SENTINEL.encode() not in data, path
        assert SENTINEL_VAR.encode() not in data, path
    # No env/ files at all (suppress_env_files).
    assert not (private / "runner" / "env").exists()
    record = json.loads((Path(doc["stages"][0]["artifact_dir"]) / "command").read_text())
    assert record["env"]["HF_TOKEN"] == runner.REDACTED


def test_a_missing_playbook_exits_2_with_a_document(project, capsys):
    doc = run_json(capsys, "serve", "-i", "inventories/local")
    assert doc["exit_code"] == 2
    assert doc["stages"] == []
    assert "playbooks/serve.yml is missing" in doc["error"]


def test_missing_inventory_exits_2(project, capsys):
    doc = run_json(capsys, "doctor", "-i", "inventories/nowhere")
    assert doc["exit_code"] == 2
    assert doc["error"].startswith("no inventory at inventories/nowhere")


def test_artifacts_are_rotated(project, monkeypatch):
    monkeypatch.setattr(runner, "KEEP_ARTIFACTS", 2)
    options = runner.RunOptions(inventory=project / "inventories" / "local")
    stage = Stage("checkpoint", project / "playbooks" / "checkpoint.yml")
    for _ in range(4):
        assert runner.run_stage(stage, options, project).exit_code == 0
    assert len(list((project / ".sparkctl" / "runner" / "artifacts").iterdir())) == 2


def test_a_stage_survives_another_run_rotating_the_same_artifacts(project, monkeypatch):
    """Two wrappers at once (`sparkctl status` while `up` runs) both rotate the artifacts:
    an old directory the other one removed first must not fail this run."""
    artifacts = project / ".sparkctl" / "runner" / "artifacts"
    for number in range(runner.KEEP_ARTIFACTS + 5):
        old = artifacts / f"status-20260101T0000{number:02d}-0000"
        old.mkdir(parents=True)
        os.utime(old, (1_000_000 + number, 1_000_000 + number))
    real_rmtree = shutil.rmtree
    raced = []

    def removed_by_the_other_run_first(path, *args, **kwargs):
        if not raced:
            raced.append(path)
            real_rmtree(path)
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", removed_by_the_other_run_first)
    options = runner.RunOptions(inventory=project / "inventories" / "local")
    result = runner.run_stage(Stage("checkpoint", project / "playbooks" / "checkpoint.yml"), options, project)
    assert (result.status, result.exit_code) == ("successful", 0), result
    assert raced, "the rotation removed nothing"
    kept = sorted(path.name for path in artifacts.iterdir() if path.is_dir())
    assert len(kept) == runner.KEEP_ARTIFACTS and Path(result.artifact_dir).name in kept


def test_ansible_playbook_is_found_without_the_venv_on_path(project, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    options = runner.RunOptions(inventory=project / "inventories" / "local")
    result = runner.run_stage(Stage("checkpoint", project / "playbooks" / "checkpoint.yml"), options, project)
    assert (result.status, result.exit_code) == ("successful", 0), result


def test_ctrl_c_cancels_the_stage_and_stops_the_sequence(project, capsys):
    (project / "playbooks" / "preflight.yml").write_text(textwrap.dedent("""\
        ---
        - name: Preflight every node
          hosts: all
          gather_facts: false
          tasks:
            - name: A long health wait
              ansible.builtin.command: sleep 60
              changed_when: false
        """))
    # A shell that starts the suite in the background hands it SIGINT ignored; the
    # wrapper must restore whatever it found, so the test starts from Python's default.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    try:
        doc = run_json(capsys, "up", "-i", "inventories/local")
    finally:
        timer.cancel()
        restored = signal.signal(signal.SIGINT, inherited)
    assert time.monotonic() - started < 40
    assert [(s["name"], s["status"]) for s in doc["stages"]] == [
        ("preflight", "canceled"), ("provision", "not_run"), ("checkpoint", "not_run")]
    assert doc["exit_code"] == 1
    # Nothing of the canceled stage keeps running (ansible-playbook, its workers, the task).
    time.sleep(0.5)
    leftovers = [p for p in Path("/proc").glob("[0-9]*/cmdline")
                 if _read(p).startswith(b"sleep\x0060") and _read(p.with_name("environ")).find(str(project).encode()) >= 0]
    assert leftovers == []
    # The wrapper's own Ctrl-C handling is gone once the stage is over.
    assert restored is signal.default_int_handler


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def test_reports_are_those_this_run_wrote_even_when_unchanged(project, capsys):
    reports = project / ".sparkctl" / "reports"
    (reports / "verify.json").write_text('{"stale": true}')
    first = run_json(capsys, "doctor", "-i", "inventories/local")
    # The second run finds its report up to date: the file keeps its mtime, and still belongs to this run.
    second = run_json(capsys, "doctor", "-i", "inventories/local")
    for doc in (first, second):
        assert list(doc["reports"]) == ["preflight"]
        assert doc["reports"]["preflight"]["hosts"]["node1"]["ok"] is True


def test_logs_prints_what_the_play_shows(project, capsys):
    assert cli.main(["logs", "-i", "inventories/local", "-n", "3", "--node", "node1"]) == 0
    out = capsys.readouterr().out
    assert "node1: Print them" in out
    assert "journal line 2" in out and "journal line 3" not in out
    doc = run_json(capsys, "logs", "-i", "inventories/local", "-n", "2")
    assert doc["stages"][0]["output"] == [{"host": "node1", "task": "Print them", "msg": ["journal line 0", "journal line 1"]}]


def test_fabric_test_prints_a_document_the_schema_accepts(project, capsys):
    doc = run_json(capsys, "fabric-test", "-i", "inventories/local")
    assert doc["command"] == "fabric-test"
    assert doc["exit_code"] == 0
    assert doc["stages"][0]["output"][0]["msg"] == "node1 enp1s0f1np1 -> node1: 98.1 Gbit/s (minimum 90)"
    assert doc["reports"]["fabric-test"]["ok"] is True


def test_the_schema_names_every_command_that_prints_a_document():
    # api-key prints the key alone, never a document (run_api_key).
    commands = json.loads(SCHEMA_PATH.read_text())["properties"]["command"]["enum"]
    assert sorted(commands) == sorted({"up", *COMMAND_STAGES} - {"api-key"})


# A rollback gives the run a record read from a history file, and its values from nodes: a Jinja
# expression in one must reach the play as the text it is. The playbook uses the values as
# playbooks/rollback.yml does (a module argument, a message built from them).
DATA_PLAYBOOK = """
- name: Use a rollback's record
  hosts: all
  gather_facts: false
  tasks:
    - name: Show the record's commit and directory
      ansible.builtin.debug:
        msg: "{{ 'Returning to ' ~ sparkctl_rollback_deployment.checkpoint.commit ~ ' in ' ~ spark_checkpoint_dir }}"
    - name: Pass the commit to a module as an argument
      ansible.builtin.set_fact:
        seen_commit: "{{ sparkctl_rollback_deployment.checkpoint.commit }}"
        seen_list: "{{ spark_profile_paths }}"
    - name: Check what the play saw
      ansible.builtin.assert:
        that:
          - seen_commit.startswith("{" ~ "{ lookup('pipe', 'touch ")
          - seen_list[0] == seen_commit
          - sparkctl_rollback_deployment.schema_version == 1
          # Strings stay strings whatever they look like; other JSON values keep their type.
          - sparkctl_rollback_deployment.recorded_at is string
          - sparkctl_rollback_deployment.recorded_at == "2026-05-01T00:00:00Z"
          - spark_profile_overrides.engine.env.TTFT is string and spark_profile_overrides.engine.env.TTFT == "0.1"
          - spark_profile_overrides.engine.env.FLAG is string and spark_profile_overrides.engine.env.FLAG == "true"
          - spark_profile_overrides.engine.args.max_num_seqs == 3 and spark_api_proxy is true
"""


@pytest.mark.parametrize("as_data", [True, False], ids=["as-data", "as-json-the-way-before"])
def test_a_rollbacks_variables_reach_the_run_as_data_never_templated(project, tmp_path, as_data, monkeypatch):
    marker = tmp_path / "ran-on-the-control-node"
    hostile = "{{ lookup('pipe', 'touch %s') }}" % marker
    (project / "playbooks" / "data.yml").write_text("---\n" + textwrap.dedent(DATA_PLAYBOOK))
    final = {"sparkctl_rollback_deployment": {"schema_version": 1, "checkpoint": {"commit": hostile},
                                              "recorded_at": "2026-05-01T00:00:00Z"},
             "spark_checkpoint_dir": "/srv/" + hostile, "spark_profile_paths": [hostile], "spark_api_proxy": True,
             "spark_profile_overrides": {"engine": {"env": {"TTFT": "0.1", "FLAG": "true"}, "args": {"max_num_seqs": 3}}}}
    if not as_data:
        # The JSON file the wrapper wrote before: Ansible trusts an extra-variables file and templates it.
        monkeypatch.setattr(runner, "data_vars_text", json.dumps)
    options = runner.RunOptions(inventory=project / "inventories" / "local", final_extravars=final)
    result = runner.run_stage(Stage("data", project / "playbooks" / "data.yml"), options, project)
    if as_data:
        assert result.exit_code == 0, result
        assert not marker.exists()
    else:
        # What the test guards against is real: the old way ran the command.
        assert marker.exists()
