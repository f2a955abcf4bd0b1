"""Rollback: which recorded deployment `sparkctl rollback [N]` and `sparkctl up`'s automatic
rollback return to, the variables they give the run, and why playbooks/rollback.yml refuses
(a node without the recorded runtime or checkpoint, a profile that resolves to other content).
Everything here is decided before any host is touched; nothing here runs a playbook."""

import hashlib
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter import deployment as deployment_filter
from ansible_collections.sparkctl.spark.plugins.module_utils import deployment as records
from sparkctl import cli, history, rollback
from sparkctl import stages as stages_module
from sparkctl.result import SCHEMA_PATH as SCHEMA
from sparkctl.result import StageResult
from collection_templating import TemplateFailed, evaluate

# A run's value of each variable that reproduces a deployment, named by their owner
# (module_utils/deployment.py, REPRODUCE_VARS) and in its order: a name added there gets a plain
# string here, so adding one changes no test. The tests below edit some of them by name.
SAMPLE_VALUES = {"spark_model_profile": "lab-standin", "spark_profile_overrides": {}, "spark_profile_paths": ["../p"],
                 "spark_checkpoint": {"source": "hub", "repo_id": "org/model", "revision": "main"},
                 "spark_checkpoint_dir": "/srv/sparkctl/models/lab-standin",
                 "spark_engine_venv_path": "/opt/sparkctl/venvs/lab-standin", "spark_api_proxy": True}
REPRODUCE = {name: SAMPLE_VALUES.get(name, "the run's " + name) for name in records.REPRODUCE_VARS}
VERIFY_REPORT = Path(__file__).resolve().parents[2] / "roles" / "verify" / "tasks" / "report.yml"
INTENT_TASK = "Note what this run deploys and the variables that reproduce it"


def dg(label):
    """A digest of sparkctl's shape (sha256:<64 hex>) standing for label."""
    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()


LOCK1 = hashlib.sha256(b"lock1").hexdigest()
P1, C1 = dg("p1"), dg("c1")


def rec(ident, recorded_at, profile_sha=P1, config_sha=C1, reproduce=REPRODUCE, kind="venv",
        runtime_id=LOCK1, commit="c" * 40):
    record = {"schema_version": 1, "deployment_id": "sha256:" + ident * 8, "recorded_at": recorded_at,
              "verify_status": "passed", "sparkctl_version": "0.1.0",
              "profile": {"name": "lab-standin", "sha256": profile_sha},
              "checkpoint": {"source": "hub", "repo_id": "org/model", "revision": "main", "commit": commit},
              "runtime": {"kind": kind, "id": runtime_id, **({"image": "img:1"} if kind == "image" else {})},
              "engine": {"kind": "vllm", "config_sha256": config_sha}}
    if reproduce is not None:
        record["reproduce"] = reproduce
    return record


A, B, B2, C = (rec("aaaa1111", "2026-05-01T00:00:00Z"), rec("bbbb2222", "2026-05-02T00:00:00Z"),
               rec("bbbb2222", "2026-05-03T00:00:00Z"), rec("cccc3333", "2026-05-04T00:00:00Z"))


# --- Which record --------------------------------------------------------------------------

def test_by_default_the_previous_distinct_deployment():
    # Newest first: C serves; B was recorded twice (left and come back to); A before it.
    assert rollback.select([C, B2, B, A]) is B2
    # The newest deployment recorded twice in a row is still the current one.
    assert rollback.select([B2, B, A]) is A


@pytest.mark.parametrize("which, expected", [("1", C), ("3", B), ("4", A), ("aaaa", A), ("sha256:cccc3333", C)])
def test_a_number_or_an_id_prefix_names_one_record(which, expected):
    assert rollback.select([C, B2, B, A], which) is expected


@pytest.mark.parametrize("history_records, which, reason", [
    ([], None, "no deployment recorded for this inventory"),
    ([B2, B], None, "no earlier deployment"),
    ([C, A], "3", "no record 3: the history holds 2"),
    ([C, A], "0", "no record 0"),
    ([C, A], "ab", "at least 4 hex digits"),
    ([C, A], "zzzz", "neither a record number"),
    ([C, A], "dddd", "no recorded deployment's id starts with dddd"),
    ([C, rec("cccc4444", "2026-05-05T00:00:00Z")], "cccc", "names 2 deployments"),
])
def test_refusals_name_the_reason(history_records, which, reason):
    with pytest.raises(rollback.RollbackError, match=reason):
        rollback.select(history_records, which)


