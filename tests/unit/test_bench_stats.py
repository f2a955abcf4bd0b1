"""sparkctl.bench arithmetic on synthetic timings: percentiles, the decode formula, the
aggregate definition, point summaries, prompt sizing, the reference comparison, and --repeat's
means and confidence intervals over repetitions."""

import math

import pytest

from sparkctl.bench import client, prompts, reference, repeat, stats


def rec(stream, t_send, t_first, t_last, tokens, ok=True, index=0, prompt_tokens=2048, length_rejected=False):
    return {"stream": stream, "index": index, "ok": ok, "t_send": t_send, "t_first": t_first, "t_last": t_last,
            "completion_tokens": tokens, "prompt_tokens": prompt_tokens, "length_rejected": length_rejected,
            "ttft_s": stats.time_to_first_token(t_send, t_first), "decode_tok_s": stats.decode_rate(tokens, t_first, t_last)}


# ------------------------------------------------------------------------------ percentiles


def test_percentile_interpolates_between_closest_ranks():
    values = [4, 1, 3, 2]
    assert stats.percentile(values, 50) == pytest.approx(2.5)
    assert stats.percentile(values, 90) == pytest.approx(3.7)  # 1 + 0.9*3 = rank 2.7 -> 3 + 0.7
    assert stats.percentile(values, 0) == 1 and stats.percentile(values, 100) == 4
    assert stats.percentile([7.0], 90) == 7.0
    assert stats.percentile([], 50) is None


def test_percentile_rejects_out_of_range_q():
    with pytest.raises(ValueError):
        stats.percentile([1, 2], 101)


def test_distribution_ignores_missing_values():
    d = stats.distribution([10.0, None, 30.0, 20.0])
    # Sorted 10, 20, 30: p90 at rank 2 * 0.9 = 1.8 -> 20 + 0.8 * 10; p99 at rank 1.98 -> 20 + 0.98 * 10.
    assert d == {"n": 3, "mean": 20.0, "median": 20.0, "p90": pytest.approx(28.0), "p99": pytest.approx(29.8),
                 "min": 10.0, "max": 30.0}
    assert stats.distribution([None]) == {"n": 0, "mean": None, "median": None, "p90": None, "p99": None, "min": None,
                                          "max": None}


def test_distribution_mean_and_p99():
    # 0, 1, ..., 100: the sum is 100 * 101 / 2 = 5050 over 101 values; p99 sits on rank 99 exactly.
    d = stats.distribution(float(v) for v in range(101))
    assert d["mean"] == pytest.approx(50.0) and d["p99"] == pytest.approx(99.0) and d["p90"] == pytest.approx(90.0)
    # Skewed: 1, 1, 1, 9 -> mean 12 / 4 = 3 while the median stays 1; p99 at rank 2.97 -> 1 + 0.97 * 8.
    skewed = stats.distribution([1.0, 9.0, 1.0, 1.0])
    assert skewed["mean"] == pytest.approx(3.0) and skewed["median"] == 1.0 and skewed["p99"] == pytest.approx(8.76)


# ------------------------------------------------------------------------------ per request


def test_decode_rate_excludes_the_first_token():
    # 128 tokens, the first at t=4.0 and the last at t=16.7: 127 decode steps over 12.7 s.
    assert stats.decode_rate(128, 4.0, 16.7) == pytest.approx(10.0)


@pytest.mark.parametrize("tokens, first, last", [(1, 1.0, 1.0), (0, None, None), (None, 1.0, 2.0), (5, 2.0, 2.0),
                                                 (5, 3.0, 2.0), (5, None, 2.0)])
def test_decode_rate_is_undefined_without_a_decode_window(tokens, first, last):
    assert stats.decode_rate(tokens, first, last) is None


def test_ttft_is_first_token_minus_send():
    assert stats.time_to_first_token(10.0, 14.25) == pytest.approx(4.25)
    assert stats.time_to_first_token(10.0, None) is None


