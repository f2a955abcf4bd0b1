"""Known-bad platforms: the shipped data file, the matcher (plugin_utils/known_bad.py) on recorded
uname -r strings, nvidia-smi output and /proc/meminfo text, the firmware reader on recorded
fwupdmgr JSON, and the two preflight checks they feed (platform.known_bad, platform.firmware_updates)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.plugin_utils.preflight_checks import (
    check_firmware_updates,
    check_known_bad,
    preflight_lines,
    preflight_report,
)
from ansible_collections.sparkctl.spark.plugins.module_utils import firmware, gpu, host
from ansible_collections.sparkctl.spark.plugins.plugin_utils import known_bad
from rich.console import Console
from sparkctl import report

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "roles" / "preflight" / "files" / "known_bad_platforms.yml"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# What `uname -r` prints: DGX OS's nvidia flavour, its 64k-page variant, this lab's VM kernel.
BAD_KERNEL = "7.0.0-1019-nvidia"
BAD_KERNEL_64K = "7.0.0-1019-nvidia-64k"
GOOD_KERNEL = "6.17.0-1014-nvidia"
LAB_KERNEL = "6.18.44-fc-v1098"


def fixture(*parts):
    return (FIXTURES.joinpath(*parts)).read_text()


def gb10_gpu_facts():
    """spark_gpu_facts from the recorded GB10 nvidia-smi outputs (driver 580.95.05, CUDA 13.0)."""
    outputs = {
        "--query-gpu": fixture("nvidia_smi", "gb10_580_query.csv"),
        "--version": fixture("nvidia_smi", "gb10_580_version.txt"),
    }

    def run(args):
        key = "--query-gpu" if args[1].startswith("--query-gpu") else args[1]
        return 0, outputs[key], ""

    return gpu.gather_gpu_facts(run, "/usr/bin/nvidia-smi", None)


def node(kernel=GOOD_KERNEL, meminfo_text=None, fw=None):
    facts = {
        "kernel": kernel,
        "gpu": gb10_gpu_facts(),
        "host": {"meminfo": host.parse_meminfo(meminfo_text or fixture("proc", "meminfo_gb10.txt"))},
    }
    if fw is not None:
        facts["firmware"] = fw
    return facts


def req(extra=(), ignore=()):
    return {"known_bad_platforms_file": str(SHIPPED), "known_bad_platforms_extra": list(extra),
            "known_bad_platforms_ignore": list(ignore)}


# --- versions --------------------------------------------------------------------------------


@pytest.mark.parametrize("text, key", [
    (BAD_KERNEL, (7, 0, 0, 1019)),
    (LAB_KERNEL, (6, 18, 44)),
    ("580.95.05", (580, 95, 5)),
    ("13.0", (13, 0)),
    ("", None), (None, None), ("nvidia", None),
])
def test_version_key(text, key):
    assert known_bad.version_key(text) == key


@pytest.mark.parametrize("left, right, order", [
    ("580.95.05", "580.126.09", -1),   # numbers, not text: 95 < 126
    ("13", "13.0", 0),
    ("7.0.0-1019-nvidia", "7.0.0-1018", 1),
    ("7.0.0-1019-nvidia", "7.0.0-1019", 0),
    ("6.17.0-1014-nvidia", "7.0.0", -1),
    ("x", "1", None),
])
def test_compare_versions(left, right, order):
    assert known_bad.compare_versions(left, right) == order


@pytest.mark.parametrize("value, condition, holds", [
    (BAD_KERNEL, {"prefix": "7.0.0-1019"}, True),
    (BAD_KERNEL_64K, {"prefix": "7.0.0-1019"}, True),
    ("7.0.0-1019", {"prefix": "7.0.0-1019"}, True),
    ("7.0.0-10190-nvidia", {"prefix": "7.0.0-1019"}, False),   # a whole component, not a digit more
    ("7.0.0-1019-nvidia", {"prefix": "7.0.0-"}, True),
    (BAD_KERNEL, {"equals": "7.0.0-1019"}, False),
    ("580.95.05", {"min": "580", "below": "580.96"}, True),
    ("580.95.05", {"min": "580.95.05", "max": "580.95.05"}, True),
    ("580.95.05", {"below": "580.95.05"}, False),
    ("580.126.09", {"below": "580.96"}, False),
    (None, {"min": "1"}, None),
    ("weird", {"min": "1"}, None),
])
def test_version_condition(value, condition, holds):
    assert known_bad.version_condition_holds(value, condition) is holds


@pytest.mark.parametrize("value, condition, holds", [
    (0, {"below": 64 * 1024 * 1024}, True),
    (0, {"min": 1}, False),
    (None, {"absent": True}, True),
    (0, {"absent": True}, False),
    (None, {"below": 1}, None),
    (512, {"absent": False, "max": 512}, True),
])
def test_number_condition(value, condition, holds):
    assert known_bad.number_condition_holds(value, condition) is holds


# --- the data file ----------------------------------------------------------------------------


def _slug(heading):
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def test_the_shipped_file_loads_and_every_source_is_a_section_of_the_docs():
    entries = known_bad.load_file(str(SHIPPED))
    assert entries and {e["id"] for e in entries} >= {"kernel-7.0.0-1019-roce-enomem"}
    for entry in entries:
        path, _, anchor = entry["source"].partition("#")
        assert path.startswith("docs/") and (REPO / path).is_file(), entry["id"]
        headings = [line.lstrip("#") for line in (REPO / path).read_text().splitlines() if line.startswith("#")]
        assert anchor in {_slug(h) for h in headings}, (entry["id"], anchor)
        # The docs name the entry next to its fact.
        assert f"`{entry['id']}`" in (REPO / path).read_text()


def test_the_file_is_read_once_per_process():
    known_bad.load_file.cache_clear()
    known_bad.load_file(str(SHIPPED))
    known_bad.load_file(str(SHIPPED))
    assert known_bad.load_file.cache_info().misses == 1


# --- the check --------------------------------------------------------------------------------


def test_a_good_node_passes_and_says_what_it_read():
    [result] = check_known_bad(node(), req())
    assert result["status"] == "pass" and result["id"] == "platform.known_bad"
    assert result["detail"] == "kernel 6.17.0-1014-nvidia, driver 580.95.05, cuda 13.0: none of 1 known-bad entries match"


@pytest.mark.parametrize("kernel", [BAD_KERNEL, BAD_KERNEL_64K])
def test_the_enomem_kernel_fails_with_the_entry_its_reason_fix_and_source(kernel):
    [result] = check_known_bad(node(kernel=kernel), req())
    assert result["status"] == "fail"
    assert result["detail"].startswith(f"known-bad entry 'kernel-7.0.0-1019-roce-enomem' matches kernel {kernel} (prefix 7.0.0-1019): "
                                       "kernel release 7.0.0-1019 broke NCCL over RoCE with ENOMEM")
    assert "(seen: docs/known-bad-platforms.md#kernel-700-1019-breaks-nccl-over-roce-enomem)" in result["detail"]
    assert result["fix"].startswith("Boot the kernel release the node ran before")
    [line] = preflight_lines([result], statuses=["fail"], with_fix=True)
    assert "platform.known_bad: known-bad entry 'kernel-7.0.0-1019-roce-enomem'" in line and " -> Fix: Boot the kernel" in line


def test_an_ignored_entry_is_not_judged():
    [result] = check_known_bad(node(kernel=BAD_KERNEL), req(ignore=["kernel-7.0.0-1019-roce-enomem"]))
    assert result["status"] == "pass"


def test_user_entries_on_driver_cuda_and_cma():
    extra = [
        {"id": "site-driver", "match": {"driver": {"min": "580", "below": "580.96"}, "cuda": {"equals": "13.0"}},
         "reason": "our NCCL tests hang", "fix": "install 580.126", "source": "our wiki"},
        {"id": "site-cma", "match": {"meminfo": {"CmaTotal": {"below": 64 * 1024 * 1024}}},
         "reason": "no CMA pool", "fix": "boot with cma=256M", "severity": "warn"},
    ]
    [result] = check_known_bad(node(), req(extra=extra))
    assert result["status"] == "fail"
    assert ("known-bad entry 'site-driver' matches driver 580.95.05 (>= 580, < 580.96), cuda 13.0 (= 13.0): "
            "our NCCL tests hang (seen: our wiki)") in result["detail"]
    assert "known-bad entry 'site-cma' matches CmaTotal 0 (< 67108864): no CMA pool" in result["detail"]
    assert result["fix"].startswith("site-driver: install 580.126 site-cma: boot with cma=256M")
    # A host without CMA prints no CmaTotal line: a `below` bound does not match what is not there.
    [small] = check_known_bad(node(meminfo_text=fixture("proc", "meminfo_small.txt")), req(extra=extra[1:]))
    assert small["status"] == "pass"


def test_nic_firmware_matches_when_one_adapter_of_the_cable_matches():
    facts = node()
    facts["link"] = {"interfaces": {"enp1s0f1np1": {"rdma_fw_version": "28.41.1000"},
                                    "enP2p1s0f1np1": {"rdma_fw_version": "28.43.1014"},
                                    "absent": {"rdma_fw_version": None}}}
    extra = [{"id": "old-cx7", "match": {"nic_firmware": {"below": "28.42"}}, "reason": "old ConnectX-7 firmware",
              "fix": "mlxfwmanager -u"}]
    [result] = check_known_bad(facts, req(extra=extra))
    assert result["status"] == "fail"
    assert result["detail"].startswith("known-bad entry 'old-cx7' matches nic_firmware 28.41.1000 (< 28.42): old ConnectX-7 firmware")
    facts["link"]["interfaces"]["enp1s0f1np1"]["rdma_fw_version"] = "28.43.1014"
    [result] = check_known_bad(facts, req(extra=extra))
    assert result["status"] == "pass"
    assert result["detail"].startswith("kernel 6.17.0-1014-nvidia, driver 580.95.05, cuda 13.0, nic_firmware 28.43.1014: none of 2")


def test_only_warn_entries_matching_is_a_warning():
    extra = [{"id": "lab-kernel", "match": {"kernel": {"prefix": "6.18"}}, "reason": "r", "fix": "f", "severity": "warn"}]
    [result] = check_known_bad(node(kernel=LAB_KERNEL), req(extra=extra))
    assert result["status"] == "warn" and result["fix"].startswith("f ")


def test_a_fact_the_node_did_not_report_matches_nothing():
    facts = node(kernel=None)
    facts["gpu"] = {"present": False}
    extra = [{"id": "any-driver", "match": {"driver": {"min": "0"}}, "reason": "r", "fix": "f"}]
    [result] = check_known_bad(facts, req(extra=extra))
    assert result["status"] == "pass" and result["detail"].startswith("no version read")


@pytest.mark.parametrize("entry, message", [
    ({"id": "x", "match": {"kernel": {"prefix": "7"}}, "reason": "r"}, "x).fix: must be a non-empty string"),
    ({"id": "x", "match": {"driver": {"min": 580.1}}, "reason": "r", "fix": "f"}, "580.1 is not a version string; quote it"),
    ({"id": "x", "match": {"bios": {"min": "1"}}, "reason": "r", "fix": "f"}, "match.bios: unknown fact"),
    ({"id": "x", "match": {"kernel": {"newer": "1"}}, "reason": "r", "fix": "f"}, "unknown condition(s) newer"),
    ({"id": "x", "match": {"meminfo": {"Cma": {"below": 1}}}, "reason": "r", "fix": "f"}, "meminfo.Cma: not a field preflight reads"),
    ({"id": "x", "match": {}, "reason": "r", "fix": "f"}, "match: must name at least one of"),
    ({"id": "kernel-7.0.0-1019-roce-enomem", "match": {"kernel": {"prefix": "1"}}, "reason": "r", "fix": "f"},
     "id 'kernel-7.0.0-1019-roce-enomem' is already a shipped entry"),
    ({"id": "x", "match": {"kernel": {"prefix": "1"}}, "reason": "r", "fix": "f", "severity": "info"}, "severity: 'info' is not one of"),
])
def test_a_bad_user_entry_is_refused_naming_the_variable(entry, message):
    with pytest.raises(AnsibleFilterError) as error:
        check_known_bad(node(), req(extra=[entry]))
    assert "preflight_known_bad_platforms_extra[0]" in str(error.value) and message in str(error.value)


def test_no_known_bad_requirements_no_check():
    assert check_known_bad(node(), {}) == []


# --- firmware updates (fwupdmgr) ----------------------------------------------------------------


def test_parse_pending_updates():
    assert firmware.parse_fwupd_updates(fixture("fwupd", "get_updates_two.json")) == [
        {"name": "System Firmware", "device_id": "362301da643102b9f38477387e2193e57abaa590", "version": "1.2.0",
         "update_version": "1.3.0", "summary": "UEFI firmware for DGX Spark"},
        {"name": "ConnectX-7", "device_id": "9d8f7e6c5b4a39281706f5e4d3c2b1a098765432", "version": "28.41.1000",
         "update_version": "28.43.1014", "summary": "ConnectX-7 firmware"},
    ]
    assert firmware.parse_fwupd_updates(fixture("fwupd", "get_updates_none.json")) == []
    with pytest.raises(ValueError):
        firmware.parse_fwupd_updates("No updatable devices")


@pytest.mark.parametrize("path, answer, expected", [
    (None, None, {"checked": False, "error": None, "updates": 0}),
    ("/usr/bin/fwupdmgr", (0, "two", ""), {"checked": True, "error": None, "updates": 2}),
    ("/usr/bin/fwupdmgr", (2, "none", ""), {"checked": True, "error": None, "updates": 0}),
    ("/usr/bin/fwupdmgr", (2, "No updatable devices\n", ""), {"checked": True, "error": None, "updates": 0}),
    ("/usr/bin/fwupdmgr", (1, "", "Failed to connect to daemon\n"),
     {"checked": False, "error": "Failed to connect to daemon", "updates": 0}),
    ("/usr/bin/fwupdmgr", (0, "{not json", ""), {"checked": False, "updates": 0}),
])
def test_gather_firmware_facts(path, answer, expected):
    texts = {"two": fixture("fwupd", "get_updates_two.json"), "none": fixture("fwupd", "get_updates_none.json")}
    calls = []

    def run(args):
        calls.append(args)
        rc, out, err = answer
        return rc, texts.get(out, out), err

    facts = firmware.gather_firmware_facts(run, path)
    assert calls == ([[path, "get-updates", "--json"]] if path else [])
    assert facts["checked"] is expected["checked"] and len(facts["updates"]) == expected["updates"]
    if "error" in expected:
        assert facts["error"] == expected["error"]
    else:
        assert facts["error"].startswith("fwupdmgr get-updates --json printed no usable JSON")


def test_firmware_check_warns_never_fails():
    def judged(path, answer):
        fw = firmware.gather_firmware_facts(lambda args: answer, path)
        [result] = check_firmware_updates(node(fw=fw), {})
        return result

    absent = judged(None, None)
    assert (absent["status"], absent["detail"]) == ("skip", "not checked: fwupdmgr is not installed on the node")
    pending = judged("/usr/bin/fwupdmgr", (0, fixture("fwupd", "get_updates_two.json"), ""))
    assert pending["status"] == "warn"
    assert pending["detail"] == "2 pending: System Firmware 1.2.0 -> 1.3.0, ConnectX-7 28.41.1000 -> 28.43.1014"
    assert "sudo fwupdmgr update" in pending["fix"]
    assert judged("/usr/bin/fwupdmgr", (2, fixture("fwupd", "get_updates_none.json"), ""))["status"] == "pass"
    broken = judged("/usr/bin/fwupdmgr", (1, "", "Failed to connect to daemon"))
    assert (broken["status"], broken["detail"]) == ("warn", "not checked: Failed to connect to daemon")
    assert check_firmware_updates(node(), {}) == []


# --- the report and `sparkctl doctor` -------------------------------------------------------------


def test_the_doctor_table_and_report_name_the_entry_its_reason_and_fix(tmp_path):
    hostvars = {"spark1": {"preflight_results": check_known_bad(node(kernel=BAD_KERNEL), req())},
                "spark2": {"preflight_results": check_known_bad(node(), req())}}
    document = preflight_report(["spark1", "spark2"], hostvars)
    assert document["ok"] is False and document["hosts"]["spark2"]["ok"] is True
    path = tmp_path / "preflight.json"
    path.write_text(json.dumps(document))
    console = Console(record=True, width=400)
    assert report.show_preflight(path, console) is False
    text = " ".join(console.export_text().split())
    assert "platform.known_bad" in text
    assert ("spark1: platform.known_bad: known-bad entry 'kernel-7.0.0-1019-roce-enomem' matches kernel 7.0.0-1019-nvidia "
            "(prefix 7.0.0-1019): kernel release 7.0.0-1019 broke NCCL over RoCE with ENOMEM") in text
    assert "Fix: Boot the kernel release the node ran before" in text