def test_the_run_gets_the_recorded_variables_and_the_record_without_them():
    extravars = rollback.rollback_vars(B)
    assert {k: v for k, v in extravars.items() if k != rollback.DEPLOYMENT_VAR} == REPRODUCE
    assert extravars[rollback.DEPLOYMENT_VAR] == {k: v for k, v in B.items() if k != "reproduce"}
    # The record's identity is still its own: the playbook checks against it.
    assert records.deployment_id(extravars[rollback.DEPLOYMENT_VAR]) == records.deployment_id(B)


@pytest.mark.parametrize("reproduce", [None, {k: v for k, v in REPRODUCE.items() if k != "spark_engine_venv_path"}])
def test_a_record_without_what_reproduces_it_is_refused(reproduce):
    with pytest.raises(rollback.RollbackError, match="recorded without what reproduces it"):
        rollback.rollback_vars(rec("aaaa1111", "2026-05-01T00:00:00Z", reproduce=reproduce))


# A history file is the control node user's to edit, and a record's values were read from nodes:
# a template in any of them is refused with the field named, before anything runs.
PIPE = "{{ lookup('pipe', 'touch /tmp/sparkctl-owned') }}"


@pytest.mark.parametrize("where, edit", [
    ("checkpoint.commit", lambda r: r["checkpoint"].update(commit=PIPE)),
    ("checkpoint.revision", lambda r: r["checkpoint"].update(revision=PIPE)),
    ("checkpoint.repo_id", lambda r: r["checkpoint"].update(repo_id=PIPE)),
    ("recorded_at", lambda r: r.update(recorded_at=PIPE)),
    ("reproduce.spark_checkpoint_dir", lambda r: r["reproduce"].update(spark_checkpoint_dir="/srv/" + PIPE)),
    ("reproduce.spark_profile_overrides.engine.args.x",
     lambda r: r["reproduce"].update(spark_profile_overrides={"engine": {"args": {"x": PIPE}}})),
    ("runtime.id", lambda r: r["runtime"].update(id="sha256:" + "a" * 64)),  # an image id on a venv record
])
def test_a_hand_edited_record_is_refused_naming_the_field(where, edit):
    record = json.loads(json.dumps(rec("aaaa1111", "2026-05-01T00:00:00Z")))
    edit(record)
    record[history.HISTORY_FILE_KEY] = "/home/op/.sparkctl/deployments/lab-1234/x.json"
    with pytest.raises(rollback.RollbackError) as raised:
        rollback.rollback_vars(record)
    message = str(raised.value)
    assert f"{where}:" in message and "/home/op/.sparkctl/deployments/lab-1234/x.json" in message
    assert "nothing was run" in message


def test_the_file_a_record_came_from_is_not_given_to_the_run(tmp_path):
    (tmp_path / "20260501T000000Z-aaaa.json").write_text(json.dumps(rec("aaaa1111", "2026-05-01T00:00:00Z")))
    records_read, problems = history.load_history(tmp_path)
    assert problems == [] and records_read[0][history.HISTORY_FILE_KEY].endswith("aaaa.json")
    given = rollback.rollback_vars(records_read[0])[rollback.DEPLOYMENT_VAR]
    assert history.HISTORY_FILE_KEY not in given and records.record_problems(dict(given, reproduce=REPRODUCE)) == []


# --- When `up` rolls back by itself ------------------------------------------------------------

def failed_verify(profile_sha=P1, config_sha=C1, reproduce=REPRODUCE, status="failed"):
    return {"status": status, "intended": {"profile": {"name": "lab-standin", "sha256": profile_sha},
                                           "engine_config_sha256": config_sha, "reproduce": reproduce}}


@pytest.mark.parametrize("doc", [
    failed_verify(profile_sha=dg("p2")),                        # a new venv lock is a new profile content
    failed_verify(config_sha=dg("c2")),                         # other engine arguments
    failed_verify(reproduce=dict(REPRODUCE, spark_engine_venv_path="/opt/sparkctl/venvs/x")),
])
def test_a_failed_verify_after_a_change_returns_to_the_last_record(doc):
    assert rollback.changed_deployment(doc, [C, B, A]) is C