def test_e2e_runs_from_the_send_to_the_end_of_the_stream():
    assert stats.end_to_end(10.0, 12.5, 12.4) == pytest.approx(2.5)  # the end of the body, not the last token
    assert stats.end_to_end(10.0, None, 12.4) == pytest.approx(2.4)  # no end recorded: the last token
    assert stats.end_to_end(None, 12.5, 12.4) is None and stats.end_to_end(10.0, None, None) is None


def test_tpot_shares_the_time_after_the_first_token_among_the_rest():
    # E2E 2.5 s, TTFT 0.5 s, 11 tokens: 2.0 s over the 10 tokens after the first.
    assert stats.time_per_output_token(2.5, 0.5, 11) == pytest.approx(0.2)
    assert stats.time_per_output_token(2.5, 0.5, 2) == pytest.approx(2.0)
    assert stats.time_per_output_token(2.5, 0.5, 1) is None and stats.time_per_output_token(2.5, 0.5, None) is None
    assert stats.time_per_output_token(None, 0.5, 11) is None and stats.time_per_output_token(2.5, None, 11) is None


def test_itl_is_the_gap_between_successive_token_chunks():
    # A chunk carrying several tokens is one arrival, so one gap, as vLLM counts it.
    assert stats.inter_token_latencies([1.0, 1.25, 1.5, 1.5, 2.0]) == [0.25, 0.25, 0.0, 0.5]
    assert stats.inter_token_latencies([1.0]) == [] and stats.inter_token_latencies([]) == []


# ------------------------------------------------------------------------------ bursts


def test_arrival_groups_join_chunks_less_than_the_burst_gap_apart():
    # Gaps: 10 ms (alone), 0.1 us, 99.9 us, 100 us (all under 200 us: one group of 4), 19.8 ms (alone).
    assert client.BURST_GAP_S == 0.0002
    assert client.arrival_groups([0.0, 0.010, 0.0100001, 0.0101, 0.0102, 0.030]) == [1, 4, 1]
    assert client.arrival_groups([5.0, 5.0, 5.0]) == [3]  # one piece of the body: the same arrival time
    assert client.arrival_groups([1.0, 1.001, 1.002]) == [1, 1, 1]  # 1 ms apart: a decode step each
    assert client.arrival_groups([]) == []


@pytest.mark.parametrize("groups, burst", [
    ([1, 4, 1], True),           # a group of BURST_MIN_CHUNKS (4)
    ([64], True),                # the whole answer at once
    ([2, 2, 1], True),           # 4 of 5 chunks grouped: more than half
    ([2, 2], True),              # every chunk in a pair
    ([2], True),                 # a two-token answer whose chunks came together
    ([1, 3, 1, 1, 1, 1], False),  # 3 of 8 grouped, no group of 4
    ([2, 1, 1], False),          # 2 of 4: half, not more
    ([1] * 128, False),
    ([1], False),
    ([], False),
])
def test_the_burst_rule(groups, burst):
    assert client.is_burst(groups) is burst


# ------------------------------------------------------------------------------ aggregate


def test_aggregate_spans_first_first_token_to_last_token_of_the_level():
    records = [
        rec(0, 0.0, 1.0, 3.0, 100),          # stream 0, request 1
        rec(0, 3.1, 4.0, 6.0, 100, index=1),  # stream 0, request 2 (its prefill gap is inside the window)
        rec(1, 0.0, 1.5, 5.0, 100),
    ]
    agg = stats.aggregate_throughput(records)
    assert agg["completion_tokens"] == 300
    assert agg["window_s"] == pytest.approx(5.0)  # 6.0 - 1.0
    assert agg["tok_s"] == pytest.approx(60.0)


def test_aggregate_leaves_out_failed_requests():
    records = [rec(0, 0.0, 1.0, 3.0, 100), rec(1, 0.0, 1.0, 9.0, 50, ok=False)]
    agg = stats.aggregate_throughput(records)
    assert agg == {"completion_tokens": 100, "window_s": pytest.approx(2.0), "tok_s": pytest.approx(50.0)}
    assert stats.aggregate_throughput([]) == {"completion_tokens": 0, "window_s": None, "tok_s": None}


