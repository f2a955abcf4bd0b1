"""sparkctl.bench workloads (workloads.py): the --dataset reader (ShareGPT's JSON list and JSONL,
the prompt/output_tokens JSONL, malformed entries refused with FILE:LINE, unusable ones left out
and counted), its seeded sample, the shared-prefix requests and their miss/hit split, the depth
sweep's skipping and figures; then whole runs against an engine stand-in with a known prefill
and decode speed and a prefix cache (an async httpx.MockTransport on the client's own event loop,
no socket), and the new flags' usage errors (exit 2, the flag and the fix, no request sent).

Timing: the engine's speeds are chosen so each figure spans tens of milliseconds; the measured
figures are held within LOADED of the engine's: an event loop's lateness is a millisecond or two
on a quiet machine and tens of them beside the suite's two labs."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from sparkctl.bench import cli, plots, prompts, workloads
from sparkctl.bench.workloads import Conversation, DatasetError, prefix_figures, read_dataset
from test_bench_cli import BASE, assert_refused_before_any_request

PREFILL_TOK_S = 20000.0  # the engine's prefill: 2000 uncached prompt tokens take 100 ms
TOKEN_GAP_S = 0.01  # its decode: 100 tok/s for one stream
# How far a figure timed against the fake engine may stray: its sleeps wake late on a loaded machine
# (the suite runs the unit tests beside two labs). The definitions are checked exactly elsewhere; here
# only that each figure follows the engine's speed and not another.
LOADED = 0.5
CACHE_BLOCK = 16  # tokens per prefix-cache block, as vLLM's default


class Engine:
    """A completions server whose token is a word. A streamed answer's first token comes after
    its prompt's uncached tokens / PREFILL_TOK_S: the tokens past the longest run of whole
    CACHE_BLOCK-token blocks it shares with a prompt streamed before (an automatic prefix cache);
    the rest are due TOKEN_GAP_S apart from the first. It records each streamed request's prompt and max_tokens."""

    def __init__(self):
        self.seen: list[list[str]] = []
        self.streamed: list[dict] = []  # {"prompt", "max_tokens", "cached"} per streamed request

    def cached_tokens(self, words: list[str]) -> int:
        best = 0
        for earlier in self.seen:
            common = 0
            for a, b in zip(earlier, words, strict=False):
                if a != b:
                    break
                common += 1
            best = max(best, common // CACHE_BLOCK * CACHE_BLOCK)
        return min(best, len(words) - 1)  # the last token is always computed

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})
        body = json.loads(request.content)
        words = body["prompt"].split()
        tokens = body["max_tokens"]
        usage = {"prompt_tokens": len(words), "completion_tokens": tokens, "total_tokens": len(words) + tokens}
        if not body["stream"]:
            return httpx.Response(200, json={"choices": [{"text": " x"}], "usage": usage})
        cached = self.cached_tokens(words)
        self.seen.append(words)
        self.streamed.append({"prompt": body["prompt"], "max_tokens": tokens, "cached": cached})
        prefill_s = (len(words) - cached) / PREFILL_TOK_S

        async def stream():
            await asyncio.sleep(prefill_s)
            loop = asyncio.get_running_loop()
            first = loop.time()
            for i in range(tokens):
                # Token i is due i gaps after the first: a late wake-up does not delay the rest.
                await asyncio.sleep(max(0.0, first + i * TOKEN_GAP_S - loop.time()))
                event = {"choices": [{"index": 0, "text": " w", "finish_reason": "length" if i == tokens - 1 else None}]}
                yield f"data: {json.dumps(event)}\n\n".encode()
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode()

        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=stream())


def run(tmp_path, engine, *extra):
    out = tmp_path / "out"
    argv = ["run", "--url", "http://bench.invalid:8000", "--model", "m", "--max-tokens", "6", "--warmup", "0",
            "--selftest-seconds", "0.05", "--out", str(out), *extra]
    code = cli.main(argv, transport=httpx.MockTransport(engine))
    return code, json.loads((out / "benchmark.json").read_text()), (out / "benchmark.md").read_text(), out


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def sharegpt(human, answer, first="human"):
    return {"id": "x", "conversations": [{"from": first, "value": human}, {"from": "gpt", "value": answer}]}


