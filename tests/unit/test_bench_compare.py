"""sparkctl.bench.compare: Student's t quantiles against published values, confidence intervals,
Welch's test, before/after comparisons of hand-made benchmark.json documents (a clear regression
is slower, equal noisy samples are within noise, points only one run has are listed) and the
`compare` subcommand (Markdown out, exit 0; unreadable files named, exit 2)."""

import json
import math
from statistics import fmean

import pytest

from sparkctl.bench import cli, compare
from sparkctl.bench.compare import confidence_interval, t_quantile, welch

# Two-sided 95 % (p = 0.975) and 99 % (p = 0.995) critical values of Student's t, as printed in tables.
T_TABLE = [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776), (0.975, 9, 2.262), (0.975, 10, 2.228),
           (0.975, 30, 2.042), (0.975, 120, 1.980), (0.995, 4, 4.604), (0.995, 30, 2.750), (0.95, 9, 1.833),
           (0.975, 5000, 1.960)]


@pytest.mark.parametrize("p, df, expected", T_TABLE)
def test_t_quantiles_match_the_tables(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=6e-4)
    assert t_quantile(1 - p, df) == pytest.approx(-expected, abs=6e-4)
    # Exact inversion up to the limit; beyond it the quantile and the CDF are two approximations.
    tolerance = 1e-9 if df <= compare.EXACT_DF_LIMIT else 1e-6
    assert compare.t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=tolerance)


def test_t_tends_to_the_normal_and_is_continuous_at_the_exact_limit():
    assert t_quantile(0.5, 3) == 0.0
    limit = compare.EXACT_DF_LIMIT
    assert t_quantile(0.975, limit) == pytest.approx(t_quantile(0.975, limit + 1), abs=1e-5)
    assert compare.t_cdf(2.0, limit) == pytest.approx(compare.t_cdf(2.0, limit + 1), abs=1e-6)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_confidence_interval_is_the_mean_plus_minus_t_s_over_root_n():
    values = [10.0, 12.0, 11.0, 13.0, 9.0]  # mean 11, s = sqrt(2.5)
    interval = confidence_interval(values)
    assert interval.mean == 11.0
    assert interval.half_width == pytest.approx(2.776 * math.sqrt(2.5) / math.sqrt(5), rel=2e-4)
    assert interval.low < 11 < interval.high
    assert confidence_interval(values, level=0.99).half_width > interval.half_width
    assert confidence_interval([4.0]) == (4.0, None)
    with pytest.raises(ValueError):
        confidence_interval([])


def test_welch_matches_a_worked_example():
    # Equal sizes and variances: t = diff / sqrt(2 s^2 / n) and df = 2 (n - 1).
    a, b = [1.0, 2.0, 3.0, 4.0, 5.0], [3.0, 4.0, 5.0, 6.0, 7.0]
    test = welch(a, b)
    assert test.t == pytest.approx(2 / math.sqrt(2 * 2.5 / 5)) and test.df == pytest.approx(8)
    assert test.p == pytest.approx(2 * (1 - compare.t_cdf(test.t, 8)))
    assert 0.05 < test.p < 0.1  # t = 2 with 8 df: p = 0.0805
    assert welch([1.0], b) is None
    assert welch([2.0, 2.0], [2.0, 2.0]).p == 1.0 and welch([2.0, 2.0], [3.0, 3.0]).p == 0.0


# ---- hand-made benchmark.json documents ---------------------------------------------------------------


def noisy(center, spread, n, phase=0):
    """n values around center, a fixed zig-zag of +-spread (no randomness: the tests stay exact)."""
    pattern = [-1.0, 0.5, 1.0, -0.5, 0.0, 0.75, -0.75, 0.25, -0.25]
    return [center + spread * pattern[(i + phase) % len(pattern)] for i in range(n)]