def test_point_summary_reports_distributions_per_level_and_per_stream():
    # Two streams at 10 and 20 tok/s, TTFTs 1, 2 (stream 0) and 3, 4 (stream 1).
    records = [
        rec(0, 0.0, 1.0, 1.0 + 99 / 10, 100), rec(0, 20.0, 22.0, 22.0 + 99 / 10, 100, index=1),
        rec(1, 0.0, 3.0, 3.0 + 99 / 20, 100), rec(1, 10.0, 14.0, 14.0 + 99 / 20, 100, index=1),
        rec(1, 30.0, None, None, None, ok=False, index=2),
        rec(1, 40.0, None, None, None, ok=False, index=3, length_rejected=True),
    ]
    summary = stats.summarize_point(records, streams=2)
    assert summary["requests"] == 6 and summary["ok_requests"] == 4
    assert summary["failed_requests"] == 1  # the length rejection is a skip, not a failure
    assert summary["ttft_s"]["median"] == pytest.approx(2.5) and summary["ttft_s"]["max"] == pytest.approx(4.0)
    assert summary["ttft_s"]["p90"] == pytest.approx(3.7)
    assert summary["decode_tok_s"]["min"] == pytest.approx(10.0) and summary["decode_tok_s"]["max"] == pytest.approx(20.0)
    assert [s["decode_tok_s"]["median"] for s in summary["per_stream"]] == [pytest.approx(10.0), pytest.approx(20.0)]
    assert [s["ttft_s"]["median"] for s in summary["per_stream"]] == [pytest.approx(1.5), pytest.approx(3.5)]
    assert summary["aggregate"]["window_s"] == pytest.approx(22.0 + 9.9 - 1.0)


