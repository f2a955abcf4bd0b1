"""The suite's end report: tests per stage from pytest's JUnit files, catalogue entries."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from suite_counts import STAGES, catalogue_entries, main, stage_counts  # noqa: E402

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="1" failures="2"
 skipped="3" tests="20" time="1.0"></testsuite></testsuites>"""


def test_stage_counts_fold_errors_into_failures(tmp_path):
    (tmp_path / "unit.xml").write_text(JUNIT)
    assert stage_counts(tmp_path / "unit.xml") == {"tests": 20, "failures": 3, "skipped": 3, "passed": 14}


def test_catalogue_entries_count_top_level_items(tmp_path):
    (tmp_path / "faults.yml").write_text("---\n# - id: not this\n- id: a\n  what: x\n- id: b\n")
    (tmp_path / "bad_inputs.yml").write_text("entries:\n  - id: a\n    produce: {}\n")
    assert catalogue_entries(tmp_path) == {"bad_inputs": 1, "faults": 2}


def test_report_names_a_stage_that_was_not_reached(tmp_path, capsys):
    (tmp_path / "unit.xml").write_text(JUNIT)
    main(["x", str(tmp_path), str(tmp_path)])
    out = capsys.readouterr().out
    assert "unit              20 tests: 14 passed, 3 failed, 3 skipped" in out
    assert "integration    (stage not reached)" in out


def test_the_real_catalogues_are_counted():
    counts = catalogue_entries(Path(__file__).resolve().parents[1] / "catalogue")
    assert counts["faults"] >= 21 and counts["bad_inputs"] >= 27


def test_role_scenarios_are_counted_and_a_failed_one_is_named(tmp_path, capsys):
    (tmp_path / "scenarios.txt").write_text("preflight 0 30\nfirewall 2 21\n")
    main(["x", str(tmp_path), str(tmp_path)])
    out = capsys.readouterr().out
    assert "scenarios          2 role scenarios: 1 passed, 1 failed, 51 s (failed: firewall)" in out


def test_role_scenarios_not_reached_are_said(tmp_path, capsys):
    main(["x", str(tmp_path), str(tmp_path)])
    assert "scenarios      (stage not reached)" in capsys.readouterr().out


def test_every_junit_file_the_suite_writes_is_reported():
    suite = (Path(__file__).resolve().parents[1] / "suite.sh").read_text()
    written = re.findall(r'--junitxml="\$COUNTS_DIR/([\w-]+)\.xml"', suite)
    assert written and sorted(written) == sorted(STAGES)
