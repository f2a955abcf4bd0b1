# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the engine said about itself while it started: KV cache size, concurrency at the
configured length, weights per rank, MoE backend; each compared with the profile's
`startup_log` rules.

Pure functions: the module reads the journal of the unit's current invocation and hands
the lines in, so the rules can be tested against recorded logs. The exception is
read_first_lines, the bounded reader the module uses for journalctl.

Per-rank lines matter: with Ray, every tensor-parallel rank prints its own "Model loading
took" line (rank > 0 behind a `(RayWorkerWrapper pid=P, ip=IP) ` prefix), and one rank that
loaded a different amount of weights is exactly what a broken mirror looks like, so every
matching line is read and every value must pass.
"""

from __future__ import annotations

import re
import subprocess

ON_MISMATCH = ("warn", "fail")

# Ray folds identical lines of several workers into one, ending it with this note.
_RAY_FOLDED_RE = re.compile(r"\s*\[repeated (\d+)x across cluster\]")
# Float slack for limits written in decimal (0.55 - 0.5 is 0.05000000000000004).
_EPSILON = 1e-9

# A value's unit, from the rule's name suffix, so the message reads "16384 tokens".
_UNIT_SUFFIXES = (("_tokens", "tokens"), ("_gib", "GiB"), ("_gb", "GB"), ("_seconds", "s"), ("_s", "s"))

NOT_FOUND = "not found in the engine log since its last start"


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_number(text):
    """'16,384' -> 16384.0, '1.04' -> 1.04; None when text is not a number."""
    if text is None:
        return None
    try:
        return float(str(text).strip().replace(",", "").replace("_", ""))
    except ValueError:
        return None


def format_value(value):
    """16384.0 -> '16384', 0.5 -> '0.50', 71.4766 -> '71.48'; strings as they are."""
    if not _is_number(value):
        return str(value)
    if float(value).is_integer():
        return "%d" % value
    return "%.2f" % value


def _format_limit(value):
    """A limit as the profile wrote it (1.0 stays 1.0, 4096 stays 4096)."""
    return str(value)


def _unit_of(name):
    for suffix, unit in _UNIT_SUFFIXES:
        if name.lower().endswith(suffix):
            return unit
    return ""


def _is_numeric_rule(rule):
    return any(rule.get(key) is not None for key in ("min", "max", "tolerance")) or _is_number(rule.get("expect"))


def _matches(pattern, lines):
    """[(match, line, folded)] of every line pattern finds; folded = how many more identical lines Ray
    left out."""
    found = []
    for line in lines:
        text = line.rstrip("\n")
        folded_match = _RAY_FOLDED_RE.search(text)
        folded = 0
        if folded_match:
            folded = int(folded_match.group(1))
            text = text[:folded_match.start()] + text[folded_match.end():]
        match = pattern.search(text)
        if match:
            found.append((match, text.strip(), folded))
    return found


def _captured(match):
    return match.group(1) if match.re.groups >= 1 else match.group(0)


def _numeric_checks(rule):
    """[(label_when_ok, label_expected, test)] for the rule's min / max / expect(+tolerance)."""
    checks = []
    expect, tolerance = rule.get("expect"), rule.get("tolerance")
    if _is_number(expect):
        slack = float(tolerance) if _is_number(tolerance) else 0.0
        if slack:
            text = "%s +/- %s" % (_format_limit(expect), _format_limit(tolerance))
            ok_text = "within " + text
        else:
            text = ok_text = "= %s" % _format_limit(expect)
        checks.append((ok_text, text, lambda v, e=float(expect), s=slack: abs(v - e) <= s + _EPSILON * max(1.0, abs(e))))
    if _is_number(rule.get("min")):
        low = float(rule["min"])
        text = ">= min %s" % _format_limit(rule["min"])
        checks.append((text, text, lambda v, low=low: v >= low - _EPSILON * max(1.0, abs(low))))
    if _is_number(rule.get("max")):
        high = float(rule["max"])
        text = "<= max %s" % _format_limit(rule["max"])
        checks.append((text, text, lambda v, high=high: v <= high + _EPSILON * max(1.0, abs(high))))
    return checks


def _values_text(values, unit):
    shown = ", ".join(format_value(v) for v in values)
    if len(values) > 1:
        shown = "rank values " + shown
    return "%s %s" % (shown, unit) if unit else shown