@pytest.mark.parametrize("doc, history_records", [
    (failed_verify(), [C, B]),                                     # the recorded deployment itself failed: no change
    (failed_verify(profile_sha=dg("p2"), status="passed"), [C]),
    ({"status": "failed"}, [C]),                                   # a verify.json of a sparkctl without `intended`
    (failed_verify(profile_sha=dg("p2")), []),                  # nothing recorded to return to
    (None, [C]),
])
def test_no_automatic_rollback_without_a_change_or_a_record(doc, history_records):
    assert rollback.changed_deployment(doc, history_records) is None


# --- What the nodes must still hold (playbooks/rollback.yml) ------------------------------------

def read(lock=LOCK1, image_id=None, commit="c" * 40, manifest=True):
    return {"versions": {"venv_lock_sha256": lock, "image_id": image_id},
            "checkpoint_manifest": {"source": "hub", "commit": commit} if manifest else None}


def test_a_deployment_whose_runtime_and_checkpoint_are_on_every_node_can_be_served():
    assert records.rollback_node_problems(B, {"spark1": read(), "spark2": read()}) == []


@pytest.mark.parametrize("reads, expected", [
    ({"spark1": read(), "spark2": read(lock=None)}, ["spark2: the venv of the recorded runtime is gone"]),
    ({"spark1": read(lock="sha256:other"), "spark2": read()}, ["spark1: the venv of the recorded runtime is not the recorded one"]),
    ({"spark1": read(manifest=False), "spark2": read()}, ["spark1: the recorded checkpoint is gone"]),
    ({"spark1": read(), "spark2": read(commit="d" * 40)}, ["spark2: the checkpoint directory holds commit " + "d" * 40]),
    ({"spark1": read(lock=None, manifest=False)}, ["spark1: the venv", "spark1: the recorded checkpoint is gone"]),
])
def test_every_node_missing_a_piece_is_named(reads, expected):
    problems = records.rollback_node_problems(B, reads)
    assert len(problems) == len(expected)
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(start), problems


def test_an_image_deployment_needs_the_recorded_image_id():
    image = rec("eeee5555", "2026-05-01T00:00:00Z", kind="image", runtime_id=dg("img1"))
    assert records.rollback_node_problems(image, {"spark1": read(image_id=dg("img1"))}) == []
    gone, other = (records.rollback_node_problems(image, {"spark1": read(image_id=i)}) for i in (None, dg("img2")))
    assert f"img:1 (id {dg('img1')}) is gone" in gone[0] and f"now another image (id {dg('img2')})" in other[0]


def test_a_worker_proves_its_copy_with_its_verification_stamp():
    # A worker has no manifest: its stamp (a file list, no commit) is what verify_facts reads there.
    stamp = {"source": None, "repo_id": None, "revision": None, "commit": None}
    reads = {"spark1": read(), "spark2": dict(read(), checkpoint_manifest=stamp)}
    assert records.rollback_node_problems(B, reads) == []


def test_a_path_checkpoint_needs_its_manifest_only():
    path = dict(B, checkpoint={"source": "path", "path": "/data/ckpt"})
    assert records.rollback_node_problems(path, {"spark1": read(commit=None)}) == []


def test_the_filter_refuses_a_profile_that_resolves_to_other_content():
    profile = {"name": "lab-standin", "schema_version": 1, "_dir": "/x"}
    digest = records.content_digest({"name": "lab-standin", "schema_version": 1})
    same = dict(B, profile={"name": "lab-standin", "sha256": digest})
    assert deployment_filter.deployment_rollback_problems(same, {"spark1": read()}, profile=profile) == []
    problems = deployment_filter.deployment_rollback_problems(B, {"spark1": read()}, profile=profile)
    assert problems == [records.profile_problem(B, digest)] and "its file (or a file it extends) changed" in problems[0]
    with pytest.raises(AnsibleFilterError, match="not a record"):
        deployment_filter.deployment_rollback_problems(None, {})


