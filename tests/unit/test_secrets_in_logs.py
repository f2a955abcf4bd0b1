"""No API key or token in what the engine logs or what sparkctl keeps of a run.

SGLang logs its parsed server arguments at every start, the API key among them, whichever way
the key came (read from SGLang 0.5.4's wheel: sglang/launch_server.py calls
prepare_server_args, which merges a --config YAML into argv before parsing
(srt/server_args_config_parser.py), and srt/entrypoints/engine.py's _launch_subprocesses runs
`logger.info(f"{server_args=}")` on the ServerArgs dataclass, whose repr holds every field; 0.5.23
logs `server_args={...}`, a dict of every field, api_key included). The stand-in below follows
that path with the rendered argv and key file, so what it logs is what SGLang would.

The wrapper keeps every task's whole result in ansible-runner's artifacts (job_events, stdout),
module arguments included at -vvv: they are scrubbed as a whole."""

import argparse
import dataclasses
import json
import logging
import shlex
from pathlib import Path

import pytest
from test_profile import cluster, shipped_where
from wrapper_project import make_project
import yaml
from ansible_collections.sparkctl.spark.plugins.module_utils.api_key import key_file_text
from ansible_collections.sparkctl.spark.plugins.module_utils.log_scrub import scrub_lines
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as P
from sparkctl import cli, redact, runner

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-SGLkey9f8e7d6c5b4a3210fedcba98765"
HF = "hf_" + "Q7x" * 12
ENV_SECRET = "vault-pass-7c1e9a44d2"
SGLANG_PROFILES = shipped_where(lambda profile: profile["engine"]["kind"] == "sglang")


# ----------------------------------------------------------------------------- SGLang's own start


@dataclasses.dataclass
class ServerArgs:
    """The fields of SGLang's ServerArgs this stand-in parses, in SGLang's order (a dataclass
    without a repr of its own, as in 0.5.4: its repr is every field's)."""

    model_path: str
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None
    admin_api_key: str | None = None
    served_model_name: str | None = None
    tp_size: int = 1


def sglang_start_log(argv, files):
    """The server_args line SGLang 0.5.4 logs when started with `argv` (python -m
    sglang.launch_server ...), the files it opens being `files` (path -> text), and 0.5.23's."""
    argv = argv[argv.index("sglang.launch_server") + 1:]
    if "--config" in argv:
        # ConfigArgumentMerger.merge_config_with_args: the YAML's entries as --key value, first.
        at = argv.index("--config")
        config = yaml.safe_load(files[argv[at + 1]]) or {}
        argv = [w for k, v in config.items() for w in (f"--{k}", str(v))] + argv[:at] + argv[at + 2:]
    parser = argparse.ArgumentParser()
    for field in dataclasses.fields(ServerArgs):
        default = None if field.default is dataclasses.MISSING else field.default
        parser.add_argument("--" + field.name.replace("_", "-"), type=int if isinstance(default, int) else str,
                            default=default)
    server_args = ServerArgs(**vars(parser.parse_known_args(argv)[0]))
    records = []
    logger = logging.getLogger("sglang.srt.entrypoints.engine")
    handler = logging.Handler()
    handler.emit = lambda record: records.append(logging.Formatter("[%(asctime)s] %(message)s").format(record))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logger.info(f"{server_args=}")
        logger.info(f"server_args={dataclasses.asdict(server_args)}")
    finally:
        logger.removeHandler(handler)
    return records


def key_files(rendered):
    """The key files as the serve stage writes them (engine_service, api_key_file_text)."""
    return {path: key_file_text(entry["format"], entry["key"], KEY) for path, entry in rendered["secret_files"].items()}


@pytest.mark.parametrize("name", SGLANG_PROFILES)
def test_sglang_behind_the_api_proxy_never_logs_the_key(name):
    profile = P.load_profile(name, [], {})
    rendered = P.render(profile, cluster(profile))
    logged = sglang_start_log(rendered["argv"], key_files(rendered))
    assert logged and all("server_args=" in line and "served_model_name=" in line.replace("'served_model_name': ",
                                                                                          "served_model_name=")
                          for line in logged)
    assert not [line for line in logged if KEY in line]
    # Not given at all: no flag, no file a rank opens or mounts, nothing for a restart to wait on.
    key_file = "/etc/sparkctl/sglang-api.yaml"
    for units in rendered["units"].values():
        for text in units.values():
            assert "--api-key" not in text and key_file not in text
    assert all(key_file not in files for units in rendered["inputs"].values() for files in units.values())
    # The proxy still has its key: the file is written whatever the engine does with it.
    assert list(rendered["secret_files"]) == [key_file]


