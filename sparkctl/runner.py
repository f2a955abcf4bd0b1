"""One stage = one ansible_runner.run() of one playbook, with its own artifacts and
nothing secret left in them."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import redact
from .events import Tally
from .project import collections_path, config_file, deployment_dir, report_dir, state_dir
from .result import StageResult
from .stages import Stage

# Artifact directories kept under .sparkctl/runner/artifacts (all stages together).
KEEP_ARTIFACTS = 20
# Held while rotating: two wrappers at once (`sparkctl status` while `up` runs) would
# otherwise both remove the same old directories. ansible-runner's own rotation has no
# lock and fails the second run when a directory it listed is gone.
# Beside the artifacts directory, not in it: everything in it is a run's.
ROTATION_LOCK = ".artifacts-rotation.lock"

# ansible-runner records the job's whole environment in artifacts/<ident>/command,
# suppress_env_files or not; values of variables named like a secret never stay there,
# nor credentials inside a URL (redact.py).
SECRET_NAME = redact.SECRET_NAME
REDACTED = redact.REDACTED


@dataclass
class RunOptions:
    """What the command line says about every stage of a run."""

    inventory: Path
    extravars: dict = field(default_factory=dict)
    # `-e @file` arguments, passed through as files (ansible reads them itself).
    extravar_files: list[str] = field(default_factory=list)
    check: bool = False
    tags: str = ""
    skip_tags: str = ""
    limit: str = ""
    verbosity: int = 0
    # Extra variables that win over every other -e, @files included (a rollback's recorded variables).
    final_extravars: dict = field(default_factory=dict)


# How Ansible's JSON reading marks a string it must never template (its legacy JSON profile, the
# form Ansible itself writes unsafe strings in): the value stays exactly the string it is.
UNSAFE_KEY = "__ansible_unsafe"


def _as_data(value):
    """value with every string in it (mapping keys aside: variable names) marked as data."""
    if isinstance(value, dict):
        return {key: _as_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_data(item) for item in value]
    return {UNSAFE_KEY: value} if isinstance(value, str) else value


def data_vars_text(values: dict) -> str:
    """Extra variables as Ansible reads them from an `-e @file`, every string marked unsafe: what a
    node or a history file wrote (a rollback's record and the variables beside it) reaches the run
    as the value it is. Ansible templates the strings of an extra-variables file it trusts, so a
    Jinja expression in one would otherwise run on the control node. (YAML's !unsafe tag would do
    it too, but Ansible resolves a tagged scalar's type: '0.1' or a timestamp would not stay a
    string.)"""
    return json.dumps(_as_data(values))


def private_data_dir(root: Path) -> Path:
    return state_dir(root) / ".sparkctl" / "runner"


def new_ident(stage: str, now: float | None = None) -> str:
    """A stage's artifact directory name: the stage, when, and a few random bits for two runs in one second."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(now if now is not None else time.time()))
    return f"{stage}-{stamp}-{secrets.token_hex(2)}"


def runner_kwargs(stage: Stage, options: RunOptions, root: Path, ident: str, extravars_file: Path | None,
                  final_file: Path | None = None) -> dict:
    """The ansible_runner.run() arguments for one stage (without the callbacks); pure."""
    cmdline = []
    if extravars_file is not None:
        # From a private file, not runner's `extravars`: those land on the recorded command line.
        cmdline += ["-e", f"@{extravars_file}"]
    for path in options.extravar_files:
        cmdline += ["-e", f"@{path}"]
    if final_file is not None:
        # Last: Ansible gives the later -e the precedence.
        cmdline += ["-e", f"@{final_file}"]
    if options.check:
        cmdline += ["--check", "--diff"]
    kwargs = {
        "private_data_dir": str(private_data_dir(root)),
        "project_dir": str(root),
        "playbook": str(stage.playbook),
        "inventory": str(options.inventory),
        "ident": ident,
        "quiet": True,
        # No env/extravars, env/envvars, env/passwords files: secrets stay in memory.
        "suppress_env_files": True,
        "envvars": {
            # ansible-playbook from the wrapper's own environment (a venv need not be on PATH).
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)]),
            "ANSIBLE_CONFIG": str(config_file(root)),
            # The wrapper reads the reports and the deployment history where the playbooks write them:
            # both absolute, so the playbooks, which take a relative one from $PWD, cannot place them
            # elsewhere than the wrapper's own working directory does.
            "SPARKCTL_REPORT_DIR": str(report_dir(root)),
            "SPARKCTL_DEPLOYMENT_DIR": str(deployment_dir(root)),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
        },
    }
    installed = collections_path(root)
    if installed is not None:
        kwargs["envvars"]["ANSIBLE_COLLECTIONS_PATH"] = str(installed)
    if cmdline:
        kwargs["cmdline"] = shlex.join(cmdline)
    if options.tags:
        kwargs["tags"] = options.tags
    if options.skip_tags:
        kwargs["skip_tags"] = options.skip_tags
    if options.limit:
        kwargs["limit"] = options.limit
    if options.verbosity:
        kwargs["verbosity"] = options.verbosity
    return kwargs