# ---- the dataset reader ---------------------------------------------------------------------------


def test_a_sharegpt_json_list_keeps_each_entry_s_line(tmp_path):
    entries = [sharegpt("What is RoCE?", "a" * 40),
               {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "Hi"},
                                  {"from": "human", "value": "again"}, {"from": "gpt", "value": "b" * 9}]},
               {"conversations": [{"from": "gpt", "value": "an answer first"}]},
               {"conversations": [{"from": "human", "value": "never answered"}]}]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(entries, indent=2), encoding="utf-8")
    dataset = read_dataset(path)
    text = path.read_text().split("\n")
    lines = [number for number, line in enumerate(text, start=1) if line == "  {"]
    assert [c.line for c in dataset.conversations] == lines[:2]
    first, second = dataset.conversations
    # The first human turn is the prompt; the answer's 40 characters are 10 tokens at 4 a token.
    assert (first.prompt, first.output_tokens, first.output_tokens_source) == ("What is RoCE?", 10, "estimate")
    assert (second.prompt, second.output_tokens) == ("Hi", 2)  # round(9 / 4)
    assert dataset.shapes == {"sharegpt": 4}
    assert dataset.left_out == {"without a human turn": 1, "without an answer after the first human turn": 1}


def test_sharegpt_jsonl_and_the_prompt_jsonl_shapes(tmp_path):
    path = write(tmp_path / "mixed.jsonl", [
        json.dumps(sharegpt("one", "x" * 400)),
        "",
        json.dumps({"prompt": "What is the capital of India?", "output_tokens": 10}),
        json.dumps({"prompt": "two", "completion": "y" * 6}),
        json.dumps({"prompt": "three", "output_tokens": 12.0, "completion": "ignored: output_tokens wins"}),
        json.dumps({"prompt": "  ", "output_tokens": 3}),
    ])
    dataset = read_dataset(path)
    assert [(c.line, c.prompt, c.output_tokens, c.output_tokens_source) for c in dataset.conversations] == [
        (1, "one", 100, "estimate"), (3, "What is the capital of India?", 10, "output_tokens"),
        (4, "two", 2, "estimate"), (5, "three", 12, "output_tokens")]
    assert dataset.shapes == {"sharegpt": 1, "prompt": 4} and dataset.left_out == {"with an empty prompt": 1}
    assert dataset.as_dict() == {"file": str(path), "conversations": 4, "shapes": {"sharegpt": 1, "prompt": 4},
                                 "left_out": {"with an empty prompt": 1}}


@pytest.mark.parametrize("lines, line, problem", [
    (['{"prompt": "a", "output_tokens": 3}', '{"prompt": "b", "output_tokens": 3', ""], 2, "not JSON"),
    (['{"prompt": "a", "output_tokens": 3}', '"just text"'], 2, "a JSON string where an object belongs"),
    (['{"prompt": "a", "output_tokens": 3}', '{"text": "a"}'], 2, "neither `conversations` (ShareGPT) nor `prompt`"),
    (['{"prompt": 7, "output_tokens": 3}'], 1, "`prompt` is not a string"),
    (['{"prompt": "a", "output_tokens": 0}'], 1, "`output_tokens` is 0, not a positive integer"),
    (['{"prompt": "a", "output_tokens": "ten"}'], 1, '`output_tokens` is "ten", not a positive integer'),
    (['{"prompt": "a", "output_tokens": true}'], 1, "`output_tokens` is true"),
    (['{"prompt": "a", "completion": null}'], 1, "`completion` is not a string"),
    (['{"prompt": "a"}'], 1, "`prompt` without `output_tokens` or `completion`"),
    (['', '', '{"conversations": {"from": "human"}}'], 3, "`conversations` is not a list"),
    (['{"conversations": [{"from": "human", "value": "a"}, {"from": "gpt"}]}'], 1,
     'turn 2 of `conversations` is not {"from": TEXT, "value": TEXT}'),
])
def test_a_malformed_line_is_refused_with_file_line_and_what_is_wrong(tmp_path, lines, line, problem):
    path = write(tmp_path / "bad.jsonl", lines)
    with pytest.raises(DatasetError) as caught:
        read_dataset(path)
    message = str(caught.value)
    assert message.startswith(f"--dataset: {path}:{line}: ") and problem in message, message
    assert '{"prompt": "...", "output_tokens": N}' in message.split("; ", 1)[1]  # the fix shows both shapes