def test_sglang_without_the_proxy_logs_the_key_and_sparkctl_scrubs_it():
    profile = P.load_profile(SGLANG_PROFILES[0], [], {})
    rendered = P.render(profile, dict(cluster(profile), api_proxy=False))
    assert shlex.join(["--config", "/etc/sparkctl/sglang-api.yaml"]) in rendered["command_line"]
    logged = sglang_start_log(rendered["argv"], key_files(rendered))
    # SGLang's own check is the only one here, and SGLang logs the key with its arguments.
    assert len(logged) == 2 and all(KEY in line for line in logged)
    for line in logged:
        assert KEY not in scrub_lines([line])[0]
        assert KEY not in redact.redact_text(line)
    assert "admin_api_key=None" in scrub_lines(logged)[0] and "'admin_api_key': None" in scrub_lines(logged)[1]


# ----------------------------------------------------------------------------- the logs play


def test_the_logs_play_keeps_the_raw_journal_out_of_its_result():
    play = yaml.safe_load((REPO / "playbooks" / "logs.yml").read_text())[0]
    readers = [t for t in play["tasks"] if "journalctl" in str(t.get("ansible.builtin.command", ""))]
    assert readers
    for task in readers:
        # The recorded result (every verbosity) and -v's printout would hold the raw lines.
        assert task.get("no_log") is True, task["name"]
        shown = [t for t in play["tasks"] if task["register"] in json.dumps(t) and t is not task]
        assert shown and all("sparkctl.spark.log_scrub" in json.dumps(t) for t in shown)


# ----------------------------------------------------------------------------- the wrapper's artifacts

JOURNAL = [
    "2026-12-01T10:00:00+0000 spark1 sglang[812]: [2026-12-01 10:00:00] server_args=ServerArgs(model_path='/srv/m', "
    f"host='127.0.0.1', port=30000, api_key='{KEY}', admin_api_key=None, served_model_name='qwen', tp_size=2)",
    f"2026-12-01T10:00:00+0000 spark1 sglang[812]: [2026-12-01 10:00:00] server_args={{'model_path': '/srv/m', "
    f"'api_key': '{KEY}', 'admin_api_key': None, 'served_model_name': 'qwen'}}",
    f"2026-12-01T10:00:01+0000 spark1 vllm[90]: args: --api-key {KEY} --port 8001",
    f"2026-12-01T10:00:02+0000 spark1 sglang[812]: GET /v1/models headers={{'authorization': 'Bearer {KEY}'}}",
    f"2026-12-01T10:00:03+0000 spark1 sglang[812]: downloading with token {HF}",
    f"2026-12-01T10:00:04+0000 spark1 sglang[812]: HF_TOKEN came from the environment: {ENV_SECRET}",
]


def _vvv_event(counter, res, module_args):
    """A runner_on_ok event as ansible-runner records it at -vvv (awx_display): the whole
    result with its invocation, and the text -vvv printed for it."""
    res = dict(res, invocation={"module_args": module_args}, _ansible_no_log=False, changed=False)
    shown = {k: v for k, v in res.items() if not k.startswith("_")}
    stdout = "ok: [spark1] => " + json.dumps(shown, indent=4)
    return {"uuid": f"e{counter}", "counter": counter, "event": "runner_on_ok", "stdout": stdout,
            "start_line": counter, "end_line": counter + stdout.count("\n") + 1, "runner_ident": "logs",
            "event_data": {"host": "spark1", "task": "Read the journal", "task_action": "ansible.builtin.command",
                           "task_args": "", "res": res, "resolved_action": "ansible.builtin.command"}}


def _artifacts(root):
    journal = "\n".join(JOURNAL)
    events = [
        _vvv_event(1, {"cmd": ["journalctl", "--no-pager", "-n", "50"], "rc": 0, "stdout": journal,
                       "stdout_lines": JOURNAL, "stderr": ""},
                   {"_raw_params": "journalctl --no-pager -n 50", "_uses_shell": False, "argv": None, "chdir": None}),
        # A module given the key and the hub token as arguments, as -vvv records them.
        _vvv_event(2, {"status": 200, "json": {"object": "list"}},
                   {"url": "http://127.0.0.1:8888/v1/models", "headers": {"Authorization": f"Bearer {KEY}"},
                    "api_key": KEY, "token": HF, "url_password": ENV_SECRET, "api_key_file": "/etc/sparkctl/sglang-api.yaml",
                    "max_tokens": 32}),
        _vvv_event(3, {"msg": JOURNAL}, {"msg": JOURNAL}),
    ]
    (root / "job_events").mkdir(parents=True)
    for event in events:
        (root / "job_events" / f"{event['counter']}-{event['uuid']}.json").write_text(json.dumps(event))
    (root / "stdout").write_text("\n".join(e["stdout"] for e in events) + "\n")


