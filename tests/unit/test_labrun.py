"""The integration tests' output readers: recap counters and changed task names."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from labrun import changed_tasks, parse_recap  # noqa: E402

OUTPUT = """
TASK [direct_link : Write the netplan file] ***********************************
ok: [spark1]
changed: [spark2]

TASK [fabric_env : Write the fabric environment file] *************************
changed: [spark1]
ok: [spark2]

RUNNING HANDLER [fabric_env : Reload systemd units] ***************************
changed: [spark1]

TASK [preflight : Create the report directory on the control node] ************
changed: [spark1 -> localhost]

PLAY RECAP *********************************************************************
localhost                  : ok=2    changed=0    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0
spark1                     : ok=11   changed=3    unreachable=0    failed=0    skipped=2    rescued=0    ignored=0
spark2                     : ok=9    changed=1    unreachable=1    failed=0    skipped=2    rescued=0    ignored=0
"""


def test_recap_counters_per_host():
    recap = parse_recap(OUTPUT)
    assert recap["spark1"]["changed"] == 3
    assert recap["spark2"]["unreachable"] == 1
    assert recap["localhost"]["ok"] == 2


def test_changed_task_names_per_host():
    assert changed_tasks(OUTPUT) == {
        "spark1": [
            "fabric_env : Write the fabric environment file",
            "fabric_env : Reload systemd units",
            "preflight : Create the report directory on the control node",
        ],
        "spark2": ["direct_link : Write the netplan file"],
    }
