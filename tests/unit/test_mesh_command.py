"""roles/ssh_mesh/files/sparkctl-mesh-command, the forced command of the head's mesh key on a
worker: it runs the head's command (SSH_ORIGINAL_COMMAND) only in the shapes the head sends
(`true`, `docker load`, rsync's server side receiving into a --root directory, the checkpoint
relay) and refuses everything else. Its judging is tested as functions (the file loaded by path),
as a process with recording stand-ins for docker and rsync on PATH, and behind the real rsync
client: the head's own Rsync (module_utils/checkpoint_rsync.py) and the JIT cache mirror push
through a stand-in for ssh that runs the program as sshd would, so the allow-list is proven
against what rsync really sends, not against a guess of it."""

from __future__ import annotations

import hashlib

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

from pathlib import Path

import pytest
import script_module
from ansible_collections.sparkctl.spark.plugins.module_utils import checkpoint_rsync, jit_cache, mesh_command
from ansible_collections.sparkctl.spark.plugins.modules import jit_cache_mirror

SCRIPT = Path(__file__).resolve().parents[2] / "roles" / "ssh_mesh" / "files" / "sparkctl-mesh-command"
SHA_A = "a" * 64


program = script_module.load("ssh_mesh", "sparkctl-mesh-command")
needs_rsync = pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed (apt-get install rsync)")

# What rsync 3.5's client sends to the server for the head's options (RSYNC_BASE and --mkpath, with
# --ignore-times; --files-from=- (-R) with --ignore-missing-args, --delete-missing-args, --dry-run),
# as recorded from the real client; -logDtpre. is an older client's spelling of -a.
SERVER_FORMS = [
    "rsync --server -lOWogDtpre.iLsfxCIvu --log-format=%i --timeout=120 --partial-dir .rsync-partial --mkpath . {root}/m/",
    "rsync --server -lOWogDtprIe.iLsfxCIvu --log-format=%i --timeout=120 --partial-dir .rsync-partial --mkpath . {root}/m/sub/",
    "rsync --server -lOWogDtpRe.LsfxCIvu --log-format=%i --timeout=120 --partial-dir .rsync-partial --mkpath . {root}/m/",
    "rsync --server -nlOWogDtpRe.LsfxCIvu --log-format=%i --timeout=120 --partial-dir .rsync-partial --mkpath . {root}/m/",
    "rsync --server -lOWogDtpRe.LsfxCIvu --log-format=%i --timeout=120 --delete-missing-args --partial-dir .rsync-partial "
    "--mkpath . {root}/m/",
    "rsync --server -lOWogDtpRe.LsfxCIvu --log-format=%i --timeout=120 --force --delete-missing-args --partial-dir .rsync-partial "
    "--mkpath . {root}/m/",
    "rsync --server -logDtpre.iLsfxCIvu --log-format=%i --timeout=120 --partial-dir=.rsync-partial . {root}",
    "rsync --server -lOWogDtpre32.1iLsfxCIvu --log-format=%i --timeout=120 --partial-dir .rsync-partial --mkpath . {root}/m/",
]
GOOD = "rsync --server -lOWogDtpre.iLsfxCIvu --log-format=%i --timeout=120 --partial-dir .rsync-partial --mkpath . "

