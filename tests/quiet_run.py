#!/usr/bin/env python3
"""Check that an ansible-playbook run in a log changed nothing on any host: the idempotence
checks of tests/suite.sh that are not molecule's own idempotence step.

- The twin lab's re-run of site.yml: the whole log is one run.
- A role scenario on the lab the whole-site scenario has just converged: that lab has run
  every role once already, so the scenario's converge is the role's second run and must
  change nothing (.config/molecule/converged-lab.yml); `--scenario NAME` takes the run
  between molecule's "[NAME > converge] Executing" and "Executed" lines of the log.

Usage: python3 tests/quiet_run.py LOG [--scenario NAME]
Exit status 0 when every host of the run's PLAY RECAP says changed=0; 1 with the hosts
and the tasks that changed otherwise, or when the log holds no such run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "integration"))
from labrun import changed_tasks, parse_recap  # noqa: E402


def scenario_converge(log: str, scenario: str) -> str | None:
    """The output of molecule's converge step of one scenario, None when the log has none."""
    start = f"[{scenario} > converge] Executing"
    end = f"[{scenario} > converge] Executed"
    if start not in log:
        return None
    section = log.split(start, 1)[1]
    return section.split(end, 1)[0] if end in section else None


def verdict(output: str | None, what: str) -> tuple[bool, str]:
    """(quiet, a line saying so) for one run's output."""
    recap = parse_recap(output or "")
    if not recap:
        return False, f"{what}: no PLAY RECAP found (did the run finish?)"
    changed = {host: counts.get("changed", 0) for host, counts in recap.items() if counts.get("changed", 0)}
    if changed:
        tasks = changed_tasks(output or "")
        detail = "; ".join(f"{host} changed={n}: {', '.join(tasks.get(host, [])) or '?'}" for host, n in sorted(changed.items()))
        return False, f"{what} changed something: {detail}"
    return True, f"{what}: changed=0 on {', '.join(sorted(recap))}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--scenario", help="check this role scenario's converge step, not the whole log")
    args = parser.parse_args(argv)
    log = args.log.read_text(errors="replace")
    if args.scenario:
        quiet, line = verdict(scenario_converge(log, args.scenario),
                              f"scenario {args.scenario}: the converge on the converged lab")
    else:
        quiet, line = verdict(log, f"the run in {args.log.name}")
    print(line, file=sys.stdout if quiet else sys.stderr)
    return 0 if quiet else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
