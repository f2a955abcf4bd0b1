"""The workers' checkpoint rsync daemon, from the checkpoint role's own template: a real
`rsync --daemon` on 127.0.0.1 refuses a client's deleting and in-place options, while every
command the head's mirror (checkpoint_rsync.Rsync) really runs still goes through."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from ports import free_port, wait_listening
from ansible_collections.sparkctl.spark.plugins.module_utils import checkpoint_rsync
from role_templating import evaluate

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "roles" / "checkpoint" / "templates" / "checkpoint-rsyncd.conf.j2"
MODULE = "checkpoint"
USER = "sparkctl-mirror"
SECRET = "daemon-secret-8b2d71"
needs_rsync = pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed (apt-get install rsync)")


def render(served: Path, secrets: Path) -> str:
    return evaluate(TEMPLATE.read_text(), dict(
        ansible_managed="managed", checkpoint_owner=pwd.getpwuid(os.getuid()).pw_name, checkpoint_dir=str(served),
        checkpoint_rsyncd_module=MODULE, checkpoint_rsyncd_user=USER, checkpoint_rsyncd_secrets_file=str(secrets),
        checkpoint_rsyncd_allowed_ips=["127.0.0.1"]))


def refused_options(conf: str) -> list[str]:
    return [word for line in conf.splitlines() if re.match(r"\s*refuse options\s*=", line)
            for word in line.split("=", 1)[1].split()]


def test_the_daemon_config_refuses_deleting_and_in_place_options(tmp_path):
    refused = refused_options(render(tmp_path / "served", tmp_path / "secrets"))
    for option in ("delete-*", "force", "inplace", "append*", "remove-source-files"):
        assert option in refused, f"refuse options lacks {option}: {refused}"
    # The head's last pass deletes exactly the files an earlier manifest listed with this one.
    assert "!delete-missing-args" in refused


@pytest.fixture
def daemon(tmp_path):
    """The rendered config served by a real daemon on a free loopback port; yields (served
    directory, target URL, log). chroot needs root, so it is off when the test is not root."""
    served = tmp_path / "served"
    served.mkdir()
    secrets = tmp_path / "rsyncd.secrets"
    secrets.write_text(f"{USER}:{SECRET}\n")
    secrets.chmod(0o600)
    conf_text = render(served, secrets)
    if os.getuid() != 0:
        conf_text = conf_text.replace("use chroot = yes", "use chroot = no")
    conf = tmp_path / "rsyncd.conf"
    conf.write_text(conf_text)
    log = tmp_path / "rsyncd.log"
    port = free_port()
    process = subprocess.Popen(["rsync", "--daemon", "--no-detach", f"--port={port}", "--address=127.0.0.1",
                                f"--config={conf}", f"--log-file={log}"])
    try:
        if not wait_listening(port, process):
            pytest.fail("the rsync daemon did not start: %s" % (log.read_text() if log.exists() else "no log"))
        yield served, f"rsync://{USER}@127.0.0.1:{port}/{MODULE}/", log
    finally:
        process.terminate()
        process.wait(timeout=10)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def _client(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["rsync", *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, RSYNC_PASSWORD=SECRET))


@needs_rsync
@pytest.mark.usefixtures("loopback_only")
# -M--delete hands the daemon a bare --delete, as a client of an attacker's own making could.
@pytest.mark.parametrize("option", ["--delete", "--delete-after", "--delete-excluded", "--del", "-M--delete", "--force",
                                    "--inplace", "--append", "--append-verify"])
def test_the_daemon_refuses_a_client_that_deletes_or_writes_in_place(tmp_path, daemon, option):
    served, target, _ = daemon
    (served / "model.safetensors").write_bytes(b"checkpoint shard")
    (served / "tokenizer").mkdir()
    (served / "tokenizer" / "vocab.json").write_text("{}")
    (served / "notes.txt").write_text("not the checkpoint's, kept")
    before = _snapshot(served)
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    (hostile / "model.safetensors").write_bytes(b"checkpoint shard, longer and different")
    (hostile / "tokenizer").write_text("a file where the directory is")

    result = _client("-a", option, f"{hostile}/", target)

    assert result.returncode != 0, result.stdout
    assert "The server is configured to refuse" in result.stderr, result.stderr
    assert _snapshot(served) == before
    assert (served / "tokenizer").is_dir()


@needs_rsync
@pytest.mark.usefixtures("loopback_only")
def test_the_heads_own_mirror_commands_go_through(tmp_path, daemon):
    served, target, log = daemon
    head = tmp_path / "head"
    (head / "sub").mkdir(parents=True)
    (head / "a.safetensors").write_bytes(b"a" * 4096)
    (head / "sub" / "b.json").write_text("{}")
    (served / "stale.safetensors").write_bytes(b"an earlier manifest's file")
    (served / "notes.txt").write_text("not the checkpoint's, kept")
    rsync = checkpoint_rsync.Rsync(password=SECRET)

    assert rsync.copy_file(str(head), "a.safetensors", target) == ["a.safetensors"]
    assert rsync.copy_file(str(head), "sub/b.json", target, ("--ignore-times",)) == ["b.json"]
    files = ["a.safetensors", "sub/b.json"]
    assert rsync.tree(str(head), target, files, delete=["stale.safetensors"], dry_run=True) == ([], ["stale.safetensors"])
    assert (served / "stale.safetensors").exists()
    assert rsync.tree(str(head), target, files, delete=["stale.safetensors"]) == ([], ["stale.safetensors"])
    assert rsync.tree(str(head), target, files) == ([], [])

    assert _snapshot(served) == {"a.safetensors": b"a" * 4096, "notes.txt": b"not the checkpoint's, kept", "sub/b.json": b"{}"}
    assert "refuse" not in log.read_text()
