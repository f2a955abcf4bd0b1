"""The benchmark stage's command line for its client (filter bench_client_argv), judged by the client's
own parser and validation (sparkctl/bench/cli.py) and held equal to what the stage's task rendered
before the command line moved out of YAML, case by case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jinja2.nativetypes import NativeEnvironment
from ansible_collections.sparkctl.spark.plugins.filter.benchmark import bench_client_argv
from role_templating import evaluate

from sparkctl.bench import cli

REPO = Path(__file__).resolve().parents[2]

# The role's literal defaults (roles/benchmark/defaults/main.yml), those that are not templates.
DEFAULTS = {
    "endpoint": "completions", "prompt_tokens": [2048, 8192, 32768], "concurrency": [1, 2, 4], "max_tokens": 128,
    "requests_per_stream": 2, "warmup": 1, "max_model_len": 0, "load": [], "num_requests": 16, "max_concurrency": 0,
    "slo": "", "sweep_rates": [], "burstiness": 1.0, "capacity_fraction": 0, "dataset": "", "seed": 0,
    "prefix_sharing": "", "depth_sweep": [], "repeat": 1, "export_vllm": True, "request_timeout": 900,
}

# The task's argv as the stage rendered it in YAML before: the reference the filter is held to.
BEFORE = """{{ [benchmark_python, '-m', 'sparkctl.bench', 'run',
    '--url', benchmark_api_url | trim, '--model', benchmark_model, '--endpoint', benchmark_endpoint,
    '--prompt-tokens', benchmark_prompt_tokens | join(','),
    '--max-tokens', benchmark_max_tokens | string, '--requests-per-stream', benchmark_requests_per_stream | string,
    '--warmup', benchmark_warmup | string, '--timeout', benchmark_request_timeout | string,
    '--reference', benchmark_out_dir ~ '/reference.json', '--label', label,
    '--out', benchmark_out_dir, '--progress-file', benchmark_out_dir ~ '/progress.jsonl',
    '--api-key-file', key_path]
   + (['--max-model-len', benchmark_max_model_len | string] if benchmark_max_model_len | int > 0 else [])
   + (['--load'] + benchmark_load if benchmark_load | length > 0 else [])
   + (['--sweep-rates', benchmark_sweep_rates | join(','), '--burstiness', benchmark_burstiness | string]
      if benchmark_sweep_rates | length > 0 else [])
   + (['--concurrency', benchmark_concurrency | join(',')]
      if benchmark_load | length == 0 and benchmark_sweep_rates | length == 0 else [])
   + ((['--num-requests', benchmark_num_requests | string]
       + (['--max-concurrency', benchmark_max_concurrency | string] if benchmark_max_concurrency | int > 0 else []))
      if benchmark_rate_loads | bool else [])
   + (['--slo', benchmark_slo | trim] if benchmark_slo | trim | length > 0 else [])
   + (['--capacity', benchmark_capacity_fraction | string] if benchmark_capacity_fraction | float > 0 else [])
   + (['--dataset', benchmark_dataset, '--seed', benchmark_seed | string] if benchmark_dataset | length > 0 else [])
   + (['--prefix-sharing', benchmark_prefix_sharing] if benchmark_prefix_sharing | length > 0 else [])
   + (['--depth-sweep', benchmark_depth_sweep | join(',')] if benchmark_depth_sweep | length > 0 else [])
   + (['--repeat', benchmark_repeat | string] if benchmark_repeat | int > 1 else [])
   + (['--export-vllm', benchmark_out_dir ~ '/vllm-results.jsonl'] if benchmark_export_vllm | bool else []) }}"""
RATE_LOADS = """{{ benchmark_sweep_rates | length > 0 or benchmark_dataset | length > 0
   or benchmark_load | select('match', '(?i)\\s*(constant|poisson|ramp):') | list | length > 0 }}"""
# The task's argv as it is now (roles/benchmark/tasks/run.yml).
AFTER = "{{ [benchmark_python, '-m', 'sparkctl.bench', 'run'] + benchmark_client_settings | sparkctl.spark.bench_client_argv }}"

CASES = {
    "the closed loops of the defaults": {},
    "a Poisson rate load with a concurrency cap": {"load": ["poisson:rate=4,seed=1"], "max_concurrency": 3},
    "closed loops given as loads": {"load": ["concurrency:1", "concurrency:4"]},
    "a sweep of rates searched for capacity": {"sweep_rates": [1, 2, 4], "burstiness": 0.5, "capacity_fraction": 0.9,
                                               "slo": " ttft=2s,tpot=100ms ", "prompt_tokens": [2048]},
    "a dataset, repeated, without the export": {"dataset": "DATASET", "seed": 7, "repeat": 3, "export_vllm": False,
                                                "max_model_len": 4096},
    "prefix sharing": {"prefix_sharing": "8,512", "prompt_tokens": [2048]},
    "a depth sweep": {"depth_sweep": [0, 1024, 4096], "prompt_tokens": [128]},
}


def _settings(tmp_path: Path, overrides: dict) -> dict:
    out = tmp_path / "benchmark"
    out.mkdir(exist_ok=True)
    (out / "reference.json").write_text("{}")
    key = tmp_path / "key"
    key.write_text("k" * 48 + "\n")
    key.chmod(0o600)
    settings = {**DEFAULTS, "api_url": " http://192.0.2.10:8000\n", "model": "lab-standin", "out_dir": str(out),
                "label": "lab-standin", "api_key_file": str(key), **overrides}
    if settings["dataset"] == "DATASET":
        data = tmp_path / "prompts.jsonl"
        data.write_text("".join(json.dumps({"prompt": f"question {n}", "output_tokens": 16}) + "\n" for n in range(4)))
        settings["dataset"] = str(data)
    return settings


@pytest.mark.parametrize("case", CASES)
def test_the_client_accepts_the_command_line_the_stage_builds(tmp_path, case):
    settings = _settings(tmp_path, CASES[case])
    argv = bench_client_argv(settings)
    run, extra = cli.validate(cli._parser().parse_args(["run", *argv]))
    assert run.url == "http://192.0.2.10:8000" and run.model == "lab-standin"
    assert extra["api_key"] == "k" * 48
    assert run.export_vllm == (f"{settings['out_dir']}/vllm-results.jsonl" if settings["export_vllm"] else None)
    assert run.repeat == settings["repeat"]
    if settings["load"] or settings["sweep_rates"]:
        assert "--concurrency" not in argv
    if settings["sweep_rates"]:
        assert run.sweep_rates == [float(rate) for rate in settings["sweep_rates"]]
        assert run.capacity_fraction == settings["capacity_fraction"]


@pytest.mark.parametrize("case", CASES)
def test_the_command_line_is_what_the_stage_rendered_before(tmp_path, case):
    settings = _settings(tmp_path, CASES[case])
    variables = {f"benchmark_{name}": value for name, value in settings.items() if name not in ("label", "api_key_file")}
    variables |= {"benchmark_python": "/usr/bin/python3", "label": settings["label"], "key_path": settings["api_key_file"]}
    variables["benchmark_rate_loads"] = RATE_LOADS
    before = evaluate(BEFORE, variables)
    assert _render_after(settings) == before


def _render_after(settings: dict) -> list:
    """The task's argv expression as Jinja evaluates it (the filter binds before the list's +), with the filter under
    its collection name."""
    environment = NativeEnvironment()
    environment.filters["sparkctl.spark.bench_client_argv"] = bench_client_argv
    return environment.from_string(AFTER).render(benchmark_python="/usr/bin/python3", benchmark_client_settings=settings)


def test_the_stage_passes_every_setting_of_the_role_and_nothing_else():
    task_file = (REPO / "roles" / "benchmark" / "tasks" / "run.yml").read_text()
    assert AFTER in task_file
    import yaml
    tasks = yaml.safe_load(task_file)[0]["block"]
    start = next(task for task in tasks if "benchmark_client_settings" in task.get("vars", {}))
    passed = start["vars"]["benchmark_client_settings"]
    assert set(passed) == set(DEFAULTS) | {"api_url", "model", "out_dir", "label", "api_key_file"}
    assert all(value == "{{ benchmark_%s }}" % name for name, value in passed.items()
               if name not in ("label", "api_key_file")), passed
