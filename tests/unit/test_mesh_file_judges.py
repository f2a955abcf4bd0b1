"""The judges ssh_mesh runs on the text it read (authorized_key_current, known_host_current,
managed_block) say "nothing to do" only where the writing module, run in check mode on the
same file, reports no change: the role skips the module on their word."""

from __future__ import annotations

import base64
import hashlib
import hmac
import shutil

import pytest
from ansible.modules import blockinfile, known_hosts
from module_runner import run_module

from ansible_collections.ansible.posix.plugins.modules import authorized_key
from ansible_collections.sparkctl.spark.plugins.filter.managed_block import managed_block
from ansible_collections.sparkctl.spark.plugins.filter.stale_mesh_keys import authorized_key_current, known_host_current

HEAD_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM3wvIQp2mL7e+GKApQfe9HAmM0HPCvwTwVaSkLnnV8b sparkctl-mesh@spark1"
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIC5AZNH6+BLNAOVWGJAaWjvozS0s67roXMVm8HAr8m/8 sparklab@vm"
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHSpjKGsgYq3rHuG6GjGFzoPE0h1rOPljVS3a0Hn4vQ5"
OLD_HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDO"
RSA_HOST_KEY = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQC7"
OPTIONS = 'restrict,from="192.168.100.10,192.168.101.10"'
ADDRESS = "192.168.100.11"


def _hashed(host, salt=b"0123456789abcdefghij"):
    digest = hmac.new(salt, host.encode(), hashlib.sha1).digest()
    return "|1|" + base64.b64encode(salt).decode() + "|" + base64.b64encode(digest).decode()


AUTHORIZED = {
    "missing": None,
    "empty": "",
    "current": f"{OTHER_KEY}\n{OPTIONS} {HEAD_KEY}\n",
    "no options": f"{OTHER_KEY}\n{HEAD_KEY}\n",
    "other options": f'from="10.0.0.1" {HEAD_KEY}\n',
    "other comment": f"{OPTIONS} {HEAD_KEY.rsplit(' ', 1)[0]} someone@else\n",
    "duplicate, last wrong": f"{OPTIONS} {HEAD_KEY}\n{HEAD_KEY}\n",
    "duplicate, last right": f"{HEAD_KEY}\n{OPTIONS} {HEAD_KEY}\n",
    "only others": f"{OTHER_KEY}\n# {HEAD_KEY}\n",
}


def _check_mode_run(main, path, text, capsys, args):
    """The writing module's result in check mode on path holding text (no file for None)."""
    if text is not None:
        path.write_text(text)
    rc, result = run_module(main, dict(args, path=str(path), _ansible_check_mode=True), capsys)
    assert rc == 0, result
    return result


@pytest.mark.parametrize("case", AUTHORIZED)
def test_authorized_key_current_agrees_with_the_module(case, tmp_path, capsys):
    text = AUTHORIZED[case]
    result = _check_mode_run(authorized_key.main, tmp_path / "authorized_keys", text, capsys,
                             {"user": "nobody", "key": HEAD_KEY, "key_options": OPTIONS, "state": "present"})
    assert authorized_key_current(text, HEAD_KEY, OPTIONS) == (not result.get("changed")), case


KNOWN = {
    "missing": None,
    "empty": "",
    "current": f"{ADDRESS} {HOST_KEY}\n",
    "current with a comment, after others": f"10.0.0.9 {OLD_HOST_KEY}\n{ADDRESS} {HOST_KEY} pinned\n",
    "old key": f"{ADDRESS} {OLD_HOST_KEY}\n",
    "old key first": f"{ADDRESS} {OLD_HOST_KEY}\n{ADDRESS} {HOST_KEY}\n",
    "other type first": f"{ADDRESS} {RSA_HOST_KEY}\n{ADDRESS} {HOST_KEY}\n",
    "in a host list": f"{ADDRESS},192.168.101.11 {HOST_KEY}\n",
    "hashed": f"{_hashed(ADDRESS)} {HOST_KEY}\n",
    "hashed old": f"{_hashed(ADDRESS)} {OLD_HOST_KEY}\n",
    "hashed other host": f"{_hashed('10.0.0.9')} {OLD_HOST_KEY}\n{ADDRESS} {HOST_KEY}\n",
    "wildcard of the same type": f"192.168.100.* {OLD_HOST_KEY}\n{ADDRESS} {HOST_KEY}\n",
    "marker": f"@revoked {ADDRESS} {OLD_HOST_KEY}\n{ADDRESS} {HOST_KEY}\n",
}


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="known_hosts needs ssh-keygen")
@pytest.mark.parametrize("case", KNOWN)
def test_known_host_current_agrees_with_the_module_or_defers_to_it(case, tmp_path, capsys):
    text = KNOWN[case]
    result = _check_mode_run(known_hosts.main, tmp_path / "known_hosts", text, capsys,
                             {"name": ADDRESS, "key": f"{ADDRESS} {HOST_KEY}", "state": "present"})
    current = known_host_current(text, ADDRESS, HOST_KEY)
    if case == "wildcard of the same type":
        assert not current  # not matched here: the module decides
    else:
        assert current == (not result.get("changed")), case


MARKER = "# {mark} sparkctl ssh_mesh: peers over the direct link (managed by Ansible)"
BLOCK = "Host 192.168.100.11\n    User spark"
BEGIN, END = MARKER.replace("{mark}", "BEGIN"), MARKER.replace("{mark}", "END")
CONFIG = {
    "missing": None,
    "empty": "",
    "current": f"{BEGIN}\n{BLOCK}\n{END}\nHost *\n    ServerAliveInterval 30\n",
    "current below other lines": f"Host *\n    User x\n{BEGIN}\n{BLOCK}\n{END}\n",
    "edited block": f"{BEGIN}\nHost 192.168.100.11\n    User root\n{END}\n",
    "no block": "Host *\n    User x",
    "markers swapped": f"{END}\n{BLOCK}\n{BEGIN}\n",
    "only the begin marker": f"{BEGIN}\n{BLOCK}\n",
    "block last without a newline": f"Host *\n{BEGIN}\n{BLOCK}\n{END}",
}


@pytest.mark.parametrize("state", ["present", "absent"])
@pytest.mark.parametrize("case", CONFIG)
def test_managed_block_agrees_with_blockinfile(case, state, tmp_path, capsys):
    text = CONFIG[case]
    result = _check_mode_run(blockinfile.main, tmp_path / "config", text, capsys,
                             {"create": True, "insertbefore": "BOF", "marker": MARKER, "block": BLOCK, "state": state,
                              "_ansible_diff": True})
    after = managed_block(text, BLOCK, MARKER, state=state, insertbefore="BOF")
    assert (after != text) == bool(result.get("changed")), (case, state)
    if result.get("changed") and text is not None:
        assert after == result["diff"][0]["after"]
