"""role_templating.evaluate with the collection's own filters and tests (sparkctl.spark.*) loaded, as
a run has them, for tests that judge a role variable that calls them.

Ansible finds a collection's plugins only through its collection finder (init_plugin_loader),
which must not be installed in the test process (tests/unit/test_plugin_preload.py). The
expressions are evaluated in one fresh interpreter that has it, started on the first call and
kept for the rest of the session; values cross as JSON (a tuple arrives as a list)."""
from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Starts the worker's answers: anything else Ansible prints on stdout is not one.
MARK = "evaluated: "
COLLECTIONS = HERE.parents[1] / "collections"

_WORKER = r"""
import json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
sys.path.insert(0, sys.argv[2])
from role_templating import evaluate
MARK = sys.argv[3]
for line in sys.stdin:
    case = json.loads(line)
    try:
        answer = {"value": evaluate(case["expr"], case["vars"])}
        text = json.dumps(answer)
    except Exception as exc:  # the caller judges the failure
        text = json.dumps({"error": "%s: %s" % (type(exc).__name__, exc)})
    sys.stdout.write(MARK + text + "\n")
    sys.stdout.flush()
"""


class TemplateFailed(Exception):
    """Ansible's templating refused the expression; the message names Ansible's error."""


_process: subprocess.Popen | None = None


def _worker() -> subprocess.Popen:
    global _process
    if _process is None or _process.poll() is not None:
        # The run's own settings (ANSIBLE_CONFIG and the like) must not reach the worker: it
        # loads the project's collection from the checkout, as the other subprocess tests do.
        env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
        _process = subprocess.Popen([sys.executable, "-c", _WORKER, str(COLLECTIONS), str(HERE), MARK], cwd=HERE.parents[1],
                                    env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return _process


@atexit.register
def _stop() -> None:
    if _process is not None and _process.poll() is None:
        _process.stdin.close()
        _process.wait(timeout=30)


def evaluate(expr: str, variables: dict):
    """expr templated with variables by role_templating.evaluate, the collection's plugins loaded;
    raises TemplateFailed when Ansible refuses it."""
    process = _worker()
    process.stdin.write(json.dumps({"expr": expr, "vars": variables}) + "\n")
    process.stdin.flush()
    line = process.stdout.readline()
    while line and not line.startswith(MARK):
        line = process.stdout.readline()
    if not line:
        raise RuntimeError("the templating worker ended (exit status %s)" % process.wait(timeout=30))
    answer = json.loads(line[len(MARK):])
    if "error" in answer:
        raise TemplateFailed(answer["error"])
    return answer["value"]


def kind(value):
    """The JSON kind of an evaluated value, so that a list and a string that reads like one differ."""
    return next(name for name, type_ in (("bool", bool), ("int", int), ("str", str), ("list", list), ("dict", dict))
                if isinstance(value, type_)) if value is not None else "none"


def judge(cases):
    """Each (expr, variables) evaluated by Ansible with the collection's filters: {value, kind} or {error}."""
    results = []
    for expr, variables in cases:
        try:
            value = evaluate(expr, variables)
        except TemplateFailed as exc:
            results.append({"error": str(exc)})
        else:
            results.append({"value": value, "kind": kind(value)})
    return results


def old_and_new(scenarios, names, old_vars):
    """scenario -> name -> {"new": ..., "old": ...}: each role variable of names judged with the role's vars
    as they are and with old_vars (the same variables' earlier expressions) put back in their place."""
    keys, cases = [], []
    for scenario, variables in scenarios.items():
        for name in names:
            for world, values in (("new", variables), ("old", {**variables, **old_vars})):
                keys.append((scenario, name, world))
                cases.append(("{{ %s }}" % name, values))
    results = {}
    for (scenario, name, world), result in zip(keys, judge(cases), strict=True):
        results.setdefault(scenario, {}).setdefault(name, {})[world] = result
    return results
