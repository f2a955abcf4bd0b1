"""ssh_session / ssh_probe_report on ssh -v output recorded in the lab (fixtures/ssh)."""

from pathlib import Path

import pytest
from ansible_collections.sparkctl.spark.plugins.filter.ssh_session import ssh_probe_report, ssh_session

FIXTURES = Path(__file__).parent / "fixtures" / "ssh"
RC = {"link_ok": 0, "mgmt_refused": 255, "host_key_unknown": 255, "host_key_changed": 255, "unreachable": 255, "remote_false": 1, "mux": 0}
CIPHER = "aes128-gcm@openssh.com"


def _result(name, **item):
    return {"rc": RC[name], "stderr": (FIXTURES / f"{name}.stderr").read_text(), "item": item}


def test_successful_login_reports_cipher_key_and_pinned_host_key():
    s = ssh_session(_result("link_ok"))
    assert s["outcome"] == "ok"
    assert s["authenticated"] and s["auth_method"] == "publickey"
    assert s["identity"] == "/home/spark/.ssh/sparkctl_ed25519"
    assert s["cipher_client_to_server"] == CIPHER and s["cipher_server_to_client"] == CIPHER
    assert s["mac"] == "<implicit>" and s["compression"] == "none"
    assert s["kex"] == "sntrup761x25519-sha512"
    assert s["host_key_type"] == "ssh-ed25519"
    assert s["host_key_fingerprint"] == "SHA256:4ZWaB8r9hqfOxQ9faV/aS0+38h/8xybfUp2toGVjeGk"
    assert s["host_key_verified"] is True
    assert s["multiplexed"] is False


def test_key_refused_off_the_link():
    s = ssh_session(_result("mgmt_refused"))
    assert s["outcome"] == "auth_refused"
    assert "Permission denied" in s["message"]
    assert s["host_key_verified"] is True  # HostKeyAlias checked the pinned key first
    assert s["cipher_client_to_server"] == "chacha20-poly1305@openssh.com"  # -F /dev/null: ssh's default
    assert s["authenticated"] is False


def test_unknown_and_changed_host_keys_are_told_apart():
    assert ssh_session(_result("host_key_unknown"))["outcome"] == "host_key_unknown"
    changed = ssh_session(_result("host_key_changed"))
    assert changed["outcome"] == "host_key_changed"
    assert changed["host_key_verified"] is False


def test_unreachable():
    s = ssh_session(_result("unreachable"))
    assert s["outcome"] == "unreachable"
    assert s["message"] == "ssh: connect to host 192.168.100.99 port 22: Connection timed out"


def test_remote_command_failure():
    s = ssh_session(_result("remote_false"))
    assert s["outcome"] == "remote_failed"
    assert s["authenticated"] is True
    assert "exited 1" in s["message"]


def test_multiplexed_session_has_no_cipher():
    s = ssh_session(_result("mux"))
    assert s["outcome"] == "ok"
    assert s["multiplexed"] is True
    assert s["cipher_client_to_server"] is None


@pytest.mark.parametrize(
    "result",
    [None, {}, {"rc": 255, "stderr": ""}, {"rc": 255, "stderr_lines": ["ssh: Could not resolve hostname x: Name or service not known"]}],
)
def test_degenerate_input(result):
    s = ssh_session(result)
    assert s["outcome"] in ("error", "unreachable")


def test_crlf_lines():
    text = (FIXTURES / "link_ok.stderr").read_text().replace("\n", "\r\n")
    assert ssh_session({"rc": 0, "stderr": text})["cipher_client_to_server"] == CIPHER


def _probe(name, expect="ok", path="link"):
    return _result(name, peer="spark2", address="192.168.100.11", path=path, expect=expect)


def test_report_passes_a_good_link_and_a_refused_management_path():
    report = ssh_probe_report([_probe("link_ok"), _probe("mgmt_refused", expect="refused", path="management")], CIPHER, "spark1")
    assert [r["status"] for r in report] == ["pass", "pass"]
    assert report[0]["line"].startswith(
        "spark1 -> spark2 192.168.100.11 (link): ok, publickey with sparkctl_ed25519, cipher aes128-gcm@openssh.com"
    )
    assert "refused as it must be" in report[1]["line"]
    assert all(r["fix"] == "" for r in report)


def test_report_fails_a_key_accepted_off_the_link():
    (entry,) = ssh_probe_report([_probe("link_ok", expect="refused", path="management")], CIPHER, "spark1")
    assert entry["status"] == "fail"
    assert "ACCEPTED" in entry["line"]
    assert "from=" in entry["fix"]


def test_report_only_warns_when_the_management_address_is_unreachable():
    (entry,) = ssh_probe_report([_probe("unreachable", expect="refused", path="management")], CIPHER, "spark1")
    assert entry["status"] == "warn"
    assert "not judged" in entry["line"]


def test_report_fails_the_wrong_cipher():
    (entry,) = ssh_probe_report([_probe("link_ok")], "chacha20-poly1305@openssh.com", "spark1")
    assert entry["status"] == "fail"
    assert "negotiated aes128-gcm@openssh.com, not chacha20-poly1305@openssh.com" in entry["fix"]


@pytest.mark.parametrize(
    "name,words",
    [
        ("unreachable", "apply the direct link"),
        ("host_key_changed", "host key differs"),
        ("host_key_unknown", "pins the key"),
        ("mgmt_refused", "refused the mesh key"),
    ],
)
def test_report_fails_link_problems_with_a_fix(name, words):
    (entry,) = ssh_probe_report([_probe(name)], CIPHER, "spark1")
    assert entry["status"] == "fail"
    assert words in entry["fix"]


def test_report_refuses_to_judge_the_cipher_of_a_multiplexed_probe():
    (entry,) = ssh_probe_report([_probe("mux")], CIPHER, "spark1")
    assert entry["status"] == "fail"
    assert "ControlPath=none" in entry["fix"]


def test_report_skips_skipped_items():
    assert ssh_probe_report([{"skipped": True, "item": {}}], CIPHER, "spark1") == []
    assert ssh_probe_report(None) == []


def test_stalled_exchange_is_told_apart_from_unreachable():
    # Seen in the lab while the other end of the cable was being reconfigured.
    stderr = "\n".join(
        [
            "OpenSSH_9.2p1 Debian-2+deb12u10, OpenSSL 3.0.20 7 Apr 2026",
            "debug1: Connecting to 192.168.100.10 [192.168.100.10] port 22.",
            "debug1: Connection established.",
            "Connection timed out during banner exchange",
            "Connection to 192.168.100.10 port 22 timed out",
        ]
    )
    s = ssh_session({"rc": 255, "stderr": stderr})
    assert s["outcome"] == "stalled"
    (entry,) = ssh_probe_report([{"rc": 255, "stderr": stderr, "item": {"peer": "spark1", "address": "192.168.100.10"}}], CIPHER, "spark2")
    assert entry["status"] == "fail" and "MTU" in entry["fix"]