def test_point_summary_has_vllm_latencies_and_throughputs_without_the_bursts():
    def record(stream, index, t_send, t_first, t_last, t_end, tokens, itl, ok=True, burst=False, stopped_early=False):
        ttft = None if t_first is None else t_first - t_send
        e2e = t_end - t_send if ok else None
        return {"stream": stream, "index": index, "ok": ok, "length_rejected": False, "burst": burst,
                "stopped_early": stopped_early, "prompt_tokens": 100 if ok else None, "completion_tokens": tokens,
                "t_send": t_send, "t_first": t_first, "t_last": t_last, "t_end": t_end, "ttft_s": ttft, "e2e_s": e2e,
                "tpot_s": None if not ok else (e2e - ttft) / (tokens - 1),
                "decode_tok_s": None if not ok else (tokens - 1) / (t_last - t_first), "itl_s": itl}

    records = [
        # 5 tokens: TTFT 1, E2E 3, TPOT (3 - 1) / 4 = 0.5, decode 4 / 2 = 2.
        record(0, 0, 0.0, 1.0, 3.0, 3.0, 5, [0.5, 0.5, 0.5, 0.5]),
        # 3 tokens: TTFT 2, E2E 4, TPOT (4 - 2) / 2 = 1, decode 2 / 1 = 2; it stopped early.
        record(1, 0, 0.0, 2.0, 3.0, 4.0, 3, [0.25, 0.75], stopped_early=True),
        # 4 tokens in one burst: decode 3 / 0.00001 = 300,000 tok/s, TPOT 0.5 / 3; TTFT 2, E2E 2.5 stay in.
        record(0, 1, 3.0, 5.0, 5.00001, 5.5, 4, [0.0, 0.0, 0.00001], burst=True),
        # Failed at 6.0: its end is the point's last.
        record(1, 1, 4.0, None, None, 6.0, None, [], ok=False),
    ]
    summary = stats.summarize_point(records, streams=2)
    assert summary["ok_requests"] == 3 and summary["errors"] == summary["failed_requests"] == 1
    assert summary["early_stops"] == 1 and summary["burst_requests"] == 1
    # Wall time: first send 0.0 to last end 6.0.
    assert summary["duration_s"] == pytest.approx(6.0)
    assert summary["request_throughput"] == pytest.approx(3 / 6.0)  # 0.5 successful requests per second
    assert summary["output_throughput"] == pytest.approx((5 + 3 + 4) / 6.0)  # 2.0 tok/s
    assert summary["total_token_throughput"] == pytest.approx((3 * 100 + 12) / 6.0)  # 52.0 tok/s

    # TTFT and E2E over all three successful requests, the burst included.
    assert summary["ttft_s"]["n"] == 3 and summary["ttft_s"]["median"] == pytest.approx(2.0)
    assert summary["ttft_s"]["mean"] == pytest.approx(5.0 / 3)
    e2e = summary["e2e_s"]  # 2.5, 3, 4: p90 at rank 1.8 -> 3 + 0.8 * 1; p99 at 1.98 -> 3.98
    assert e2e["n"] == 3 and e2e["median"] == pytest.approx(3.0) and e2e["mean"] == pytest.approx(9.5 / 3)
    assert e2e["p90"] == pytest.approx(3.8) and e2e["p99"] == pytest.approx(3.98)
    # TPOT, ITL and decode without the burst.
    tpot = summary["tpot_s"]  # 0.5, 1.0
    assert tpot["n"] == 2 and tpot["mean"] == pytest.approx(0.75) and tpot["median"] == pytest.approx(0.75)
    assert tpot["p90"] == pytest.approx(0.95) and tpot["p99"] == pytest.approx(0.995)
    itl = summary["itl_s"]  # every gap of both: 0.25, 0.5, 0.5, 0.5, 0.5, 0.75
    assert itl["n"] == 6 and itl["mean"] == pytest.approx(3.0 / 6) and itl["median"] == pytest.approx(0.5)
    assert itl["p90"] == pytest.approx(0.625) and itl["p99"] == pytest.approx(0.7375)  # ranks 4.5 and 4.95
    assert itl["min"] == 0.25 and itl["max"] == 0.75
    assert summary["decode_tok_s"]["n"] == 2 and summary["decode_tok_s"]["max"] == pytest.approx(2.0)
    stream0 = summary["per_stream"][0]
    assert stream0["decode_tok_s"]["n"] == 1 and stream0["ttft_s"]["median"] == pytest.approx(1.5)
    # The aggregate keeps its own window (first first-token 1.0 to last token 5.00001), bursts included.
    assert summary["aggregate"]["completion_tokens"] == 12
    assert summary["aggregate"]["window_s"] == pytest.approx(4.00001)


def test_point_throughputs_fall_back_to_the_last_token_and_need_a_span():
    # Records without t_end (older reports): the end is the last token.
    records = [rec(0, 0.0, 1.0, 5.0, 10), rec(1, 1.0, 2.0, 4.0, 10)]
    summary = stats.summarize_point(records, streams=2)
    assert summary["duration_s"] == pytest.approx(5.0) and summary["output_throughput"] == pytest.approx(20 / 5.0)
    assert summary["request_throughput"] == pytest.approx(2 / 5.0)
    empty = stats.summarize_point([rec(0, 0.0, None, None, None, ok=False)], streams=1)
    assert empty["duration_s"] is None and empty["request_throughput"] is None and empty["output_throughput"] is None
    assert empty["itl_s"]["n"] == 0 and empty["tpot_s"]["median"] is None


def test_ratio():
    assert stats.ratio(9.0, 10.0) == pytest.approx(0.9)
    assert stats.ratio(None, 10.0) is None and stats.ratio(1.0, 0) is None and stats.ratio(1.0, None) is None


# ------------------------------------------------------------------------------ prompts