@pytest.mark.parametrize("text, line, problem", [
    ('[\n  {"prompt": "a", "output_tokens": 1},\n  {"prompt": "b", "output_tokens": 1\n]', 4, "not JSON"),
    ('[\n  {"prompt": "a", "output_tokens": 1}\n  {"prompt": "b"}\n]', 3, "expected ',' or ']'"),
    ('[\n  {"prompt": "a", "output_tokens": 1},\n  {"prompt": 5, "output_tokens": 1}\n]', 3, "`prompt` is not a string"),
    ('[{"prompt": "a", "output_tokens": 1}] trailing', 1, "text after the end of the JSON list"),
    ('[\n  ["a", "b"]\n]', 2, "a JSON list where an object belongs"),
])
def test_a_malformed_entry_of_a_json_list_names_its_line(tmp_path, text, line, problem):
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DatasetError) as caught:
        read_dataset(path)
    assert f"{path}:{line}: " in str(caught.value) and problem in str(caught.value), str(caught.value)


def test_files_without_a_usable_conversation_are_refused(tmp_path):
    for name, text, problem in (("empty.jsonl", "\n\n", "the file holds no entry"),
                                ("lonely.jsonl", json.dumps({"conversations": [{"from": "gpt", "value": "x"}]}),
                                 "1 without a human turn"),
                                ("latin1.jsonl", "caf\xe9".encode("latin-1"), "is not UTF-8 text")):
        path = tmp_path / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(DatasetError) as caught:
            read_dataset(path)
        assert f"--dataset: {path}: " in str(caught.value) and problem in str(caught.value)
    with pytest.raises(DatasetError, match="no such file"):
        read_dataset(tmp_path / "missing.jsonl")


def test_the_model_length_leaves_out_what_cannot_fit(tmp_path):
    # Prompts of 40 and 400 characters: 10 and 100 tokens at 4 a token, each with a 20-token answer.
    path = write(tmp_path / "d.jsonl", [json.dumps({"prompt": "p" * 40, "output_tokens": 20}),
                                        json.dumps({"prompt": "q" * 400, "output_tokens": 20})])
    dataset = workloads.fit_model_len(read_dataset(path), 100)
    assert [c.line for c in dataset.conversations] == [1]
    assert dataset.left_out == {"longer than --max-model-len 100": 1}
    assert workloads.fit_model_len(read_dataset(path), None).conversations == read_dataset(path).conversations
    with pytest.raises(DatasetError, match="no conversation fits --max-model-len 20"):
        workloads.fit_model_len(read_dataset(path), 20)


def test_the_sample_is_seeded_and_uses_every_conversation_before_repeating_one():
    conversations = [Conversation(line, f"p{line}", 4, "output_tokens") for line in range(1, 6)]
    first = workloads.sample(conversations, 3, seed=0)
    assert first == workloads.sample(conversations, 3, seed=0)
    assert [c.line for c in workloads.sample(conversations, 5, seed=1)] != [c.line for c in workloads.sample(conversations, 5)]
    twelve = workloads.sample(conversations, 12, seed=7)
    assert sorted(c.line for c in twelve[:5]) == sorted(c.line for c in twelve[5:10]) == [1, 2, 3, 4, 5]
    assert len(twelve) == 12


def test_dataset_prompts_are_a_queue_for_closed_loops_and_an_index_for_open_ones():
    conversations = [Conversation(line, f"p{line}", line, "output_tokens") for line in (3, 8)]
    source = workloads.DatasetPrompts(conversations)
    source.start()
    taken = [source.take(0, 0), source.take(1, 0), source.take(0, 1)]
    assert [(p.text, p.max_tokens, p.line, p.nonce_first) for p in taken[:2]] == [("p3", 3, 3, True), ("p8", 8, 8, True)]
    assert taken[2] is None
    source.start()  # a new repetition: the queue again from the start
    assert source.take(1, 0).line == 3 and source.take(None, 1).line == 8


