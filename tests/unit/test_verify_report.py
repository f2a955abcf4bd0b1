"""The verify stage's verdict document and summary, and the benchmark stage's progress line."""

import json

from ansible_collections.sparkctl.spark.plugins.filter.benchmark import bench_progress_line
from ansible_collections.sparkctl.spark.plugins.filter.verify_report import verify_lines, verify_report

PASSING_PROBE = {"checks": [
    {"name": "health", "ok": True, "skipped": False, "message": "health: 200"},
    {"name": "smoke", "ok": True, "skipped": False, "message": "smoke: 'Tokyo' in ' Tokyo.'"},
    {"name": "tools", "ok": False, "skipped": True, "message": "tools: no tool parser"},
]}
STARTUP = {"startup": [
    {"name": "kv_cache_tokens", "ok": True, "on_mismatch": "fail", "message": "kv_cache_tokens: 65536 >= 4096"},
    {"name": "moe_backend", "ok": False, "on_mismatch": "warn", "message": "moe_backend: not found"},
]}
MEMORY = {"rows": [
    {"host": "spark1", "status": "ok", "message": "spark1: 20.00 GiB available, 12.00 GiB above the guard"},
    {"host": "spark2", "status": "ok", "message": "spark2: 20.00 GiB available"},
]}
PARITY = {"ok": True, "rows": [{"item": "driver", "values": {"a": "1", "b": "1"}, "same": True}], "mismatches": []}


def test_a_healthy_cluster_passes_with_its_warnings_listed():
    report = verify_report(PASSING_PROBE, startup=STARTUP, memory=MEMORY, parity=PARITY, context={"profile": "p"})
    assert report["status"] == "passed_with_warnings" and report["ok"] is True
    assert report["failures"] == []
    assert report["warnings"] == ["startup fact moe_backend: not found"]
    assert report["context"] == {"profile": "p"} and report["schema_version"] == 2
    json.dumps(report)  # the document is what the report file holds


def test_every_kind_of_evidence_can_fail_the_stage():
    probe = {"checks": PASSING_PROBE["checks"] + [
        {"name": "generation", "ok": False, "skipped": False, "message": "generation: no token within 5 s: wedged"}]}
    startup = {"startup": [{"name": "kv", "ok": False, "on_mismatch": "fail", "message": "kv: 100 < min 4096"}]}
    memory = {"rows": [{"host": "spark2", "status": "fail", "message": "spark2: 7.50 GiB at or below the guard"}]}
    parity = {"rows": [], "mismatches": ["driver", "packages.vllm"], "table": "item | a | b"}
    report = verify_report(probe, startup=startup, memory=memory, parity=parity)
    assert report["status"] == "failed" and report["ok"] is False
    assert report["failures"] == [
        "generation: no token within 5 s: wedged",
        "startup fact kv: 100 < min 4096",
        "memory: spark2: 7.50 GiB at or below the guard",
        "versions differ across nodes: driver, packages.vllm\nitem | a | b",
    ]


def test_warnings_fail_on_request_and_the_escape_hatch_is_named():
    assert verify_report(PASSING_PROBE, startup=STARTUP, fail_on_warnings=True)["status"] == "failed"
    hatch = verify_report({"checks": [{"name": "smoke", "ok": False, "message": "smoke: wrong"}]}, ignore_errors=True)
    assert hatch["status"] == "failed_ignored" and hatch["ok"] is True and hatch["failures"] == ["smoke: wrong"]
    assert verify_lines(hatch)[-1] == "verify FAILED: 1 failure(s), ignored (spark_ignore_assert_errors)"


def test_summary_has_one_line_per_piece_of_evidence_and_the_verdict():
    lines = verify_lines(verify_report(PASSING_PROBE, startup=STARTUP, memory=MEMORY, parity=PARITY))
    assert lines[0].startswith("PASS health")
    assert lines[2].startswith("skip tools")
    assert any(line.startswith("warn startup") and "moe_backend" in line for line in lines)
    assert sum(line.startswith("PASS memory") for line in lines) == 2
    assert lines[-2] == "PASS version parity: 1 items identical on every node"
    assert lines[-1] == "verify PASSED with 1 warning(s)"
    failed = verify_lines(verify_report({"checks": [{"name": "auth", "ok": False, "message": "auth: open"}]}))
    assert failed[0].startswith("FAIL auth") and failed[-1] == "verify FAILED: 1 failure(s)"


