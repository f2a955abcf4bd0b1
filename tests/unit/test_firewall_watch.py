"""roles/firewall/files/sparkctl-firewall-watch, the firewall unit's main process: it loads the rule
set file again the moment the table is deleted (nftables.service's flush, `nft flush ruleset`), and
only then; as the unit's ExecStopPost= it deletes the table after a clean stop only. Its nft is a
recording stand-in here but in the last test, which runs the real nft in a network namespace; the
lab runs it on the nodes (tests/catalogue/faults.yml, firewall_gone_after_nftables_stop_and_flush)."""

from __future__ import annotations


import os
import subprocess

from pathlib import Path

import pytest
import script_module

SCRIPT = Path(__file__).resolve().parents[2] / "roles" / "firewall" / "files" / "sparkctl-firewall-watch"


watch = script_module.load("firewall", "sparkctl-firewall-watch")


class FakeNft:
    """nft's table as a flag: `list table` answers by it, `-f` sets it, `delete table` clears it."""

    def __init__(self, loaded=True, load_rc=0):
        self.loaded, self.load_rc, self.calls = loaded, load_rc, []

    def __call__(self, argv, **kwargs):
        self.calls.append(argv[1:])
        if argv[1:3] == ["list", "table"]:
            rc = 0 if self.loaded else 1
        elif argv[1] == "-f":
            rc = self.load_rc
            self.loaded = self.loaded or rc == 0
        elif argv[1:3] == ["delete", "table"]:
            rc, self.loaded = (0 if self.loaded else 1), False
        return subprocess.CompletedProcess(argv, rc, stdout="Error: syntax error" if rc else "")


def keeper(nft, logs):
    return watch.Keeper("/usr/sbin/nft", "inet", "sparkctl", "/etc/sparkctl/firewall.nft", run=nft, log=logs.append)


@pytest.mark.parametrize("line, ours", [
    ("delete table inet sparkctl\n", True),
    ("delete table inet sparkctl2\n", False),
    ("delete table ip nat\n", False),
    ("# new generation 4 by process 25968 (nft)\n", False),
    ("add table inet sparkctl\n", False),
])
def test_only_the_deletion_of_its_own_table_is_an_event(line, ours):
    assert watch.deletion_event(line, "inet", "sparkctl") is ours


def test_a_flushed_ruleset_loads_the_file_again_and_says_so():
    nft, logs = FakeNft(), []

    def events():
        nft.loaded = False  # what `nft flush ruleset` did before the kernel told the monitor
        yield "delete table ip nat\n"
        yield "delete table inet sparkctl\n"

    keeper(nft, logs).watch(events())
    assert nft.loaded is True
    assert ["-f", "/etc/sparkctl/firewall.nft"] in nft.calls
    assert [line for line in logs if "was gone" in line] == [
        "table inet sparkctl was gone (deleted: delete table inet sparkctl): loaded /etc/sparkctl/firewall.nft again"]


def test_a_reload_of_its_own_file_loads_nothing():
    # `nft -f` of the rule set deletes and adds the table in one transaction: the monitor reports
    # the deletion, but the table is there when it is checked.
    nft, logs = FakeNft(), []
    keeper(nft, logs).watch(iter(["delete table inet sparkctl\n"]))
    assert ["-f", "/etc/sparkctl/firewall.nft"] not in nft.calls
    assert logs == ["watching table inet sparkctl (loaded from /etc/sparkctl/firewall.nft whenever it is deleted)"]


def test_a_deletion_the_monitor_missed_is_found_after_a_quiet_while():
    nft, logs = FakeNft(), []

    def events():
        nft.loaded = False  # deleted while the monitor was not listening yet: no event
        yield None

    keeper(nft, logs).watch(events())
    assert nft.loaded is True and "found missing by the check after a quiet while" in logs[-1]


def test_the_monitors_lines_and_its_quiet_whiles():
    read_end, write_end = os.pipe()
    lines = watch.monitor_lines(read_end, quiet_seconds=0.05)
    assert next(lines) is None  # nothing written yet
    os.write(write_end, b"delete table ip nat\ndelete table inet spark")
    assert next(lines) == "delete table ip nat"
    os.write(write_end, b"ctl\n")
    assert next(lines) == "delete table inet sparkctl"
    os.write(write_end, b"partial")
    os.close(write_end)
    assert list(lines) == ["partial"]
    os.close(read_end)


