"""Secrets on the two-node lab: a sentinel hub token and a sentinel API key, given the
way a user gives them, go through a whole `sparkctl up -vvv` and must never appear in
the wrapper's output, in ansible-runner's artifacts, in the nodes' journals or in any
file on the nodes that another user can read; the key file itself is 0600 and owned by
the service user. With the chosen key in place, `bench` (a short run), `logs`, `status`
and `serve --check --diff` with another sentinel key, all at -vvv, keep every sentinel
out of their output and artifacts too, and the bench's private key file is gone after
it. Afterwards the chosen key is dropped and a generated one comes back."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from labrun import LAB_INVENTORY_DIR, REPO, management_address, node_exec, service_user

pytestmark = pytest.mark.lab

HOSTS = ("spark1", "spark2")
TOKEN = "hf_SENTINELtokenQ7w2Zr5Kx9Lm3Np8Vb4"
API_KEY = "sk-SENTINELkeyD3f8Gh2Jk6Lq9Rt5Wy1Xz7Ce4"
# A key a --check run would write: its diff must not show it.
OTHER_KEY = "sk-SENTINELotherK8m2Pq7Ws4Ev9Rb3Tn6Yh1Uj5"
SENTINELS = (TOKEN, API_KEY, OTHER_KEY)
BENCH_SHORT = {"benchmark_prompt_tokens": [64], "benchmark_concurrency": [1], "benchmark_max_tokens": 8,
               "benchmark_requests_per_stream": 1, "benchmark_warmup": 0, "benchmark_progress_interval": 2}
KEY_FILE = "/etc/sparkctl/api-key.env"
# Where a secret could be written on a node (the root file system without the venvs' bulk).
SEARCHED = ("/etc", "/srv", "/var/lib", "/var/tmp", "/tmp", "/home", "/root", "/opt/sparkctl", "/usr/local")
# The checkpoint's weights are the hub's bytes, each file checked against the hub's hash by
# the checkpoint stage: nothing sparkctl writes can be in them, and they are most of the bytes.
NOT_SEARCHED = ("*.safetensors",)


@pytest.fixture(scope="module")
def secret_run(lab_up, report_dir, tmp_path_factory):
    env = dict(os.environ, SPARKCTL_REPORT_DIR=str(report_dir), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    secrets = {"spark_hf_token": TOKEN, "spark_api_key": API_KEY}
    proc = subprocess.run([sys.executable, "-m", "sparkctl", "up", "-i", str(LAB_INVENTORY_DIR), "-vvv", "--json",
                           "-e", json.dumps(secrets)], cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    yield proc
    # Back to a generated key: drop the chosen one and let the serve stage make a new one.
    node_exec("spark1", "rm", "-f", KEY_FILE)
    restore = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "playbooks/serve.yml",
                              "-i", str(LAB_INVENTORY_DIR)], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert restore.returncode == 0, restore.stdout[-3000:]


def test_the_run_with_chosen_secrets_succeeds(secret_run):
    doc = json.loads(secret_run.stdout)
    assert doc["exit_code"] == 0, [s.get("failures") for s in doc["stages"]]
    assert [s["name"] for s in doc["stages"]][-1] == "verify"
    assert doc["reports"]["verify"]["status"] == "passed"


def test_no_secret_in_the_wrappers_output(secret_run):
    for sentinel in SENTINELS:
        assert sentinel not in secret_run.stdout
        assert sentinel not in secret_run.stderr


def test_no_secret_in_the_runner_artifacts(secret_run):
    doc = json.loads(secret_run.stdout)
    checked = 0
    for stage in doc["stages"]:
        for path in Path(stage["artifact_dir"]).rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                checked += 1
                for sentinel in SENTINELS:
                    assert sentinel.encode() not in data, path
    assert checked > 0
    # -vvv really was on: the stage logs hold module invocations.
    stdout = Path(doc["stages"][0]["artifact_dir"]) / "stdout"
    assert f"<{management_address('spark1')}> ESTABLISH SSH CONNECTION" in stdout.read_text()


@pytest.mark.parametrize("node", HOSTS)
def test_no_secret_in_the_journal_or_a_readable_file(secret_run, node):
    patterns = " ".join(f"-e '{sentinel}'" for sentinel in SENTINELS)
    journal = node_exec(node, "sh", "-c", f"journalctl --no-pager -q | grep -oF {patterns} || true").stdout
    leaked = sorted({line[:8] + "..." for line in journal.splitlines() if line.strip()})
    assert not leaked, f"{leaked} in the journal of {node}"
    excludes = " ".join(f"--exclude='{glob}'" for glob in NOT_SEARCHED)
    found = node_exec(node, "sh", "-c", "grep -rlsF %s -e '%s' -e '%s' %s || true"
                      % (excludes, TOKEN, API_KEY, " ".join(SEARCHED)))
    files = [line for line in found.stdout.splitlines() if line.strip()]
    for path in files:
        mode, owner = node_exec(node, "stat", "-c", "%a %U", path).stdout.split()
        assert int(mode, 8) & 0o077 == 0, f"{path} on {node} holds a secret with mode {mode}"
        assert owner in (service_user(), "root"), (path, owner)
    if node == "spark1":
        assert KEY_FILE in files
        assert node_exec(node, "stat", "-c", "%a %U", KEY_FILE).stdout.split() == ["600", service_user()]
    else:
        assert KEY_FILE not in files


def test_the_chosen_key_is_the_one_the_api_takes(secret_run):
    code = ("import urllib.request, sys\n"
            "req = urllib.request.Request('http://127.0.0.1:8000/v1/models', headers={'Authorization': 'Bearer ' + sys.argv[1]})\n"
            "print(urllib.request.urlopen(req, timeout=10).status)\n")
    assert node_exec("spark1", "python3", "-c", code, API_KEY).stdout.strip() == "200"


def _sparkctl(report_dir, *args):
    env = dict(os.environ, SPARKCTL_REPORT_DIR=str(report_dir), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    return subprocess.run([sys.executable, "-m", "sparkctl", *args, "-i", str(LAB_INVENTORY_DIR), "-vvv", "--json"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def other_runs(secret_run, report_dir):
    """bench, logs, status and serve --check --diff at -vvv while the chosen key is the live one."""
    assert json.loads(secret_run.stdout)["exit_code"] == 0
    given = {"spark_hf_token": TOKEN, "spark_api_key": API_KEY}
    before = set(Path(tempfile.gettempdir()).glob("sparkctl-bench-key-*"))
    commands = {
        "bench": ("bench", "-e", json.dumps(given), "-e", json.dumps(BENCH_SHORT)),
        "logs": ("logs", "-n", "200", "-e", json.dumps(given)),
        "status": ("status", "-e", json.dumps(given)),
        "check": ("serve", "--check", "-e", json.dumps(dict(given, spark_api_key=OTHER_KEY))),
    }
    # None of them changes the cluster (check mode, reads, a short bench nobody judges on
    # its rates), so they run side by side: most of each run is waiting on the nodes.
    with concurrent.futures.ThreadPoolExecutor(len(commands)) as pool:
        futures = {name: pool.submit(_sparkctl, report_dir, *args) for name, args in commands.items()}
        runs = {name: future.result() for name, future in futures.items()}
    runs["bench_key_files_left"] = set(Path(tempfile.gettempdir()).glob("sparkctl-bench-key-*")) - before
    return runs


@pytest.mark.parametrize("command", ["bench", "logs", "status", "check"])
def test_other_commands_keep_the_secrets_out_of_output_and_artifacts(other_runs, command):
    proc = other_runs[command]
    doc = json.loads(proc.stdout)
    assert doc["exit_code"] == 0, [s.get("failures") for s in doc["stages"]]
    for sentinel in SENTINELS:
        assert sentinel not in proc.stdout and sentinel not in proc.stderr, (command, sentinel[:12])
    checked = 0
    for stage in doc["stages"]:
        for path in Path(stage["artifact_dir"]).rglob("*"):
            if path.is_file():
                checked += 1
                data = path.read_bytes()
                for sentinel in SENTINELS:
                    assert sentinel.encode() not in data, (command, path)
    assert checked > 0
    if command == "bench":
        assert not other_runs["bench_key_files_left"], "the bench's private key file was left behind"
