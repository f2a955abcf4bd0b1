"""Workloads beside the measurement points (README.md, "Workloads"): a user's file of
conversations (--dataset), requests sharing one long prefix (--prefix-sharing) and a sweep of
context depths (--depth-sweep). Each is measured after the points and reported under its own key
of benchmark.json: `dataset`, `prefix_sharing`, `depth_sweep`.

The pure parts come first: the dataset reader (ShareGPT's JSON list or JSONL of
{"conversations": [...]}, or JSONL of {"prompt", "output_tokens" | "completion"}; a malformed
entry is refused naming FILE:LINE and what is wrong, before any request), its seeded sample, the
shared-prefix prompts and their miss/hit split, the depth sweep's plan and figures. The measure_*
coroutines at the end send the requests through the Runner (runner.py): the same stream reader,
records and statistics as the points."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import prompts, repeat, stats
from .arrivals import SpecError

# ShareGPT's speakers: the prompt is the first turn of a person, the reference answer the next
# turn that is neither a person's nor the system's ("gpt", "chatgpt", "bard", "assistant", ...).
HUMAN_ROLES = frozenset({"human", "user"})
NOT_ANSWER_ROLES = HUMAN_ROLES | {"system"}
DATASET_FIX = ('give ShareGPT conversations, {"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", '
               '"value": "..."}]} in a JSON list or one a line, or one {"prompt": "...", "output_tokens": N} (or '
               '"completion": "...") a line')
# Words after the shared prefix: the request's own nonce and a short question. Short, so the
# TTFT of a hit is the cache's, not a second prefill's.
SUFFIX_WORDS = 32
DEPTH_FIGURES = ("ttft_s", "prefill_tok_s", "decode_tok_s")
PREFIX_FIGURES = ("ttft_miss_s", "ttft_hit_median_s", "miss_to_hit")


# ---- the dataset ------------------------------------------------------------------------------


class DatasetError(SpecError):
    """A --dataset that cannot be used: '--dataset: FILE[:LINE]: problem; fix'."""

    def __init__(self, path, line: int | None, problem: str, fix: str = DATASET_FIX):
        super().__init__("--dataset", f"{path}:{line}: {problem}" if line else f"{path}: {problem}", fix)


@dataclass(frozen=True)
class Conversation:
    line: int  # the line its entry starts on
    prompt: str
    output_tokens: int
    # "output_tokens": given in the file; "estimate": the reference answer's characters / 4
    # (prompts.estimate_tokens, the client's estimate when a server counts no tokens).
    output_tokens_source: str


@dataclass
class Dataset:
    path: str
    conversations: list[Conversation]
    shapes: dict[str, int]  # entries of each shape: "sharegpt", "prompt"
    left_out: dict[str, int]  # well-formed entries without a usable prompt and answer: why -> how many

    def as_dict(self) -> dict:
        return {"file": self.path, "conversations": len(self.conversations), "shapes": dict(self.shapes),
                "left_out": dict(self.left_out)}


def read_dataset(path: str | Path) -> Dataset:
    """The conversations of a dataset file; DatasetError for a file that cannot be read, a
    malformed entry (FILE:LINE), or no usable conversation. Well-formed entries without a usable
    prompt and answer (ShareGPT has many: a lone turn, an answer first) are left out and counted,
    as vLLM's ShareGPT reader drops them."""
    text = _read_text(path)
    entries = _array_entries(text, path) if text.lstrip().startswith("[") else _line_entries(text, path)
    shapes, left_out, conversations = Counter(), Counter(), []
    for line, entry in entries:
        shape, conversation, why = _conversation(entry, path, line)
        shapes[shape] += 1
        if conversation is None:
            left_out[why] += 1
        else:
            conversations.append(conversation)
    if not conversations:
        detail = ", ".join(f"{count} {why}" for why, count in left_out.items()) or "the file holds no entry"
        raise DatasetError(path, None, f"no usable conversation ({detail})")
    return Dataset(str(path), conversations, dict(shapes), dict(left_out))