# (command, what the refusal says): attacker inputs and near misses, none of which may run.
REFUSED = [
    ("", "interactive login"),
    ("   ", "interactive login"),
    ("true; id", "not a command the head sends"),
    ("true && id", "not a command the head sends"),
    ("true || id", "not a command the head sends"),
    ("true\nid", "line break"),
    ("true\rid", "line break"),
    ("$(id)", "not a command the head sends"),
    ("`id`", "not a command the head sends"),
    ("id", "not a command the head sends"),
    ("sh -c true", "not a command the head sends"),
    ("true 'unbalanced", "does not parse"),
    ("docker load; rm -rf /", "not a command the head sends"),
    ("docker load > /tmp/x", "not a command the head sends"),
    ("docker load -i /etc/shadow", "not a command the head sends"),
    ("docker run --privileged -v /:/host alpine", "not a command the head sends"),
    ("docker", "not a command the head sends"),
    ("rsync --server --sender -lOWogDtpre.iLsfxCIvu . {root}/m/", "--sender"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --delete . {root}/m/", "'--delete' is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --delete-after . {root}/m/", "'--delete-after' is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --delete-excluded . {root}/m/", "is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --remove-source-files . {root}/m/", "is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --inplace . {root}/m/", "is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --append . {root}/m/", "is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --rsync-path=sh . {root}/m/", "is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --files-from=/etc/passwd . {root}/m/", "is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --log-file=/home/sparkctl/.bashrc . {root}/m/", "is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --log-format=%f . {root}/m/", "is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --write-devices . {root}/m/", "is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --copy-devices . {root}/m/", "is not one"),
    ("rsync --server --daemon --config=/tmp/x . {root}/m/", "is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --backup-dir=/home/sparkctl . {root}/m/", "is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --temp-dir=/tmp . {root}/m/", "is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --link-dest=/ . {root}/m/", "is not one"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --partial-dir /home/sparkctl/.ssh . {root}/m/", "not a plain name"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --partial-dir .. . {root}/m/", "not a plain name"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --timeout=1;id . {root}/m/", "is not one"),
    ("rsync --server -e sh . {root}/m/", "is not one"),
    ("rsync --server -blOWogDtpre.iLsfxCIvu . {root}/m/", "is not one"),
    ("rsync --server -KlOWogDtpre.iLsfxCIvu . {root}/m/", "is not one"),
    ("rsync --server -slOWogDtpre.iLsfxCIvu . {root}/m/", "is not one"),
    ("rsync --server -llOWogDtpre.iLsfxCIvu . {root}/m/", "repeats a letter"),
    ("rsync --server -lOWogDtpr . {root}/m/", "is not one"),
    ("rsync --server . {root}/m/", "do not end in"),
    ("rsync --server --mkpath . {root}/m/", "lack the option word"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --mkpath --mkpath . {root}/m/", "given twice"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu . {root}/m/ /etc/", "do not end in"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu . /home/sparkctl/.ssh/", "outside"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu . {root}/../.ssh/", "climbs out"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu . {root}/m/../../x/", "climbs out"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu . {root}x/", "outside"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu . m/", "not an absolute path"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu . ~/.ssh/", "not an absolute path"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu . {root}/escape/", "outside"),  # a symlink in the root to outside
    ("rsync -lOWogDtpre.iLsfxCIvu . {root}/m/", "not a command the head sends"),
    ("/usr/bin/rsync --server -lOWogDtpre.iLsfxCIvu . {root}/m/", "not a command the head sends"),
    ("scp -t {root}/m/", "not a command the head sends"),
    ("internal-sftp", "not a command the head sends"),
    # The relay form from SSH_ORIGINAL_COMMAND.
    ("sparkctl-mesh-command relay %s {root}/m/f {root}/n/" % SHA_A, "not a command the head sends"),
    (mesh_command.MESH_COMMAND_PATH + " --root / relay %s /etc/shadow {root}/n/" % SHA_A, "not a command the head sends"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s /etc/shadow {root}/n/" % SHA_A, "outside"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s {root}/m/../../etc/shadow {root}/n/" % SHA_A, "climbs out"),
    (mesh_command.MESH_COMMAND_PATH + " relay nothex {root}/m/f {root}/n/", "not a sha256"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s {root}/m/f /home/sparkctl/.ssh/" % SHA_A, "outside"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s {root}/m/f -e/x" % SHA_A, "is not rsync://"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s {root}/m/f h:/d/ -e 'sh -c id'" % SHA_A, "is not ssh"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s {root}/m/f h:/d/ -e 'ssh -o ProxyCommand=id'" % SHA_A, "ssh option"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s {root}/m/f h:/d/ -e 'ssh -F /tmp/x'" % SHA_A, "ssh argument"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s {root}/m/f {root}/n/ -e 'ssh -o BatchMode=yes'" % SHA_A, "is not one"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s {root}/m/f h:/d/ --rsync-path=sh" % SHA_A, "is not one"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s {root}/m/f h:/d/ --remove-source-files" % SHA_A, "is not one"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s {root}/m/f h:/d/ --password-file=/p" % SHA_A, "is not one"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s {root}/m/f rsync://h/m/ --password-file=x" % SHA_A, "is not one"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s {root}/m/f h:/d/../../x/" % SHA_A, "climbs out"),
    (mesh_command.MESH_COMMAND_PATH + " relay %s {root}/m/f" % SHA_A, "relay takes"),
]


@pytest.fixture
def root(tmp_path):
    """A --root with a symlink in it that leads out of it."""
    base = tmp_path / "root"
    (base / "m").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (base / "escape").symlink_to(tmp_path / "outside")
    return base


# --- the program's constants are the controller's ------------------------------------------------


def test_the_program_and_the_controller_agree():
    assert program.MESH_COMMAND_PATH == mesh_command.MESH_COMMAND_PATH == "/usr/local/libexec/sparkctl-mesh-command"
    assert program.RELAY_HASH_MISMATCH == checkpoint_rsync.RELAY_HASH_MISMATCH == 86
    assert SCRIPT.read_text().startswith("#!/usr/bin/python3\n")
    assert os.access(SCRIPT, os.X_OK)


def test_the_relay_command_line_is_one_the_program_accepts(root):
    options = list(checkpoint_rsync.RSYNC_BASE) + ["--mkpath", "--ignore-times", "-e", "ssh -o BatchMode=yes -o ConnectTimeout=10"]
    line = mesh_command.relay_command(SHA_A, f"{root}/m/x y.bin", "spark@192.168.100.12:/srv/m/", options)
    assert shlex.split(line)[:2] == [mesh_command.MESH_COMMAND_PATH, "relay"]
    verdict = program.judge(line, [str(root)])
    assert verdict.argv == ["rsync"] + options + [f"{root}/m/x y.bin", "spark@192.168.100.12:/srv/m/"]
    assert verdict.verify == (f"{root}/m/x y.bin", SHA_A)


# --- judging ---------------------------------------------------------------------------------------


def test_true_and_docker_load_exactly():
    assert program.judge("true", []).argv == ["true"]
    assert program.judge("docker load", []) == program.Verdict(["docker", "load"], None)
    assert program.judge("  docker   load ", []).argv == ["docker", "load"]


@pytest.mark.parametrize("form", SERVER_FORMS)
def test_rsync_server_forms_the_client_sends_are_accepted(root, form):
    command = form.format(root=root)
    verdict = program.judge(command, [str(root)])
    assert verdict.verify is None
    assert verdict.argv == shlex.split(command)


def test_the_destination_is_normalised_and_a_root_itself_is_inside(root):
    verdict = program.judge(GOOD + f"{root}//m/./sub/", [str(root) + "/"])
    assert verdict.argv[-1] == f"{root}/m/sub/"
    assert program.judge(GOOD + str(root), [str(root)]).argv[-1] == str(root)
    # Another root's subtree is as good.
    assert program.judge(GOOD + "/var/cache/sparkctl/jit/venv-x/", [str(root), "/var/cache/sparkctl/jit"]).argv[-1] == \
        "/var/cache/sparkctl/jit/venv-x/"


@pytest.mark.parametrize("command, reason", REFUSED)
def test_refused(root, command, reason):
    with pytest.raises(program.Refused, match=re.escape(reason)):
        program.judge(command.format(root=root), [str(root)])


def test_without_roots_nothing_is_written():
    with pytest.raises(program.Refused, match="none given"):
        program.judge(GOOD + "/srv/m/", [])
    assert program.judge("true", []).argv == ["true"]


@pytest.mark.parametrize("bad", ["/", "//", "relative", "/srv/../etc", "/srv/a b", '/srv/"x"'])
def test_a_bad_root_refuses_everything(bad):
    with pytest.raises(program.Refused, match="--root"):
        program.judge("true", [bad])


def test_relay_targets(root):
    base = mesh_command.MESH_COMMAND_PATH + f" relay {SHA_A} {root}/m/f "
    daemon = program.judge(base + "rsync://sparkctl@192.168.100.12:8730/checkpoint/sub/ -a --contimeout=20 "
                           "--password-file=/etc/sparkctl/checkpoint-rsyncd.password", [str(root)])
    assert daemon.argv == ["rsync", "-a", "--contimeout=20", "--password-file=/etc/sparkctl/checkpoint-rsyncd.password",
                           f"{root}/m/f", "rsync://sparkctl@192.168.100.12:8730/checkpoint/sub/"]
    ssh = program.judge(base + "sparkctl@[fd00::2]:/srv/m/ -e 'ssh  -oBatchMode=yes'", [str(root)])
    assert ssh.argv[1:3] == ["-e", "ssh -oBatchMode=yes"]
    local = program.judge(base + f"{root}/n/", [str(root)])
    assert local.argv == ["rsync", f"{root}/m/f", f"{root}/n/"]
    with pytest.raises(program.Refused, match="--contimeout is for an rsync:// target"):
        program.judge(base + "h:/d/ --contimeout=5", [str(root)])


# --- as a process: stand-ins for docker and rsync record what they were given ----------------------


@pytest.fixture
def fakes(tmp_path):
    """docker and rsync stand-ins first on PATH; each writes its argv and stdin to <name>.json."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("docker", "rsync"):
        tool = bin_dir / name
        tool.write_text(f"""#!{sys.executable}
import json, sys
data = sys.stdin.read()
with open({str(tmp_path / (name + ".json"))!r}, "w") as handle:
    json.dump({{"argv": sys.argv[1:], "stdin": data}}, handle)
""")
        tool.chmod(0o755)
    return tmp_path


def recorded(fakes_dir, name):
    path = fakes_dir / (name + ".json")
    return json.loads(path.read_text()) if path.exists() else None


def run_program(fakes_dir, roots, original=None, args=(), stdin=""):
    env = {"PATH": f"{fakes_dir / 'bin'}:/usr/bin:/bin"}
    if original is not None:
        env["SSH_ORIGINAL_COMMAND"] = original
    argv = [sys.executable, str(SCRIPT)]
    for root in roots:
        argv += ["--root", str(root)]
    return subprocess.run(argv + list(args), input=stdin, env=env, capture_output=True, text=True, timeout=30, check=False)


def test_process_true_runs_nothing(fakes, root):
    done = run_program(fakes, [root], "true")
    assert (done.returncode, done.stderr) == (0, "")
    assert recorded(fakes, "docker") is None and recorded(fakes, "rsync") is None


def test_process_docker_load_gets_the_stream(fakes, root):
    done = run_program(fakes, [root], "docker load", stdin="image tar stream")
    assert done.returncode == 0, done.stderr
    assert recorded(fakes, "docker") == {"argv": ["load"], "stdin": "image tar stream"}


def test_process_rsync_server_is_run_as_sent(fakes, root):
    command = SERVER_FORMS[4].format(root=root)
    done = run_program(fakes, [root], command, stdin="protocol")
    assert done.returncode == 0, done.stderr
    assert recorded(fakes, "rsync") == {"argv": shlex.split(command)[1:], "stdin": "protocol"}


@pytest.mark.parametrize("command, reason", [
    (None, "interactive login"),
    ("true; id", "not a command the head sends"),
    ("true && id", "not a command the head sends"),
    ("$(id)", "not a command the head sends"),
    ("docker load; rm -rf /", "not a command the head sends"),
    ("docker run -v /:/host alpine", "not a command the head sends"),
    ("rsync --server --sender -lOWogDtpre.iLsfxCIvu . {root}/m/", "--sender"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --delete . {root}/m/", "--delete"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu --remove-source-files . {root}/m/", "--remove-source-files"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu . /home/sparkctl/.ssh/", "outside"),
    ("rsync --server -lOWogDtpre.iLsfxCIvu . {root}/../.ssh/", "climbs out"),
    ("true\nid", "line break"),
])
def test_process_refuses_and_runs_nothing(fakes, root, command, reason):
    done = run_program(fakes, [root], None if command is None else command.format(root=root))
    assert done.returncode == 1
    assert done.stderr.startswith("sparkctl-mesh-command: refused: ") and reason in done.stderr, done.stderr
    assert done.stdout == ""
    assert recorded(fakes, "docker") is None and recorded(fakes, "rsync") is None


def test_process_shortens_a_long_command(fakes, root):
    done = run_program(fakes, [root], "x" * 5000)
    assert done.returncode == 1 and len(done.stderr) < 300


def test_process_relay_sends_only_a_copy_that_matches(fakes, root):
    data = b"shard bytes"
    (root / "m" / "f.bin").write_bytes(data)
    good = hashlib.sha256(data).hexdigest()
    target = "rsync://sparkctl@127.0.0.1:8730/checkpoint/"
    options = ["-a", "--mkpath", "--contimeout=20", "--password-file=/etc/sparkctl/checkpoint-rsyncd.password"]

    wrong = run_program(fakes, [root], mesh_command.relay_command("0" * 64, f"{root}/m/f.bin", target, options))
    assert wrong.returncode == checkpoint_rsync.RELAY_HASH_MISMATCH
    assert wrong.stderr == f"{root}/m/f.bin: the copy differs from the manifest's sha256\n"
    assert recorded(fakes, "rsync") is None, "nothing is sent"

    missing = run_program(fakes, [root], mesh_command.relay_command(good, f"{root}/m/gone.bin", target, options))
    assert missing.returncode == checkpoint_rsync.RELAY_HASH_MISMATCH and f"{root}/m/gone.bin" in missing.stderr
    assert recorded(fakes, "rsync") is None

    outside = run_program(fakes, [root], mesh_command.relay_command(good, "/etc/passwd", target, options))
    assert outside.returncode == 1 and "outside" in outside.stderr
    assert recorded(fakes, "rsync") is None

    done = run_program(fakes, [root], mesh_command.relay_command(good, f"{root}/m/f.bin", target, options))
    assert done.returncode == 0, done.stderr
    assert recorded(fakes, "rsync")["argv"] == options + [f"{root}/m/f.bin", target]


def test_process_relay_called_directly(fakes, root, tmp_path):
    data = b"direct"
    (root / "m" / "f.bin").write_bytes(data)
    good = hashlib.sha256(data).hexdigest()
    # A login without the forced command runs the program by its arguments; roots, when given, still hold.
    done = run_program(fakes, [], args=["relay", good, f"{root}/m/f.bin", "h:/d/", "-a"])
    assert done.returncode == 0, done.stderr
    assert recorded(fakes, "rsync")["argv"] == ["-a", f"{root}/m/f.bin", "h:/d/"]
    outside = run_program(fakes, [tmp_path / "other"], args=["relay", good, f"{root}/m/f.bin", "h:/d/"])
    assert outside.returncode == 1 and "outside" in outside.stderr
    wrong = run_program(fakes, [], args=["relay", "1" * 64, f"{root}/m/f.bin", "h:/d/"])
    assert wrong.returncode == 86


# --- behind the real rsync client ------------------------------------------------------------------


@pytest.fixture
def forced_ssh(tmp_path):
    """A stand-in for ssh to a worker whose mesh key has the forced command: drops the user and host, runs the
    program with the command in SSH_ORIGINAL_COMMAND and <tmp>/root and <tmp>/jit as its roots, and
    keeps each command it was given in commands.log."""
    script = tmp_path / "ssh" / "forced-ssh"
    script.parent.mkdir()
    script.write_text(f"""#!{sys.executable}
import os, sys
args = sys.argv[1:]
if args[:1] == ["-l"]:  # rsync's user@host: -l user host
    args = args[2:]
command = " ".join(args[1:])
with open({str(script.parent / "commands.log")!r}, "a") as log:
    log.write(command + "\\n")
os.environ["SSH_ORIGINAL_COMMAND"] = command
os.execv(sys.executable, [sys.executable, {str(SCRIPT)!r}, "--root", {str(tmp_path / "root")!r}, "--root", {str(tmp_path / "jit")!r}])
""")
    script.chmod(0o755)
    (tmp_path / "root").mkdir()
    (tmp_path / "jit").mkdir()
    return script


def server_commands(forced_ssh):
    return (forced_ssh.parent / "commands.log").read_text().splitlines()


@needs_rsync
def test_real_rsync_copy_file_and_tree_pass_the_allow_list(tmp_path, forced_ssh):
    head = tmp_path / "head"
    (head / "sub").mkdir(parents=True)
    (head / "config.json").write_text("{}")
    (head / "sub" / "model.bin").write_bytes(os.urandom(300000))
    rsync = checkpoint_rsync.Rsync(rsh=str(forced_ssh))
    worker = tmp_path / "root" / "models" / "x"
    target = f"fake:{worker}/"

    assert rsync.copy_file(str(head), "sub/model.bin", target) == ["model.bin"]
    assert (worker / "sub" / "model.bin").read_bytes() == (head / "sub" / "model.bin").read_bytes()
    assert rsync.copy_file(str(head), "sub/model.bin", target, extra=("--ignore-times",)) == ["model.bin"]

    copied, _deleted = rsync.tree(str(head), target, ["config.json", "sub/model.bin"], dry_run=True)
    assert copied == ["config.json"] and not (worker / "config.json").exists()
    copied, _deleted = rsync.tree(str(head), target, ["config.json", "sub/model.bin"])
    assert copied == ["config.json"] and (worker / "config.json").read_text() == "{}"

    (worker / "old.bin").write_text("gone from the head")
    (worker / "other.bin").write_text("not ours")
    copied, deleted = rsync.tree(str(head), target, ["config.json", "sub/model.bin"], delete=["old.bin"])
    assert deleted == ["old.bin"] and not (worker / "old.bin").exists() and (worker / "other.bin").exists()

    commands = server_commands(forced_ssh)
    assert len(commands) == 5 and all(c.startswith("rsync --server -") for c in commands), commands
    assert all(c.endswith(" . " + str(worker) + ("/sub/" if i < 2 else "/")) for i, c in enumerate(commands)), commands
    assert "--delete-missing-args" in commands[-1]


@needs_rsync
def test_real_rsync_into_a_directory_outside_the_roots_fails_and_writes_nothing(tmp_path, forced_ssh):
    head = tmp_path / "head"
    head.mkdir()
    (head / "authorized_keys").write_text("ssh-ed25519 AAAA attacker")
    rsync = checkpoint_rsync.Rsync(rsh=str(forced_ssh))
    for target in (f"fake:{tmp_path / 'home'}/.ssh/", f"fake:{tmp_path / 'root'}/../home/.ssh/"):
        with pytest.raises(checkpoint_rsync.RsyncFailure, match="refused"):
            rsync.copy_file(str(head), "authorized_keys", target)
    assert not (tmp_path / "home").exists()
    argv = ["rsync", "-a", "--delete", "-e", str(forced_ssh), f"{head}/", f"fake:{tmp_path / 'root'}/m/"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "refused: rsync option '--delete'" in done.stderr


@needs_rsync
def test_real_rsync_jit_cache_mirror_passes_the_allow_list(tmp_path, forced_ssh):
    head = tmp_path / "head-jit" / "venv-a"
    worker = tmp_path / "jit" / "venv-a"
    for rel, text in (("flashinfer/k.so", "kernel"), ("triton/t.bin", "t")):
        (head / rel).parent.mkdir(parents=True, exist_ok=True)
        (head / rel).write_text(text)
    (worker / "triton").mkdir(parents=True)
    (worker / "triton" / "stale.bin").write_text("old")
    names = sorted(jit_cache.scan(str(head)))
    digest = jit_cache.manifest_digest(jit_cache.scan(str(head)))
    params = {"source": str(head), "identity": "venv-a", "digest": digest, "names": names,
              "workers": [{"name": "spark2", "target": f"sparkctl@fake:{worker}/", "identity": "venv-a", "digest": "sha256:w",
                           "names": sorted(jit_cache.scan(str(worker)))}]}
    results, changed, failed = jit_cache_mirror.mirror(params, False, jit_cache_mirror.Rsync(rsh=str(forced_ssh)))
    assert changed and not failed, failed
    assert results["spark2"] == {"action": "mirrored", "copied": 2, "deleted": 1}
    assert jit_cache.manifest_digest(jit_cache.scan(str(worker))) == digest
    assert all(c.startswith("rsync --server -") for c in server_commands(forced_ssh))


@needs_rsync
def test_real_relay_sends_a_matching_copy_and_refuses_a_differing_one(tmp_path, forced_ssh):
    feeder = tmp_path / "root" / "w1"
    (feeder / "sub").mkdir(parents=True)
    data = os.urandom(200000)
    (feeder / "sub" / "shard.bin").write_bytes(data)
    rsync = checkpoint_rsync.Rsync(rsh=str(forced_ssh))
    target = f"{tmp_path / 'root' / 'w2'}/"

    copied = rsync.relay_file(f"fake:{feeder}/", "sub/shard.bin", hashlib.sha256(data).hexdigest(), target, ("--ignore-times",))
    assert copied == ["shard.bin"]
    assert (tmp_path / "root" / "w2" / "sub" / "shard.bin").read_bytes() == data
    command = server_commands(forced_ssh)[-1]
    assert shlex.split(command)[:3] == [mesh_command.MESH_COMMAND_PATH, "relay", hashlib.sha256(data).hexdigest()]

    (tmp_path / "root" / "w2" / "sub" / "shard.bin").unlink()
    with pytest.raises(checkpoint_rsync.RsyncFailure) as failure:
        rsync.relay_file(f"fake:{feeder}/", "sub/shard.bin", "0" * 64, target)
    assert failure.value.returncode == checkpoint_rsync.RELAY_HASH_MISMATCH
    assert "differs from the manifest's sha256" in str(failure.value) and str(feeder / "sub" / "shard.bin") in str(failure.value)
    assert not (tmp_path / "root" / "w2" / "sub" / "shard.bin").exists()

    # A relay to a directory outside the roots (the feeding worker's own home) is refused.
    with pytest.raises(checkpoint_rsync.RsyncFailure, match="outside"):
        rsync.relay_file(f"fake:{feeder}/", "sub/shard.bin", hashlib.sha256(data).hexdigest(), f"{tmp_path / 'home'}/.ssh/")
    assert not (tmp_path / "home").exists()