def evaluate_rule(lines, rule):
    """The result of one startup_log rule against the log lines; see evaluate()."""
    name = str(rule.get("name") or rule.get("regex") or "?")
    on_mismatch = rule.get("on_mismatch") if rule.get("on_mismatch") in ON_MISMATCH else "fail"
    result = {
        "name": name,
        "found": 0,
        "matched_values": [],
        "value": None,
        "expect": rule.get("expect"),
        "min": rule.get("min"),
        "max": rule.get("max"),
        "tolerance": rule.get("tolerance"),
        "ok": False,
        "on_mismatch": on_mismatch,
        "message": "",
        "lines": [],
        "folded": 0,
    }
    try:
        pattern = re.compile(str(rule.get("regex") or ""))
    except re.error as exc:
        result["message"] = "%s: the profile's regex %r is not valid: %s" % (name, rule.get("regex"), exc)
        return result
    if not rule.get("regex"):
        result["message"] = "%s: the profile gives no regex" % name
        return result

    found = _matches(pattern, lines)
    result["found"] = len(found)
    result["lines"] = [line for _match, line, _folded in found[:8]]
    result["folded"] = sum(folded for _match, _line, folded in found)
    if not found:
        result["message"] = "%s: %s" % (name, NOT_FOUND)
        return result

    numeric = _is_numeric_rule(rule)
    if numeric and pattern.groups < 1:
        result["message"] = "%s: the profile's regex %r has no group holding the number" % (name, pattern.pattern)
        return result
    raw = [_captured(match) for match, _line, _folded in found]
    folded_note = " (Ray folded %d more similar lines)" % result["folded"] if result["folded"] else ""

    if numeric:
        numbers = [parse_number(text) for text in raw]
        bad = [text for text, number in zip(raw, numbers) if number is None]
        if bad:
            result["matched_values"] = raw
            result["value"] = raw[0]
            result["message"] = "%s: %r is not a number (in: %s)" % (name, bad[0], result["lines"][0])
            return result
        result["matched_values"], result["value"] = numbers, numbers[0]
        unit = _unit_of(name)
        checks = _numeric_checks(rule)
        failed = [expected for _ok_text, expected, test in checks if not all(test(v) for v in numbers)]
        values_text = _values_text(numbers, unit)
        if failed:
            result["message"] = "%s: %s; expected %s%s" % (name, values_text, " and ".join(failed), folded_note)
        else:
            result["ok"] = True
            criteria = " and ".join(ok_text for ok_text, _expected, _test in checks)
            result["message"] = "%s: %s%s%s" % (name, values_text, " " + criteria if criteria else "", folded_note)
        return result

    result["matched_values"], result["value"] = raw, raw[0]
    expect = rule.get("expect")
    if expect is not None:
        wrong = sorted(set(v for v in raw if v != str(expect)))
        if wrong:
            result["message"] = "%s: %s; expected %s%s" % (name, ", ".join(wrong), expect, folded_note)
            return result
        result["ok"] = True
        result["message"] = "%s: %s as expected%s" % (name, expect, folded_note)
        return result
    result["ok"] = True
    result["message"] = "%s: found %d time%s: %s%s" % (
        name, len(found), "" if len(found) == 1 else "s", found[0][0].group(0), folded_note)
    return result


def evaluate(lines, rules):
    """{startup: [result per rule], failed: [names], warnings: [names]} for the profile's
    startup_log rules against the engine's log lines.

    A result is {name, found (matching lines), values, value (the first, or None), expect, min,
    max, tolerance (as the rule gives them), ok, on_mismatch, message, lines (up to 8 matching
    lines), folded (lines Ray folded into a "[repeated Nx across cluster]" note)}. Numeric rules
    (min, max, tolerance, or a numeric expect) read the regex's first group as a number, with
    thousands separators; every value (one per rank) must pass. A string expect must equal the
    first group (or the whole match without a group) on every line. A rule without checks
    passes when some line matches. Not found is not ok.
    """
    lines = list(lines or [])
    results = [evaluate_rule(lines, rule or {}) for rule in rules or []]
    return {
        "startup": results,
        "failed": [r["name"] for r in results if not r["ok"] and r["on_mismatch"] == "fail"],
        "warnings": [r["name"] for r in results if not r["ok"] and r["on_mismatch"] == "warn"],
    }


