"""sparkctl.bench report writers on a synthetic run: benchmark.json keys, the Markdown
tables, valid PNGs with the reference drawn beside the measured points, atomic writes and
the client-overhead verdict."""

import json
import os

import pytest
from matplotlib import image as mpimg

from sparkctl.bench import SCHEMA_VERSION, plots, reference, report, stats
from sparkctl.bench.runner import Runner
from sparkctl.bench.settings import Settings

TOP_LEVEL = {"schema_version", "tool", "label", "started_at", "finished_at", "duration_s", "ok", "settings", "calibration",
             "points", "requests", "warmup", "overhead", "reference", "comparisons", "errors", "warnings", "plots"}
SOLAR = {"source": "seed 004 (its author's two Sparks)",
         "decode_tok_s": [{"prompt_tokens": 2048, "value": 10.2}, {"prompt_tokens": 8192, "value": 10.6},
                          {"prompt_tokens": 223000, "value": 8.1}],
         "ttft_s": [{"prompt_tokens": 8192, "value": 4}, {"prompt_tokens": 32768, "value": 16}],
         "throughput_tok_s": [{"streams": 1, "value": 10.0}, {"streams": 2, "value": 19.0}],
         "notes": "~67% of a ~15 tok/s roofline"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def synthetic_doc(ref=SOLAR):
    """Two lengths x two stream counts; decode = 9.0 / streams * (1 if 2K else 0.9), TTFT 1 s per 2K tokens;
    the 32K length skipped."""
    settings = Settings(url="http://10.0.0.1:8000", model="solar-open2", prompt_tokens=[2048, 8192, 32768],
                        concurrency=[1, 2], max_tokens=128, max_model_len=16384)
    points, requests = [], []
    number = 0
    for target in settings.prompt_tokens:
        for streams in settings.concurrency:
            number += 1
            if target == 32768:
                points.append({"point": number, "prompt_tokens_target": target, "streams": streams, "status": "skipped",
                               "reason": "32768 prompt + 128 max_tokens exceeds --max-model-len 16384", "summary": None})
                continue
            rate = 9.0 / streams * (1 if target == 2048 else 0.9)
            ttft = target / 2048
            records = []
            for stream in range(streams):
                t_send = stream * 0.01
                t_first = t_send + ttft
                t_last = t_first + 127 / rate
                records.append({"point": number, "stream": stream, "index": 0, "ok": True, "length_rejected": False,
                                "prompt_tokens": target + 3, "completion_tokens": 128, "t_send": t_send, "t_first": t_first,
                                "t_last": t_last, "t_end": t_last, "ttft_s": ttft, "decode_tok_s": rate,
                                "e2e_s": t_last - t_send, "tpot_s": 1 / rate, "itl_s": [1 / rate] * 127, "burst": False,
                                "error": None})
            requests += records
            points.append({"point": number, "prompt_tokens_target": target, "streams": streams, "status": "ok",
                           "reason": None, "summary": stats.summarize_point(records, streams)})
    validated = reference.validate(ref) if ref else None
    return {
        "schema_version": SCHEMA_VERSION, "tool": {"name": "sparkctl.bench", "version": "0"}, "label": "Solar-Open2 lab",
        "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:10:00+00:00", "duration_s": 600.0,
        "ok": True, "settings": settings.as_dict() | {"api_key_set": True},
        "calibration": {"fit": {"tokens_per_word": 1.3, "overhead_tokens": 12}, "probes": [], "lengths": []},
        "points": points, "requests": requests, "warmup": [],
        "overhead": {"client_cpu_s": 0.5, "wall_s": 600.0, "tokens_received": 2000, "cpu_us_per_token": 250.0,
                     "core_fraction": 0.0008, "selftest": {"tokens_per_s": 50000.0}, "peak_aggregate_tok_s": 9.0,
                     "peak_fraction_of_capacity": 0.00018, "warn_above_fraction": 0.1, "warnings": []},
        "reference": validated, "comparisons": reference.compare(points, validated), "errors": [], "warnings": [],
    }


@pytest.fixture
def written(tmp_path):
    doc = synthetic_doc()
    paths = report.write(doc, tmp_path / "report")
    return doc, paths, tmp_path / "report"


def test_every_file_is_written_and_nothing_else(written):
    _, paths, out = written
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["benchmark.json", "benchmark.md", "decode_vs_context.png", "ttft_vs_context.png", "throughput_vs_streams.png"])
    assert set(paths) == {"json", "markdown", "decode_vs_context", "ttft_vs_context", "throughput_vs_streams"}


