# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an `ssh -v ... true` probe tells: whether it got in, with which key,
over which cipher, against which pinned host key, and if not, why; and the probes of the
SSH mesh themselves, each with the item the report judges it by."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: ssh_probe_report
short_description: Judge a loop of ssh -v probes of the SSH mesh
version_added: 0.1.0
description:
  - Reads the registered results of C(ssh -v -o BatchMode=yes HOST true) probes (an C(ansible.builtin.command) loop
    or C(sparkctl.spark.probe_commands)) whose items carry C(peer), C(address), C(path) and C(expect) (C(ok), or
    C(refused) for a probe that must be refused), and returns one verdict per probe with a readable C(line) and the
    C(fix).
  - Each probe's C(outcome) is one of C(ok) (authenticated and the remote command exited 0), C(auth_refused) (every
    key was refused), C(host_key_unknown) (strict checking and no pinned key), C(host_key_changed) (the pinned key
    differs), C(unreachable) (no TCP connection or no name), C(stalled) (TCP connected, then the exchange timed out),
    C(remote_failed) (authenticated, remote command failed) or C(error).
  - A probe expected to get in passes only with the negotiated cipher O(cipher) (when given) both ways and a host key
    verified against C(known_hosts). A session that went through an existing C(ControlMaster) shows no key exchange
    and fails; probe with C(-o ControlPath=none).
  - A probe that must be refused passes on C(auth_refused), fails when the key was accepted, and warns when it could
    not reach the peer (nothing to judge).
  - Companion filter C(ssh_probe_plan) builds those probes for C(sparkctl.spark.probe_commands), C(item), C(argv)
    and, for a link probe, C(retries) and C(delay). Input the target nodes' published mesh identities (C(name),
    C(user), C(addresses), C(management_address)); arguments the mesh key's path, the C(known_hosts) path, the
    C(ConnectTimeout) seconds, the retries and delay of a link probe, and whether the key must also be refused at
    each management address. First one C(ok) probe per node and link address, in node then address order
    (C(ssh -v -o BatchMode=yes -o ControlPath=none)); then, when asked, one C(refused) probe per node at its
    management address offering the mesh key alone (C(-F /dev/null), C(IdentitiesOnly)), checked against the host
    key pinned for the node's first link address (C(HostKeyAlias)).
options:
  _input:
    description: The registered loop results (C(rc), C(stderr), C(item)); skipped items are left out.
    type: list
    elements: dict
    required: true
  cipher:
    description: The cipher every session must negotiate; not judged when omitted.
    type: str
  source:
    description: The node the probes ran on, for the lines.
    type: str
"""

EXAMPLES = r"""
- name: Judge the probes
  ansible.builtin.set_fact:
    ssh_mesh_sessions: "{{ ssh_mesh_probes.results | sparkctl.spark.ssh_probe_report('aes128-gcm@openssh.com', inventory_hostname) }}"
