"""The observe role's alert rules (roles/observe/templates/sparkctl.rules.yml.j2), rendered with
the role's defaults and run through `promtool check rules` and `promtool test rules`
(tests/unit/fixtures/observe/rules_test.yml: each alert fires on the series that should fire it
and stays quiet otherwise). promtool comes from the distribution's prometheus package, unpacked
into the venv by tests/bootstrap.sh ($SPARKCTL_PROMTOOL or PATH otherwise)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "observe"
FIXTURE = Path(__file__).parent / "fixtures" / "observe" / "rules_test.yml"


def _promtool():
    for candidate in (os.environ.get("SPARKCTL_PROMTOOL"), str(Path(sys.prefix) / "prometheus" / "usr" / "bin" / "promtool"),
                      shutil.which("promtool")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


PROMTOOL = _promtool()
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="no promtool: tests/bootstrap.sh unpacks the prometheus "
                                    "package into .venv/prometheus (or set SPARKCTL_PROMTOOL)")


def render_rules(**overrides) -> str:
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values["spark_oom_guard_min_available_bytes"] = 8589934592
    values.update(overrides)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string((ROLE / "templates" / "sparkctl.rules.yml.j2").read_text()).render(**values)


def test_the_rules_name_every_alert_the_stage_documents():
    rules = yaml.safe_load(render_rules())["groups"][0]["rules"]
    assert [rule["alert"] for rule in rules] == [
        "SparkMemAvailableNearOOMLine", "SparkEngineDown", "SparkEngineUnhealthy", "SparkGenerationWedged", "SparkCableHalfDown",
        "SparkCableHalfErrors", "SparkCheckpointDiskNearlyFull", "SparkEngineRestarted", "SparkRayNodeLost"]
    assert "12884901888" in rules[0]["expr"]  # 8 GiB line + 4 GiB margin


def test_the_memory_line_follows_the_oom_guard_and_the_margin():
    rules = yaml.safe_load(render_rules(spark_oom_guard_min_available_bytes=4 * 2**30,
                                        observe_alert_memory_margin_bytes=2**30))["groups"][0]["rules"]
    assert rules[0]["expr"].endswith(f"< {5 * 2**30}")
    assert "within 1 GiB" in rules[0]["annotations"]["summary"]


@needs_promtool
def test_promtool_checks_the_rules(tmp_path):
    (tmp_path / "sparkctl.rules.yml").write_text(render_rules())
    done = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "sparkctl.rules.yml")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_every_alert_fires_when_it_should_and_only_then(tmp_path):
    (tmp_path / "sparkctl.rules.yml").write_text(render_rules())
    shutil.copy(FIXTURE, tmp_path / "rules_test.yml")
    done = subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / "rules_test.yml")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_a_broken_expectation_fails(tmp_path):
    """The promtool run can fail: an alert expected where the series never cross the line."""
    (tmp_path / "sparkctl.rules.yml").write_text(render_rules(observe_alert_memory_margin_bytes=0))
    shutil.copy(FIXTURE, tmp_path / "rules_test.yml")
    done = subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / "rules_test.yml")],
                          capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "SparkMemAvailableNearOOMLine" in done.stdout + done.stderr