def test_a_table_gone_before_the_watch_starts_is_loaded():
    nft, logs = FakeNft(loaded=False), []
    keeper(nft, logs).watch(iter([]))
    assert nft.loaded is True and "deleted before the watch started" in logs[0]


def test_a_rule_set_that_does_not_load_is_said_with_nfts_words():
    nft, logs = FakeNft(loaded=False, load_rc=1), []
    assert keeper(nft, logs).ensure("deleted: x") is True
    assert "did not load: Error: syntax error" in logs[0]


def test_a_clean_stop_deletes_the_table_and_nothing_else():
    nft, logs = FakeNft(), []
    assert keeper(nft, logs).stop_post("success") is True
    assert nft.calls == [["delete", "table", "inet", "sparkctl"]]


@pytest.mark.parametrize("result", ["exit-code", "signal", "core-dump", None])
def test_a_watcher_that_died_leaves_the_table_loaded(result):
    nft, logs = FakeNft(), []
    assert keeper(nft, logs).stop_post(result) is False
    assert nft.calls == [] and nft.loaded is True and "stays loaded" in logs[0]


RULES = """table inet sparkctl
delete table inet sparkctl
table inet sparkctl {
  chain input {
    type filter hook input priority filter; policy accept;
    iifname "lo" accept
  }
}
"""
# In a network namespace of its own (nothing the machine's own ruleset holds is touched): the table
# loaded, the watcher started, the whole ruleset flushed; the table must be back. Then the watcher
# is stopped as systemd stops it (SIGTERM), and its ExecStopPost= run: after a crash the table
# stays, after a clean stop it goes.
NAMESPACE_SCRIPT = """
set -e
wait_for() { for i in $(seq 150); do if grep -q "$1" "$LOG"; then return 0; fi; sleep 0.1; done; echo "no '$1'"; cat "$LOG"; exit 1; }
nft -f "$RULES"
python3 "$WATCH" --rules "$RULES" > "$LOG" 2>&1 &
watcher=$!
wait_for "watching table inet sparkctl"
sleep 0.2
nft flush ruleset
back=no
for i in $(seq 150); do if nft list table inet sparkctl > /dev/null 2>&1; then back=yes; break; fi; sleep 0.1; done
echo "back=$back"
wait_for "was gone ("
kill -TERM $watcher
wait $watcher || true
SERVICE_RESULT=exit-code python3 "$WATCH" --stop-post >> "$LOG" 2>&1
if nft list table inet sparkctl > /dev/null 2>&1; then echo after-crash=present; else echo after-crash=gone; fi
SERVICE_RESULT=success python3 "$WATCH" --stop-post >> "$LOG" 2>&1
if nft list table inet sparkctl > /dev/null 2>&1; then echo after-stop=present; else echo after-stop=gone; fi
"""


@pytest.mark.skipif(not Path("/usr/sbin/nft").exists() or not Path("/usr/bin/unshare").exists(),
                    reason="needs nft and unshare (tests/bootstrap.sh installs nftables)")
def test_the_real_nft_a_flushed_ruleset_is_back_and_the_stop_deletes_the_table(tmp_path):
    rules, log = tmp_path / "firewall.nft", tmp_path / "watch.log"
    rules.write_text(RULES)
    proc = subprocess.run(["/usr/bin/unshare", "--net", "sh", "-c", NAMESPACE_SCRIPT], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "RULES": str(rules),
                                           "WATCH": str(SCRIPT), "LOG": str(log)})
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip("no permission for a network namespace: " + proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout + log.read_text()
    assert "back=yes" in proc.stdout and "after-crash=present" in proc.stdout and "after-stop=gone" in proc.stdout, said
    # Back through the monitor's event, or (a busy machine, a monitor not listening yet) the quiet-while check.
    assert "table inet sparkctl was gone (" in log.read_text()