def journal_argv(journalctl, invocation_id):
    """The unit's log of one invocation, oldest first, message text only (like engine_health);
    --quiet keeps journalctl's own notes ("-- No entries --", hints) out of the lines."""
    return [journalctl, "--no-pager", "--quiet", "-o", "cat", "_SYSTEMD_INVOCATION_ID=%s" % invocation_id]


def read_first_lines(argv, limit, timeout=120):
    """(rc, first `limit` lines of argv's stdout, stderr text). Stops the command once it has
    printed `limit` lines: the startup lines come first in the invocation's log, and an engine
    that has served for days has a journal far longer than anyone needs to read. rc is None when
    the command was stopped early."""
    # Not run_command: it reads the whole output before returning, which is what this must not do.
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,  # pylint: disable=ansible-bad-function
                               universal_newlines=True, errors="replace")
    lines = []
    stopped = False
    try:
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if len(lines) >= limit:
                stopped = True
                break
    finally:
        if stopped:
            process.terminate()
        try:
            _out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            _out, err = process.communicate()
    return (None if stopped else process.returncode), lines, err or ""


class StartupLogError(Exception):
    """Why the log of the unit's current start could not be read (msg, and the command's rc when one failed)."""

    def __init__(self, msg, rc=None):
        super().__init__(msg)
        self.msg = msg
        self.rc = rc


def read_invocation_lines(module, unit, log_lines):
    """(invocation id, the first log_lines lines of the unit's current invocation), as an
    AnsibleModule reads them: engine_startup_facts' and verify_facts' one reader. Raises
    StartupLogError when the unit has no current invocation or a command fails."""
    if log_lines < 1:
        raise StartupLogError("log_lines must be at least 1, got %d." % log_lines)
    systemctl = module.get_bin_path("systemctl", required=True)
    journalctl = module.get_bin_path("journalctl", required=True)
    rc, out, err = module.run_command([systemctl, "show", "-p", "InvocationID", "--value", unit], check_rc=False)
    if rc != 0:
        raise StartupLogError("systemctl show %s failed: %s" % (unit, (err or out).strip()), rc)
    invocation_id = out.strip() or None
    if not invocation_id:
        raise StartupLogError("%s is not running (systemd has no current invocation of it), so there is no startup "
                              "log to read. Start the engine (the serve stage) before verifying it." % unit)
    rc, lines, err = read_first_lines(journal_argv(journalctl, invocation_id), log_lines)
    if rc not in (0, None):
        raise StartupLogError("journalctl could not read the log of %s: %s" % (unit, err.strip()), rc)
    return invocation_id, lines


def startup_result(lines, rules, invocation_id=None):
    """The engine_startup_facts result of evaluating rules on lines (startup, failed_rules, warned_rules,
    invocation_id, lines_read): the keys are not failed/warnings, which Ansible reads as the task's own."""
    result = evaluate(lines, rules)
    return {
        "startup": result["startup"],
        "failed_rules": result["failed"],
        "warned_rules": result["warnings"],
        "invocation_id": invocation_id,
        "lines_read": len(lines),
    }


def unit_active_state(module, unit):
    """The unit's ActiveState (active, inactive, failed...) from systemctl, None when systemctl cannot tell."""
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return None
    rc, out, _err = module.run_command([systemctl, "show", "-p", "ActiveState", "--value", unit], check_rc=False)
    return (out.strip() or None) if rc == 0 else None


def read_unit_startup(module, unit, rules, log_lines, check_mode=False):
    """(startup result or {}, error message or None, ActiveState) of the unit, for verify_facts.

    No rules: nothing to read. A check run reads only an active unit (on a cluster not served yet
    there is no engine, which the verdict says); a real run that cannot read the log reports why,
    and the role stops on it after the endpoint probe, as engine_startup_facts' failure did."""
    state = unit_active_state(module, unit)
    if not rules or (check_mode and state != "active"):
        return {}, None, state
    try:
        invocation_id, lines = read_invocation_lines(module, unit, log_lines)
    except StartupLogError as exc:
        return {}, exc.msg, state
    return startup_result(lines, rules, invocation_id), None, state
