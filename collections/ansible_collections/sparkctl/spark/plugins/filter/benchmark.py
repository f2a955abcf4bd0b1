# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark stage's two views of its client: the command line it starts it with, from the role's
settings, and the client's progress file as one line, for the task that waits for it."""

from __future__ import annotations

import json
import re

from ansible.module_utils.parsing.convert_bool import boolean

DOCUMENTATION = r"""
name: bench_progress_line
short_description: The benchmark client's last progress record as one line
version_added: 0.1.0
description:
  - Reads the progress file of C(python -m sparkctl.bench run --progress-file), one JSON line per finished measurement
    point, and returns the last point as one line (which point of how many, its prompt tokens and streams, or the load
    of a rate point, the seconds since the start, the client's message); lines that are not JSON are skipped.
  - Before the first point has finished it says the client is warming up.
  - Companion filter C(bench_client_argv) (input a dict of the benchmark role's settings, its variables without the
    C(benchmark_) prefix, with C(api_key_file) and C(label)) returns the arguments of C(python -m sparkctl.bench run).
    Options left at their off value are not passed; C(--num-requests) and C(--max-concurrency) only with a rate load
    (a sweep of rates, a dataset, or a C(--load) schedule), which the client requires.
options:
  _input:
    description: The progress file's text (or its lines joined).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Show how far the benchmark got
  ansible.builtin.debug:
    msg: "{{ progress_slurp.content | b64decode | sparkctl.spark.bench_progress_line }}"
"""

RETURN = r"""
_value:
  description: The line.
  type: str
"""

# A --load entry that is a schedule (a rate load) rather than a number of streams.
_RATE_LOAD = re.compile(r"(?i)\s*(constant|poisson|ramp):")


def bench_client_argv(settings):
    """The arguments of `python -m sparkctl.bench run` for the benchmark role's settings (its variables
    without the `benchmark_` prefix; `api_key_file` the private file the run wrote the key to, `label` the
    profile's name). Options left at their off value are not passed, so the client's own defaults apply."""
    s = dict(settings)
    out = s["out_dir"]
    argv = ["--url", str(s["api_url"]).strip(), "--model", s["model"], "--endpoint", s["endpoint"],
            "--prompt-tokens", ",".join(str(n) for n in s["prompt_tokens"]),
            "--max-tokens", str(s["max_tokens"]), "--requests-per-stream", str(s["requests_per_stream"]),
            "--warmup", str(s["warmup"]), "--timeout", str(s["request_timeout"]),
            "--reference", out + "/reference.json", "--label", s["label"],
            "--out", out, "--progress-file", out + "/progress.jsonl", "--api-key-file", s["api_key_file"]]
    load = list(s.get("load") or [])
    sweep_rates = list(s.get("sweep_rates") or [])
    dataset = s.get("dataset") or ""
    if int(s.get("max_model_len") or 0) > 0:
        argv += ["--max-model-len", str(s["max_model_len"])]
    if load:
        argv += ["--load"] + [str(entry) for entry in load]
    if sweep_rates:
        argv += ["--sweep-rates", ",".join(str(rate) for rate in sweep_rates), "--burstiness", str(s["burstiness"])]
    if not load and not sweep_rates:
        argv += ["--concurrency", ",".join(str(n) for n in s["concurrency"])]
    # The client refuses --num-requests and --max-concurrency without a rate load to apply them to.
    if sweep_rates or dataset or any(_RATE_LOAD.match(str(entry)) for entry in load):
        argv += ["--num-requests", str(s["num_requests"])]
        if int(s.get("max_concurrency") or 0) > 0:
            argv += ["--max-concurrency", str(s["max_concurrency"])]
    if str(s.get("slo") or "").strip():
        argv += ["--slo", str(s["slo"]).strip()]
    if float(s.get("capacity_fraction") or 0) > 0:
        argv += ["--capacity", str(s["capacity_fraction"])]
    if dataset:
        argv += ["--dataset", dataset, "--seed", str(s["seed"])]
    if s.get("prefix_sharing"):
        argv += ["--prefix-sharing", s["prefix_sharing"]]
    if s.get("depth_sweep"):
        argv += ["--depth-sweep", ",".join(str(depth) for depth in s["depth_sweep"])]
    if int(s.get("repeat") or 1) > 1:
        argv += ["--repeat", str(s["repeat"])]
    if boolean(s.get("export_vllm") or False, strict=False):
        argv += ["--export-vllm", out + "/vllm-results.jsonl"]
    return argv


def bench_progress_line(text):
    """The last progress record of the benchmark client as one human line."""
    records = []
    for line in str(text or "").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    if not records:
        return "benchmark: warming up (no measurement point finished yet)"
    last = records[-1]
    # A rate point (a --load with a schedule) has no streams: its load says what it was.
    if last.get("streams") is None and last.get("load"):
        load = "load %s" % last["load"]
    else:
        load = "%s streams" % last.get("streams", "?")
    return "benchmark: point %s of %s done (%s prompt tokens, %s) after %.0f s%s" % (
        last.get("point", "?"), last.get("points", "?"), last.get("prompt_tokens", "?"), load,
        float(last.get("elapsed_s") or 0), (": " + last["message"]) if last.get("message") else "")


class FilterModule:
    def filters(self):
        return {"bench_progress_line": bench_progress_line, "bench_client_argv": bench_client_argv}