def test_intent_holds_the_reproducing_variables_and_refuses_without_one():
    profile = {"name": "lab-standin", "schema_version": 1}
    intent = deployment_filter.deployment_intent(profile, {"argv": ["x"]}, dict(REPRODUCE, other=1))
    assert intent["reproduce"] == REPRODUCE and intent["profile"]["sha256"] == records.content_digest(profile)
    assert list(intent["reproduce"]) == list(records.REPRODUCE_VARS)
    for missing in records.REPRODUCE_VARS:
        with pytest.raises(AnsibleFilterError, match=missing):
            deployment_filter.deployment_intent(profile, {}, {k: v for k, v in REPRODUCE.items() if k != missing})


def _intent_task():
    tasks = yaml.safe_load(VERIFY_REPORT.read_text(encoding="utf-8"))
    (task,) = [task for task in tasks if task.get("name") == INTENT_TASK]
    return task


def test_the_verify_role_records_the_owners_variables_without_naming_them():
    """The task asks the run for every name the owner lists (deployment_reproduce_vars), so a name
    added to REPRODUCE_VARS is recorded and given back by a rollback with no other change."""
    assert deployment_filter.deployment_reproduce_vars() == list(records.REPRODUCE_VARS)
    task = _intent_task()
    text = yaml.safe_dump(task)
    assert "sparkctl.spark.deployment_reproduce_vars" in text
    assert [name for name in records.REPRODUCE_VARS if name in text] == []
    profile = {"name": "lab-standin", "schema_version": 1}
    variables = {**REPRODUCE, **task.get("vars", {}), "spark_profile": profile, "verify_engine_render": {"argv": ["x"]},
                 # Another variable of the run is not recorded.
                 "spark_cluster": {"head": {"name": "spark1"}}}
    intent = evaluate(task["ansible.builtin.set_fact"]["verify_intent"], variables)
    assert list(intent["reproduce"]) == list(records.REPRODUCE_VARS) and intent["reproduce"] == REPRODUCE
    assert intent == deployment_filter.deployment_intent(profile, {"argv": ["x"]}, REPRODUCE)


def test_the_verify_role_refuses_a_run_without_one_of_them():
    task = _intent_task()
    missing = records.REPRODUCE_VARS[-1]
    variables = {**{k: v for k, v in REPRODUCE.items() if k != missing}, **task.get("vars", {}),
                 "spark_profile": {"name": "lab-standin", "schema_version": 1}, "verify_engine_render": {}}
    with pytest.raises(TemplateFailed, match=missing):
        evaluate(task["ansible.builtin.set_fact"]["verify_intent"], variables)


# --- The commands ------------------------------------------------------------------------------

