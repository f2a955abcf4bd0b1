"""sparkctl.bench run with load shapes, goodput and a capacity search, against a scripted server
(an async httpx.MockTransport on the client's own event loop, no socket): rate points send at the
schedule's offsets and never before them, a seeded poisson schedule is the same twice,
--max-concurrency caps the requests in flight, the goodput in a point's summary is the hand count
of the requests the server made slow, and a capacity search finds the rate where the server's
latency breaks. Then the usage errors of the new flags, and the benchmark role's argv, which the
client must accept as it is.

Timing: nothing here judges a speed. The sends are held to their schedule within 50 ms (a loaded
machine's event loop is late by milliseconds, not tens of them), and the server's fast and slow
answers are 5 ms against 300 ms, either side of a 100 ms objective."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest
import yaml
from collection_templating import evaluate

from sparkctl.bench import arrivals, cli, plots
from test_bench_cli import assert_refused_before_any_request

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "benchmark"
SEND_TOLERANCE_S = 0.05
FAST_TTFT_S, SLOW_TTFT_S = 0.005, 0.3


class ScriptedServer:
    """A completions server: a token is a word; a streamed answer waits `ttft(number, in_flight)`
    seconds (number: the 1-based count of streamed requests, in_flight: the streamed requests
    being answered, this one included), then sends its tokens `token_gap` seconds apart. It
    records when each streamed request arrived and the most that were in flight at once."""

    def __init__(self, ttft=lambda number, in_flight: FAST_TTFT_S, token_gap=0.002):
        self.ttft, self.token_gap = ttft, token_gap
        self.in_flight = self.most_in_flight = self.streamed = 0
        self.arrivals: list[float] = []  # time.perf_counter() of each streamed request, in order
        self.slow: list[int] = []  # the numbers of the streamed requests answered slowly

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})
        body = json.loads(request.content)
        words = len(body["prompt"].split())
        tokens = body["max_tokens"]
        usage = {"prompt_tokens": words, "completion_tokens": tokens, "total_tokens": words + tokens}
        if not body["stream"]:
            return httpx.Response(200, json={"choices": [{"text": " x"}], "usage": usage})
        self.streamed += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.arrivals.append(time.perf_counter())
        wait = self.ttft(self.streamed, self.in_flight)
        if wait >= SLOW_TTFT_S:
            self.slow.append(self.streamed)

        async def stream():
            try:
                await asyncio.sleep(wait)
                for i in range(tokens):
                    if i:
                        await asyncio.sleep(self.token_gap)
                    event = {"choices": [{"index": 0, "text": " w", "finish_reason": "length" if i == tokens - 1 else None}]}
                    yield f"data: {json.dumps(event)}\n\n".encode()
                yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode()
            finally:
                self.in_flight -= 1

        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=stream())


def run(tmp_path, server, *extra):
    out = tmp_path / "out"
    argv = ["run", "--url", "http://bench.invalid:8000", "--model", "m", "--prompt-tokens", "64", "--max-tokens", "4",
            "--warmup", "0", "--selftest-seconds", "0.05", "--out", str(out), *extra]
    code = cli.main(argv, transport=httpx.MockTransport(server))
    return code, json.loads((out / "benchmark.json").read_text()), (out / "benchmark.md").read_text(), out


def test_a_constant_rate_point_sends_each_request_at_its_offset_and_never_before(tmp_path, capsys):
    server = ScriptedServer()
    code, doc, markdown, out = run(tmp_path, server, "--load", "constant:rate=20", "--num-requests", "6")
    assert code == 0, capsys.readouterr().err
    (point,) = doc["points"]
    assert point["load"] == "constant:rate=20" and point["streams"] is None and point["offered_rate"] == 20
    records = [r for r in doc["requests"] if r["point"] == 1]
    assert [r["index"] for r in records] == list(range(6)) and all(r["ok"] and r["stream"] is None for r in records)
    assert [r["offset_s"] for r in records] == pytest.approx(arrivals.constant(20, 6), abs=1e-6)
    start = records[0]["t_scheduled"]
    for record in records:
        assert record["t_scheduled"] - start == pytest.approx(record["offset_s"], abs=2e-6)
        # Never before its time; how late at most is a measured time (the timing test below).
        assert record["t_send"] >= record["t_scheduled"], record["index"]
    # The server saw them one after the other (the sends are held back by the client, not by the server).
    assert len(server.arrivals) == 6 and server.arrivals == sorted(server.arrivals)
    assert point["send_lag_s"]["max"] >= 0 and point["max_in_flight"] >= 1
    summary = point["summary"]
    assert summary["requests"] == summary["ok_requests"] == 6 and summary["per_stream"] == []
    # Reported as a rate point: its own table and the latency-throughput plot, not the closed-loop ones.
    assert "## By offered load" in markdown and "| 64 | `constant:rate=20` | 20.00 |" in markdown
    assert "## By concurrency" not in markdown and "## By prompt length" not in markdown
    assert sorted(p.name for p in out.glob("*.png")) == ["latency_vs_throughput.png"]
    measured = next(s for s in doc["plots"]["latency_vs_throughput"]["series"] if s["kind"] == "measured")
    assert measured["load"] == ["constant:rate=20"] and measured["x"] == [summary["output_throughput"]]
    progress = capsys.readouterr().err
    assert "[1/1] prompt 64 at constant:rate=20: TTFT" in progress


@pytest.mark.timing
def test_a_rate_point_sends_each_request_within_50_ms_of_its_time(tmp_path, capsys):
    """How late the client sends: a measured time, so a timing test (the suite runs them alone, first)."""
    server = ScriptedServer()
    code, doc, _, _ = run(tmp_path, server, "--load", "constant:rate=20", "--num-requests", "6")
    assert code == 0, capsys.readouterr().err
    lags = [r["t_send"] - r["t_scheduled"] for r in doc["requests"] if r["point"] == 1]
    assert all(0 <= lag < SEND_TOLERANCE_S for lag in lags), lags
    # Over the schedule's quarter of a second.
    assert server.arrivals[-1] - server.arrivals[0] > 0.25 - SEND_TOLERANCE_S
    assert doc["points"][0]["send_lag_s"]["max"] < SEND_TOLERANCE_S


def test_a_seeded_poisson_point_sends_the_same_schedule_twice(tmp_path, capsys):
    offsets = []
    for run_number, seed in enumerate((3, 3, 4)):
        code, doc, _, _ = run(tmp_path / str(run_number), ScriptedServer(), "--load", f"poisson:rate=50,seed={seed}",
                              "--num-requests", "8")
        assert code == 0, capsys.readouterr().err
        assert doc["points"][0]["load"] == f"poisson:rate=50,burstiness=1,seed={seed}"
        offsets.append([r["offset_s"] for r in doc["requests"]])
        for record in doc["requests"]:
            assert record["t_send"] >= record["t_scheduled"]
    assert offsets[0] == offsets[1] == pytest.approx(arrivals.poisson(50, 8, 1.0, seed=3), abs=1e-6)
    assert offsets[2] != offsets[0]


def test_max_concurrency_bounds_the_requests_in_flight(tmp_path, capsys):
    # Every request is due at once (rate inf), and each takes 30 ms and more to answer.
    slow_enough = ScriptedServer(ttft=lambda number, in_flight: 0.03)
    code, doc, markdown, _ = run(tmp_path / "capped", slow_enough, "--load", "constant:rate=inf", "--num-requests", "8",
                                 "--max-concurrency", "2")
    assert code == 0, capsys.readouterr().err
    point = doc["points"][0]
    assert slow_enough.most_in_flight == 2 and point["max_in_flight"] == 2
    assert doc["settings"]["max_concurrency"] == 2 and point["offered_rate"] is None
    # The six that waited for a slot left late by their wait, which the point records.
    lags = sorted(r["t_send"] - r["t_scheduled"] for r in doc["requests"])
    assert lags[-1] >= 0.03 and point["send_lag_s"]["max"] >= 0.03
    assert not any("fell behind the schedule" in w for w in doc["warnings"])  # the cap's wait is not the client's
    assert "at most 2 in flight" in markdown
    unbounded = ScriptedServer(ttft=lambda number, in_flight: 0.03)
    code, doc, _, _ = run(tmp_path / "unbounded", unbounded, "--load", "constant:rate=inf", "--num-requests", "8")
    assert code == 0 and unbounded.most_in_flight > 2 and doc["points"][0]["max_in_flight"] > 2


def test_goodput_in_the_summary_is_the_hand_count_of_the_requests_within_the_slo(tmp_path, capsys):
    # Streamed requests 2, 5 and 6 answer after 300 ms, the rest after 5 ms: with a 150 ms TTFT
    # objective, 3 of the 6 requests of each point meet it. The objectives leave a loaded machine's
    # lateness room (30 times the fast answer, 500 times the 2 ms token gap): only the slow ones miss.
    def ttft(number, in_flight):
        return SLOW_TTFT_S if number in (2, 5, 6, 8, 11, 12) else FAST_TTFT_S

    server = ScriptedServer(ttft=ttft)
    code, doc, markdown, _ = run(tmp_path, server, "--load", "concurrency:1", "constant:rate=20", "--num-requests", "6",
                                 "--requests-per-stream", "6", "--slo", "ttft=150ms,tpot=1s")
    assert code == 0, capsys.readouterr().err
    assert server.slow == [2, 5, 6, 8, 11, 12] and doc["settings"]["slo"] == {"ttft": 0.15, "tpot": 1.0}
    assert doc["settings"]["concurrency"] == [1] and doc["settings"]["loads"] == ["concurrency:1", "constant:rate=20"]
    closed, rate = doc["points"]
    assert closed["streams"] == 1 and closed["load"] == "concurrency:1" and rate["streams"] is None
    for point in (closed, rate):
        summary = point["summary"]
        good = summary["goodput"]
        records = [r for r in doc["requests"] if r["point"] == point["point"]]
        slow = [r for r in records if r["ttft_s"] >= SLOW_TTFT_S]
        assert len(records) == 6 and len(slow) == 3  # the server's three, seen by the client
        assert good["requests"] == 6 and good["good_requests"] == 3 and good["fraction"] == pytest.approx(0.5)
        assert good["missed"] == {"ttft": 3, "tpot": 0} and good["unmeasured"] == {"ttft": 0, "tpot": 0}
        assert good["duration_s"] == summary["duration_s"]
        assert good["goodput_rps"] == pytest.approx(3 / summary["duration_s"])
        assert good["throughput_rps"] == pytest.approx(summary["request_throughput"])
    assert "SLO: each request within ttft=150ms,tpot=1s" in markdown
    assert "| goodput (within SLO / good requests/s) |" in markdown and "| 50% / " in markdown
    # One run with both kinds: the closed loop's tables and plots, the rate point's table and plot.
    assert "## By concurrency" in markdown and "## By offered load" in markdown
    assert set(doc["plots"]) == {"decode_vs_context", "ttft_vs_context", "throughput_vs_streams", "latency_vs_throughput"}
    assert doc["capacity"] is None


def test_a_capacity_search_finds_the_rate_where_the_latency_breaks(tmp_path, capsys):
    # Answers take ~25 ms while at most 3 requests are in flight; a request arriving to find 3
    # ahead of it waits 300 ms for its first token. At 5, 10 and 20 requests/s (gaps of 200, 100,
    # 50 ms) one request is in flight at a time; at 1000/s six arrive within 5 ms and the last
    # three are slow: 50 % within the 100 ms objective, a clear miss, so 2000/s is never tried.
    def ttft(number, in_flight):
        return SLOW_TTFT_S if in_flight > 3 else FAST_TTFT_S

    server = ScriptedServer(ttft=ttft, token_gap=0.005)
    code, doc, markdown, out = run(tmp_path, server, "--sweep-rates", "5,10,20,1000,2000", "--burstiness", "inf",
                                   "--num-requests", "6", "--slo", "ttft=100ms", "--capacity", "0.9")
    assert code == 0, capsys.readouterr().err
    capacity = doc["capacity"]
    assert capacity["rate"] == 20 and capacity["load"] == "poisson:rate=20,burstiness=inf,seed=0"
    assert capacity["fraction"] == 0.9 and capacity["slo"] == {"ttft": 0.1} and capacity["prompt_tokens_target"] == 64
    assert [p["rate"] for p in capacity["points"]] == [5, 10, 20, 1000]
    assert [p["meets"] for p in capacity["points"]] == [True, True, True, False]
    assert capacity["points"][-1]["fraction"] == pytest.approx(0.5)
    assert "more than 10 percentage points below" in capacity["stop"] and "capacity 20" in capacity["note"]
    assert not capacity["may_be_higher"]
    assert server.streamed == 4 * 6  # nothing sent at 2000/s
    statuses = [(p["load"].split(",")[0], p["status"]) for p in doc["points"]]
    assert statuses == [("poisson:rate=5", "ok"), ("poisson:rate=10", "ok"), ("poisson:rate=20", "ok"),
                        ("poisson:rate=1000", "ok"), ("poisson:rate=2000", "skipped")]
    assert "the capacity search stopped after load 1000" in doc["points"][-1]["reason"]
    assert all(p["summary"]["goodput"]["fraction"] == c["fraction"] for p, c in zip(doc["points"], capacity["points"],
                                                                                        strict=False))
    assert doc["settings"]["sweep_rates"] == [5, 10, 20, 1000, 2000] and doc["settings"]["capacity_fraction"] == 0.9
    assert "## Capacity" in markdown and "**20 requests/s** (`poisson:rate=20,burstiness=inf,seed=0`)" in markdown
    # The latency-throughput plot marks the capacity and the objective.
    series = doc["plots"]["latency_vs_throughput"]["series"]
    assert [s["kind"] for s in series] == ["measured", "slo", "capacity"]
    assert series[1]["y"] == 0.1 and series[2]["load"] == capacity["load"]
    assert (out / plots.RATE_FILES["latency_vs_throughput"]).read_bytes().startswith(b"\x89PNG")


# ---- usage errors ---------------------------------------------------------------------------------



RATE = ["--load", "poisson:rate=4"]


@pytest.mark.parametrize("extra, flag, fix", [
    (["--sweep-rates", "1,2", "--capacity", "0.9", "--prompt-tokens", "64"], "--capacity", "--slo ttft=2s"),
    (["--capacity", "0.9", "--slo", "ttft=1s", "--prompt-tokens", "64"], "--capacity", "--sweep-rates 1,2,4,8"),
    (["--capacity", "1.5", "--slo", "ttft=1s", "--sweep-rates", "1,2"], "--capacity", "--capacity 0.9"),
    (["--capacity", "0.9", "--slo", "ttft=1s", "--sweep-rates", "1,2"], "--prompt-tokens", "--prompt-tokens 2048"),
    (["--sweep-rates", "1,2", *RATE], "--sweep-rates", "--sweep-rates 1,2,4,8"),
    (["--sweep-rates", "4,2"], "--sweep-rates", "lowest first"),
    (["--sweep-rates", "1,1"], "--sweep-rates", "each rate once"),
    (["--sweep-rates", "1,inf"], "--sweep-rates", "--sweep-rates 1,2,4,8"),
    (["--load", "poisson:rate=4", "poisson:rate=2", "--capacity", "0.9", "--slo", "ttft=1s", "--prompt-tokens", "64"],
     "--load", "lowest rate first"),
    (["--load", "ramp:start=1,end=4", "--capacity", "0.9", "--slo", "ttft=1s", "--prompt-tokens", "64"],
     "--load", "finite rates"),
    (["--load", "concurrency:2", "--capacity", "0.9", "--slo", "ttft=1s", "--prompt-tokens", "64"], "--load", "finite rates"),
    ([*RATE, "--num-requests", "0"], "--num-requests", "--num-requests 16"),
    ([*RATE, "--max-concurrency", "0"], "--max-concurrency", "--max-concurrency 4"),
    (["--num-requests", "8"], "--num-requests", "--load poisson:rate=4"),
    (["--load", "concurrency:2", "--max-concurrency", "2"], "--max-concurrency", "--requests-per-stream"),
    (["--load", "poisson:rate=fast"], "--load", "--load poisson:rate=4"),
    ([*RATE, "poisson:rate=4"], "--load", "give each load once"),
    ([*RATE, "--concurrency", "1,2"], "--concurrency", "--load concurrency:1"),
    (["--burstiness", "0.5"], "--burstiness", "--sweep-rates 1,2,4,8"),
    (["--sweep-rates", "1,2", "--burstiness", "-1"], "--burstiness", "--burstiness 0.5"),
    (["--slo", "ttft=2"], "--slo", "ttft=2s"),
])
def test_usage_errors_of_the_load_flags_name_the_flag_and_the_fix(tmp_path, capsys, no_network, extra, flag, fix):
    assert_refused_before_any_request(tmp_path, capsys, no_network, extra, flag, fix)


def test_the_strict_help_speaks_of_bursts(capsys):
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--strict" in text and "arrived in bursts" in text and "many tokens in one network read" not in text
    for flag in ("--load", "--num-requests", "--max-concurrency", "--sweep-rates", "--burstiness", "--slo", "--capacity"):
        assert flag in text


# ---- the benchmark role's argv ----------------------------------------------------------------------


def role_argv(tmp_path, **overrides) -> list[str]:
    """The argv the role's start task gives the client, templated by Ansible with the role's defaults."""
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    tasks = yaml.safe_load((ROLE / "tasks" / "run.yml").read_text())
    start = next(t for t in tasks[0]["block"] if t["name"] == "Start the benchmark client on the control node")
    profile = {"name": "lab-standin", "api": {"port": 8000, "served_model_name": "lab-standin"},
               "engine": {"args": {"max_model_len": 4096}}}
    variables = defaults | {
        "spark_profile": profile, "spark_cluster": {"head": {"name": "spark1"}},
        "hostvars": {"spark1": {"ansible_host": "10.0.0.1"}}, "spark_report_dir": str(tmp_path),
        "ansible_playbook_python": "/usr/bin/python3", "benchmark_key_tmp": {"path": str(tmp_path / "key")},
    } | overrides | start.get("vars", {})
    return evaluate(start["ansible.builtin.command"]["argv"], variables)


def accepted(tmp_path, argv):
    """The client's settings from the role's argv: parsed and validated as `run` does, no request sent."""
    assert argv[:4] == ["/usr/bin/python3", "-m", "sparkctl.bench", "run"] and all(isinstance(a, str) for a in argv)
    args = cli._parser().parse_args(argv[3:])
    # What the role's prepare tasks and its key task leave on the control node before the start.
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reference.json").write_text("{}")
    key = Path(args.api_key_file)
    key.write_text("sk-test\n")
    key.chmod(0o600)
    return cli.validate(args)[0]


def test_the_role_runs_closed_loops_by_default(tmp_path):
    argv = role_argv(tmp_path)
    settings = accepted(tmp_path, argv)
    assert settings.concurrency == [1, 2, 4] and settings.loads == [] and settings.slo is None
    assert settings.max_model_len == 4096 and settings.capacity_fraction is None
    for flag in ("--load", "--num-requests", "--max-concurrency", "--slo", "--capacity", "--sweep-rates", "--burstiness"):
        assert flag not in argv


def test_the_role_passes_loads_slo_and_a_capacity_search(tmp_path):
    argv = role_argv(tmp_path, benchmark_load=["concurrency:1", "poisson:rate=2,burstiness=0.5"], benchmark_num_requests=32,
                     benchmark_max_concurrency=8, benchmark_slo="ttft=2s,tpot=100ms")
    settings = accepted(tmp_path, argv)
    assert settings.loads == ["concurrency:1", "poisson:rate=2,burstiness=0.5,seed=0"] and settings.concurrency == [1]
    assert settings.num_requests == 32 and settings.max_concurrency == 8 and settings.slo == {"ttft": 2.0, "tpot": 0.1}
    assert "--concurrency" not in argv
    sweep = role_argv(tmp_path, benchmark_prompt_tokens=[2048], benchmark_sweep_rates=[1, 2, 4.5],
                      benchmark_capacity_fraction=0.9, benchmark_burstiness=0.5, benchmark_slo="ttft=2s")
    settings = accepted(tmp_path, sweep)
    assert settings.sweep_rates == [1, 2, 4.5] and settings.capacity_fraction == 0.9 and settings.burstiness == 0.5
    assert settings.loads[0] == "poisson:rate=1,burstiness=0.5,seed=0"


def test_the_role_takes_the_slo_from_the_profile(tmp_path):
    profile = {"name": "p", "api": {"port": 8000, "served_model_name": "p"}, "benchmark": {"slo": "ttft=3s"}}
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert evaluate(defaults["benchmark_slo"], {"spark_profile": profile}) == "ttft=3s"
    assert evaluate(defaults["benchmark_slo"], {"spark_profile": {"name": "p"}}) == ""


# ---- other loads, interrupts, comparisons --------------------------------------------------------


def test_a_ramp_point_rises_to_its_end_rate(tmp_path, capsys):
    code, doc, _, _ = run(tmp_path, ScriptedServer(), "--load", "ramp:start=20,end=80", "--num-requests", "5")
    assert code == 0, capsys.readouterr().err
    offsets = arrivals.ramp(20, 80, 5)
    point = doc["points"][0]
    assert point["load"] == "ramp:start=20,end=80,shape=linear,seed=0"
    assert [r["offset_s"] for r in doc["requests"]] == pytest.approx(offsets, abs=1e-6)
    assert point["offered_rate"] == pytest.approx(4 / offsets[-1], abs=1e-5)
    assert all(r["t_send"] >= r["t_scheduled"] for r in doc["requests"])


def test_an_infinite_burstiness_is_written_as_text_in_the_json(tmp_path, capsys):
    code, doc, _, out = run(tmp_path, ScriptedServer(), "--sweep-rates", "100,200", "--burstiness", "inf",
                            "--num-requests", "2")
    assert code == 0, capsys.readouterr().err
    assert doc["settings"]["burstiness"] == "inf" and "Infinity" not in (out / "benchmark.json").read_text()


def test_an_interrupted_rate_run_marks_the_points_it_did_not_measure():
    from sparkctl.bench.runner import Runner
    from sparkctl.bench.settings import Settings

    settings = Settings(url="http://h:1", model="m", prompt_tokens=[64], concurrency=[1],
                        loads=["concurrency:1", "poisson:rate=2,burstiness=1,seed=0"])
    doc = Runner(settings, None).partial_document("SIGINT")
    assert [(p["streams"], p["load"], p["status"]) for p in doc["points"]] == [
        (1, "concurrency:1", "failed"), (None, "poisson:rate=2,burstiness=1,seed=0", "failed")]
    assert all("interrupted (SIGINT)" in p["reason"] for p in doc["points"]) and doc["capacity"] is None


def test_compare_matches_rate_points_by_their_load(tmp_path, capsys):
    from sparkctl.bench import compare

    docs = []
    for side in ("before", "after"):
        code, doc, _, _ = run(tmp_path / side, ScriptedServer(), "--load", "concurrency:1", "constant:rate=50",
                              "--num-requests", "4", "--requests-per-stream", "2")
        assert code == 0, capsys.readouterr().err
        docs.append(doc)
    result = compare.compare(*docs)
    assert {(row["streams"], row.get("load")) for row in result["rows"]} == {(1, None), (None, "constant:rate=50")}
    assert result["only_before"] == result["only_after"] == []
    text = compare.render_markdown(result)
    assert "| prompt tokens | load | figure |" in text and "| 64 | `constant:rate=50` |" in text
    assert "| 64 | concurrency:1 |" in text
    docs[1]["points"][1]["load"] = "constant:rate=60"
    moved = compare.compare(*docs)
    assert moved["only_before"] == [{"prompt_tokens": 64, "streams": None, "load": "constant:rate=50"}]
    assert "Only in after: prompt 64 at constant:rate=60" in compare.render_markdown(moved)