def test_filler_is_deterministic_and_has_the_asked_word_count():
    assert prompts.filler(5000) == prompts.filler(5000)
    assert len(prompts.filler(70000).split()) == 70000  # longer than the base sequence: it repeats
    assert prompts.filler(0) == ""
    assert "Japan" not in prompts.filler(5000)


def test_every_nonce_is_unique_and_leads_the_prompt():
    nonces = prompts.Nonces()
    seen = {nonces.next() for _ in range(1000)}
    assert len(seen) == 1000
    text = prompts.prompt_text(nonces.next(), "a b c")
    assert text.startswith("[bench ") and text.endswith(" a b c")
    assert prompts.Nonces().run_id != prompts.Nonces().run_id


def test_request_bodies_ask_for_usage_and_carry_the_prompt():
    chat = prompts.request_body("chat", "m", "hello", 8, stream=True, ignore_eos=True)
    assert chat["messages"] == [{"role": "user", "content": "hello"}] and chat["stream_options"] == {"include_usage": True}
    assert chat["ignore_eos"] is True and chat["max_tokens"] == 8
    completion = prompts.request_body("completions", "m", "hello", 1, stream=False, ignore_eos=False)
    assert completion == {"model": "m", "max_tokens": 1, "stream": False, "prompt": "hello"}


def test_linear_fit_sizes_words_from_two_probes():
    fit = prompts.LinearFit(32, 60, 256, 340)  # 1.25 tokens per word + 20 tokens of template
    assert fit.per_word == pytest.approx(1.25) and fit.overhead == pytest.approx(20.0)
    assert fit.words_for(2048) == round((2048 - 20) / 1.25)
    assert fit.words_for(5) == 0
    with pytest.raises(ValueError):
        prompts.LinearFit(32, 60, 256, 60)


def test_within_tolerance_and_ceiling():
    assert prompts.within(2080, 2048, 0.02) and not prompts.within(2100, 2048, 0.02)
    assert prompts.within(65, 64, 0.02)  # at least one token of slack for tiny prompts
    assert not prompts.within(2060, 2048, 0.02, ceiling=2050)


# ------------------------------------------------------------------------------ reference


QWEN = {"source": "seed 002", "decode_tok_s": [{"prompt_tokens": 0, "value": 64.4}],
        "throughput_tok_s": [{"streams": 2, "value": 116.8}, {"streams": 1, "value": 64.4}, {"streams": 4, "value": 114.1}]}


def point(number, target, streams, decode=None, ttft=None, aggregate=None, status="ok", actual=None):
    return {"point": number, "prompt_tokens_target": target, "streams": streams, "status": status,
            "summary": None if status == "skipped" else {
                "decode_tok_s": {"median": decode}, "ttft_s": {"median": ttft}, "aggregate": {"tok_s": aggregate},
                "prompt_tokens": {"median": actual if actual is not None else target}}}


def test_reference_validation_sorts_and_accepts_a_profile_document():
    ref = reference.validate({"reference": QWEN})
    assert [e["streams"] for e in ref["throughput_tok_s"]] == [1, 2, 4] and ref["ttft_s"] == []
    assert ref["source"] == "seed 002"


@pytest.mark.parametrize("bad, needle", [
    ({"source": "x", "decode_tok_s": [{"prompt_tokens": 10, "value": -1}]}, "value must be a positive"),
    ({"source": "x", "decode_tok_s": [{"streams": 1, "value": 1}]}, "decode_tok_s[0]"),
    ({"source": "x", "throughput_tok_s": [{"streams": 0, "value": 1}]}, "streams must be an integer >= 1"),
    ({"source": "x", "tput": []}, "unknown key"),
    ([1, 2], "expected a JSON object"),
])
def test_reference_validation_names_the_problem(bad, needle):
    with pytest.raises(reference.ReferenceFileError, match=None) as info:
        reference.validate(bad)
    assert needle in str(info.value)