def document(points, label="run", settings=None):
    """points: {(prompt tokens, streams): (ttft values, decode values, aggregate tok/s) or None for skipped}."""
    doc = {"schema_version": 1, "label": label, "started_at": "2026-01-01T00:00:00+00:00",
           "settings": {"model": "m", "endpoint": "completions", "max_tokens": 128, "requests_per_stream": 2,
                        "ignore_eos": True} | (settings or {}),
           "points": [], "requests": [], "warmup": [{"phase": "warmup", "point": None, "ok": True, "ttft_s": 99.0}]}
    for number, ((target, streams), figures) in enumerate(sorted(points.items()), start=1):
        if figures is None:
            doc["points"].append({"point": number, "prompt_tokens_target": target, "streams": streams,
                                  "status": "skipped", "reason": "exceeds --max-model-len", "summary": None})
            continue
        ttfts, decodes, aggregate = figures
        records = [{"phase": "measure", "point": number, "stream": i % streams, "index": i // streams, "ok": True,
                    "ttft_s": ttft, "decode_tok_s": decode} for i, (ttft, decode) in enumerate(zip(ttfts, decodes, strict=True))]
        # A failed request carries no figures and must not count.
        records.append({"phase": "measure", "point": number, "stream": 0, "index": 99, "ok": False, "ttft_s": 50.0,
                        "decode_tok_s": None})
        doc["requests"] += records
        doc["points"].append({"point": number, "prompt_tokens_target": target, "streams": streams, "status": "ok",
                              "reason": None, "summary": {
                                  "requests": len(records), "ok_requests": len(records) - 1,
                                  "ttft_s": {"n": len(ttfts), "median": sorted(ttfts)[len(ttfts) // 2]},
                                  "decode_tok_s": {"n": len(decodes), "median": sorted(decodes)[len(decodes) // 2]},
                                  "aggregate": {"tok_s": aggregate}}})
    return doc


def rows_of(result, prompt, streams):
    return {row["figure"]: row for row in result["rows"] if (row["prompt_tokens"], row["streams"]) == (prompt, streams)}


def test_a_clear_regression_is_slower_and_equal_noisy_samples_are_within_noise():
    before = document({(2048, 1): (noisy(1.0, 0.1, 20), noisy(20.0, 1.0, 20), 20.0),
                       (2048, 2): (noisy(1.5, 0.2, 20), noisy(15.0, 2.0, 20), 30.0)})
    after = document({(2048, 1): (noisy(1.6, 0.1, 20), noisy(12.0, 1.0, 20), 12.0),  # TTFT +60 %, decode -40 %
                      (2048, 2): (noisy(1.5, 0.2, 20, phase=4), noisy(15.0, 2.0, 20, phase=2), 30.5)})
    result = compare.compare(before, after)
    slow = rows_of(result, 2048, 1)
    assert slow["ttft_s"]["verdict"] == "slower" and slow["decode_tok_s"]["verdict"] == "slower"
    assert slow["ttft_s"]["ratio"] == pytest.approx(1.6, rel=0.02) and slow["decode_tok_s"]["ratio"] == pytest.approx(0.6, rel=0.02)
    assert slow["ttft_s"]["p"] < 0.001 and slow["ttft_s"]["before_n"] == 20  # the failed request is left out
    assert slow["ttft_s"]["before"] == pytest.approx(1.0)  # the median of the successful requests
    same = rows_of(result, 2048, 2)
    assert same["ttft_s"]["verdict"] == "within noise" and same["decode_tok_s"]["verdict"] == "within noise"
    assert same["ttft_s"]["p"] > 0.5
    # One aggregate per run: no variance to judge it by.
    assert slow["aggregate_tok_s"]["verdict"] == "no noise estimate"
    assert slow["aggregate_tok_s"]["ratio"] == pytest.approx(0.6)
    assert result["only_before"] == [] and result["only_after"] == [] and result["settings_differ"] == []


def test_an_improvement_is_faster_in_the_figure_s_own_direction():
    before = document({(8192, 1): (noisy(4.0, 0.2, 12), noisy(10.0, 0.5, 12), 10.0)})
    after = document({(8192, 1): (noisy(3.0, 0.2, 12), noisy(12.0, 0.5, 12), 12.0)})
    rows = rows_of(compare.compare(before, after), 8192, 1)
    assert rows["ttft_s"]["verdict"] == "faster"  # lower TTFT
    assert rows["decode_tok_s"]["verdict"] == "faster"  # higher decode rate


def test_repetitions_make_the_aggregate_judgeable():
    def run(ttft, aggregate):
        return document({(2048, 4): (noisy(ttft, 0.05, 8), noisy(9.0, 0.3, 8), aggregate)})

    before = [run(1.0, 36.0), run(1.0, 35.5), run(1.0, 36.4)]
    after = [run(1.0, 30.1), run(1.0, 29.8), run(1.0, 30.3)]
    rows = rows_of(compare.compare(before, after), 2048, 4)
    assert rows["aggregate_tok_s"]["verdict"] == "slower"
    assert rows["aggregate_tok_s"]["before"] == pytest.approx(fmean([36.0, 35.5, 36.4]))
    assert rows["aggregate_tok_s"]["before_n"] == 3 and rows["ttft_s"]["before_n"] == 24  # requests pooled
    assert rows["ttft_s"]["verdict"] == "within noise"
    noise = compare.compare([run(1.0, 36.0), run(1.0, 35.0)], [run(1.0, 35.5), run(1.0, 36.2)])
    assert rows_of(noise, 2048, 4)["aggregate_tok_s"]["verdict"] == "within noise"


def test_points_in_one_run_only_and_unmeasured_points_are_listed():
    figures = (noisy(1.0, 0.1, 10), noisy(20.0, 1.0, 10), 20.0)
    before = document({(2048, 1): figures, (8192, 1): figures, (32768, 1): None})
    after = document({(2048, 1): figures, (2048, 2): figures, (32768, 1): None}, settings={"max_tokens": 256})
    result = compare.compare(before, after)
    assert {(row["prompt_tokens"], row["streams"]) for row in result["rows"]} == {(2048, 1)}
    assert len(result["rows"]) == 3
    assert result["only_before"] == [{"prompt_tokens": 8192, "streams": 1}]
    assert result["only_after"] == [{"prompt_tokens": 2048, "streams": 2}]
    assert [(item["side"], item["prompt_tokens"], item["status"]) for item in result["not_measured"]] == [
        ("before", 32768, "skipped"), ("after", 32768, "skipped")]
    assert result["settings_differ"] == [{"setting": "max_tokens", "before": "128", "after": "256"}]
    text = compare.render_markdown(result, "old.json", "new.json")
    assert "Only in old.json: prompt 8192 x 1 stream(s)" in text
    assert "Only in new.json: prompt 2048 x 2 stream(s)" in text
    assert "new.json: prompt 32768 x 1 stream(s): skipped (exceeds --max-model-len)" in text
    assert "**settings differ**: max_tokens: 128 -> 256" in text


def test_a_document_without_request_records_shows_the_summary_medians_unjudged():
    before = document({(2048, 1): (noisy(1.0, 0.1, 9), noisy(20.0, 1.0, 9), 20.0)})
    after = document({(2048, 1): (noisy(2.0, 0.1, 9), noisy(10.0, 1.0, 9), 10.0)})
    before["requests"] = after["requests"] = []
    rows = rows_of(compare.compare(before, after), 2048, 1)
    assert rows["ttft_s"]["before"] == pytest.approx(1.0) and rows["ttft_s"]["after"] == pytest.approx(2.0)
    assert rows["ttft_s"]["verdict"] == "no noise estimate"


# ---- python -m sparkctl.bench compare ------------------------------------------------------------------


def write(path, doc):
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_compare_command_prints_the_table_and_writes_it(tmp_path, capsys):
    before = write(tmp_path / "before.json", document({(2048, 1): (noisy(1.0, 0.1, 20), noisy(20.0, 1.0, 20), 20.0)}))
    after = write(tmp_path / "after.json", document({(2048, 1): (noisy(1.6, 0.1, 20), noisy(12.0, 1.0, 20), 12.0),
                                                     (8192, 1): (noisy(2.0, 0.1, 20), noisy(18.0, 1.0, 20), 18.0)}))
    out = tmp_path / "comparison.md"
    assert cli.main(["compare", before, after, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed == out.read_text()
    assert "| prompt tokens | streams | figure | before | after | after/before | p | verdict |" in printed
    assert "| 2048 | 1 | median TTFT (s) | 1.000 (n=20) | 1.600 (n=20) | 1.600x | <0.001 | **slower** |" in printed
    assert f"Only in {after}: prompt 8192 x 1 stream(s)" in printed
    extra = write(tmp_path / "before2.json", document({(2048, 1): (noisy(1.0, 0.1, 20), noisy(20.0, 1.0, 20), 21.0)}))
    assert cli.main(["compare", before, after, "--also-before", extra, "--also-after", after]) == 0
    assert "2 run(s)" in capsys.readouterr().out


def test_the_compare_command_names_a_file_it_cannot_use(tmp_path, capsys):
    good = write(tmp_path / "good.json", document({(2048, 1): (noisy(1.0, 0.1, 5), noisy(20.0, 1.0, 5), 20.0)}))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"hello": 1}))
    cases = [
        (["compare", good, str(tmp_path / "missing.json")], "missing.json: no such file"),
        (["compare", str(tmp_path / "broken.json"), good], "broken.json: is not JSON"),
        (["compare", good, str(tmp_path / "other.json")], "other.json: is not a benchmark.json"),
        (["compare", good, str(tmp_path)], "is a directory; give the benchmark.json inside it"),
        (["compare", good, good, "--also-after", str(tmp_path / "gone.json")], "gone.json: no such file"),
        (["compare", good, good, "--out", str(tmp_path / "no" / "dir.md")], "--out: cannot write"),
        (["compare", good], "required"),
    ]
    for argv, words in cases:
        assert cli.main(argv) == 2, argv
        captured = capsys.readouterr()
        assert words in captured.err and captured.out == "", (argv, captured.err)


def test_burst_requests_stay_out_of_the_decode_figure_only():
    before = document({(2048, 1): (noisy(1.0, 0.1, 10), noisy(20.0, 1.0, 10), 20.0)})
    after = document({(2048, 1): (noisy(1.0, 0.1, 10), noisy(20.0, 1.0, 10), 20.0)})
    after["requests"].append({"phase": "measure", "point": 1, "stream": 0, "index": 50, "ok": True, "burst": True,
                              "ttft_s": 1.0, "decode_tok_s": 5000.0})
    rows = rows_of(compare.compare(before, after), 2048, 1)
    assert rows["decode_tok_s"]["after_n"] == 10 and rows["ttft_s"]["after_n"] == 11