# ---- prefix sharing -----------------------------------------------------------------------------


def test_prefix_requests_share_the_prefix_and_differ_after_it():
    prefix = prompts.prompt_text("[bench run-000001]", prompts.filler(100))
    requests = workloads.prefix_prompts(prefix, ["[bench run-000002]", "[bench run-000003]", "[bench run-000004]"],
                                        suffix_words=5)
    assert len(requests) == 3 and all(not r.nonce_first and r.words is None for r in requests)
    assert all(r.text.startswith(prefix + " ") for r in requests)
    suffixes = [r.text[len(prefix) + 1:] for r in requests]
    assert suffixes[0] == "[bench run-000002] " + prompts.filler(5)
    assert len(set(suffixes)) == 3


def record(ttft, ok=True, repetition=0, **extra):
    return {"ok": ok, "ttft_s": ttft, "repetition": repetition, "length_rejected": False} | extra


def test_the_first_request_is_the_miss_and_the_rest_are_hits():
    figures = prefix_figures([record(0.8), record(0.1), record(0.3), record(0.2)])
    assert figures["ttft_miss_s"] == 0.8
    assert figures["ttft_hit_s"]["n"] == 3 and figures["ttft_hit_median_s"] == 0.2
    assert figures["miss_to_hit"] == pytest.approx(4.0)
    # Repetitions: each one's first request is a miss; the misses' median against the hits' median.
    repeated = [record(0.8, repetition=0), record(0.1, repetition=0), record(0.6, repetition=1), record(0.3, repetition=1),
                record(1.0, repetition=2), record(0.2, repetition=2)]
    figures = prefix_figures(repeated)
    assert figures["ttft_miss_s"] == 0.8 and figures["ttft_hit_median_s"] == 0.2 and figures["miss_to_hit"] == 4.0
    # A failed first request leaves no miss to compare.
    assert prefix_figures([record(None, ok=False), record(0.1)])["miss_to_hit"] is None


def test_repetitions_of_a_workload_get_each_one_s_figures_and_their_interval():
    records = [record(0.8, repetition=0), record(0.2, repetition=0), record(0.6, repetition=1), record(0.3, repetition=1)]
    result = workloads.with_repetitions(prefix_figures, records, workloads.PREFIX_FIGURES)
    assert [run["ttft_miss_s"] for run in result["runs"]] == [0.8, 0.6]
    assert [run["miss_to_hit"] for run in result["runs"]] == pytest.approx([4.0, 2.0])
    ratio = result["repeat"]["figures"]["miss_to_hit"]
    # mean 3, s = sqrt(2), half-width t(0.975, 1) * s / sqrt(2) = 12.706 * 1.
    assert ratio["mean"] == pytest.approx(3.0) and ratio["half_width"] == pytest.approx(12.706, rel=1e-4)
    assert "runs" not in workloads.with_repetitions(prefix_figures, records[:2], workloads.PREFIX_FIGURES)


# ---- depth sweep ----------------------------------------------------------------------------------


def test_depths_beyond_the_model_length_are_skipped_and_said_so():
    plan = workloads.depth_plan([16384, 0, 4096, 65536, 4096], 128, 32768)
    assert [(e["depth"], e["status"]) for e in plan] == [(0, "ok"), (4096, "ok"), (16384, "ok"), (65536, "skipped")]
    assert plan[-1]["reason"] == "depth 65536 + --max-tokens 128 exceeds --max-model-len 32768"
    assert [e["status"] for e in workloads.depth_plan([0, 65536], 128, None)] == ["ok", "ok"]


def test_depth_figures_are_medians_of_prefill_and_decode():
    records = [record(0.5, prompt_tokens=4000, decode_tok_s=50.0), record(0.4, prompt_tokens=4000, decode_tok_s=40.0),
               record(0.25, prompt_tokens=4000, decode_tok_s=60.0), record(None, ok=False, prompt_tokens=4000)]
    figures = workloads.depth_figures(records)
    # Prefill per request: 8000, 10000, 16000 tok/s; the median is 10000.
    assert figures == {"prompt_tokens": 4000, "ttft_s": 0.4, "prefill_tok_s": 10000.0, "decode_tok_s": 50.0}
    assert workloads.prefill_rate(record(0.0, prompt_tokens=10)) is None