def test_reference_comparison_matches_lengths_and_streams():
    ref = reference.validate({"source": "seed 004", "decode_tok_s": [{"prompt_tokens": 2048, "value": 10.2},
                                                                    {"prompt_tokens": 8192, "value": 10.6},
                                                                    {"prompt_tokens": 223000, "value": 8.1}],
                              "ttft_s": [{"prompt_tokens": 8000, "value": 4.0}],
                              "throughput_tok_s": [{"streams": 2, "value": 20.0}]})
    points = [point(1, 2048, 1, decode=9.18, ttft=1.0, aggregate=9.0), point(2, 2048, 2, aggregate=15.0),
              point(3, 8192, 1, decode=10.6, ttft=5.0, actual=8150), point(4, 8192, 2, aggregate=14.0)]
    rows = {(r["metric"], r["prompt_tokens"], r["streams"]): r for r in reference.compare(points, ref)}
    assert rows[("decode_tok_s", 2048, 1)]["ratio"] == pytest.approx(0.9) and rows[("decode_tok_s", 2048, 1)]["point"] == 1
    assert rows[("decode_tok_s", 8192, 1)]["ratio"] == pytest.approx(1.0)
    assert rows[("decode_tok_s", 223000, 1)]["measured"] is None and "5 %" in rows[("decode_tok_s", 223000, 1)]["note"]
    # 8000 is within 5 % of the 8150 tokens actually sent.
    assert rows[("ttft_s", 8000, 1)]["ratio"] == pytest.approx(1.25) and rows[("ttft_s", 8000, 1)]["point"] == 3
    # Throughput compares at the shortest measured prompt.
    assert rows[("throughput_tok_s", None, 2)]["measured"] == 15.0 and rows[("throughput_tok_s", None, 2)]["ratio"] == 0.75


def test_short_prompt_reference_compares_with_the_shortest_measured_length():
    points = [point(1, 8192, 1, decode=50.0), point(2, 2048, 1, decode=60.0), point(3, 2048, 2, aggregate=100.0),
              point(4, 1024, 1, status="skipped")]
    rows = reference.compare(points, reference.validate(QWEN))
    decode = next(r for r in rows if r["metric"] == "decode_tok_s")
    assert decode["point"] == 2 and decode["ratio"] == pytest.approx(60.0 / 64.4) and "short prompt" in decode["note"]
    by_streams = {r["streams"]: r for r in rows if r["metric"] == "throughput_tok_s"}
    assert by_streams[2]["measured"] == 100.0 and by_streams[4]["measured"] is None
    assert reference.compare(points, None) == []


# ------------------------------------------------------------------------------ repetitions (--repeat)


def test_a_repetition_interval_is_the_mean_and_its_student_t_half_width():
    interval = repeat.interval([10.0, None, 12.0, 14.0])
    # mean 12, s = 2, t(0.975, 2) = 4.303: half-width 4.303 * 2 / sqrt(3) = 4.968
    assert interval["n"] == 3 and interval["mean"] == 12.0 and interval["values"] == [10.0, 12.0, 14.0]
    assert interval["half_width"] == pytest.approx(4.968, abs=1e-3)
    assert interval["low"] == pytest.approx(12 - 4.968, abs=1e-3) and interval["high"] == pytest.approx(16.968, abs=1e-3)
    single = repeat.interval([5.0])
    assert single["mean"] == 5.0 and single["half_width"] is None and single["low"] is None
    assert repeat.interval([None]) == {"n": 0, "mean": None, "half_width": None, "low": None, "high": None, "values": []}


# Two-sided 95 % critical values of Student's t from the printed tables, df = K - 1.
@pytest.mark.parametrize("k, t", [(2, 12.706), (3, 4.303), (4, 3.182), (5, 2.776), (6, 2.571), (8, 2.365), (10, 2.262),
                                  (21, 2.086), (31, 2.042)])
def test_repetition_intervals_use_the_printed_t_for_k_minus_one_degrees_of_freedom(k, t):
    # K - 1 zeros and one K: mean 1, sample variance K, so s / sqrt(K) = 1 and the half-width is t.
    values = [0.0] * (k - 1) + [float(k)]
    interval = repeat.interval(values)
    assert interval["mean"] == pytest.approx(1.0) and interval["half_width"] == pytest.approx(t, rel=2e-4)


