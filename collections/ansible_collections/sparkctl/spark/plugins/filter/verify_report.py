# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verify stage's verdict: one JSON document from the probe, the startup facts, the
memory headroom and the version parity, and the short human summary printed from it."""

from __future__ import annotations

from ansible_collections.sparkctl.spark.plugins.module_utils.fit import compare_startup

DOCUMENTATION = r"""
name: verify_report
short_description: The verify stage's machine-readable result from its four kinds of evidence
version_added: 0.1.0
description:
  - Combines the C(checks) of M(sparkctl.spark.engine_probe), the C(startup) list of
    M(sparkctl.spark.engine_startup_facts), the result of P(sparkctl.spark.memory_headroom#filter), the
    result of P(sparkctl.spark.version_parity#filter) and every node's firewall table (the firewall role's
    C(state.yml)) into one document with C(status) V(passed),
    V(passed_with_warnings) or V(failed), the list of failures and the list of warnings, each one line naming
    what is wrong.
  - The document's C(rows) are its one rendering for people, one row per piece of evidence; the play
    (P(sparkctl.spark.verify_lines#filter)) and the C(sparkctl) wrapper both print them.
options:
  _input:
    description: The endpoint probe's result (C(checks) list), or an empty mapping when it did not run.
    type: dict
    required: true
  startup:
    description: The startup facts' result (C(startup) list), or an empty mapping.
    type: dict
    default: {}
  memory:
    description: The result of P(sparkctl.spark.memory_headroom#filter).
    type: dict
    default: {}
  parity:
    description: The result of P(sparkctl.spark.version_parity#filter).
    type: dict
    default: {}
  firewall:
    description:
      - Per node, the firewall role's C(firewall_state_report) (C(enabled), C(nft_installed), C(table),
        C(config_file), C(present), C(in_sync), C(differences)). A table missing or differing from its rule set
        fails; a firewall turned off (or left loaded while off) is a warning.
    type: dict
    default: {}
  units:
    description:
      - "Per serving node, the C(ActiveState) of every engine unit the profile renders there (the C(units) of
        M(sparkctl.spark.verify_facts)): a unit not active fails, naming it (a worker's rank down is the served model
        down, even while the head still answers)."
    type: dict
    default: {}
  fabric:
    description:
      - The fabric test's report (the C(report) of M(sparkctl.spark.fabric_bandwidth)) when verify ran it
        (C(verify_fabric_test)); each half below its minimum or without traffic fails.
    type: dict
    default: {}
  jit_cache:
    description:
      - Per node, its M(sparkctl.spark.jit_cache) read after the boot (C(boot), C(cache), C(identity)); kept as
        C(jit_cache) (per node C(boot) warm, cold, empty or unknown, C(files), C(written_since), C(identity)) and
        one row per node. Information, never a failure.
    type: dict
    default: {}
  fit:
    description:
      - The fit estimate the checkpoint stage kept beside the checkpoint on the head (C(.sparkctl-fit.json), the
        C(fit_estimate) of M(sparkctl.spark.verify_facts)); compared with the engine's startup facts
        C(model_loading_gib) (weights per rank) and C(kv_cache_tokens). Beyond 10 % a row warns with both numbers,
        never a failure; without an estimate nothing is compared.
    type: dict
    default: {}
  serving:
    description:
      - The serving set (C(spark_serving), with C(nodes), C(serving) and C(idle)), kept as C(serving), with one row for
        the serving nodes and one row per idle node (marked V(idle)). Information, never a failure.
    type: dict
    default: {}
  fit_due:
    description:
      - Whether that estimate stands, as P(sparkctl.spark.checkpoint_fit_due#filter) judges it for the profile and the
        checkpoint's commit (C(due), C(reason)). When it is due (none kept, an earlier sparkctl's, or made for other
        inputs) nothing is compared and one warning row says why, with the fix (re-run the checkpoint stage). Omitted, it
        is not judged.
    type: dict
    default: {}
  context:
    description: Free-form facts recorded as they are (profile, endpoint URL, model, hosts).
    type: dict
    default: {}
  fail_on_warnings:
    description: Count warnings as failures.
    type: bool
    default: false
  ignore_errors:
    description: The escape hatch (C(spark_ignore_assert_errors)); failures are kept but the status says they were ignored.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Put the verdict together
  ansible.builtin.set_fact:
    verify_result: >-
      {{ verify_probe | sparkctl.spark.verify_report(startup=verify_startup, memory=verify_memory,
                                                      parity=verify_parity, context={'profile': spark_profile.name}) }}
"""

RETURN = r"""
_value:
  description: The verify document.
  type: dict
  contains:
    schema_version: {description: Version of this document's shape, type: int}
    status: {description: V(passed), V(passed_with_warnings), V(failed) or V(failed_ignored), type: str}
    ok: {description: Whether the stage passes, type: bool}
    failures: {description: One line per failure, type: list, elements: str}
    warnings: {description: One line per warning, type: list, elements: str}
    checks: {description: The probe's checks, type: list, elements: dict}
    startup: {description: The startup facts, type: list, elements: dict}
    memory: {description: The memory headroom result, type: dict}
    parity: {description: The version parity result, type: dict}
    firewall: {description: "C(rows): per node C(host), C(status) (V(ok), V(warn), V(fail)) and C(message)", type: dict}
    fabric: {description: The fabric test's report when it ran, else an empty mapping, type: dict}
    units: {description: "C(rows): per serving node C(host), C(status) (V(ok), V(fail)) and C(message)", type: dict}
    fit:
      description: "C(rows): per compared figure C(item), C(where), C(estimated), C(measured), C(status) (V(ok), V(warn))
        and C(message); one row of C(item) V(estimate) instead when the estimate does not stand (O(fit_due))"
      type: dict
    jit_cache:
      description: "Per node C(boot) (V(warm), V(cold), V(empty), V(unknown)), C(files), C(written_since), C(identity)"
      type: dict
    rows:
      description: "The evidence for people: per check, startup fact, node's memory, the parity, each node's engine
        units, each firewall and
        each cable half measured, each node's kernel cache, each figure of the fit estimate, the serving nodes and
        each idle node, C(mark) (V(PASS), V(FAIL), V(warn), V(skip), V(idle)), C(what) and C(detail)"
      type: list
      elements: dict
    serving:
      description: "The serving set as given: C(nodes), C(serving) (hosts) and C(idle) (hosts); empty when not given"
      type: dict
    context: {description: The given context, type: dict}
"""

# 2: `rows` (the one rendering the play and the wrapper print), `fabric`.
SCHEMA_VERSION = 2


def _probe_lines(probe):
    if (probe or {}).get("skipped"):
        # The probe did not run (--check on a cluster without a key or engine yet).
        return ["endpoint: not probed (%s)" % ((probe or {}).get("skip_reason") or "skipped")]
    failures = []
    for check in (probe or {}).get("checks") or []:
        if check.get("skipped") or check.get("ok"):
            continue
        failures.append(str(check.get("message") or "%s failed" % check.get("name", "?")))
    return failures


def _startup_lines(startup):
    failures, warnings = [], []
    for fact in (startup or {}).get("startup") or []:
        if fact.get("ok"):
            continue
        line = "startup fact %s" % (fact.get("message") or fact.get("name", "?"))
        (failures if fact.get("on_mismatch") == "fail" else warnings).append(line)
    return failures, warnings


def _memory_lines(memory):
    failures, warnings = [], []
    for row in (memory or {}).get("rows") or []:
        if row.get("status") == "fail":
            failures.append("memory: %s" % row.get("message"))
        elif row.get("status") == "warn":
            warnings.append("memory: %s" % row.get("message"))
    return failures, warnings


def _parity_lines(parity):
    mismatches = (parity or {}).get("mismatches") or []
    if not mismatches:
        return []
    line = "versions differ across nodes: %s" % ", ".join(mismatches)
    table = (parity or {}).get("table")
    return [line + ("\n" + table if table else "")]


REPAIR_FIREWALL = "a provision run loads it again (sparkctl up, or site.yml --tags firewall)"


def _firewall_row(host, state):
    table, where = state.get("table") or "inet sparkctl", state.get("config_file") or "its rule set file"
    if not state.get("enabled"):
        if state.get("present"):
            return "warn", "table %s is loaded though firewall_enabled is false (a provision run removes it)" % table
        return "warn", ("off (firewall_enabled: false): Ray's and the engines' ports answer on every network the "
                        "node is on")
    if not state.get("nft_installed"):
        return "fail", "nft is not installed, so table %s cannot be loaded: %s" % (table, REPAIR_FIREWALL)
    if not state.get("present"):
        return "fail", ("table %s is not loaded: Ray's and the engines' ports are open beyond the cable; %s"
                        % (table, REPAIR_FIREWALL))
    if not state.get("in_sync"):
        differences = list(state.get("differences") or [])
        shown = "; ".join(differences[:3]) + (" (and %d more)" % (len(differences) - 3) if len(differences) > 3 else "")
        return "fail", "the live table %s differs from %s: %s; %s" % (table, where, shown or "?", REPAIR_FIREWALL)
    how = " (compared in a scratch network namespace)" if state.get("method") == "canonical" else ""
    return "ok", "table %s holds exactly %s%s" % (table, where, how)


def _firewall_rows(firewall):
    rows = []
    for host, state in sorted((firewall or {}).items()):
        status, message = _firewall_row(host, state or {})
        rows.append({"host": host, "status": status, "message": message})
    return rows


def _fabric_lines(fabric):
    return ["fabric: %s" % problem for problem in (fabric or {}).get("problems") or []]


_STATUS_MARK = {"ok": "PASS", "warn": "warn", "fail": "FAIL"}


def _rows(report):
    """(mark, what, detail) per probe check, startup fact, node's memory, the parity check, each firewall
    and each cable half the fabric test measured: the document's one rendering for people."""
    rows = []

    def row(mark, what, detail):
        rows.append({"mark": mark, "what": what, "detail": detail})

    for check in report["checks"]:
        row(_mark(check.get("ok"), check.get("skipped")), check.get("name", "?"), check.get("message", ""))
    for fact in report["startup"]:
        mark = "PASS" if fact.get("ok") else ("FAIL" if fact.get("on_mismatch") == "fail" else "warn")
        row(mark, "startup %s" % fact.get("name", "?"), fact.get("message", ""))
    for item in report["memory"].get("rows") or []:
        row(_STATUS_MARK.get(item.get("status"), "?"), "memory %s" % item.get("host", "?"), item.get("message", ""))
    parity = report["parity"]
    if parity:
        mismatches = parity.get("mismatches") or []
        row("FAIL" if mismatches else "PASS", "version parity",
            ("differ: " + ", ".join(mismatches)) if mismatches
            else "%d items identical on every node" % len(parity.get("rows") or []))
    for item in (report.get("units") or {}).get("rows") or []:
        row(_STATUS_MARK.get(item["status"], "?"), "units %s" % item["host"], item["message"])
    for item in report["firewall"]["rows"]:
        row(_STATUS_MARK.get(item["status"], "?"), "firewall %s" % item["host"], item["message"])
    for host, cache in sorted((report.get("jit_cache") or {}).items()):
        row("PASS", "jit cache %s" % host, _jit_detail(cache))
    for item in report["fit"]["rows"]:
        row(_STATUS_MARK.get(item["status"], "?"), "fit %s %s" % (item["item"], item["where"]), item["message"])
    serving = report.get("serving") or {}
    if serving.get("serving"):
        row("PASS", "serving", "%s (%d node(s), the profile's topology.nodes)" % (
            ", ".join(serving["serving"]), serving.get("nodes") or len(serving["serving"])))
    for host in serving.get("idle") or []:
        row("idle", "node %s" % host, "not needed by the profile (topology.nodes %s): provisioned, runtime and "
            "checkpoint in place, no engine or Ray unit" % (serving.get("nodes") or "?"))
    for half in report["fabric"].get("results") or []:
        detail = half.get("problem") or "%.2f Gbit/s (minimum %g, %s)" % (
            half["gbps"], half["minimum_gbps"], report["fabric"].get("tool", "?"))
        row("PASS" if half.get("ok") else "FAIL", "fabric %s half %s" % (half.get("peer", "?"), half.get("half", "?")),
            detail)
    return rows


_JIT_MEANING = {
    "warm": "warm: the boot found %(files)d cached file(s) and wrote none (compile skipped)",
    "cold": "cold: the boot wrote %(written_since)d of %(files)d cached file(s) (it compiled)",
    "empty": "empty: nothing cached (the engine compiled nothing it keeps, or has not booted)",
    "unknown": "unknown: the engine's start could not be read",
}


def _jit_detail(cache):
    values = {"files": cache.get("files") or 0, "written_since": cache.get("written_since") or 0}
    return _JIT_MEANING.get(cache.get("boot"), _JIT_MEANING["unknown"]) % values


def jit_cache_rows(reads):
    """{host: jit_cache read} -> {host: {boot, files, written_since, identity}}: what verify.json keeps
    of each node's kernel cache (roles/jit_cache; a node without a read is left out)."""
    out = {}
    for host, read in (reads or {}).items():
        if not isinstance(read, dict) or "boot" not in read:
            continue
        cache = read.get("cache") or {}
        out[host] = {"boot": read["boot"], "files": cache.get("files"), "written_since": cache.get("written_since"),
                     "identity": read.get("identity")}
    return out


FIT_FIX = ("re-run the checkpoint stage (site.yml --tags checkpoint, with checkpoint_fit_check true): it makes the "
           "estimate from the head's files")


def _fit_rows(fit, fit_due, startup):
    """The fit estimate against the engine's figures, or the one row saying why there is nothing to compare."""
    if (fit_due or {}).get("due"):
        return [{"item": "estimate", "where": "head", "estimated": None, "measured": None, "status": "warn",
                 "message": "%s: the engine's figures are not compared with it; %s"
                            % (fit_due.get("reason") or "the kept fit estimate does not stand", FIT_FIX)}]
    return compare_startup(fit, startup)


def _unit_rows(units):
    """{host: {unit: ActiveState}} (verify_facts' `units` on each serving node) -> one row per host: pass
    when every engine unit the profile renders there is active, else fail naming the others. A worker's
    rank or Ray unit down is the served model down even while the head still answers (docs/topologies.md)."""
    rows = []
    for host, states in sorted((units or {}).items()):
        if not isinstance(states, dict) or not states:
            continue
        down = ["%s %s" % (name, state or "unknown") for name, state in sorted(states.items()) if state != "active"]
        if down:
            rows.append({"host": host, "status": "fail", "message": "%s: every engine unit of a serving node must run "
                         "(sparkctl status; journalctl -u UNIT on %s; a run of the serve stage starts them)"
                         % (", ".join(down), host)})
        else:
            rows.append({"host": host, "status": "ok", "message": "%s active" % ", ".join(sorted(states))})
    return rows


def verify_report(probe, startup=None, memory=None, parity=None, context=None, fail_on_warnings=False,
                  ignore_errors=False, firewall=None, fabric=None, jit_cache=None, fit=None, fit_due=None, serving=None,
                  units=None):
    failures = _probe_lines(probe)
    unit_rows = _unit_rows(units)
    failures += ["units %s: %s" % (r["host"], r["message"]) for r in unit_rows if r["status"] == "fail"]
    startup_failures, startup_warnings = _startup_lines(startup)
    memory_failures, memory_warnings = _memory_lines(memory)
    firewall_rows = _firewall_rows(firewall)
    failures += startup_failures + memory_failures + _parity_lines(parity)
    failures += ["firewall %s: %s" % (r["host"], r["message"]) for r in firewall_rows if r["status"] == "fail"]
    failures += _fabric_lines(fabric)
    fit_rows = _fit_rows(fit, fit_due, (startup or {}).get("startup"))
    warnings = startup_warnings + memory_warnings
    warnings += ["fit: %s" % r["message"] for r in fit_rows if r["status"] == "warn"]
    warnings += ["firewall %s: %s" % (r["host"], r["message"]) for r in firewall_rows if r["status"] == "warn"]
    if fail_on_warnings:
        failures += warnings
        warnings = []
    if failures:
        status = "failed_ignored" if ignore_errors else "failed"
    else:
        status = "passed_with_warnings" if warnings else "passed"
    report = {
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "ok": not failures or bool(ignore_errors),
        "failures": failures,
        "warnings": warnings,
        "checks": list((probe or {}).get("checks") or []),
        "startup": list((startup or {}).get("startup") or []),
        "memory": dict(memory or {}),
        "parity": dict(parity or {}),
        "firewall": {"rows": firewall_rows},
        "fabric": dict(fabric or {}),
        "jit_cache": jit_cache_rows(jit_cache),
        "fit": {"rows": fit_rows},
        "units": {"rows": unit_rows},
        "serving": {key: (serving or {})[key] for key in ("nodes", "serving", "idle") if key in (serving or {})},
        "context": dict(context or {}),
    }
    report["rows"] = _rows(report)
    return report


def _mark(ok, skipped=False):
    return "skip" if skipped else ("PASS" if ok else "FAIL")


def verify_lines(report):
    """The human summary: the document's rows, then the verdict."""
    lines = ["%s %s: %s" % (row["mark"], row["what"], row["detail"]) for row in report.get("rows") or []]
    verdict = {"passed": "verify PASSED", "passed_with_warnings": "verify PASSED with %d warning(s)",
               "failed": "verify FAILED: %d failure(s)", "failed_ignored":
               "verify FAILED: %d failure(s), ignored (spark_ignore_assert_errors)"}[report["status"]]
    count = len(report.get("failures") or []) if report["status"].startswith("failed") else len(report.get("warnings") or [])
    lines.append(verdict % count if "%d" in verdict else verdict)
    return lines


class FilterModule:
    def filters(self):
        return {"verify_report": verify_report, "verify_lines": verify_lines}