# ---- runs against the engine --------------------------------------------------------------------


def test_a_depth_sweep_measures_the_engine_s_prefill_and_decode_and_skips_what_does_not_fit(tmp_path, capsys):
    engine = Engine()
    code, doc, markdown, out = run(tmp_path, engine, "--depth-sweep", "0,1000,2000,8K", "--max-model-len", "4096",
                                   "--requests-per-stream", "2")
    assert code == 0, capsys.readouterr().err
    assert doc["points"] == [] and doc["settings"]["prompt_tokens"] == []  # a workload alone: no default points
    sweep = doc["depth_sweep"]
    assert [(e["depth"], e["status"]) for e in sweep["depths"]] == [(0, "ok"), (1000, "ok"), (2000, "ok"),
                                                                     (8192, "skipped")]
    assert "exceeds --max-model-len 4096" in sweep["depths"][-1]["reason"]
    for entry in sweep["depths"][:3]:
        assert len(entry["requests"]) == 2 and all(r["ok"] and r["phase"] == "depth" for r in entry["requests"])
        assert entry["decode_tok_s"] == pytest.approx(1 / TOKEN_GAP_S, rel=LOADED)
    for entry in sweep["depths"][1:3]:
        assert entry["prompt_tokens"] == pytest.approx(entry["depth"], rel=0.02)
        assert entry["prefill_tok_s"] == pytest.approx(PREFILL_TOK_S, rel=LOADED)
    assert sweep["depths"][0]["prompt_tokens"] == 2  # depth 0: the nonce alone
    assert all(s["cached"] == 0 for s in engine.streamed)  # every prompt its own: no cache hit
    assert "## Depth sweep" in markdown and "| 8192 |" in markdown and "skipped: depth 8192" in markdown
    assert sorted(p.name for p in out.glob("*.png")) == ["depth_sweep.png"]
    series = doc["plots"]["depth_sweep"]["series"]
    assert [s["metric"] for s in series] == ["prefill_tok_s", "decode_tok_s"] and series[0]["x"] == [0, 1000, 2000]
    assert (out / plots.DEPTH_FILES["depth_sweep"]).read_bytes().startswith(b"\x89PNG")


def test_prefix_sharing_splits_the_miss_from_the_hits(tmp_path, capsys):
    engine = Engine()
    code, doc, markdown, _ = run(tmp_path, engine, "--prefix-sharing", "4,2000")
    assert code == 0, capsys.readouterr().err
    prefix = doc["prefix_sharing"]
    records = prefix["requests"]
    assert len(records) == 4 and [r["index"] for r in records] == [0, 1, 2, 3]
    # The engine saw one prefix: nothing cached for the first request, the prefix's blocks for the rest.
    assert [s["cached"] for s in engine.streamed][0] == 0 and all(s["cached"] >= 2000 for s in engine.streamed[1:])
    assert prefix["prompt_tokens"] == pytest.approx(2000 + 2 + 2 + workloads.SUFFIX_WORDS, abs=20)
    assert prefix["ttft_miss_s"] == records[0]["ttft_s"] == pytest.approx(prefix["prompt_tokens"] / PREFILL_TOK_S,
                                                                           rel=LOADED)
    assert prefix["ttft_hit_s"]["n"] == 3 and prefix["ttft_hit_median_s"] < prefix["ttft_miss_s"]
    assert prefix["miss_to_hit"] == pytest.approx(prefix["ttft_miss_s"] / prefix["ttft_hit_median_s"])
    assert "## Prefix sharing" in markdown and "| first request (miss) |" in markdown


