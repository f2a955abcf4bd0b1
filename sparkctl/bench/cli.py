"""python -m sparkctl.bench run|selftest|compare: argument checks (all before any request), the
run, the report. Exit status: 0 all measured requests succeeded, 1 a measured request (or the
warm-up / prompt sizing) failed - the report is still written, failures marked - or nothing
could be measured, 2 usage error (a --model the server does not list included), 130/143
interrupted by SIGINT/SIGTERM - the partial report of the points measured so far is written
first. The API key is read from a file only its owner can read
(--api-key-file) or from the environment variable named by --api-key-env; it never appears
in argv, output or the report. `compare` sets two runs' benchmark.json side by side (compare.py,
LOAD.md): exit 0, or 2 when a file cannot be read or is not a benchmark.json.

The load flags (--load, --num-requests, --max-concurrency, --sweep-rates, --burstiness, --slo,
--capacity; README.md, "Load shapes, goodput and capacity") are checked together before any
request too: a flag that would be ignored in its company is refused, naming what to give instead.
So are the workloads (--dataset with --seed, --prefix-sharing, --depth-sweep; workloads.py),
--repeat and --export-vllm (export.py): a dataset is read whole, and a malformed entry refused
naming FILE:LINE, before the first request."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import signal
import sys
from pathlib import Path
from urllib.parse import urlsplit

from . import compare as compare_mod
from . import export
from . import reference as reference_mod
from . import report, workloads
from .arrivals import DEFAULT_SEED, LoadSpec, SpecError, parse_load
from .goodput import parse_slo
from .runner import ModelChoiceError, Runner
from .selftest import DEFAULT_SECONDS, run_selftest
from .settings import (DEFAULT_API_KEY_ENV, DEFAULT_CONCURRENCY, DEFAULT_NUM_REQUESTS, DEFAULT_PROMPT_TOKENS,
                       DEFAULT_STALL_TIMEOUT_S, Settings)

PROG = "python -m sparkctl.bench"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIZE = re.compile(r"^(\d+)([kKmM]?)$")


class UsageError(Exception):
    def __init__(self, flag: str, problem: str, fix: str):
        super().__init__(f"{flag}: {problem}; {fix}")


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # argparse would echo unknown arguments verbatim; one of them could be a secret.
        if message.startswith("unrecognized arguments:"):
            flags = [word.split("=", 1)[0] for word in message.split(":", 1)[1].split() if word.startswith("-")]
            message = "unrecognized arguments" + (f": {' '.join(flags)}" if flags else "")
        self.exit(2, f"{self.prog}: error: {message}\nsee `{PROG} {{run,selftest,compare}} --help`\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, allow_abbrev=False, description="Streaming benchmark of an OpenAI-compatible endpoint.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    run = sub.add_parser("run", allow_abbrev=False, help="measure TTFT, decode and aggregate throughput; write the report",
                         description="Measure an OpenAI-compatible endpoint; see sparkctl/bench/README.md.")
    run.add_argument("--url", required=True, help="server base URL, e.g. http://172.30.77.11:8000 (/v1 is added)")
    run.add_argument("--model", default=None,
                     help="served model name, as GET /v1/models lists it; default: the one model the server lists")
    run.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    # None, not the default list: with a workload only the workload is measured unless given.
    run.add_argument("--prompt-tokens", default=None,
                     help="comma-separated prompt lengths in tokens (K = 1024), default "
                          f"{','.join(map(str, DEFAULT_PROMPT_TOKENS))} (none with a workload flag)")
    # None, not the default list: --concurrency given beside --load is refused, not ignored.
    run.add_argument("--concurrency", default=None,
                     help="comma-separated stream counts of the closed loops, default "
                          f"{','.join(map(str, DEFAULT_CONCURRENCY))} (with --load: give concurrency:N loads instead)")
    run.add_argument("--max-tokens", default="128", help="completion tokens per request, default %(default)s")
    run.add_argument("--requests-per-stream", default="2", help="back-to-back requests per stream, default %(default)s")
    run.add_argument("--warmup", default="1", help="warm-up requests before measuring (not counted), default %(default)s")
    run.add_argument("--max-model-len", default=None, help="skip lengths where prompt + max-tokens exceeds this")
    run.add_argument("--timeout", default="600", help="seconds per request, whole stream included, default %(default)s")
    run.add_argument("--stall-timeout", default=f"{DEFAULT_STALL_TIMEOUT_S:g}",
                     help="seconds without a new token, once the first has come, before a request fails as stalled, "
                          "default %(default)s")
    run.add_argument("--reference", default=None, help="JSON file: the profile's `reference` mapping")
    run.add_argument("--label", default="", help="title of the report")
    run.add_argument("--out", required=True, help="output directory")
    run.add_argument("--progress-file", default=None, help="append one JSON line per finished measurement point")
    run.add_argument("--api-key-env", default=DEFAULT_API_KEY_ENV,
                     help="environment variable holding the API key, default %(default)s")
    run.add_argument("--api-key-file", default=None,
                     help="file holding only the API key, readable by its owner only (mode 0600); wins over --api-key-env")
    run.add_argument("--selftest-seconds", default=str(DEFAULT_SECONDS),
                     help="duration of the client self-test after the run, default %(default)s")
    run.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                     help="do not send ignore_eos; answers may then stop early (a server that refuses the field "
                          "with a 400/422 is detected and the field dropped without this flag)")
    run.add_argument("--strict", action="store_true",
                     help="fail requests whose token chunks arrived in bursts (together, less than 200 us apart, as "
                          "behind a buffering proxy) instead of warning: their TTFT, TPOT, ITL and decode rate are not "
                          "the server's")
    loads = run.add_argument_group("load shapes, goodput and capacity (sparkctl/bench/LOAD.md)")
    loads.add_argument("--load", action="extend", nargs="+", default=None, metavar="SPEC",
                       help="the loads to measure each prompt length at, in order (repeatable; several specs after one "
                            "--load too): constant:rate=R, poisson:rate=R[,burstiness=B][,seed=S], "
                            "ramp:start=R0,end=R1[,shape=linear|exponential][,burstiness=B][,seed=S] (requests/s), or "
                            "concurrency:N (a closed loop); default: the closed loops of --concurrency")
    loads.add_argument("--num-requests", default=None, metavar="N",
                       help=f"requests of each rate point, sent at the schedule's offsets, default {DEFAULT_NUM_REQUESTS}")
    loads.add_argument("--max-concurrency", default=None, metavar="N",
                       help="at most this many requests of a rate point in flight; a request whose time has come waits "
                            "for a free slot (default: unbounded)")
    loads.add_argument("--sweep-rates", default=None, metavar="R1,R2,...",
                       help="ascending requests/s, each a poisson load (instead of --load): e.g. 1,2,4,8")
    loads.add_argument("--burstiness", default=None, metavar="B",
                       help="burstiness of the --sweep-rates loads: 1 Poisson (default), below 1 burstier, above 1 more "
                            "even, inf evenly spaced")
    loads.add_argument("--slo", default=None, metavar="SPEC",
                       help="latency objectives with units, e.g. ttft=2s,tpot=100ms (metrics ttft, tpot, itl, e2e): each "
                            "point's goodput, the requests/s that met all of them")
    loads.add_argument("--capacity", default=None, metavar="FRACTION",
                       help="walk the rate loads upwards (--sweep-rates, or --load with ascending rates) and report the "
                            "highest rate at which this fraction of requests met --slo, e.g. 0.9")

    work = run.add_argument_group("workloads, repetitions and export (sparkctl/bench/README.md, \"Workloads\")")
    work.add_argument("--dataset", default=None, metavar="FILE.jsonl",
                      help="a file of conversations, ShareGPT's JSON or JSONL ({\"conversations\": [{\"from\": \"human\", "
                           "...}, {\"from\": \"gpt\", ...}]}) or JSONL of {\"prompt\", \"output_tokens\" or \"completion\"}: "
                           "--num-requests of them, sampled by --seed, sent at each load, each with its first human "
                           "turn as prompt and its answer's length as max tokens")
    work.add_argument("--seed", default=None, metavar="N",
                      help="seed of the --dataset sample, default 0: the same seed sends the same conversations")
    work.add_argument("--prefix-sharing", default=None, metavar="N,PREFIX_TOKENS",
                      help="N requests one after another sharing one PREFIX_TOKENS-long prefix, each with its own short "
                           "suffix: the first request's TTFT (a prefix-cache miss) against the rest's (hits), e.g. 8,4096")
    work.add_argument("--depth-sweep", default=None, metavar="D1,D2,...",
                      help="context depths in tokens (K = 1024), e.g. 0,4096,16384,65536: at each, prefill tok/s "
                           "(prompt tokens / TTFT) and single-stream decode tok/s; depths beyond --max-model-len are "
                           "skipped")
    work.add_argument("--repeat", default="1", metavar="K",
                      help="run each measurement point and workload K times; above 1 the report gives each headline "
                           "figure's mean and 95 %% confidence interval, default %(default)s")
    work.add_argument("--export-vllm", default=None, metavar="FILE.json",
                      help="also write each measured point's results under the field names `vllm bench serve "
                           "--save-result` writes, one JSON object a line")

    test = sub.add_parser("selftest", allow_abbrev=False, help="print the client's own parse capacity (loopback only)")
    test.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    test.add_argument("--seconds", default=str(DEFAULT_SECONDS), help="duration, default %(default)s")

    comparison = sub.add_parser("compare", allow_abbrev=False, help="compare two runs' benchmark.json, point by point",
                                description="Before/after comparison of two benchmark.json files: median TTFT, median "
                                            "decode and aggregate tok/s per point, each judged faster, slower or within "
                                            "noise (Welch's t-test); see sparkctl/bench/LOAD.md.")
    comparison.add_argument("before", metavar="BEFORE.json", help="benchmark.json of the run before the change")
    comparison.add_argument("after", metavar="AFTER.json", help="benchmark.json of the run after the change")
    comparison.add_argument("--also-before", action="append", default=[], metavar="FILE.json",
                            help="another repetition of the before run (repeatable): its requests are pooled and its "
                                 "aggregates make the aggregate figure judgeable")
    comparison.add_argument("--also-after", action="append", default=[], metavar="FILE.json",
                            help="another repetition of the after run (repeatable)")
    comparison.add_argument("--out", default=None, metavar="FILE.md", help="also write the Markdown table to this file")
    return parser


def _int(flag: str, text: str, minimum: int = 1, example: str = "2") -> int:
    match = _SIZE.match(str(text).strip())
    value = None
    if match:
        value = int(match.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[match.group(2).lower()]
    if value is None or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise UsageError(flag, f"{text!r} is not {kind}", f"give e.g. {flag} {example}")
    return value


def _int_list(flag: str, text: str, example: str) -> list[int]:
    items = [item for item in str(text).split(",") if item.strip()]
    if not items:
        raise UsageError(flag, "no value given", f"give a comma-separated list such as {flag} {example}")
    values = []
    for item in items:
        try:
            values.append(_int(flag, item))
        except UsageError:
            raise UsageError(flag, f"{item.strip()!r} is not a positive integer",
                             f"give a comma-separated list such as {flag} {example}") from None
    return sorted(set(values))


def _seconds(flag: str, text: str, example: str = "600") -> float:
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value > 0 or value != value or value == float("inf"):
        raise UsageError(flag, f"{text!r} is not a positive number of seconds", f"give e.g. {flag} {example}")
    return value


def _url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError("--url", f"{text!r} is not an http:// or https:// URL with a host",
                         "give the server's base URL, e.g. --url http://172.30.77.11:8000")
    if parts.username or parts.password:
        raise UsageError("--url", "the URL carries credentials", "put the API key in the environment variable named by "
                                                                 "--api-key-env instead")
    if parts.query or parts.fragment:
        raise UsageError("--url", "the URL has a query or fragment", "give only scheme://host:port[/path]")
    try:
        _ = parts.port  # urlsplit checks the port only when it is read
    except ValueError:
        raise UsageError("--url", "the port is not a number between 0 and 65535", "fix the port in --url") from None
    return text.rstrip("/")


def _fraction(flag: str, text: str, example: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value <= 1:
        raise UsageError(flag, f"{text!r} is not a fraction in (0, 1]", f"give e.g. {flag} {example}")
    return value


def _rates(flag: str, text: str) -> list[float]:
    """Ascending, finite, positive requests/s: a sweep walks rates upwards, and an infinite one has no
    place on its curve."""
    example = f"{flag} 1,2,4,8"
    items = [item.strip() for item in str(text).split(",") if item.strip()]
    if not items:
        raise UsageError(flag, "no rate given", f"give ascending requests/s, e.g. {example}")
    rates = []
    for item in items:
        try:
            rate = float(item)
        except ValueError:
            rate = math.nan
        if not 0 < rate < math.inf:
            raise UsageError(flag, f"{item!r} is not a positive, finite number of requests/s", f"give e.g. {example}")
        if rates and rate <= rates[-1]:
            raise UsageError(flag, f"{item} after {rates[-1]:g}: the rates do not ascend",
                             f"give each rate once, lowest first, e.g. {example}")
        rates.append(rate)
    return rates


def _load_specs(args: argparse.Namespace) -> tuple[list[LoadSpec], list[float]]:
    """(the --load specs, or the poisson specs --sweep-rates makes; the sweep's rates). Both empty:
    the closed loops of --concurrency."""
    if args.sweep_rates is not None and args.load:
        raise UsageError("--sweep-rates", "cannot be combined with --load",
                         "give the rates either as --sweep-rates 1,2,4,8 or as --load specs, e.g. "
                         "--load poisson:rate=1 poisson:rate=2")
    if args.burstiness is not None and args.sweep_rates is None:
        raise UsageError("--burstiness", "applies to --sweep-rates only",
                         "add --sweep-rates 1,2,4,8, or give the burstiness in each --load spec, e.g. "
                         "--load poisson:rate=4,burstiness=0.5")
    if args.sweep_rates is not None:
        rates = _rates("--sweep-rates", args.sweep_rates)
        burstiness = 1.0
        if args.burstiness is not None:
            try:
                burstiness = float(args.burstiness)
            except ValueError:
                burstiness = math.nan
            if not burstiness > 0:
                raise UsageError("--burstiness", f"{args.burstiness!r} is not a positive number",
                                 "give e.g. --burstiness 0.5 (burstier), 1 (Poisson) or inf (evenly spaced)")
        return [LoadSpec(kind="poisson", rate=rate, burstiness=burstiness, seed=DEFAULT_SEED) for rate in rates], rates
    specs = []
    for text in args.load or []:
        try:
            spec = parse_load(text)
        except SpecError as exc:
            raise UsageError(exc.flag, exc.problem, exc.fix) from None
        if str(spec) in map(str, specs):
            raise UsageError("--load", f"{spec} is given twice", "give each load once")
        specs.append(spec)
    return specs, []


def _check_capacity(args: argparse.Namespace, specs: list[LoadSpec], prompt_tokens: list[int]) -> float | None:
    """The --capacity fraction, with what a capacity search needs around it: an SLO, one prompt
    length, and rate loads (constant or poisson, finite) listed with ascending rates."""
    if args.capacity is None:
        return None
    fraction = _fraction("--capacity", args.capacity, "0.9")
    if args.slo is None:
        raise UsageError("--capacity", "needs the latency objectives each rate is judged by",
                         "give --slo too, e.g. --slo ttft=2s,tpot=100ms")
    if not specs:
        raise UsageError("--capacity", "needs rates to walk", "give --sweep-rates 1,2,4,8 or ascending rate loads, e.g. "
                                                              "--load poisson:rate=1 poisson:rate=2 poisson:rate=4")
    if not prompt_tokens:
        raise UsageError("--capacity", "a capacity search measures one --prompt-tokens length, and none is given",
                         "give one, e.g. --prompt-tokens 2048")
    if len(prompt_tokens) > 1:
        raise UsageError("--prompt-tokens", "a capacity search measures one prompt length",
                         f"give one, e.g. --prompt-tokens {prompt_tokens[0]}, and run again for another")
    previous = None
    for spec in specs:
        if spec.kind not in ("constant", "poisson") or spec.rate == math.inf:
            raise UsageError("--load", f"{spec} has no finite rate for a capacity search to walk",
                             "give constant or poisson loads with finite rates, e.g. --load poisson:rate=1 poisson:rate=2")
        if previous is not None and spec.rate <= previous.rate:
            raise UsageError("--load", f"{spec} comes after {previous}: the rates do not ascend",
                             "list the loads lowest rate first, each rate once, e.g. --load poisson:rate=1 poisson:rate=2")
        previous = spec
    return fraction


def _workload_given(args: argparse.Namespace) -> bool:
    return any(value is not None for value in (args.dataset, args.prefix_sharing, args.depth_sweep))


def _prompt_tokens(args: argparse.Namespace) -> list[int]:
    """--prompt-tokens; without it the default lengths, or none when a workload is given (a
    workload alone should not cost the default points' minutes)."""
    if args.prompt_tokens is not None:
        return _int_list("--prompt-tokens", args.prompt_tokens, "2048,8192,32768")
    return [] if _workload_given(args) else list(DEFAULT_PROMPT_TOKENS)


def _prefix_sharing(text: str | None, settings: Settings) -> dict[str, int] | None:
    """--prefix-sharing N,PREFIX_TOKENS -> {requests, prefix_tokens}: at least two requests (a
    miss and a hit), a prefix that leaves --max-tokens room in --max-model-len."""
    if text is None:
        return None
    example = "--prefix-sharing 8,4096"
    items = [item.strip() for item in text.split(",")]
    if len(items) != 2:
        raise UsageError("--prefix-sharing", f"{text!r} is not N,PREFIX_TOKENS", f"give e.g. {example}")
    requests = _int("--prefix-sharing", items[0], example="8,4096")
    prefix_tokens = _int("--prefix-sharing", items[1], example="8,4096")
    if requests < 2:
        raise UsageError("--prefix-sharing", f"{requests} request: the first misses the prefix cache and the rest hit it, "
                                             "so at least 2 are needed", f"give e.g. {example}")
    if settings.max_model_len is not None and prefix_tokens + settings.max_tokens > settings.max_model_len:
        raise UsageError("--prefix-sharing", f"a {prefix_tokens}-token prefix and --max-tokens {settings.max_tokens} "
                                             f"exceed --max-model-len {settings.max_model_len}",
                         f"give a shorter prefix, e.g. --prefix-sharing {requests},"
                         f"{max(1, settings.max_model_len - settings.max_tokens) // 2}")
    return {"requests": requests, "prefix_tokens": prefix_tokens}


def _depths(text: str | None) -> list[int]:
    """--depth-sweep: context depths in tokens, 0 allowed, ascending, each once."""
    if text is None:
        return []
    example = "--depth-sweep 0,4096,16384,65536"
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UsageError("--depth-sweep", "no depth given", f"give a comma-separated list such as {example}")
    depths = set()
    for item in items:
        try:
            depths.add(_int("--depth-sweep", item, minimum=0))
        except UsageError:
            raise UsageError("--depth-sweep", f"{item!r} is not a number of tokens (0 or more)",
                             f"give a comma-separated list such as {example}") from None
    return sorted(depths)


def _dataset(args: argparse.Namespace, settings: Settings) -> workloads.Dataset | None:
    """The --dataset file read whole (a malformed entry refused with FILE:LINE) and fitted to
    --max-model-len, or None."""
    if args.seed is not None and args.dataset is None:
        raise UsageError("--seed", "applies to --dataset only", "add --dataset FILE.jsonl, or give a rate load's seed in "
                                                                "its spec, e.g. --load poisson:rate=4,seed=7")
    if args.dataset is None:
        return None
    try:
        return workloads.fit_model_len(workloads.read_dataset(args.dataset), settings.max_model_len)
    except workloads.DatasetError as exc:
        raise UsageError(exc.flag, exc.problem, exc.fix) from None


def _export_path(text: str | None) -> str | None:
    if text is None:
        return None
    path = Path(text)
    if path.is_dir() or not path.parent.is_dir():
        raise UsageError("--export-vllm", f"cannot write {path}", "give a file path in an existing directory, e.g. "
                                                                  "--export-vllm results/vllm.json")
    return text


def read_key_file(text: str) -> str:
    """The key in a file only its owner can read: a key others can read is refused, not used."""
    try:
        fd = os.open(text, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise UsageError("--api-key-file", f"cannot read {text} ({exc.strerror or exc})",
                         "give the file holding the key, mode 0600") from None
    with os.fdopen(fd, encoding="utf-8") as handle:
        mode = os.fstat(handle.fileno()).st_mode & 0o777
        if mode & 0o077:
            raise UsageError("--api-key-file", f"{text} is readable by others (mode {mode:04o})",
                             f"chmod 600 {text}, and change the key if anyone else could have read it")
        key = handle.read().strip()
    if not key:
        raise UsageError("--api-key-file", f"{text} is empty", "write the key into it, alone on one line")
    return key


def validate(args: argparse.Namespace) -> tuple[Settings, dict]:
    """The run's Settings plus {out, progress_file, reference, api_key}; UsageError on the first bad
    flag. api_key is the key read from --api-key-file, else None (then --api-key-env is read)."""
    if args.model is not None and not args.model.strip():
        raise UsageError("--model", "empty", "give the served model name, e.g. --model solar-open2, or leave --model out "
                                             "to take the one model the server lists")
    if not _ENV_NAME.match(args.api_key_env):
        raise UsageError("--api-key-env", "not an environment variable name",
                         f"give the NAME of the variable holding the key, e.g. --api-key-env {DEFAULT_API_KEY_ENV}")
    specs, sweep_rates = _load_specs(args)
    if specs and args.concurrency is not None:
        raise UsageError("--concurrency", "cannot be combined with --load or --sweep-rates",
                         "give the closed loops as loads instead, e.g. --load concurrency:1 concurrency:4")
    rate_loads = any(spec.kind != "concurrency" for spec in specs)
    if args.num_requests is not None and not rate_loads and args.dataset is None:
        raise UsageError("--num-requests", "applies to rate loads and --dataset only, and neither is given",
                         "add a rate load, e.g. --load poisson:rate=4 or --sweep-rates 1,2,4,8, or --dataset FILE.jsonl "
                         "(closed loops send --requests-per-stream requests per stream)")
    if args.max_concurrency is not None and not rate_loads:
        raise UsageError("--max-concurrency", "applies to rate loads only, and none is given",
                         "add one, e.g. --load poisson:rate=4 or --sweep-rates 1,2,4,8 (closed loops send "
                         "--requests-per-stream requests per stream)")
    slo = None
    if args.slo is not None:
        try:
            slo = parse_slo(args.slo)
        except SpecError as exc:
            raise UsageError(exc.flag, exc.problem, exc.fix) from None
    prompt_tokens = _prompt_tokens(args)
    if specs:
        concurrency = sorted({spec.streams for spec in specs if spec.kind == "concurrency"})
    else:
        concurrency = _int_list("--concurrency", args.concurrency or ",".join(map(str, DEFAULT_CONCURRENCY)), "1,2,4")
    settings = Settings(
        url=_url(args.url),
        model=args.model,
        endpoint=args.endpoint,
        prompt_tokens=prompt_tokens,
        concurrency=concurrency,
        max_tokens=_int("--max-tokens", args.max_tokens, example="128"),
        requests_per_stream=_int("--requests-per-stream", args.requests_per_stream),
        warmup=_int("--warmup", args.warmup, minimum=0, example="1"),
        max_model_len=None if args.max_model_len is None else _int("--max-model-len", args.max_model_len, example="262144"),
        timeout_s=_seconds("--timeout", args.timeout),
        stall_timeout_s=_seconds("--stall-timeout", args.stall_timeout, f"{DEFAULT_STALL_TIMEOUT_S:g}"),
        strict=args.strict,
        label=args.label,
        api_key_env=args.api_key_env,
        ignore_eos=args.ignore_eos,
        selftest_s=_seconds("--selftest-seconds", args.selftest_seconds, "1.5"),
        loads=[str(spec) for spec in specs],
        num_requests=(DEFAULT_NUM_REQUESTS if args.num_requests is None
                      else _int("--num-requests", args.num_requests, example=str(DEFAULT_NUM_REQUESTS))),
        max_concurrency=None if args.max_concurrency is None else _int("--max-concurrency", args.max_concurrency,
                                                                        example="4"),
        sweep_rates=sweep_rates,
        burstiness=specs[0].burstiness if sweep_rates else None,
        slo=slo,
        capacity_fraction=_check_capacity(args, specs, prompt_tokens),
        repeat=_int("--repeat", args.repeat, example="5"),
        dataset=args.dataset,
        dataset_seed=0 if args.seed is None else _int("--seed", args.seed, minimum=0, example="0"),
        depth_sweep=_depths(args.depth_sweep),
        export_vllm=_export_path(args.export_vllm),
    )
    if settings.max_tokens < 2:
        raise UsageError("--max-tokens", "decode rate needs at least 2 completion tokens", "give e.g. --max-tokens 128")
    if settings.max_model_len is not None and settings.max_tokens >= settings.max_model_len:
        raise UsageError("--max-tokens", f"{settings.max_tokens} leaves no room for a prompt in --max-model-len "
                                         f"{settings.max_model_len}", "lower --max-tokens or raise --max-model-len")
    settings.prefix_sharing = _prefix_sharing(args.prefix_sharing, settings)
    dataset = _dataset(args, settings)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError("--out", f"{out} exists and is not a directory", "give a directory (it is created if missing)")
    progress_file = None
    if args.progress_file:
        progress_file = Path(args.progress_file)
        if progress_file.is_dir() or not progress_file.parent.is_dir():
            raise UsageError("--progress-file", f"cannot append to {progress_file}",
                             "give a file path in an existing directory")
    reference = None
    if args.reference:
        try:
            reference = reference_mod.load(args.reference)
        except reference_mod.ReferenceFileError as exc:
            raise UsageError("--reference", str(exc), "give a JSON file holding the profile's `reference` mapping") from None
    api_key = read_key_file(args.api_key_file) if args.api_key_file else None
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError("--out", f"cannot create {out} ({exc.strerror or exc})", "give a writable directory") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError("--out", f"{out} is not writable", "give a writable directory")
    return settings, {"out": out, "progress_file": progress_file, "reference": reference, "api_key": api_key,
                      "dataset": dataset}


def _refuse_key_flag(argv: list[str]) -> bool:
    return any(a == "--api-key" or a.startswith("--api-key=") for a in argv)


def main(argv: list[str] | None = None, *, transport=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if _refuse_key_flag(argv):
        print(f"{PROG}: --api-key is not accepted (argv is visible to every user of the machine); put the key in the "
              f"environment variable named by --api-key-env (default {DEFAULT_API_KEY_ENV})", file=sys.stderr)
        return 2
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.command is None:
        _parser().print_help(sys.stderr)
        return 2
    if args.command == "compare":
        return _compare(args)
    if args.command == "selftest":
        try:
            seconds = _seconds("--seconds", args.seconds, "1.5")
        except UsageError as exc:
            print(f"{PROG} selftest: {exc}", file=sys.stderr)
            return 2
        result = run_selftest(args.endpoint, seconds)
        if result["error"] or not result["tokens_per_s"]:
            print(f"client self-test failed: {result['error']}", file=sys.stderr)
            return 1
        print(f"client capacity: {result['tokens_per_s']:,.0f} tokens/s ({result['endpoint']} chunks, {result['tokens']} tokens "
              f"in {result['seconds']:.2f} s, {result['cpu_s']:.2f} s CPU; {result['method']})")
        return 0

    try:
        settings, extra = validate(args)
    except UsageError as exc:
        print(f"{PROG} run: {exc}", file=sys.stderr)
        return 2
    api_key = extra["api_key"] or os.environ.get(settings.api_key_env) or None
    if api_key is None:
        print(f"note: ${settings.api_key_env} is not set; requests carry no API key", file=sys.stderr)
    runner = Runner(settings, api_key, transport=transport, progress_file=extra["progress_file"], reference=extra["reference"],
                    dataset=extra["dataset"])
    interrupted: list[str] = []
    try:
        doc = asyncio.run(_run_until_signal(runner, interrupted))
    except ModelChoiceError as exc:
        print(f"{PROG} run: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, asyncio.CancelledError):
        name = interrupted[0] if interrupted else "SIGINT"
        doc = runner.partial_document(name)
        code = 128 + int(getattr(signal, name))
        print(f"interrupted by {name}: writing the partial report of the {sum(1 for p in doc['points'] if p['summary'])} "
              "point(s) measured so far", file=sys.stderr)
        _report(doc, extra["out"])
        _export(doc, settings.export_vllm)
        return code
    status = _report(doc, extra["out"])
    return _export(doc, settings.export_vllm) or status


async def _run_until_signal(runner: Runner, interrupted: list[str]) -> dict:
    """runner.run(), cancelled by SIGTERM as Ctrl-C cancels it (asyncio.run turns SIGINT into
    KeyboardInterrupt), so either way the caller can write the partial report."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()

    def terminate():
        interrupted.append("SIGTERM")
        task.cancel()

    previous = signal.getsignal(signal.SIGTERM)
    try:
        loop.add_signal_handler(signal.SIGTERM, terminate)
    except (NotImplementedError, RuntimeError, ValueError):
        previous = None  # not the main thread, or no signals here: Ctrl-C still works
    try:
        return await runner.run()
    finally:
        if previous is not None:
            # remove_signal_handler would leave SIG_DFL: give back what the caller had.
            loop.remove_signal_handler(signal.SIGTERM)
            signal.signal(signal.SIGTERM, previous)


def _compare(args: argparse.Namespace) -> int:
    """Print (and with --out write) the Markdown comparison -> 0, or 2 naming the file that cannot be used."""
    try:
        before = [compare_mod.load_document(path) for path in [args.before, *args.also_before]]
        after = [compare_mod.load_document(path) for path in [args.after, *args.also_after]]
        out = None
        if args.out:
            out = Path(args.out)
            if out.is_dir() or not out.parent.is_dir():
                raise UsageError("--out", f"cannot write {out}", "give a file path in an existing directory")
    except (compare_mod.DocumentError, UsageError) as exc:
        print(f"{PROG} compare: {exc}", file=sys.stderr)
        return 2
    text = compare_mod.render_markdown(compare_mod.compare(before, after), before_name=args.before, after_name=args.after)
    if out is not None:
        try:
            report.atomic_write(out, text.encode("utf-8"))
        except OSError as exc:
            print(f"{PROG} compare: --out: cannot write {out} ({exc.strerror or exc}); give a writable path", file=sys.stderr)
            return 2
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0


def _export(doc: dict, path: str | None) -> int:
    """--export-vllm: write the vLLM-named results -> 0, or 1 when the file cannot be written."""
    if path is None:
        return 0
    try:
        count = export.write_vllm(doc, path)
    except OSError as exc:
        print(f"cannot write --export-vllm {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"vLLM-named results: {count} measurement(s) in {path}", file=sys.stderr)
    return 0


def _report(doc: dict, out: Path) -> int:
    """Write and print the report -> the exit status (0 ok, 1 failed or not written)."""
    try:
        written = report.write(doc, out)
    except OSError as exc:
        print(f"cannot write the report into {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    sys.stdout.write(report.render_markdown(doc))
    sys.stdout.flush()
    print(f"report: {', '.join(str(p) for p in written.values())}", file=sys.stderr)
    for error in doc["errors"]:
        print(f"error: {error}", file=sys.stderr)
    return 0 if doc["ok"] else 1