def _read_text(path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(path, None, "no such file") from None
    except IsADirectoryError:
        raise DatasetError(path, None, "is a directory") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(path, None, f"is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise DatasetError(path, None, f"cannot be read ({exc.strerror or exc})") from None


def _line_entries(text: str, path) -> list[tuple[int, object]]:
    """JSONL: one JSON value a line, blank lines skipped. Split on newlines only: a JSON string
    may hold U+2028, which str.splitlines would also split on."""
    entries = []
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            entries.append((number, json.loads(raw)))
        except json.JSONDecodeError as exc:
            raise DatasetError(path, number, f"not JSON ({exc.msg} at column {exc.colno})") from None
    return entries


class _Lines:
    """Line numbers of positions in a text, counted forwards only (a big file is read once)."""

    def __init__(self, text: str):
        self.text, self.position, self.line = text, 0, 1

    def at(self, position: int) -> int:
        self.line += self.text.count("\n", self.position, position)
        self.position = position
        return self.line


def _array_entries(text: str, path) -> list[tuple[int, object]]:
    """A JSON list (ShareGPT's own file) read element by element, so each entry keeps the line it
    starts on for the error messages."""
    decoder, lines, entries = json.JSONDecoder(), _Lines(text), []
    position = _skip_space(text, text.index("[") + 1)
    while position >= len(text) or text[position] != "]":
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise DatasetError(path, exc.lineno, f"not JSON ({exc.msg} at column {exc.colno})") from None
        entries.append((lines.at(position), value))
        position = _skip_space(text, end)
        if position < len(text) and text[position] == ",":
            position = _skip_space(text, position + 1)
        elif position >= len(text) or text[position] != "]":
            raise DatasetError(path, lines.at(min(position, len(text))), "expected ',' or ']' after an entry of the list")
    if text[position + 1:].strip():
        raise DatasetError(path, lines.at(position), "text after the end of the JSON list")
    return entries


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


_JSON_TYPES = {str: "string", list: "list", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _conversation(entry, path, line) -> tuple[str, Conversation | None, str | None]:
    """(shape, the conversation or None, why it was left out); DatasetError when malformed."""
    if not isinstance(entry, dict):
        raise DatasetError(path, line, f"a JSON {_JSON_TYPES.get(type(entry), 'value')} where an object belongs")
    if "conversations" in entry:
        return ("sharegpt", *_sharegpt(entry["conversations"], path, line))
    if "prompt" in entry:
        return ("prompt", *_prompt_entry(entry, path, line))
    raise DatasetError(path, line, "an object with neither `conversations` (ShareGPT) nor `prompt`")


def _sharegpt(turns, path, line) -> tuple[Conversation | None, str | None]:
    if not isinstance(turns, list):
        raise DatasetError(path, line, "`conversations` is not a list")
    for number, turn in enumerate(turns, start=1):
        if not (isinstance(turn, dict) and isinstance(turn.get("from"), str) and isinstance(turn.get("value"), str)):
            raise DatasetError(path, line, f'turn {number} of `conversations` is not {{"from": TEXT, "value": TEXT}}')
    human = next((i for i, turn in enumerate(turns) if turn["from"].lower() in HUMAN_ROLES), None)
    if human is None:
        return None, "without a human turn"
    answer = next((turn for turn in turns[human + 1:] if turn["from"].lower() not in NOT_ANSWER_ROLES), None)
    if answer is None:
        return None, "without an answer after the first human turn"
    return _usable(line, turns[human]["value"], answer["value"], None)


def _prompt_entry(entry: dict, path, line) -> tuple[Conversation | None, str | None]:
    prompt = entry["prompt"]
    if not isinstance(prompt, str):
        raise DatasetError(path, line, "`prompt` is not a string")
    if "output_tokens" in entry:
        tokens = entry["output_tokens"]
        if isinstance(tokens, float) and tokens.is_integer():
            tokens = int(tokens)  # pandas writes integer columns with gaps as floats
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise DatasetError(path, line, f"`output_tokens` is {json.dumps(tokens)}, not a positive integer")
        return _usable(line, prompt, None, tokens)
    if "completion" in entry:
        if not isinstance(entry["completion"], str):
            raise DatasetError(path, line, "`completion` is not a string")
        return _usable(line, prompt, entry["completion"], None)
    raise DatasetError(path, line, "`prompt` without `output_tokens` or `completion`: nothing says how long its answer is")


def _usable(line: int, prompt: str, answer: str | None, tokens: int | None) -> tuple[Conversation | None, str | None]:
    if not prompt.strip():
        return None, "with an empty prompt"
    if tokens is not None:
        return Conversation(line, prompt, tokens, "output_tokens"), None
    if not answer.strip():
        return None, "with an empty answer"
    return Conversation(line, prompt, prompts.estimate_tokens(len(answer)), "estimate"), None


def fit_model_len(dataset: Dataset, max_model_len: int | None) -> Dataset:
    """The dataset without the conversations whose prompt (estimated, 4 characters a token) and
    answer exceed --max-model-len: the server would refuse them. DatasetError when none fits."""
    if max_model_len is None:
        return dataset
    kept = [c for c in dataset.conversations if prompts.estimate_tokens(len(c.prompt)) + c.output_tokens <= max_model_len]
    dropped = len(dataset.conversations) - len(kept)
    if not kept:
        raise DatasetError(dataset.path, None, f"no conversation fits --max-model-len {max_model_len} (prompt estimated at "
                                               "4 characters a token, plus the answer's tokens)",
                           "raise --max-model-len, or give shorter conversations")
    left_out = dict(dataset.left_out)
    if dropped:
        left_out[f"longer than --max-model-len {max_model_len}"] = dropped
    return Dataset(dataset.path, kept, dataset.shapes, left_out)


def sample(conversations: list[Conversation], n: int, seed: int = 0) -> list[Conversation]:
    """n conversations in a seeded order: the file shuffled by random.Random(seed), then shuffled
    again as often as n needs, so every conversation is sent once before any is sent twice. The
    same seed gives the same sample."""
    rng = random.Random(seed)
    order: list[Conversation] = []
    while len(order) < n:
        batch = list(conversations)
        rng.shuffle(batch)
        order += batch
    return order[:n]


class DatasetPrompts:
    """The prompts of a dataset point: the sample in order. A closed loop's streams take the next
    conversation as each finishes a request (a queue, until the sample is used up); an open loop's
    request i is conversation i. The prompts differ in length, so a refusal of one does not stop
    a stream (it is counted, not failed)."""

    stops_on_length = False

    def __init__(self, conversations: list[Conversation]):
        self.conversations = conversations
        self._queue: Iterable[Conversation] = iter(())

    def start(self) -> None:
        self._queue = iter(self.conversations)

    def take(self, stream: int | None, index: int) -> prompts.Prompt | None:
        conversation = self.conversations[index] if stream is None else next(self._queue, None)
        if conversation is None:
            return None
        return prompts.Prompt(text=conversation.prompt, max_tokens=conversation.output_tokens, line=conversation.line)


# ---- shared prefix ----------------------------------------------------------------------------


def prefix_prompts(prefix: str, suffix_nonces: list[str], suffix_words: int = SUFFIX_WORDS) -> list[prompts.Prompt]:
    """One request per suffix nonce: the shared prefix exactly as given (it carries the run's
    nonce at its front, so no earlier run can have cached it), then the request's own nonce and a
    short filler. No nonce goes in front: that would hide the shared prefix from the cache."""
    tail = prompts.filler(suffix_words)
    return [prompts.Prompt(text=f"{prefix} {prompts.prompt_text(nonce, tail)}", nonce_first=False) for nonce in suffix_nonces]


def prefix_figures(records: list[dict]) -> dict:
    """The first request of each repetition (the prefix's first sight: a cache miss) apart from
    the rest (hits): ttft_miss_s (the median over repetitions of the misses), ttft_hit_s (the
    distribution of the hits' TTFT), ttft_hit_median_s and miss_to_hit = miss / median hit (how
    many times faster a hit's first token comes)."""
    misses, hits = [], []
    for batch in repeat.by_repetition(records).values():
        first, rest = batch[0], batch[1:]
        if first["ok"]:
            misses.append(first["ttft_s"])
        hits += [r["ttft_s"] for r in rest if r["ok"]]
    miss = stats.percentile(misses, 50)
    hit = stats.distribution(hits)
    return {"ttft_miss_s": miss, "ttft_hit_s": hit, "ttft_hit_median_s": hit["median"],
            "miss_to_hit": stats.ratio(miss, hit["median"])}


# ---- depth sweep ------------------------------------------------------------------------------


def depth_plan(depths: list[int], max_tokens: int, max_model_len: int | None) -> list[dict]:
    """One entry per depth, ascending: measured, or skipped when the depth and --max-tokens do not
    fit --max-model-len (said in its reason)."""
    plan = []
    for depth in sorted(set(depths)):
        entry = {"depth": depth, "status": "ok", "reason": None}
        if max_model_len is not None and depth + max_tokens > max_model_len:
            entry.update(status="skipped", reason=f"depth {depth} + --max-tokens {max_tokens} exceeds --max-model-len "
                                                  f"{max_model_len}")
        plan.append(entry)
    return plan


def prefill_rate(record: dict) -> float | None:
    """Prompt tokens / TTFT of one request: the first token closes the prefill."""
    if not record.get("ok") or not record.get("prompt_tokens") or not record.get("ttft_s"):
        return None
    return record["prompt_tokens"] / record["ttft_s"]


def depth_figures(records: list[dict]) -> dict:
    """The medians over a depth's successful requests: prompt tokens (as the server counted
    them), TTFT, prefill tok/s (prompt tokens / TTFT, per request) and decode tok/s (one stream)."""
    ok = [r for r in records if r.get("ok")]
    return {
        "prompt_tokens": stats.percentile((r.get("prompt_tokens") for r in ok), 50),
        "ttft_s": stats.percentile((r.get("ttft_s") for r in ok), 50),
        "prefill_tok_s": stats.percentile((prefill_rate(r) for r in ok), 50),
        "decode_tok_s": stats.percentile((r.get("decode_tok_s") for r in ok if not r.get("burst")), 50),
    }


def with_repetitions(figures_of, records: list[dict], names: tuple[str, ...], level: float = repeat.DEFAULT_LEVEL) -> dict:
    """figures_of(records) over all the records, plus, with more than one repetition, `runs` (each
    repetition's figures) and `repeat` (each named figure's interval over them)."""
    result = figures_of(records)
    groups = repeat.by_repetition(records)
    if len(groups) > 1:
        runs = [{"repetition": number} | figures_of(batch) for number, batch in groups.items()]
        result |= {"runs": runs, "repeat": {"k": len(runs), "level": level,
                                            "figures": repeat.figures_interval(runs, names, level)}}
    return result


# ---- measuring (through the Runner) -------------------------------------------------------------


def failures(records: list[dict]) -> tuple[int, str | None]:
    """(failed requests, the first one's error); a length the server refused is not a failure."""
    failed = [r for r in records if not r["ok"] and not r["length_rejected"]]
    return len(failed), failed[0]["error"] if failed else None


def _settle(runner, result: dict, name: str, records: list[dict]) -> None:
    """The status of a workload's measurement: skipped when the server refused the length (not a
    failure: the model is too short for it), failed (and a run error) when a request failed."""
    rejected = next((r for r in records if r["length_rejected"]), None)
    if rejected:
        result.update(status="skipped", reason=f"the server refused the length: {rejected['error']}")
        return
    count, first = failures(records)
    if count:
        result.update(status="failed", reason=f"{count} of {len(records)} requests failed; first: {first}")
        runner.errors.append(f"{name}: {result['reason']}")


async def measure_dataset(runner, client, dataset: Dataset) -> dict:
    """The dataset's sample at each load of the run (closed loops share it as a queue, rate loads
    send request i at offset i), --repeat times: `dataset` of benchmark.json."""
    s = runner.settings
    chosen = sample(dataset.conversations, s.num_requests, s.dataset_seed)
    result = dataset.as_dict() | {"seed": s.dataset_seed, "num_requests": len(chosen), "sample_lines": [c.line for c in chosen],
                                  "output_tokens_estimated": sum(c.output_tokens_source == "estimate" for c in chosen),
                                  "points": [], "requests": []}
    for number, spec in enumerate(runner.load_specs(), start=1):
        point = runner.new_point(number, None, spec)
        if runner.abandoned:
            point.update(status="failed", reason=runner.abandoned)
        else:
            records = await runner.measure_load(client, point, spec, DatasetPrompts(chosen), phase="dataset")
            runner.summarize(point, records)
            point["length_rejected"] = sum(1 for r in records if r["length_rejected"])
            result["requests"] += records
            if point["status"] == "failed":
                runner.errors.append(f"dataset {runner.where(point)}: {point['reason']}")
        result["points"].append(point)
        runner.progress(f"[dataset {number}] {runner.point_message(point)}")
    return result


async def measure_prefix_sharing(runner, client) -> dict:
    """--prefix-sharing N,P: per repetition a fresh P-token prefix, then N requests one after the
    other (each finds what the earlier ones left in the cache), each the prefix and its own short
    suffix: `prefix_sharing` of benchmark.json."""
    s = runner.settings
    n, target = s.prefix_sharing["requests"], s.prefix_sharing["prefix_tokens"]
    result = {"requests_per_repetition": n, "prefix_tokens_target": target, "suffix_words": SUFFIX_WORDS, "status": "ok",
              "reason": None, "prefix_words": None, "prompt_tokens": None, "requests": []}
    size = {"status": "failed", "reason": runner.abandoned} if runner.abandoned else await runner.sized(client, target)
    if size["status"] != "ok":
        result.update(status=size["status"], reason=size["reason"])
        return result
    records = []
    for repetition in range(s.repeat):
        prefix = prompts.prompt_text(runner.nonces.next(), prompts.filler(size["words"]))
        for index, prompt in enumerate(prefix_prompts(prefix, [runner.nonces.next() for _ in range(n)])):
            records.append(await runner.send(client, prompt, phase="prefix", point=None, stream=0, index=index, target=target,
                                             repetition=repetition))
    result.update(prefix_words=size["words"], requests=records,
                  prompt_tokens=stats.percentile((r["prompt_tokens"] for r in records if r["ok"]), 50))
    result |= with_repetitions(prefix_figures, records, PREFIX_FIGURES)
    _settle(runner, result, "prefix sharing", records)
    runner.progress(f"prefix sharing: first request (miss) TTFT {_fmt(result['ttft_miss_s'], '.3f')} s, the rest (hits) "
                    f"median {_fmt(result['ttft_hit_median_s'], '.3f')} s, miss/hit {_fmt(result['miss_to_hit'], '.1f')}x")
    return result


async def measure_depth_sweep(runner, client) -> dict:
    """--depth-sweep: at each depth, --requests-per-stream requests one after the other (a single
    stream), --repeat times, each prompt with its own nonce (no cache hit): `depth_sweep`."""
    s = runner.settings
    result = {"requests_per_depth": s.requests_per_stream, "max_model_len": s.max_model_len,
              "depths": depth_plan(s.depth_sweep, s.max_tokens, s.max_model_len)}
    for entry in result["depths"]:
        if entry["status"] == "ok":
            await _measure_depth(runner, client, entry)
        runner.progress(f"depth {entry['depth']}: " + (
            f"prefill {_fmt(entry.get('prefill_tok_s'), '.0f')} tok/s, decode {_fmt(entry.get('decode_tok_s'), '.1f')} tok/s"
            if entry["status"] == "ok" else f"{entry['status']} ({entry['reason']})"))
    return result


async def _measure_depth(runner, client, entry: dict) -> None:
    s = runner.settings
    depth = entry["depth"]
    if runner.abandoned:
        size = {"status": "failed", "reason": runner.abandoned}
    elif depth == 0:
        size = {"status": "ok", "words": 0}  # the nonce alone: no context, the decode of a fresh conversation
    else:
        size = await runner.sized(client, depth)
    if size["status"] != "ok":
        entry.update(status=size["status"], reason=size["reason"])
        return
    records = []
    for repetition in range(s.repeat):
        for index in range(s.requests_per_stream):
            records.append(await runner.send(client, prompts.Prompt(words=size["words"]), phase="depth", point=None,
                                             stream=0, index=index, target=depth, repetition=repetition))
    entry.update(prompt_words=size["words"])
    entry |= with_repetitions(depth_figures, records, DEPTH_FIGURES)
    entry["requests"] = records
    _settle(runner, entry, f"depth {depth}", records)


async def measure_all(runner, client, dataset: Dataset | None) -> dict:
    """Every workload the settings ask for, in the order dataset, prefix sharing, depth sweep,
    each result put into runner.workloads as it ends (an interrupt keeps the finished ones)."""
    s = runner.settings
    results = runner.workloads
    if dataset is not None:
        results["dataset"] = await measure_dataset(runner, client, dataset)
    if s.prefix_sharing:
        results["prefix_sharing"] = await measure_prefix_sharing(runner, client)
    if s.depth_sweep:
        results["depth_sweep"] = await measure_depth_sweep(runner, client)
    return results


def all_records(results: dict) -> list[dict]:
    """Every request record of the workloads (the client's overhead counts their tokens)."""
    records = list((results.get("dataset") or {}).get("requests", []))
    records += (results.get("prefix_sharing") or {}).get("requests", [])
    for entry in (results.get("depth_sweep") or {}).get("depths", []):
        records += entry.get("requests", [])
    return records


def any_measured(results: dict) -> bool:
    """Did any workload get a successful answer?"""
    return any(r["ok"] for r in all_records(results))


def _fmt(value, spec):
    return "n/a" if value is None else format(value, spec)