def test_a_dataset_run_sends_each_prompt_with_its_answer_s_length(tmp_path, capsys):
    path = write(tmp_path / "d.jsonl", [json.dumps({"prompt": f"question {i} " + "word " * i, "output_tokens": 2 + i})
                                        for i in range(5)])
    engine = Engine()
    code, doc, markdown, _ = run(tmp_path, engine, "--dataset", str(path), "--num-requests", "4", "--seed", "3",
                                 "--load", "concurrency:2", "constant:rate=50")
    assert code == 0, capsys.readouterr().err
    dataset = doc["dataset"]
    expected = [c.line for c in workloads.sample(read_dataset(path).conversations, 4, seed=3)]
    assert dataset["sample_lines"] == expected and dataset["seed"] == 3 and dataset["num_requests"] == 4
    closed, rate = dataset["points"]
    assert closed["streams"] == 2 and rate["load"] == "constant:rate=50" and closed["prompt_tokens_target"] is None
    for point in (closed, rate):
        records = [r for r in dataset["requests"] if r["point"] == point["point"]]
        assert len(records) == 4 and point["summary"]["ok_requests"] == 4 and point["status"] == "ok"
        # Each request's max_tokens is its conversation's output_tokens (line i + 1 asked for 2 + i).
        assert sorted(r["dataset_line"] for r in records) == sorted(expected)
        assert all(r["max_tokens"] == r["completion_tokens"] == r["dataset_line"] + 1 for r in records)
    # The open loop sends conversation i as request i; the prompts go out with a nonce in front.
    assert [r["dataset_line"] for r in sorted((r for r in dataset["requests"] if r["point"] == 2),
                                              key=lambda r: r["index"])] == expected
    assert all(s["prompt"].startswith("[bench ") and " question " in s["prompt"] for s in engine.streamed)
    assert doc["points"] == [] and "## Dataset" in markdown and "| `concurrency:2` |" in markdown


def test_repeat_measures_each_point_k_times_and_reports_the_interval(tmp_path, capsys):
    code, doc, markdown, _ = run(tmp_path, Engine(), "--prompt-tokens", "64", "--concurrency", "1", "--repeat", "3",
                                 "--requests-per-stream", "2")
    assert code == 0, capsys.readouterr().err
    (point,) = doc["points"]
    assert [r["repetition"] for r in doc["requests"]] == [0, 0, 1, 1, 2, 2]
    assert point["summary"]["requests"] == 6  # the repetitions pooled
    repeated = point["repeat"]
    assert repeated["k"] == 3 and [run["repetition"] for run in repeated["runs"]] == [0, 1, 2]
    ttft = repeated["figures"]["ttft_median_s"]
    values = [run["ttft_median_s"] for run in repeated["runs"]]
    assert ttft["n"] == 3 and ttft["values"] == values and ttft["mean"] == pytest.approx(sum(values) / 3)
    assert ttft["half_width"] is not None and ttft["low"] < ttft["mean"] < ttft["high"]
    assert "## Repetitions" in markdown and "Each point measured 3 times" in markdown
    assert doc["settings"]["repeat"] == 3


class ShortEngine(Engine):
    """The engine serving a 1024-token model: a longer prompt is refused as vLLM refuses it."""

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and len(json.loads(request.content)["prompt"].split()) > 1024:
            return httpx.Response(400, json={"error": {"message": "This model's maximum context length is 1024 tokens"}})
        return await super().__call__(request)


class FailingEngine(Engine):
    """The engine failing every streamed request whose prompt is over 500 words."""

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.method == "POST" else {}
        if body.get("stream") and len(body["prompt"].split()) > 500:
            return httpx.Response(500, json={"error": {"message": "engine fell over"}})
        return await super().__call__(request)


def test_a_depth_the_server_refuses_is_skipped_and_a_failed_one_fails_the_run(tmp_path, capsys):
    code, doc, _, _ = run(tmp_path / "short", ShortEngine(), "--depth-sweep", "0,2000")
    assert code == 0, capsys.readouterr().err
    shallow, deep = doc["depth_sweep"]["depths"]
    assert shallow["status"] == "ok" and deep["status"] == "skipped" and "refused a 2000-token prompt" in deep["reason"]
    code, doc, markdown, _ = run(tmp_path / "failing", FailingEngine(), "--depth-sweep", "0,1000", "--prefix-sharing", "2,800")
    assert code == 1
    shallow, deep = doc["depth_sweep"]["depths"]
    assert shallow["status"] == "ok" and deep["status"] == "failed" and "engine fell over" in deep["reason"]
    assert doc["prefix_sharing"]["status"] == "failed" and doc["prefix_sharing"]["ttft_miss_s"] is None
    assert any(e.startswith("depth 1000: 2 of 2 requests failed") for e in doc["errors"])
    assert any(e.startswith("prefix sharing: 2 of 2 requests failed") for e in doc["errors"])
    assert "# Benchmark: m - FAILED" in markdown