def test_progress_line_reads_the_last_record():
    assert "warming up" in bench_progress_line("")
    text = "\n".join([json.dumps({"point": 1, "points": 6, "prompt_tokens": 2048, "streams": 1, "elapsed_s": 3.2}),
                      "not json", json.dumps({"point": 2, "points": 6, "prompt_tokens": 2048, "streams": 2,
                                              "elapsed_s": 9.7, "message": "ttft 0.4 s"})])
    assert bench_progress_line(text) == "benchmark: point 2 of 6 done (2048 prompt tokens, 2 streams) after 10 s: ttft 0.4 s"


def test_progress_line_names_the_load_of_a_rate_point():
    text = json.dumps({"point": 3, "points": 4, "prompt_tokens": 2048, "streams": None, "load": "poisson:rate=2,burstiness=1,seed=0",
                       "elapsed_s": 41.0})
    assert bench_progress_line(text) == ("benchmark: point 3 of 4 done (2048 prompt tokens, load "
                                         "poisson:rate=2,burstiness=1,seed=0) after 41 s")


def test_a_probe_that_did_not_run_is_a_failure_not_a_pass():
    report = verify_report({"changed": False, "skipped": True, "skip_reason": "Conditional result was False"})
    assert report["status"] == "failed"
    assert report["failures"] == ["endpoint: not probed (Conditional result was False)"]


IN_SYNC = {"enabled": True, "nft_installed": True, "table": "inet sparkctl", "config_file": "/etc/sparkctl/firewall.nft",
           "present": True, "in_sync": True, "method": "canonical", "differences": []}


def test_every_nodes_firewall_table_is_checked_against_its_rule_set():
    firewall = {
        "spark1": IN_SYNC,
        "spark2": dict(IN_SYNC, in_sync=False, differences=["rule missing: tcp dport 22 accept", "a", "b", "c"]),
        "spark3": dict(IN_SYNC, present=False, in_sync=False, differences=["table inet sparkctl is not loaded"]),
        "spark4": dict(IN_SYNC, nft_installed=False, present=False, in_sync=None),
    }
    report = verify_report(PASSING_PROBE, firewall=firewall)
    assert report["status"] == "failed"
    assert report["failures"] == [
        "firewall spark2: the live table inet sparkctl differs from /etc/sparkctl/firewall.nft: rule missing: tcp dport "
        "22 accept; a; b (and 1 more); a provision run loads it again (sparkctl up, or site.yml --tags firewall)",
        "firewall spark3: table inet sparkctl is not loaded: Ray's and the engines' ports are open beyond the cable; "
        "a provision run loads it again (sparkctl up, or site.yml --tags firewall)",
        "firewall spark4: nft is not installed, so table inet sparkctl cannot be loaded: a provision run loads it again "
        "(sparkctl up, or site.yml --tags firewall)",
    ]
    assert [row["status"] for row in report["firewall"]["rows"]] == ["ok", "fail", "fail", "fail"]
    lines = verify_lines(report)
    assert "PASS firewall spark1: table inet sparkctl holds exactly /etc/sparkctl/firewall.nft (compared in a " \
           "scratch network namespace)" in lines
    assert sum(line.startswith("FAIL firewall") for line in lines) == 3


def test_a_firewall_turned_off_is_a_warning_not_a_silent_pass():
    off = dict(IN_SYNC, enabled=False, present=False, in_sync=None, method=None)
    report = verify_report(PASSING_PROBE, firewall={"spark1": off, "spark2": dict(off, present=True)})
    assert report["status"] == "passed_with_warnings" and report["failures"] == []
    assert report["warnings"] == [
        "firewall spark1: off (firewall_enabled: false): Ray's and the engines' ports answer on every network the node "
        "is on",
        "firewall spark2: table inet sparkctl is loaded though firewall_enabled is false (a provision run removes it)",
    ]
    assert verify_report(PASSING_PROBE, firewall={"spark1": off}, fail_on_warnings=True)["status"] == "failed"