def rotate_artifacts(artifacts: Path, keep: int) -> None:
    """Keep the newest `keep` artifact directories (by modification time, as ansible-runner
    does); a directory another run removed first is already gone, not an error."""
    artifacts.mkdir(parents=True, exist_ok=True)
    with open(artifacts.parent / ROTATION_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        dated = []
        for path in artifacts.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if path.is_dir():
                    dated.append((path.stat().st_mtime, path.name, path))
        dated.sort()
        for _, _, path in dated[:max(0, len(dated) - keep)]:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(path)


def redact_env(env: dict) -> dict:
    return redact.redact_env(env)


def _rewrite_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", errors="surrogateescape") as handle:
        handle.write(text)
    os.replace(tmp, path)


def redact_command_file(artifact_dir: str | os.PathLike) -> None:
    """Rewrite artifacts/<ident>/command without secret-named environment values or URL credentials."""
    path = Path(artifact_dir) / "command"
    try:
        record = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return
    record["env"] = redact_env(record.get("env") or {})
    record = {key: (value if key == "env" else redact.redact_value(value)) for key, value in record.items()}
    _rewrite_private(path, json.dumps(record, ensure_ascii=False))


def redact_artifacts(artifact_dir: str | os.PathLike, secrets=None) -> None:
    """The stage's log (stdout) and its recorded events without secrets: credentials inside
    URLs (pip's index, a proxy setting), the spellings of a key or token (an engine's log line
    as `sparkctl logs` reads it, SGLang's server arguments among them; every module's
    arguments, which -vvv records), and the exact values of the wrapper's secret-named
    environment variables (`secrets`, by default from os.environ), which the play inherits.
    An event keeps a task's whole result whatever the verbosity, so each one is read as
    JSON and every value under a secret's name goes, not only the spellings in its text."""
    root = Path(artifact_dir)
    secrets = redact.env_secrets(os.environ) if secrets is None else list(secrets)
    paths = [root / "stdout"] + (sorted((root / "job_events").glob("*.json")) if (root / "job_events").is_dir() else [])
    for path in paths:
        try:
            text = path.read_text(errors="surrogateescape")
        except (FileNotFoundError, IsADirectoryError):
            continue
        clean = None
        if path.suffix == ".json":
            try:
                event = json.loads(text)
            except json.JSONDecodeError:
                pass
            else:
                redacted = redact.redact_record(event, secrets)
                clean = text if redacted == event else json.dumps(redacted)
        if clean is None:
            clean = redact.redact_text(text, secrets)
        if clean != text:
            _rewrite_private(path, clean)


@contextlib.contextmanager
def interrupt_cancels():
    """Ctrl-C cancels the running playbook through ansible-runner (which stops it and
    records the run as canceled) instead of tearing the wrapper down mid-write."""
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.set())
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def worker_groups(controller_pids: set[int]) -> set[int]:
    """Process groups of ansible-playbook's workers: each worker runs in a session of its
    own (ansible detaches it from the terminal), so killing the controller's group, as
    ansible-runner does on cancel, leaves them and their task running."""
    groups = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the command name: state, ppid, pgrp.
        if len(fields) > 2 and int(fields[1]) in controller_pids:
            groups.add(int(fields[2]))
    return groups - controller_pids


def stop_groups(groups: set[int], grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after grace_s, to each process group still alive."""
    alive = set(groups)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, sig)
        deadline = time.monotonic() + grace_s
        while alive and time.monotonic() < deadline:
            alive = {g for g in alive if _group_alive(g)}
            time.sleep(0.1)
        if not alive:
            return


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def run_stage(stage: Stage, options: RunOptions, root: Path, on_event: Callable[[Tally, dict], None] | None = None,
              on_status: Callable[[str], None] | None = None, ident: str | None = None) -> StageResult:
    """Run one stage's playbook through ansible-runner; never raises on a play failure."""
    import ansible_runner  # imported late: `sparkctl report` and `--help` must not need it

    ident = ident or new_ident(stage.name)
    private_data_dir(root).mkdir(parents=True, exist_ok=True)
    tally = Tally()

    playbook_pids: set[int] = set()

    def event_handler(event: dict) -> bool:
        if isinstance(event.get("pid"), int):
            playbook_pids.add(event["pid"])
        tally.feed(event)
        if on_event is not None:
            on_event(tally, event)
        return True  # keep the event in artifacts/<ident>/job_events

    def status_handler(status: dict, runner_config) -> None:
        # Runner wrote the command file (with the environment) just before "running"
        # and has already built the child's environment: redact before the play starts.
        if status.get("status") == "running":
            redact_command_file(runner_config.artifact_dir)
        if on_status is not None:
            on_status(status.get("status", ""))

    with tempfile.TemporaryDirectory(prefix="sparkctl-") as private:
        extravars_file = final_file = None
        # The command line's own variables (the user's) as Ansible takes them from -e; the final ones
        # (a rollback's record and its variables, read from a file) as data only.
        for name, values, text in (("extravars.json", options.extravars, json.dumps),
                                   ("final-extravars.json", options.final_extravars, data_vars_text)):
            if not values:
                continue
            path = Path(private) / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(text(values))
            if values is options.extravars:
                extravars_file = path
            else:
                final_file = path
        kwargs = runner_kwargs(stage, options, root, ident, extravars_file, final_file)
        started = time.monotonic()
        orphans: set[int] = set()

        def cancel_callback() -> bool:
            # Runner kills the controller as soon as this says yes: find its workers first.
            if interrupted.is_set():
                orphans.update(worker_groups(playbook_pids))
                return True
            return False

        with interrupt_cancels() as interrupted:
            run = ansible_runner.run(**kwargs, event_handler=event_handler, status_handler=status_handler,
                                     cancel_callback=cancel_callback)
        duration = time.monotonic() - started
    stop_groups(orphans)
    artifact_dir = run.config.artifact_dir
    rotate_artifacts(Path(artifact_dir).parent, KEEP_ARTIFACTS)
    redact_command_file(artifact_dir)
    redact_artifacts(artifact_dir)
    return StageResult.from_run(stage.name, str(stage.playbook.relative_to(root)) if stage.playbook.is_relative_to(root)
                                else str(stage.playbook), run.status, run.rc, tally, duration, artifact_dir)