@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "site.yml").write_text("---\n")
    (tmp_path / "ansible.cfg").write_text("")
    (tmp_path / "playbooks").mkdir()
    for name in ("verify", "rollback", "serve"):
        (tmp_path / "playbooks" / f"{name}.yml").write_text("---\n")
    (tmp_path / "playbooks" / "site.yml").write_text(
        "- ansible.builtin.import_playbook: serve.yml\n- ansible.builtin.import_playbook: verify.yml\n")
    (tmp_path / "inventories" / "spark").mkdir(parents=True)
    (tmp_path / "inventories" / "spark" / "hosts.yml").write_text("---\n")
    monkeypatch.setenv("SPARKCTL_PROJECT", str(tmp_path))
    for name in ("SPARKCTL_REPORT_DIR", "SPARKCTL_DEPLOYMENT_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_history(project, *recs):
    directory = history.inventory_history(project / ".sparkctl" / "deployments", project / "inventories" / "spark")
    directory.mkdir(parents=True, exist_ok=True)
    for record in recs:
        (directory / records.history_name(record)).write_text(json.dumps(record))


class Stages:
    """run_stage stand-in: each stage's exit code from `codes`, verify writing `verify_doc`."""

    def __init__(self, project, codes, verify_doc=None):
        self.project, self.codes, self.verify_doc, self.calls = project, codes, verify_doc, []

    def __call__(self, stage, options, root, **_):
        self.calls.append((stage.name, options))
        files = []
        if stage.name == "verify" and self.verify_doc is not None:
            path = self.project / ".sparkctl" / "reports" / "verify.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.verify_doc))
            files.append(str(path))
        code = self.codes.get(stage.name, 0)
        return StageResult(name=stage.name, playbook=f"playbooks/{stage.name}.yml",
                           status="successful" if code == 0 else "failed", rc=code, exit_code=code, files=files)


@pytest.fixture
def stages(project, monkeypatch):
    def make(codes, verify_doc=None):
        fake = Stages(project, codes, verify_doc)
        monkeypatch.setattr("sparkctl.runner.run_stage", fake)
        return fake
    return make


def test_rollback_runs_its_playbook_with_the_recorded_variables_last(project, stages, capsys):
    write_history(project, A, C)
    fake = stages({})
    assert cli.main(["rollback", "-e", "spark_model_profile=other", "--json"]) == 0
    jsonschema.validate(json.loads(capsys.readouterr().out), json.loads(SCHEMA.read_text()))
    [(name, options)] = fake.calls
    assert name == "rollback"
    assert options.final_extravars == rollback.rollback_vars(A)
    # A command-line -e cannot override what reproduces the record: those go in the last -e file.
    assert options.extravars == {"spark_model_profile": "other"}


def test_rollback_without_a_record_to_return_to_runs_nothing(project, stages, capsys):
    fake = stages({})
    assert cli.main(["rollback"]) == 2
    assert fake.calls == [] and "no deployment recorded for this inventory" in capsys.readouterr().err
    write_history(project, A)
    assert cli.main(["rollback", "7"]) == 2 and fake.calls == []


def test_up_rolls_back_by_itself_when_verify_fails_after_a_change(project, stages, capsys):
    write_history(project, A, C)
    fake = stages({"verify": 1}, failed_verify(profile_sha="sha256:new"))
    assert cli.main(["up", "--json"]) == 1
    assert [name for name, _ in fake.calls] == ["serve", "verify", "rollback"]
    assert fake.calls[-1][1].final_extravars == rollback.rollback_vars(C)
    err = capsys.readouterr()
    assert "ROLLING BACK to deployment cccc3333" in " ".join(err.err.split())
    doc = json.loads(err.out)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert [s["name"] for s in doc["stages"]] == ["serve", "verify", "rollback"] and doc["exit_code"] == 1
    assert "ROLLED BACK: the cluster serves deployment cccc3333 again" in doc["error"]
    # The failed change's report stays for reading; the rollback's verify writes verify.json anew.
    assert json.loads((project / ".sparkctl" / "reports" / "verify-failed.json").read_text())["intended"]


@pytest.mark.parametrize("argv, codes, doc", [
    (["up", "--no-rollback"], {"verify": 1}, failed_verify(profile_sha="sha256:new")),
    (["up"], {"verify": 1}, failed_verify()),                       # the recorded deployment itself failed
    (["up"], {"serve": 1}, None),                                    # the verify after the failed serve passes
    (["up"], {"serve": 1, "verify": 1}, failed_verify()),            # ... or fails on the recorded deployment
    (["up", "--no-rollback"], {"serve": 1, "verify": 1}, failed_verify(profile_sha="sha256:new")),
    (["up", "--check"], {"verify": 1}, failed_verify(profile_sha="sha256:new")),
])
def test_up_leaves_the_cluster_alone_otherwise(project, stages, argv, codes, doc):
    write_history(project, A, C)
    fake = stages(codes, doc)
    assert cli.main([*argv, "--json"]) == 1
    assert "rollback" not in [name for name, _ in fake.calls]


def test_up_verifies_after_a_failed_serve_and_rolls_back_a_change(project, stages, capsys):
    write_history(project, A, C)
    fake = stages({"serve": 1, "verify": 1}, failed_verify(profile_sha="sha256:new"))
    assert cli.main(["up", "--tags", "serve", "--json"]) == 1
    assert [name for name, _ in fake.calls] == ["serve", "verify", "rollback"]
    # The verify after the failure judges the whole cluster, whatever the run's tags.
    assert fake.calls[0][1].tags == "serve" and fake.calls[1][1].tags == ""
    assert fake.calls[-1][1].final_extravars == rollback.rollback_vars(C)
    captured = capsys.readouterr()
    assert "serve failed after the serve stage started: verifying the cluster" in " ".join(captured.err.split())
    doc = json.loads(captured.out)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert [(s["name"], s["status"]) for s in doc["stages"]] == [("serve", "failed"), ("verify", "failed"),
                                                                 ("rollback", "successful")]
    assert doc["exit_code"] == 1
    assert "serve failed (the verify after it too) after this run changed the deployment" in doc["error"]
    assert "ROLLED BACK: the cluster serves deployment cccc3333 again" in doc["error"]


def _plan(*names):
    return [stages_module.Stage(name, Path(f"playbooks/{name}.yml")) for name in names]


@pytest.mark.parametrize("codes, expected", [
    ({"runtime": 1}, None),            # before serve: the stages there install beside what serves
    ({"serve": 2}, 3),
    ({"observe": 1}, 3),               # after serve, before verify: the switched engine may be the cause
    ({"verify": 1}, None),             # verify ran already
    ({}, None),
])
def test_which_failures_get_a_verify_run(codes, expected):
    names = ("runtime", "serve", "observe", "verify")
    results = []
    for name in names:
        if any(r.exit_code not in (0, None) for r in results):
            results.append(StageResult.not_run(name, f"playbooks/{name}.yml"))
            continue
        code = codes.get(name, 0)
        results.append(StageResult(name=name, playbook=f"playbooks/{name}.yml", status="failed" if code else "successful",
                                   rc=code, exit_code=code))
    assert cli.verify_after_failed_serve(_plan(*names), results) == expected


def test_the_rollback_playbook_exists_and_checks_before_it_serves():
    playbook = Path(__file__).resolve().parents[2] / "playbooks" / "rollback.yml"
    text = playbook.read_text()
    assert text.index("deployment_rollback_problems") < text.index("import_playbook: serve.yml") \
        < text.index("import_playbook: verify.yml")


# --- One venv per runtime lock (spark_engine_venv_per_lock) ---------------------------------------

def test_the_venv_digest_follows_what_the_venv_is_built_from_and_nothing_else():
    from ansible_collections.sparkctl.spark.plugins.filter.profile import profile_venv_digest

    base = {"name": "p", "topology": {"kind": "ray_tp"}, "engine": {"args": {"max_num_seqs": 4}},
            "runtime": {"kind": "venv", "venv": {"python": "3", "packages": ["vllm==0.25.1"], "find_links": ["../w"]}}}
    digest = profile_venv_digest(base)
    assert digest.startswith("sha256:")
    other_args = dict(base, engine={"args": {"max_num_seqs": 3}})
    assert profile_venv_digest(other_args) == digest
    for venv in ({"python": "3", "packages": ["vllm==0.25.2"], "find_links": ["../w"]},
                 {"python": "3.12", "packages": ["vllm==0.25.1"], "find_links": ["../w"]},
                 {"python": "3", "packages": ["vllm==0.25.1"], "find_links": ["../w"], "plugin": {"source": "x"}}):
        assert profile_venv_digest(dict(base, runtime={"kind": "venv", "venv": venv})) != digest


def test_the_venv_path_holds_the_digest_only_when_asked(tmp_path):
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    playbook = tmp_path / "show.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n"
        f"  vars_files: ['{repo / 'roles' / 'spark' / 'defaults' / 'main.yml'}']\n"
        "  tasks:\n    - ansible.builtin.debug: {msg: \"VENV={{ spark_engine_venv_path }}\"}\n")
    paths = {}
    for per_lock in ("false", "true"):
        proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c",
                               "local", str(playbook), "-e", "spark_model_profile=lab-standin", "-e",
                               json.dumps({"spark_profile_paths": [str(repo / "tests" / "lab" / "profiles")],
                                           "spark_engine_venv_per_lock": per_lock == "true"})],
                              cwd=repo, capture_output=True, text=True, timeout=120, check=False,
                              env={"PATH": "/usr/bin:/bin", "ANSIBLE_CONFIG": str(repo / "ansible.cfg"),
                                   "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path)})
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        paths[per_lock] = re.search(r"VENV=(\S+?)\"?$", proc.stdout, re.M).group(1)
    from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile import load_profile, venv_digest

    profile = load_profile("lab-standin", [str(repo / "tests" / "lab" / "profiles")])
    assert paths == {"false": "/opt/sparkctl/venvs/lab-standin",
                     "true": "/opt/sparkctl/venvs/lab-standin-" + venv_digest(profile)[7:19]}