def test_a_rank_down_on_a_worker_fails_even_while_the_head_answers():
    """vllm_ranks: the head's probe passes (vLLM's idle head stays healthy without its worker rank),
    but a serving node's engine unit that is not active is the served model down."""
    units = {"spark1": {"sparkctl-engine.service": "active"},
             "spark2": {"sparkctl-vllm-rank.service": "activating"},
             "spark3": {}}
    report = verify_report(PASSING_PROBE, units=units)
    assert report["status"] == "failed"
    assert report["failures"] == [
        "units spark2: sparkctl-vllm-rank.service activating: every engine unit of a serving node must run (sparkctl "
        "status; journalctl -u UNIT on spark2; a run of the serve stage starts them)"]
    assert [(row["host"], row["status"]) for row in report["units"]["rows"]] == [("spark1", "ok"), ("spark2", "fail")]
    lines = verify_lines(report)
    assert "PASS units spark1: sparkctl-engine.service active" in lines
    assert any(line.startswith("FAIL units spark2: sparkctl-vllm-rank.service activating") for line in lines)
    # systemctl that could not tell is no pass either.
    assert verify_report(PASSING_PROBE, units={"spark2": {"sparkctl-vllm-rank.service": None}})["status"] == "failed"
    assert verify_report(PASSING_PROBE, units={"spark1": {"sparkctl-engine.service": "active"}})["status"] == "passed"


def test_a_report_without_firewall_evidence_has_no_firewall_rows():
    assert verify_report(PASSING_PROBE)["firewall"] == {"rows": []}


def test_the_fabric_test_when_run_is_a_row_per_half_and_a_failure_per_bad_half():
    fabric = {"tool": "iperf3", "ok": False,
              "results": [{"peer": "spark2", "half": 0, "gbps": 5.29, "minimum_gbps": 1.0, "ok": True, "problem": None},
                          {"peer": "spark2", "half": 1, "gbps": None, "minimum_gbps": 1.0, "ok": False,
                           "problem": "half 1 enP2p1s0f1np1 192.168.101.10 -> spark2 enP2p1s0f1np1 192.168.101.11: "
                                      "no traffic (No route to host)"}],
              "problems": ["half 1 enP2p1s0f1np1 192.168.101.10 -> spark2 enP2p1s0f1np1 192.168.101.11: "
                           "no traffic (No route to host)"]}
    report = verify_report(PASSING_PROBE, fabric=fabric)
    assert report["status"] == "failed" and report["fabric"] == fabric
    assert report["failures"] == ["fabric: " + fabric["problems"][0]]
    fabric_rows = [row for row in report["rows"] if row["what"].startswith("fabric")]
    assert fabric_rows == [
        {"mark": "PASS", "what": "fabric spark2 half 0", "detail": "5.29 Gbit/s (minimum 1, iperf3)"},
        {"mark": "FAIL", "what": "fabric spark2 half 1", "detail": fabric["problems"][0]},
    ]
    # Not run: no row, no failure.
    assert not [row for row in verify_report(PASSING_PROBE)["rows"] if row["what"].startswith("fabric")]


def test_each_nodes_kernel_cache_is_reported_warm_or_cold_and_never_fails():
    reads = {
        "spark1": {"boot": "cold", "identity": "venv-ab", "cache": {"files": 3, "written_since": 3}},
        "spark2": {"boot": "warm", "identity": "venv-ab", "cache": {"files": 3, "written_since": 0}},
        # A skipped read (the other node kind's task) carries no verdict.
        "spark3": {"skipped": True},
    }
    report = verify_report(PASSING_PROBE, jit_cache=reads)
    assert report["jit_cache"] == {
        "spark1": {"boot": "cold", "files": 3, "written_since": 3, "identity": "venv-ab"},
        "spark2": {"boot": "warm", "files": 3, "written_since": 0, "identity": "venv-ab"},
    }
    assert report["status"] == "passed"
    lines = verify_lines(report)
    assert "PASS jit cache spark1: cold: the boot wrote 3 of 3 cached file(s) (it compiled)" in lines
    assert "PASS jit cache spark2: warm: the boot found 3 cached file(s) and wrote none (compile skipped)" in lines
    assert verify_report(PASSING_PROBE)["jit_cache"] == {}


