"""The observe role's alert rules (roles/observe/templates/sparkctl.rules.yml.j2), rendered with
the role's defaults (tests/lab/alert_rules.py) and run through `promtool check rules` and `promtool test rules`
(tests/unit/fixtures/observe/rules_test.yml: each alert fires on the series that should fire it
and stays quiet otherwise, on a vLLM profile; rules_test_sglang.yml: the engine's alert on an
SGLang profile's metric names). promtool comes from the distribution's prometheus package, unpacked
into the venv by tests/bootstrap.sh ($SPARKCTL_PROMTOOL or PATH otherwise)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from alert_rules import PROMTOOL, PROMTOOL_MISSING, render_rules
from alert_rules import promtool_test as _promtool_test
from ansible.errors import AnsibleFilterError

FIXTURES = Path(__file__).parent / "fixtures" / "observe"
FIXTURE = FIXTURES / "rules_test.yml"
# The engine alert's cases in SGLang's metric names (FIXTURE has them in vLLM's, with every other alert).
SGLANG_FIXTURE = FIXTURES / "rules_test_sglang.yml"
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)


def promtool_test(tmp_path, rules_text, fixture):
    return _promtool_test(tmp_path, rules_text, fixture.read_text(), fixture.name)


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


def test_each_engine_s_rules_name_its_own_series_only():
    vllm, sglang = render_rules(observe_engine_kind="vllm"), render_rules(observe_engine_kind="sglang")
    assert "vllm:num_requests_running" in vllm and "sglang:" not in vllm
    assert "sglang:num_running_reqs" in sglang and "vllm:" not in sglang
    # Only the engine's alert differs.
    assert [line for line in vllm.splitlines() if "vllm:" not in line] == [line for line in sglang.splitlines() if "sglang:" not in line]


def test_an_engine_without_metric_names_is_refused():
    with pytest.raises(AnsibleFilterError, match="spark_profile.engine.kind"):
        render_rules(observe_engine_kind="tgi")


@needs_promtool
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_promtool_checks_the_rules(tmp_path, engine):
    (tmp_path / "sparkctl.rules.yml").write_text(render_rules(observe_engine_kind=engine))
    done = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "sparkctl.rules.yml")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_every_alert_fires_when_it_should_and_only_then(tmp_path):
    done = promtool_test(tmp_path, render_rules(), FIXTURE)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_the_wedge_alert_fires_on_sglang_s_series(tmp_path):
    done = promtool_test(tmp_path, render_rules(observe_engine_kind="sglang"), SGLANG_FIXTURE)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_vllm_s_rules_miss_a_wedged_sglang(tmp_path):
    """The SGLang cases can fail: rules in vLLM's names never see SGLang's series, so the expected alert is missing."""
    done = promtool_test(tmp_path, render_rules(observe_engine_kind="vllm"), SGLANG_FIXTURE)
    assert done.returncode != 0 and "SparkGenerationWedged" in done.stdout + done.stderr


@needs_promtool
def test_a_broken_expectation_fails(tmp_path):
    """The promtool run can fail: an alert expected where the series never cross the line."""
    done = promtool_test(tmp_path, render_rules(observe_alert_memory_margin_bytes=0), FIXTURE)
    assert done.returncode != 0 and "SparkMemAvailableNearOOMLine" in done.stdout + done.stderr
