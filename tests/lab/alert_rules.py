"""The observe stage's alert rules as the role renders them, and promtool to test them: shared by
the unit tests (tests/unit/test_observe_rules.py, against hand-written series) and the lab's real
vLLM (tests/integration/test_lab_model_switch.py, against series scraped from the engine).

render_rules() renders roles/observe/templates/sparkctl.rules.yml.j2 with the role's defaults and
the project's filter, without Ansible (the default of observe_engine_kind reads the profile, which
Ansible would template: it is set here). promtool comes from the distribution's prometheus
package, unpacked into the venv by tests/bootstrap.sh ($SPARKCTL_PROMTOOL or PATH otherwise)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "observe"
COLLECTIONS = REPO / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

from ansible_collections.sparkctl.spark.plugins.filter.observe import observe_engine_metrics  # noqa: E402

RULES_FILE = "sparkctl.rules.yml"


def find_promtool() -> str | None:
    for candidate in (os.environ.get("SPARKCTL_PROMTOOL"), str(Path(sys.prefix) / "prometheus" / "usr" / "bin" / "promtool"),
                      shutil.which("promtool")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


PROMTOOL = find_promtool()
PROMTOOL_MISSING = ("no promtool: tests/bootstrap.sh unpacks the prometheus package into .venv/prometheus "
                    "(or set SPARKCTL_PROMTOOL)")


def render_rules(**overrides) -> str:
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values["spark_oom_guard_min_available_bytes"] = 8589934592
    values["observe_engine_kind"] = "vllm"
    values.update(overrides)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["sparkctl.spark.observe_engine_metrics"] = observe_engine_metrics
    return env.from_string((ROLE / "templates" / "sparkctl.rules.yml.j2").read_text()).render(**values)


def promtool_test(directory: Path, rules_text: str, test_text: str, test_name: str = "rules_test.yml"):
    """`promtool test rules` of test_text (its rule_files naming RULES_FILE) against rules_text."""
    (directory / RULES_FILE).write_text(rules_text)
    (directory / test_name).write_text(test_text)
    return subprocess.run([PROMTOOL, "test", "rules", str(directory / test_name)], capture_output=True, text=True,
                          check=False)