def test_json_has_the_schema_keys_and_the_plotted_series(written):
    _, _, out = written
    doc = json.loads((out / "benchmark.json").read_text())
    assert set(doc) == TOP_LEVEL and doc["schema_version"] == SCHEMA_VERSION
    assert set(doc["plots"]) == {"decode_vs_context", "ttft_vs_context", "throughput_vs_streams"}
    decode = doc["plots"]["decode_vs_context"]
    assert decode["file"] == "decode_vs_context.png"
    ref = [s for s in decode["series"] if s["kind"] == "reference"]
    assert len(ref) == 1 and ref[0]["x"] == [2048, 8192, 223000] and ref[0]["y"] == [10.2, 10.6, 8.1]
    assert SOLAR["source"] in ref[0]["label"]
    one_stream = next(s for s in decode["series"] if s["kind"] == "measured" and s["streams"] == 1)
    assert one_stream["x"] == [2051, 8195] and one_stream["y"] == [pytest.approx(9.0), pytest.approx(8.1)]
    throughput = doc["plots"]["throughput_vs_streams"]["series"]
    assert next(s for s in throughput if s["kind"] == "reference")["x"] == [1, 2]
    assert [s["prompt_tokens"] for s in throughput if s["kind"] == "measured"] == [2048, 8192]


def test_pngs_are_valid_images(written):
    _, _, out = written
    for name in plots.FILES.values():
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC)
        pixels = mpimg.imread(out / name)
        assert pixels.shape[0] > 200 and pixels.shape[1] > 300


def test_the_reference_is_drawn_beside_the_measured_points():
    doc = synthetic_doc()
    figures = plots.build(doc)
    figure, _ = figures["decode_vs_context"]
    ax = figure.axes[0]
    stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
    assert len(stars) == 1
    assert list(stars[0].get_xdata()) == [2048, 8192, 223000] and list(stars[0].get_ydata()) == [10.2, 10.6, 8.1]
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert f"reference: {SOLAR['source']}" in legend and "measured, 1 stream" in legend and "measured, 2 streams" in legend
    measured = [line for line in ax.get_lines() if line.get_marker() not in ("*", "_", "None", None) and len(line.get_xdata())]
    assert any(list(line.get_ydata()) == [pytest.approx(9.0), pytest.approx(8.1)] for line in measured)
    ttft_ax = figures["ttft_vs_context"][0].axes[0]
    ttft_star = next(line for line in ttft_ax.get_lines() if line.get_marker() == "*")
    assert list(ttft_star.get_xdata()) == [8192, 32768] and list(ttft_star.get_ydata()) == [4, 16]


def test_a_short_prompt_reference_sits_left_of_the_shortest_length_and_says_so():
    doc = synthetic_doc({"source": "seed 002", "decode_tok_s": [{"prompt_tokens": 0, "value": 64.4}]})
    figure, series = plots.build(doc)["decode_vs_context"]
    ref = next(s for s in series if s["kind"] == "reference")
    assert ref["prompt_tokens"] == [0] and ref["x"] == [1024.0] and ref["short_prompt_x"] == 1024.0
    ax = figure.axes[0]
    figure.canvas.draw()
    labels = {tick.get_text() for tick in ax.get_xticklabels()}
    assert "short" in labels and "2K" in labels
    assert any(text.get_text() == "short prompt" for text in ax.texts)
    # No reference at all: measured lines only, no star.
    bare = plots.build(synthetic_doc(None))
    assert not [line for line in bare["decode_vs_context"][0].axes[0].get_lines() if line.get_marker() == "*"]


def test_markdown_has_both_tables_with_reference_ratios(written):
    _, _, out = written
    text = (out / "benchmark.md").read_text()
    assert text.startswith("# Benchmark: Solar-Open2 lab - OK")
    assert "## By prompt length (1 stream)" in text and "## By concurrency" in text
    assert "| prompt (target) | prompt (sent) | TTFT median s |" in text
    # 2K, 1 stream: 9.0 tok/s against 10.2 published -> 0.88x; 8K: 8.1 vs 10.6 -> 0.76x, TTFT 4 s vs 4 s -> 1.00x.
    assert "| 2048 | 2,051 | 1.000 | 1.000 | 9.0 | 9.0 | 10.2 | 0.88x |" in text
    assert "| 8192 | 8,195 | 4.000 | 4.000 | 8.1 | 8.1 | 10.6 | 0.76x | 4.000 | 1.00x | ok |" in text
    assert "| 2048 | 2 | " in text and "| 19.0 |" in text  # the 2-stream reference beside the measured aggregate
    assert "32768 tokens, streams 1, 2: skipped: 32768 prompt + 128 max_tokens exceeds --max-model-len 16384" in text
    assert "not compared: decode_tok_s at prompt 223000 = 8.1" in text
    assert SOLAR["source"] in text and "## Client overhead" in text and "250 us per received token" in text


