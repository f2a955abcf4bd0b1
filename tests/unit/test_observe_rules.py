"""The observe role's alert rules (roles/observe/templates/sparkctl.rules.yml.j2), rendered with
the role's defaults and run through `promtool check rules` and `promtool test rules`
(tests/unit/fixtures/observe/rules_test.yml: each alert fires on the series that should fire it
and stays quiet otherwise, on a vLLM profile; rules_test_sglang.yml: the engine's alert on an
SGLang profile's metric names). promtool comes from the distribution's prometheus package, unpacked
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
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.observe import observe_engine_metrics

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "observe"
FIXTURES = Path(__file__).parent / "fixtures" / "observe"
FIXTURE = FIXTURES / "rules_test.yml"
# The engine alert's cases in SGLang's metric names (FIXTURE has them in vLLM's, with every other alert).
SGLANG_FIXTURE = FIXTURES / "rules_test_sglang.yml"


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
    # The default reads spark_profile.engine.kind, which Ansible would template; plain jinja2 does not.
    values["observe_engine_kind"] = "vllm"
    values.update(overrides)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["sparkctl.spark.observe_engine_metrics"] = observe_engine_metrics
    return env.from_string((ROLE / "templates" / "sparkctl.rules.yml.j2").read_text()).render(**values)


def promtool_test(tmp_path, rules_text, fixture):
    (tmp_path / "sparkctl.rules.yml").write_text(rules_text)
    shutil.copy(fixture, tmp_path / fixture.name)
    return subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / fixture.name)], capture_output=True, text=True, check=False)


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