@pytest.mark.parametrize("verbosity", [0, 3])
def test_artifacts_keep_no_key_token_or_secret_at_any_verbosity(tmp_path, monkeypatch, verbosity):
    monkeypatch.setenv("SPARK_VAULT_PASSWORD", ENV_SECRET)
    root = tmp_path / "artifacts" / "logs"
    _artifacts(root)
    if verbosity == 0:
        # Without -v the events hold the same results; only the printed text is shorter.
        for path in (root / "job_events").glob("*.json"):
            event = json.loads(path.read_text())
            event["stdout"] = "ok: [spark1]"
            path.write_text(json.dumps(event))
    runner.redact_artifacts(root)
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) == 4
    for path in files:
        text = path.read_text()
        for secret in (KEY, HF, ENV_SECRET):
            assert secret not in text, (path.name, secret)
    event = json.loads(sorted((root / "job_events").glob("2-*.json"))[0].read_text())
    args = event["event_data"]["res"]["invocation"]["module_args"]
    # What is not secret stays, for whoever reads the log.
    assert args["api_key_file"] == "/etc/sparkctl/sglang-api.yaml" and args["max_tokens"] == 32
    assert args["url"] == "http://127.0.0.1:8888/v1/models"
    first = json.loads(sorted((root / "job_events").glob("1-*.json"))[0].read_text())
    assert "served_model_name='qwen'" in first["event_data"]["res"]["stdout_lines"][0]


def test_the_wrapper_removes_every_spelling_the_collection_does():
    # The collection scrubs the journal lines the plays print; the wrapper scrubs what it keeps.
    samples = [line.split(": ", 1)[1] for line in JOURNAL[:5]] + [f"VLLM_API_KEY={KEY}", f"api-key: {KEY}",
                                                                  f'server_args=ServerArgs(api_key="{KEY}")']
    for line in samples:
        assert KEY not in scrub_lines([line])[0] or HF in line, line
        assert KEY not in redact.redact_text(line) and HF not in redact.redact_text(line), line
    assert HF not in scrub_lines([JOURNAL[4]])[0]


# ----------------------------------------------------------------------------- `sparkctl logs -vvvv`


LEAKY_LOGS = """
    - name: Show the last lines of the sparkctl units
      hosts: all
      gather_facts: false
      tasks:
        - name: Read the journal
          ansible.builtin.command:
            argv: [printf, "%s\\n", "{journal0}", "{journal1}", "{journal2}"]
          register: journal
          changed_when: false
        - name: Keep the engine's arguments
          ansible.builtin.set_fact:
            engine_args: {{api_key: "{key}", hf_token: "{hf}"}}
        - name: Print them
          ansible.builtin.debug:
            msg: "{{{{ journal.stdout_lines }}}}"
"""


# In the whole unit run, other modules' loopback servers are still running threads when
# ansible-runner forks ansible-playbook; the wrapper itself forks with none.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_sparkctl_logs_at_vvvv_keeps_no_key_in_its_artifacts(tmp_path, monkeypatch, capsys):
    # A play that shows the engine's raw lines and holds the key in module arguments: whatever
    # a play lets through, the wrapper's artifacts and output keep none of it.
    journal = [line.replace('"', "'") for line in JOURNAL[:3]]
    logs = LEAKY_LOGS.format(journal0=journal[0], journal1=journal[1], journal2=journal[2], key=KEY, hf=HF)
    root = make_project(tmp_path / "project", monkeypatch, {"logs": logs}, ["logs"])
    code = cli.main(["--json", "logs", "-i", "inventories/local", "-vvvv"])
    out = capsys.readouterr()
    assert code == 0, out
    assert "served_model_name" in out.out
    files = [p for p in (root / ".sparkctl").rglob("*") if p.is_file()]
    assert any(p.parent.name == "job_events" for p in files)
    assert any(p.name == "stdout" and KEY.encode() not in p.read_bytes() and b"server_args=" in p.read_bytes()
               for p in files)
    for path in files:
        data = path.read_bytes()
        assert KEY.encode() not in data and HF.encode() not in data, path
    assert KEY not in out.out + out.err and HF not in out.out + out.err