def test_markdown_has_the_latency_table_as_vllm_reports_it(written):
    _, _, out = written
    text = (out / "benchmark.md").read_text()
    assert "## Latency and throughput per point" in text
    assert "| prompt (target) | streams | TTFT ms | TPOT ms | ITL ms | E2E ms | output tok/s | requests/s | bursts | status |" in text
    # 2K x 1 stream: TTFT 1 s; 127 tokens at 9 tok/s after it: E2E 1 + 127 / 9 = 15.111 s, TPOT = ITL = 1 / 9 s;
    # 128 tokens and 1 request over those 15.111 s: 8.47 tok/s and 0.07 requests/s.
    assert ("| 2048 | 1 | 1,000 / 1,000 / 1,000 | 111 / 111 / 111 | 111 / 111 / 111 | 15,111 / 15,111 / 15,111 | 8.5 "
            "| 0.07 | 0 | ok |") in text
    # 2K x 2 streams at 4.5 tok/s, the second sent 10 ms later: E2E 1 + 127 / 4.5 = 29.222 s for both; the point
    # lasts 29.232 s (first send to last end): 256 tokens -> 8.76 tok/s, 2 requests -> 0.07/s.
    assert ("| 2048 | 2 | 1,000 / 1,000 / 1,000 | 222 / 222 / 222 | 222 / 222 / 222 | 29,222 / 29,222 / 29,222 | 8.8 "
            "| 0.07 | 0 | ok |") in text
    assert "arrived in bursts" not in text.split("## Latency and throughput per point")[1].split("\n\n", 2)[2]


def test_markdown_counts_bursts_and_reads_older_reports():
    doc = synthetic_doc()
    doc["points"][0]["burst_requests"] = 1
    del doc["points"][1]["summary"]["tpot_s"]  # a report written before TPOT was measured
    doc["points"][1]["buffered_requests"] = 2  # ... and before bursts had their own name
    text = report.render_markdown(doc)
    assert "| 1,000 / 1,000 / 1,000 | n/a | 222 / 222 / 222 |" in text
    assert "| **1 of 1** | ok |" in text and "| **2 of 2** | ok |" in text
    assert "- prompt 2048 x 1 stream(s): 1 of 1 answers arrived in bursts" in text


def test_json_keeps_lists_of_numbers_on_one_line(written):
    _, _, out = written
    text = (out / "benchmark.json").read_text()
    assert '"itl_s": [0.1111111111111111, 0.1111111111111111,' in text
    assert json.loads(text)["requests"][0]["itl_s"] == [1 / 9] * 127


def test_a_failed_write_leaves_the_previous_report_whole(tmp_path, monkeypatch):
    out = tmp_path / "report"
    out.mkdir()
    (out / "benchmark.json").write_text('{"previous": true}')
    real_replace = os.replace

    def failing_replace(src, dst):
        if str(dst).endswith("benchmark.json"):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(report.os, "replace", failing_replace)
    with pytest.raises(OSError):
        report.write(synthetic_doc(), out)
    assert json.loads((out / "benchmark.json").read_text()) == {"previous": True}
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")], "temporary files left behind"


def test_overhead_warns_when_the_client_nears_its_capacity():
    runner = Runner(Settings(url="http://h:1", model="m"), None)
    points = [{"summary": {"aggregate": {"tok_s": 1500.0}}}, {"summary": None}]
    records = [{"completion_tokens": 1000}, {"completion_tokens": None}]
    overhead = runner._overhead(cpu=0.2, wall=10.0, streamed=records, points=points, capacity={"tokens_per_s": 10000.0})
    assert overhead["cpu_us_per_token"] == pytest.approx(200.0) and overhead["core_fraction"] == pytest.approx(0.02)
    assert overhead["peak_fraction_of_capacity"] == pytest.approx(0.15)
    assert len(overhead["warnings"]) == 1 and "15%" in overhead["warnings"][0]
    calm = runner._overhead(cpu=0.2, wall=10.0, streamed=records, points=points, capacity={"tokens_per_s": 100000.0})
    assert calm["peak_fraction_of_capacity"] == pytest.approx(0.015) and calm["warnings"] == []