def rep_record(repetition, t_send, ttft, e2e, itl, tokens=10):
    return {"ok": True, "repetition": repetition, "stream": 0, "t_send": t_send, "t_first": t_send + ttft,
            "t_last": t_send + e2e, "t_end": t_send + e2e, "ttft_s": ttft, "e2e_s": e2e, "itl_s": itl,
            "tpot_s": (e2e - ttft) / (tokens - 1), "decode_tok_s": None, "completion_tokens": tokens, "prompt_tokens": 64}


def test_the_repetitions_of_a_point_are_hand_computed():
    # Repetition 0: TTFT 0.1 and 0.3 s (median 0.2), ITL gaps 0.01, 0.02, 0.03 (median 0.02), E2E
    # 1.0 and 1.74 s so TPOT (0.9/9 = 0.1, 1.44/9 = 0.16) has median 0.13; 20 tokens over 0..1.74 s.
    # Repetition 1: TTFT 0.4 and 0.4 s, gap 0.04, E2E 1.3 and 1.3 s (TPOT 0.1); 20 tokens over 10..11.3 s.
    records = [rep_record(0, 0.0, 0.1, 1.0, [0.01, 0.02]), rep_record(0, 0.0, 0.3, 1.74, [0.03]),
               rep_record(1, 10.0, 0.4, 1.3, [0.04]), rep_record(1, 10.0, 0.4, 1.3, [])]
    result = repeat.summarize(records, streams=1)
    assert result["k"] == 2 and result["level"] == 0.95
    runs = result["runs"]
    assert [run["repetition"] for run in runs] == [0, 1]
    assert [run["ttft_median_s"] for run in runs] == pytest.approx([0.2, 0.4])
    assert [run["tpot_median_s"] for run in runs] == pytest.approx([0.13, 0.1])
    assert [run["itl_median_s"] for run in runs] == pytest.approx([0.02, 0.04])
    assert [run["output_throughput"] for run in runs] == pytest.approx([20 / 1.74, 20 / 1.3])
    # Two values a and b: mean (a + b) / 2, s = |a - b| / sqrt(2), half-width t(0.975, 1) * |a - b| / 2.
    figures = result["figures"]
    assert figures["ttft_median_s"]["mean"] == pytest.approx(0.3)
    assert figures["ttft_median_s"]["half_width"] == pytest.approx(12.706 * 0.1, rel=1e-4)
    assert figures["output_throughput"]["mean"] == pytest.approx((20 / 1.74 + 20 / 1.3) / 2)
    assert figures["output_throughput"]["half_width"] == pytest.approx(12.706 * abs(20 / 1.74 - 20 / 1.3) / 2, rel=1e-4)
    assert set(figures) == {"ttft_median_s", "tpot_median_s", "itl_median_s", "output_throughput"}


def test_headline_figures_and_grouping_by_repetition():
    summary = {"ttft_s": {"median": 0.5}, "tpot_s": {"median": None}, "itl_s": {}, "output_throughput": 42.0}
    assert repeat.headline_figures(summary) == {"ttft_median_s": 0.5, "tpot_median_s": None, "itl_median_s": None,
                                                "output_throughput": 42.0}
    groups = repeat.by_repetition([{"repetition": 1, "i": 0}, {"i": 1}, {"repetition": 1, "i": 2}])
    assert list(groups) == [0, 1] and [r["i"] for r in groups[1]] == [0, 2]
    assert math.isclose(repeat.interval([1.0, 3.0])["mean"], 2.0)


def test_the_token_estimate_is_four_characters_a_token():
    assert prompts.estimate_tokens(40) == 10 and prompts.estimate_tokens(9) == 2 and prompts.estimate_tokens(0) == 1
    assert prompts.estimate_tokens(30, chars_per_token=3.0) == 10