def test_the_engines_figures_beyond_ten_per_cent_of_the_fit_estimate_warn_not_fail():
    startup = {"startup": [
        {"name": "model_loading_gib", "ok": True, "on_mismatch": "warn", "message": "ok",
         "matched_values": [0.5, 0.5],
         "lines": ["INFO Model loading took 0.50 GiB", "(RayWorkerWrapper pid=9, ip=192.168.100.11) INFO Model loading took 0.50 GiB"]},
        {"name": "kv_cache_tokens", "ok": True, "on_mismatch": "fail", "message": "ok", "matched_values": [65536.0],
         "lines": ["INFO GPU KV cache size: 65,536 tokens"]},
    ]}
    # The estimate: 0.50 GiB per rank (agrees), 52,428 KV tokens (the engine reports 65,536: 20 % more).
    fit = {"weights_per_rank_bytes": 537202688, "kv_tokens": 52428}
    report = verify_report(PASSING_PROBE, startup=startup, memory=MEMORY, parity=PARITY, fit=fit)
    assert report["status"] == "passed_with_warnings" and report["failures"] == []
    assert [(r["item"], r["where"], r["status"]) for r in report["fit"]["rows"]] == [
        ("weights_per_rank", "head", "ok"), ("weights_per_rank", "192.168.100.11", "ok"), ("kv_tokens", "head", "warn")]
    (warning,) = report["warnings"]
    assert warning.startswith("fit: kv_tokens on head: estimated 52,428 tokens, the engine reports 65,536 tokens (-20.0 %")
    rows = {row["what"]: row for row in report["rows"]}
    assert rows["fit kv_tokens head"]["mark"] == "warn" and "52,428" in rows["fit kv_tokens head"]["detail"]
    assert rows["fit weights_per_rank 192.168.100.11"]["mark"] == "PASS"
    # Without a kept estimate (a checkpoint stage that could not read the headers) nothing is compared.
    assert verify_report(PASSING_PROBE, startup=startup)["fit"] == {"rows": []}


def test_each_idle_node_is_a_row_of_its_own_and_never_a_failure():
    serving = {"nodes": 2, "serving": ["spark1", "spark2"], "idle": ["spark3", "spark4"]}
    report = verify_report(PASSING_PROBE, startup=STARTUP, memory=MEMORY, parity=PARITY, serving=serving)
    assert report["serving"] == serving
    assert report["status"] == "passed_with_warnings" and report["failures"] == []
    rows = [(r["mark"], r["what"]) for r in report["rows"]]
    assert ("PASS", "serving") in rows
    assert [r for r in rows if r[0] == "idle"] == [("idle", "node spark3"), ("idle", "node spark4")]
    lines = verify_lines(report)
    assert "PASS serving: spark1, spark2 (2 node(s), the profile's topology.nodes)" in lines
    assert any(line.startswith("idle node spark3: not needed by the profile (topology.nodes 2)") for line in lines)
    # Every node serving: one serving row, no idle row; no serving set given: neither.
    every = verify_report(PASSING_PROBE, serving={"nodes": 2, "serving": ["spark1", "spark2"], "idle": []})
    assert [r["what"] for r in every["rows"] if r["mark"] == "idle" or r["what"] == "serving"] == ["serving"]
    assert not [r for r in verify_report(PASSING_PROBE)["rows"] if r["mark"] == "idle" or r["what"] == "serving"]


def test_no_kept_fit_estimate_or_a_stale_one_warns_with_the_fix_never_silence():
    """What verify.json says when the checkpoint stage kept no estimate (a checkpoint an earlier sparkctl
    fetched) or one made for other inputs (a profile change that kept the checkpoint): one warning row with
    the reason and the fix, and nothing compared with a stale estimate."""
    startup = {"startup": [{"name": "kv_cache_tokens", "ok": True, "on_mismatch": "fail", "message": "ok",
                            "matched_values": [65536.0], "lines": ["INFO GPU KV cache size: 65,536 tokens"]}]}
    none_kept = {"due": True, "reason": "no fit estimate is kept beside the checkpoint"}
    report = verify_report(PASSING_PROBE, startup=startup, fit=None, fit_due=none_kept)
    assert report["status"] == "passed_with_warnings" and report["failures"] == []
    (warning,) = report["warnings"]
    assert warning.startswith("fit: no fit estimate is kept beside the checkpoint: the engine's figures are not compared")
    assert "re-run the checkpoint stage (site.yml --tags checkpoint" in warning
    rows = {row["what"]: row for row in report["rows"]}
    assert rows["fit estimate head"]["mark"] == "warn" and "re-run the checkpoint stage" in rows["fit estimate head"]["detail"]
    stale = {"due": True, "reason": "the kept fit estimate was made for other inputs: kv_pool_bytes 1, now 2"}
    report = verify_report(PASSING_PROBE, startup=startup, fit={"kv_tokens": 65536}, fit_due=stale)
    assert [(r["item"], r["status"]) for r in report["fit"]["rows"]] == [("estimate", "warn")]
    assert "kv_pool_bytes 1, now 2" in report["warnings"][0]
    # A current estimate is compared as before.
    report = verify_report(PASSING_PROBE, startup=startup, fit={"kv_tokens": 65536}, fit_due={"due": False, "reason": ""})
    assert [(r["item"], r["status"]) for r in report["fit"]["rows"]] == [("kv_tokens", "ok")] and not report["warnings"]
