"""link_ping: the argv of each ping as the role ran it, every ping started before any is waited for, and results
shaped like a loop's so that the link_ping filters read them unchanged."""

from __future__ import annotations

import os
import time

import pytest

from module_runner import run_module

from ansible_collections.sparkctl.spark.plugins.filter.link_ping import link_ping_failed_targets
from ansible_collections.sparkctl.spark.plugins.modules import link_ping as module

TARGET = {"interface": "enp1s0f1np1", "address": "192.168.100.11", "peer": "spark2", "half": 0}


def test_a_no_fragment_jumbo_ping_command():
    assert module.ping_command("/bin/ping", TARGET, size=8972, prohibit_fragmentation=True, count=3, interval=0.2,
                               wait=2) == ["/bin/ping", "-M", "do", "-s", "8972", "-c", "3", "-i", "0.2", "-W", "2",
                                           "-I", "enp1s0f1np1", "192.168.100.11"]


def test_a_small_ping_command_keeps_pings_defaults():
    assert module.ping_command("ping", TARGET, count=2) == [
        "ping", "-c", "2", "-i", "0.2", "-W", "2", "-I", "enp1s0f1np1", "192.168.100.11"]


def fake_ping(tmp_path, body):
    path = tmp_path / "ping"
    path.write_text("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
    return str(path)


@pytest.mark.timing
def test_the_pings_run_side_by_side(tmp_path):
    ping = fake_ping(tmp_path, "sleep 0.5\n")
    targets = [dict(TARGET, address="192.168.100.%d" % n) for n in range(4)]
    start = time.monotonic()
    results = module.ping_all([[ping] for _ in targets], targets)
    assert time.monotonic() - start < 1.5
    assert [r["item"] for r in results] == targets and {r["rc"] for r in results} == {0}


def test_results_read_by_the_filters_like_a_loops(tmp_path, capsys, monkeypatch):
    # Fails for the second half's address only, as a dead half would.
    ping = fake_ping(tmp_path, 'for a; do last=$a; done\necho "3 packets transmitted, 3 received"\n'
                               '[ "$last" = 192.168.101.11 ] && { echo "ping: sendmsg: No route" >&2; exit 1; }\nexit 0\n')
    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", lambda self, name, required=False: ping)
    second = dict(TARGET, interface="enP2p1s0f1np1", address="192.168.101.11", half=1)
    rc, result = run_module(module.main, {"targets": [TARGET, second], "size": 8972, "prohibit_fragmentation": True},
                            capsys)
    assert rc == 0 and result["changed"] is False
    assert [p["rc"] for p in result["pings"]] == [0, 1]
    assert "No route" in result["pings"][1]["stderr"]
    assert link_ping_failed_targets(result["pings"]) == [second]


def test_a_target_without_an_address_is_refused(capsys):
    rc, result = run_module(module.main, {"targets": [{"interface": "enp1s0f1np1"}]}, capsys)
    assert rc == 1 and "lack an interface or an address" in result["msg"]