"""

RETURN = r"""
_value:
  description: One verdict per probe, in loop order.
  type: list
  elements: dict
  contains:
    source: {description: The node the probe ran on (O(source))., type: str}
    peer: {description: The item's C(peer)., type: str}
    address: {description: The item's C(address)., type: str}
    path: {description: The item's C(path) (C(link) unless given)., type: str}
    expect: {description: C(ok) or C(refused)., type: str}
    status: {description: "C(pass), C(fail) or C(warn).", type: str}
    outcome: {description: See the description., type: str}
    cipher: {description: Negotiated cipher client to server., type: str}
    identity: {description: Path of the key the server accepted., type: str}
    host_key_verified: {description: The host key matched a C(known_hosts) entry., type: bool}
    line: {description: One line for humans., type: str}
    fix: {description: What to do about a probe that did not pass; empty when it passed., type: str}
"""

_PATTERNS = {
    "kex": re.compile(r"^debug1: kex: algorithm: (\S+)"),
    "host_key_type": re.compile(r"^debug1: kex: host key algorithm: (\S+)"),
    "server_to_client": re.compile(r"^debug1: kex: server->client cipher: (\S+) MAC: (\S+) compression: (\S+)"),
    "client_to_server": re.compile(r"^debug1: kex: client->server cipher: (\S+) MAC: (\S+) compression: (\S+)"),
    "host_key": re.compile(r"^debug1: Server host key: (\S+) (\S+)"),
    "host_known": re.compile(r"^debug1: Host '.*' is known and matches the \S+ host key\."),
    "accepted": re.compile(r"^debug1: Server accepts key: (\S+)"),
    "authenticated": re.compile(r'^Authenticated to .* using "([^"]+)"\.'),
    "mux": re.compile(r"^debug1: (auto-mux: Trying existing master|mux_client_request_session)"),
    "exit": re.compile(r"^debug1: Exit status (-?\d+)"),
}

_FAILURES = (
    ("host_key_changed", re.compile(r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key for .* has changed")),
    ("host_key_unknown", re.compile(r"No \S+ host key is known for|Host key verification failed")),
    ("auth_refused", re.compile(r"Permission denied \(")),
    # TCP connected, then nothing: the peer is wedged or packets are lost on the way.
    ("stalled", re.compile(r"timed out during banner exchange|kex_exchange_identification: read: Connection (timed out|reset)")),
    ("unreachable", re.compile(r"^ssh: (connect to host|Could not resolve hostname)|Connection (timed out|refused)|No route to host")),
)


def _lines(text):
    if isinstance(text, (list, tuple)):
        text = "\n".join(str(t) for t in text)
    return [line.rstrip("\r") for line in str(text or "").splitlines()]


def ssh_session(result):
    """What one probe shows: outcome and message (see DOCUMENTATION), rc, authenticated, auth_method, identity,
    the negotiated cipher_client_to_server, cipher_server_to_client, mac, compression and kex, host_key_type,
    host_key_fingerprint, host_key_verified, and multiplexed (the session reused a master, so the fields of the
    key exchange are None)."""
    if not isinstance(result, dict):
        result = {}
    rc = result.get("rc")
    lines = _lines(result.get("stderr") if "stderr" in result else result.get("stderr_lines"))
    summary = {
        "outcome": "error",
        "message": "",
        "rc": rc,
        "authenticated": False,
        "auth_method": None,
        "identity": None,
        "cipher_client_to_server": None,
        "cipher_server_to_client": None,
        "mac": None,
        "compression": None,
        "kex": None,
        "host_key_type": None,
        "host_key_fingerprint": None,
        "host_key_verified": False,
        "multiplexed": False,
    }
    remote_exit = None
    for line in lines:
        for name, pattern in _PATTERNS.items():
            match = pattern.search(line)
            if not match:
                continue
            if name == "kex":
                summary["kex"] = match.group(1)
            elif name == "host_key_type":
                summary["host_key_type"] = match.group(1)
            elif name == "server_to_client":
                summary["cipher_server_to_client"] = match.group(1)
            elif name == "client_to_server":
                summary["cipher_client_to_server"], summary["mac"], summary["compression"] = match.groups()
            elif name == "host_key":
                summary["host_key_type"] = summary["host_key_type"] or match.group(1)
                summary["host_key_fingerprint"] = match.group(2)
            elif name == "host_known":
                summary["host_key_verified"] = True
            elif name == "accepted":
                summary["identity"] = match.group(1)
            elif name == "authenticated":
                summary["authenticated"] = True
                summary["auth_method"] = match.group(1)
            elif name == "mux":
                summary["multiplexed"] = True
            elif name == "exit":
                remote_exit = int(match.group(1))

    # Lines ssh prints without the debug prefix are its own verdict.
    plain = [line for line in lines if line and not line.startswith("debug") and not line.startswith("OpenSSH_")]
    failure = None
    for outcome, pattern in _FAILURES:
        hit = next((line for line in plain if pattern.search(line)), None)
        if hit is not None:
            failure = (outcome, hit)
            break

    if rc == 0 and failure is None:
        summary["outcome"] = "ok"
        summary["message"] = "authenticated" if summary["authenticated"] or summary["multiplexed"] else "exited 0"
    elif failure is not None:
        summary["outcome"], summary["message"] = failure
    elif summary["authenticated"] or summary["multiplexed"] or (rc is not None and rc != 255):
        summary["outcome"] = "remote_failed"
        summary["message"] = f"the remote command exited {remote_exit if remote_exit is not None else rc}"
    else:
        summary["message"] = plain[-1] if plain else f"ssh exited {rc}"
    return summary


_FIXES = {
    "auth_refused": "the peer refused the mesh key: re-run the ssh_mesh role (it authorizes the key from the link subnets); "
    "check the peer's ~/.ssh/authorized_keys and that sshd reads it (AuthorizedKeysFile)",
    "host_key_unknown": "no host key of the peer is pinned for this address: "
    "re-run the ssh_mesh role (it pins the key it reads on the peer)",
    "host_key_changed": "the peer's host key differs from the pinned one: if the peer was reinstalled, re-run the ssh_mesh role; "
    "otherwise find out who answers on this address",
    "unreachable": "the link address does not answer on port 22: apply the direct link first (addresses from spark_link), "
    "check `ip -br addr` on both nodes and that sshd listens on the link",
    "stalled": "TCP connects but the SSH exchange stalls: packets are lost on the link (an MTU mismatch between the two ends, "
    "or the link being reconfigured right now: re-run) or the peer's sshd is wedged",
    "remote_failed": "logged in, but the remote command failed: check the peer's shell and ~/.bashrc for the service user",
    "error": "read the ssh output in the task result (-v)",
}


def _probe_line(source, item, summary, status):
    where = f"{source} -> {item.get('peer')} {item.get('address')} ({item.get('path', 'link')})"
    if item.get("expect", "ok") == "refused":
        if status == "pass":
            return f"{where}: refused as it must be (the key is limited to the link subnets)"
        if summary["outcome"] == "ok":
            return f"{where}: the mesh key was ACCEPTED off the link"
        return f"{where}: not judged ({summary['outcome']}: {summary['message']})"
    if summary["outcome"] != "ok":
        return f"{where}: {summary['outcome']}: {summary['message']}"
    identity = (summary["identity"] or "?").rsplit("/", 1)[-1]
    host_key = (
        f"host key pinned ({summary['host_key_type']} {summary['host_key_fingerprint']})"
        if summary["host_key_verified"]
        else "host key NOT verified"
    )
    cipher = summary["cipher_client_to_server"]
    if cipher != summary["cipher_server_to_client"]:
        cipher = f"{summary['cipher_client_to_server']} / {summary['cipher_server_to_client']}"
    return f"{where}: ok, {summary['auth_method']} with {identity}, cipher {cipher}, compression {summary['compression']}, {host_key}"


def ssh_probe_report(results, cipher=None, source=None):
    """Judge registered loop results of ssh probes; each item carries peer, address, path and expect (ok or refused)."""
    report = []
    for result in results or []:
        if not isinstance(result, dict) or result.get("skipped"):
            continue
        item = result.get("item") or {}
        summary = ssh_session(result)
        expect = item.get("expect", "ok")
        fix = ""
        if expect == "refused":
            if summary["outcome"] == "auth_refused":
                status = "pass"
            elif summary["outcome"] == "ok":
                status = "fail"
                fix = (
                    "sshd accepted the key from a management address: check the from= option on the peer's authorized_keys line "
                    "and that traffic to the management address does not leave through the link"
                )
            else:
                status = "warn"  # could not reach the management address: nothing to judge
        else:
            problems = []
            if summary["outcome"] != "ok":
                fix = _FIXES.get(summary["outcome"], _FIXES["error"])
            else:
                if summary["multiplexed"]:
                    problems.append("went through an existing master, so the cipher is unknown: probe with -o ControlPath=none")
                elif cipher and (summary["cipher_client_to_server"] != cipher or summary["cipher_server_to_client"] != cipher):
                    problems.append(
                        f"negotiated {summary['cipher_client_to_server']}, not {cipher}: "
                        "check Ciphers in ~/.ssh/config and in the peer's sshd_config"
                    )
                if not summary["host_key_verified"] and not summary["multiplexed"]:
                    problems.append("the host key was not checked against known_hosts: check StrictHostKeyChecking and UserKnownHostsFile")
                fix = "; ".join(problems)
            status = "pass" if summary["outcome"] == "ok" and not problems else "fail"
        report.append(
            {
                "source": source,
                "peer": item.get("peer"),
                "address": item.get("address"),
                "path": item.get("path", "link"),
                "expect": expect,
                "status": status,
                "outcome": summary["outcome"],
                "cipher": summary["cipher_client_to_server"],
                "identity": summary["identity"],
                "host_key_verified": summary["host_key_verified"],
                "line": _probe_line(source, item, summary, status)
                + (f" - {fix}" if status == "fail" and summary["outcome"] == "ok" and expect == "ok" else ""),
                "fix": fix if status != "pass" else "",
            }
        )
    return report


def ssh_probe_plan(nodes, key_path, known_hosts, connect_timeout, retries, delay, off_link_refused=True):
    """The probes of the nodes this one logs in to: every link address must let the mesh key in
    (ssh's own config, which names the key; a few retries, as a link just configured can take
    seconds to pass traffic); with off_link_refused, every management address must refuse it,
    sshd's from= option holding the key to the link. ControlPath=none everywhere: a shared
    master would hide the key exchange, and with it the cipher."""
    timeout = f"ConnectTimeout={connect_timeout}"
    try:
        probes = [{"item": {"peer": node["name"], "address": address, "path": "link", "expect": "ok"},
                   "retries": retries, "delay": delay,
                   "argv": ["ssh", "-v", "-o", "BatchMode=yes", "-o", "ControlPath=none", "-o", timeout, address, "true"]}
                  for node in nodes or [] for address in node["addresses"]]
        if off_link_refused:
            probes += [{"item": {"peer": node["name"], "address": node["management_address"], "path": "management",
                                 "expect": "refused"},
                        "argv": ["ssh", "-v", "-F", "/dev/null", "-i", key_path, "-o", "IdentitiesOnly=yes",
                                 "-o", "BatchMode=yes", "-o", "PasswordAuthentication=no",
                                 "-o", "KbdInteractiveAuthentication=no", "-o", "ControlPath=none",
                                 "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}",
                                 "-o", f"HostKeyAlias={node['addresses'][0]}", "-o", timeout,
                                 "-l", node["user"], node["management_address"], "true"]}
                       for node in nodes or []]
    except (KeyError, IndexError, TypeError) as exc:
        raise AnsibleFilterError(f"ssh_probe_plan: not a mesh identity with name, user, addresses and "
                                 f"management_address ({exc!r})") from exc
    return probes


class FilterModule:
    def filters(self):
        return {"ssh_probe_report": ssh_probe_report, "ssh_probe_plan": ssh_probe_plan}