def test_a_workload_beside_explicit_points_measures_both(tmp_path, capsys):
    code, doc, _, out = run(tmp_path, Engine(), "--prompt-tokens", "64", "--concurrency", "1", "--depth-sweep", "0")
    assert code == 0, capsys.readouterr().err
    assert len(doc["points"]) == 1 and doc["depth_sweep"]["depths"][0]["status"] == "ok"
    assert "depth_sweep.png" in {p.name for p in out.glob("*.png")} and "decode_vs_context.png" in {
        p.name for p in out.glob("*.png")}


# ---- usage errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("extra, flag, fix", [
    (["--prefix-sharing", "1,4096"], "--prefix-sharing", "--prefix-sharing 8,4096"),
    (["--prefix-sharing", "8"], "--prefix-sharing", "--prefix-sharing 8,4096"),
    (["--prefix-sharing", "8,big"], "--prefix-sharing", "--prefix-sharing 8,4096"),
    (["--prefix-sharing", "8,4096", "--max-model-len", "4096"], "--prefix-sharing", "--prefix-sharing 8,1984"),
    (["--depth-sweep", "0,-5"], "--depth-sweep", "--depth-sweep 0,4096,16384,65536"),
    (["--depth-sweep", ","], "--depth-sweep", "--depth-sweep 0,4096,16384,65536"),
    (["--repeat", "0"], "--repeat", "--repeat 5"),
    (["--seed", "3"], "--seed", "--dataset FILE.jsonl"),
    (["--num-requests", "8", "--depth-sweep", "0"], "--num-requests", "--dataset FILE.jsonl"),
    (["--depth-sweep", "0", "--sweep-rates", "1,2", "--slo", "ttft=1s", "--capacity", "0.9"], "--capacity",
     "--prompt-tokens 2048"),
    (["--export-vllm", "/nonexistent-dir/x.json"], "--export-vllm", "existing directory"),
])
def test_usage_errors_of_the_workload_flags_name_the_flag_and_the_fix(tmp_path, capsys, no_network, extra, flag, fix):
    assert_refused_before_any_request(tmp_path, capsys, no_network, extra, flag, fix)


def test_a_malformed_dataset_stops_the_run_before_any_request(tmp_path, capsys, no_network):
    calls, transport = no_network
    path = write(tmp_path / "d.jsonl", [json.dumps({"prompt": "a", "output_tokens": 2}), "{oops"])
    code = cli.main(BASE + ["--out", str(tmp_path / "out"), "--dataset", str(path)], transport=transport)
    err = capsys.readouterr().err
    assert code == 2 and f"run: --dataset: {path}:2: not JSON" in err
    assert calls == [] and not (tmp_path / "out").exists()


def test_the_run_help_shows_the_workload_flags(capsys):
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--dataset", "--seed", "--prefix-sharing", "--depth-sweep", "--repeat", "--export-vllm"):
        assert flag in text


def test_an_interrupted_run_says_which_workloads_finished():
    from sparkctl.bench.runner import Runner
    from sparkctl.bench.settings import Settings

    settings = Settings(url="http://h:1", model="m", prompt_tokens=[], depth_sweep=[0, 4096],
                        prefix_sharing={"requests": 4, "prefix_tokens": 1024})
    runner = Runner(settings, None)
    runner.workloads["prefix_sharing"] = {"requests": []}
    doc = runner.partial_document("SIGTERM")
    assert doc["interrupted"] == "SIGTERM" and doc["points"] == []
    assert "after 0 of 0 point(s) (workloads finished: prefix_sharing)" in doc["errors"][0]
    assert doc["prefix_sharing"] == {"requests": []} and doc["depth_sweep"] is None and doc["dataset"] is None
