"""The suite's idempotence check outside molecule's own step (tests/quiet_run.py): a role
scenario's converge on the converged lab, and the twin's re-run, must change nothing."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quiet_run import main, scenario_converge  # noqa: E402

RECAP_QUIET = """
PLAY RECAP *********************************************************************
localhost                  : ok=1    changed=0    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0
spark1                     : ok=9    changed=0    unreachable=0    failed=0    skipped=1    rescued=0    ignored=0
spark2                     : ok=9    changed=0    unreachable=0    failed=0    skipped=1    rescued=0    ignored=0
"""
RECAP_CHANGED = """
TASK [linger : Enable lingering for the service user] **************************
ok: [spark1]
changed: [spark2]

PLAY RECAP *********************************************************************
spark1                     : ok=9    changed=0    unreachable=0    failed=0    skipped=1    rescued=0    ignored=0
spark2                     : ok=9    changed=1    unreachable=0    failed=0    skipped=1    rescued=0    ignored=0
"""
VERIFY_RECAP = RECAP_QUIET.replace("changed=0", "changed=2")


def _molecule_log(converge_output: str) -> str:
    # The shape of `molecule test` output with the converged-lab sequence: converge, then verify.
    return ("INFO     [linger > discovery] scenario test matrix: converge, verify\n"
            "INFO     [linger > converge] Executing\n" + converge_output +
            "INFO     [linger > converge] Executed: Successful\n"
            "INFO     [linger > verify] Executing\n" + VERIFY_RECAP +
            "INFO     [linger > verify] Executed: Successful\n")


def test_a_quiet_converge_passes_whatever_verify_reports(tmp_path, capsys):
    log = tmp_path / "scenario-linger.log"
    log.write_text(_molecule_log(RECAP_QUIET))
    assert main([str(log), "--scenario", "linger"]) == 0
    assert "changed=0 on localhost, spark1, spark2" in capsys.readouterr().out


def test_a_converge_that_changed_fails_naming_host_and_task(tmp_path, capsys):
    log = tmp_path / "scenario-linger.log"
    log.write_text(_molecule_log(RECAP_CHANGED))
    assert main([str(log), "--scenario", "linger"]) == 1
    err = capsys.readouterr().err
    assert "spark2 changed=1: linger : Enable lingering for the service user" in err
    assert "spark1 changed" not in err


def test_a_log_without_the_scenarios_converge_fails(tmp_path):
    log = tmp_path / "scenario-linger.log"
    log.write_text(_molecule_log(RECAP_QUIET))
    assert scenario_converge(log.read_text(), "firewall") is None
    assert main([str(log), "--scenario", "firewall"]) == 1
    # A converge cut off before molecule said it finished is no evidence either.
    log.write_text("INFO     [linger > converge] Executing\n" + RECAP_QUIET)
    assert main([str(log), "--scenario", "linger"]) == 1


def test_a_whole_log_is_one_run(tmp_path):
    log = tmp_path / "twin-idempotence.log"
    log.write_text(RECAP_QUIET)
    assert main([str(log)]) == 0
    log.write_text(RECAP_CHANGED)
    assert main([str(log)]) == 1
    log.write_text("ERROR! the playbook could not be found\n")
    assert main([str(log)]) == 1
