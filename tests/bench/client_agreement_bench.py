#!/usr/bin/env python3
"""sparkctl's benchmark client against vLLM's own (`vllm bench serve`), on the same real vLLM and the
same workload, in interleaved rounds on the lab.

Needs the lab converged with the real vLLM (tests/lab/vllm/README.md):
    ansible-playbook site.yml -i inventories/lab -e spark_model_profile=lab-vllm

Each round runs, one after the other, the same workload through the API proxy with the key:
  sparkctl   python -m sparkctl.bench run, from the control node (this checkout)
  vllm       vllm bench serve from the served venv on the head (vLLM's own client, the served
             model's tokenizer, the random dataset)
at one closed-loop concurrency (--concurrency, requests back to back per stream) and one open-loop
Poisson rate (--rate; each client draws its own arrivals). Fixed lengths: --prompt-tokens in,
--output-tokens out (ignore_eos), --requests per point, one warm-up request not counted.

It prints each round's figures and, per point, the median over the rounds of each ratio
sparkctl / vLLM: TTFT, TPOT and ITL medians and p99s, output throughput.

The two clients do not stand in the same place: sparkctl's crosses the lab's bridge to the head's
proxy, vLLM's reaches the same proxy on the head's loopback; the bridge adds tens of microseconds to
a request, far below the tiny model's token times on the lab's CPUs (tens of milliseconds).

Usage: .venv/bin/python tests/bench/client_agreement_bench.py [--rounds 3] [--concurrency 1] [--rate 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from labrun import api_key, management_address, node_exec, serving_venv, unit_command  # noqa: E402

HEAD = "spark1"
ENGINE_UNIT = "sparkctl-engine.service"
RESULT_DIR = "/var/tmp/sparkctl-agreement-bench"
# vLLM's result fields (vllm/benchmarks/serve.py) and sparkctl's point summary, by figure.
FIGURES = {
    "TTFT median": ("median_ttft_ms", ("ttft_s", "median")),
    "TTFT p99": ("p99_ttft_ms", ("ttft_s", "p99")),
    "TPOT median": ("median_tpot_ms", ("tpot_s", "median")),
    "TPOT p99": ("p99_tpot_ms", ("tpot_s", "p99")),
    "ITL median": ("median_itl_ms", ("itl_s", "median")),
    "ITL p99": ("p99_itl_ms", ("itl_s", "p99")),
    "output tok/s": ("output_throughput", ("output_throughput", None)),
}


def served_model_and_checkpoint() -> tuple[str, str]:
    words = unit_command(HEAD, ENGINE_UNIT)
    serve = words.index("serve")
    return words[words.index("--served-model-name") + 1], words[serve + 1]


def sparkctl_point(args, model: str, key_file: Path, out: Path, load: str | None) -> dict:
    argv = [sys.executable, "-m", "sparkctl.bench", "run", "--url", f"http://{management_address(HEAD)}:8000",
            "--model", model, "--prompt-tokens", str(args.prompt_tokens), "--max-tokens", str(args.output_tokens),
            "--warmup", "1", "--api-key-file", str(key_file), "--out", str(out), "--selftest-seconds", "0.2"]
    if load:
        argv += ["--load", load, "--num-requests", str(args.requests)]
    else:
        argv += ["--concurrency", str(args.concurrency),
                 "--requests-per-stream", str(max(1, args.requests // args.concurrency))]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"sparkctl.bench failed: {done.stderr[-3000:]}")
    doc = json.loads((out / "benchmark.json").read_text())
    summary = next(p["summary"] for p in doc["points"] if p["summary"])
    figures = {}
    for name, (_, (field, stat)) in FIGURES.items():
        value = summary[field] if stat is None else summary[field][stat]
        figures[name] = value if stat is None else value * 1000
    return figures


def vllm_point(args, model: str, checkpoint: str, key: str, rate: float | None, seed: int) -> dict:
    venv = serving_venv(HEAD)
    argv = [f"{venv}/bin/vllm", "bench", "serve", "--backend", "openai", "--base-url", "http://127.0.0.1:8000",
            "--endpoint", "/v1/completions", "--model", model, "--tokenizer", checkpoint, "--dataset-name", "random",
            "--random-input-len", str(args.prompt_tokens), "--random-output-len", str(args.output_tokens),
            "--num-prompts", str(args.requests), "--ignore-eos", "--num-warmups", "1", "--seed", str(seed),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--result-dir", RESULT_DIR, "--result-filename", "result.json"]
    argv += ["--request-rate", str(rate)] if rate else ["--request-rate", "inf", "--max-concurrency",
                                                       str(args.concurrency)]
    script = f"mkdir -p {RESULT_DIR} && OPENAI_API_KEY=\"$1\" HF_HUB_OFFLINE=1 exec " + shlex.join(argv)
    node_exec(HEAD, "sh", "-c", script, "sh", key)
    result = json.loads(node_exec(HEAD, "cat", f"{RESULT_DIR}/result.json").stdout)
    return {name: result[field] for name, (field, _) in FIGURES.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--rate", type=float, default=2.0, help="requests per second of the open-loop point")
    parser.add_argument("--requests", type=int, default=16, help="measured requests per point")
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=32)
    args = parser.parse_args()
    model, checkpoint = served_model_and_checkpoint()
    key = api_key(HEAD)
    points = {f"concurrency {args.concurrency}": None, f"poisson rate {args.rate:g}/s": args.rate}
    ratios: dict[str, dict[str, list[float]]] = {point: {name: [] for name in FIGURES} for point in points}
    with tempfile.TemporaryDirectory() as scratch:
        key_file = Path(scratch) / "key"
        key_file.touch(mode=0o600)
        key_file.write_text(key)
        try:
            for round_number in range(1, args.rounds + 1):
                for point, rate in points.items():
                    out = Path(scratch) / f"r{round_number}-{len(ratios[point]['TTFT median'])}-{rate or 0}"
                    load = f"poisson:rate={rate:g},seed={round_number}" if rate else None
                    # Alternate which client goes first, so neither always meets the warmer server.
                    order = ("sparkctl", "vllm") if round_number % 2 else ("vllm", "sparkctl")
                    measured = {}
                    for client in order:
                        measured[client] = (sparkctl_point(args, model, key_file, out, load) if client == "sparkctl"
                                            else vllm_point(args, model, checkpoint, key, rate, round_number))
                    print(f"round {round_number} {point}:")
                    for name in FIGURES:
                        ours, theirs = measured["sparkctl"][name], measured["vllm"][name]
                        ratio = ours / theirs if theirs else float("nan")
                        ratios[point][name].append(ratio)
                        print(f"  {name:<13} sparkctl {ours:9.2f}  vllm {theirs:9.2f}  ratio {ratio:5.2f}", flush=True)
        finally:
            node_exec(HEAD, "rm", "-rf", RESULT_DIR, check=False)
    print("\nmedian ratio sparkctl / vllm bench serve over the rounds")
    print(f"{'figure':<13} | " + " | ".join(f"{point:>20}" for point in points))
    for name in FIGURES:
        print(f"{name:<13} | " + " | ".join(f"{statistics.median(ratios[point][name]):20.3f}" for point in points))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
