"""Shared pieces of the lab benchmarks: the bench's rsync daemons and the module runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from labrun import LAB_INVENTORY, node_exec  # noqa: E402

USER = "spark"
WORKER_LINKS = ("192.168.100.11", "192.168.101.11")
DAEMON_CONF = "/etc/sparkctl/checkpoint-rsyncd.conf"
BENCH_CONF = "/run/sparkctl-bench-rsyncd.conf"
BENCH_PORT = 8731
PASSWORD_FILE = "/etc/sparkctl/checkpoint-rsyncd.password"
DAEMON_USER = "sparkctl-mirror"


def start_bench_daemons(bench_root: str) -> list[str]:
    """The role's daemon configuration, module path moved to bench_root, one daemon per cable address."""
    node_exec("spark2", "sh", "-c", f"mkdir -p {bench_root} && chown {USER}: {bench_root} && "
              f"sed 's#^path = .*#path = {bench_root}#' {DAEMON_CONF} > {BENCH_CONF}")
    units = []
    for index, address in enumerate(WORKER_LINKS):
        unit = f"sparkctl-bench-rsyncd-{index}"
        node_exec("spark2", "systemd-run", f"--unit={unit}", "--collect", "rsync", "--daemon", "--no-detach",
                  f"--config={BENCH_CONF}", f"--address={address}", f"--port={BENCH_PORT}")
        units.append(unit)
    deadline = time.monotonic() + 10
    listening = f"ss -ltn 'sport = :{BENCH_PORT}' | grep -c LISTEN"
    while node_exec("spark2", "sh", "-c", listening, check=False).stdout.strip() != str(len(WORKER_LINKS)):
        if time.monotonic() > deadline:
            sys.exit("the bench rsync daemons did not start")
        time.sleep(0.2)
    return units


def stop_bench_daemons(units: list[str]) -> None:
    for unit in units:
        node_exec("spark2", "systemctl", "stop", unit, check=False)
    node_exec("spark2", "rm", "-f", BENCH_CONF)


def fresh_dir(node: str, root: str, name: str) -> str:
    """An empty root/name on node, root and all below it owned by the service user."""
    path = f"{root}/{name}"
    node_exec(node, "sh", "-c", f"rm -rf {path} && mkdir -p {path} && chown -R {USER}: {root}")
    return path


def daemon_worker_args(sub: str) -> dict:
    """checkpoint_sync's arguments that mirror to spark2's bench daemons (start_bench_daemons), into sub
    below their module path: one URL per cable address, the first the target, the others alternates."""
    urls = [f"rsync://{DAEMON_USER}@{ip}:{BENCH_PORT}/checkpoint/{sub}/" for ip in WORKER_LINKS]
    return {"workers": [{"name": "spark2", "target": urls[0], "alternate_targets": urls[1:]}],
            "rsync_password_file": PASSWORD_FILE}


def run_checkpoint_sync(args: dict, what: str) -> dict:
    """sparkctl.spark.checkpoint_sync on spark1 as the service user, through ansible; its result."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    ansible = str(Path(sys.executable).with_name("ansible"))
    proc = subprocess.run(
        [ansible, "spark1", "-i", str(LAB_INVENTORY), "-b", "--become-user", USER,
         "-e", "ansible_python_interpreter=/opt/sparkctl/tools/bin/python",
         "-m", "sparkctl.spark.checkpoint_sync", "-a", json.dumps(args), "-o"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"{what} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.split("=>", 1)[1])
