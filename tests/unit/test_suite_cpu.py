"""The suite's CPU report: how busy the machine was while each stage ran."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from suite_cpu import busy_share, cpu_jiffies, main, parse_samples, parse_spans, report  # noqa: E402

# As Linux 6.1 prints it: user nice system idle iowait irq softirq steal guest guest_nice.
STAT = """cpu  1000 50 300 8000 100 0 50 0 200 0
cpu0 500 25 150 4000 50 0 25 0 100 0
intr 12345
"""


def test_busy_leaves_out_idle_iowait_and_guest_time():
    # busy = 1000 + 50 + 300 + 0 + 50 + 0; total adds idle 8000 and iowait 100.
    assert cpu_jiffies(STAT) == (1400, 9500)


def test_a_stat_without_the_aggregate_line_is_an_error():
    with pytest.raises(ValueError):
        cpu_jiffies("cpu0 1 2 3 4 5 6 7 8\n")


def test_share_of_a_span_comes_from_the_samples_around_it():
    samples = parse_samples("100.0 0 0\n105.0 100 1000\n110.0 900 2000\n115.0 950 3000\nnot a sample\n")
    # 100..110: busy 900 of 2000 jiffies.
    assert busy_share(samples, 104.0, 106.0) == pytest.approx(900 / 2000)
    # A span past the last sample has nothing to measure.
    assert busy_share(samples, 200.0, 300.0) is None


def test_report_prints_every_stage_and_the_whole_run(tmp_path, capsys):
    log, spans = tmp_path / "cpu.log", tmp_path / "spans.txt"
    log.write_text("100.0 0 0\n105.0 500 1000\n110.0 600 2000\n")
    spans.write_text("fresh-check 100 105\nmolecule 106 110\nlater 500 600\n")
    assert main(["report", str(log), str(spans)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["fresh-check", "5s", "30.0%"]
    assert out[3].split() == ["later", "100s", "-"]
    assert out[4].split() == ["whole", "run", "10s", "30.0%"]
    assert report([], parse_spans("")) == [out[0]]
